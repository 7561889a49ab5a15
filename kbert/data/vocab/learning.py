"""Learning a BERT WordPiece vocabulary: from text files, or from a corpus' counts.

The trainer is Hugging Face `tokenizers`' `WordPieceTrainer` (Rust,
multi-threaded, maintained by Hugging Face) with `BertNormalizer` and
`BertPreTokenizer`, i.e. BERT's basic tokenization. It learns a 30k vocabulary
from 20 MB in seconds; tensorflow-text's `bert_vocab_from_dataset` (what
keras-hub uses) takes about 290 s for the same on a 2-core machine because
it counts and prunes words in Python/TF ops over many iterations. Measured in
`benchmarks/tokenization.py`.

The output is a plain `vocab.txt` laid out like the released BERT
vocabularies: `[PAD]` (id 0), `[unused0]`..`[unused{N-1}]`, `[UNK]`, `[CLS]`,
`[SEP]`, `[MASK]`, every character of the alphabet, its `##` form, then the
learned tokens with `##` marking word continuations. With the default
`num_unused=99` the special ids are those of bert-base (`[UNK]`=100,
`[CLS]`=101, `[SEP]`=102, `[MASK]`=103).

Determinism: the same corpus and flags give the same `vocab.txt`, byte for
byte. Left to itself the trainer does not (huggingface/tokenizers#1794): it
numbers the `##c` tokens in hash-map order as it meets them, and those
numbers break ties between equally frequent merges, so every run learns a
slightly different vocabulary. Both ways of learning therefore count the
alphabet first (one cheap pass, `_alphabet`), fix it with `initial_alphabet`,
and hand the trainer every `##c` up front as a special token so that all ids
are assigned in a fixed order. Giving every character a `##` form is also
what the released vocabularies do (bert-base-uncased has 997 of each).

Two ways in, one vocabulary: `learn_vocab_from_files` has the trainer read
the lines on this machine; `learn_vocab` takes the counts an Apache Beam
pipeline made (`kbert.data.vocab.beam`: `count_characters` and `count_words`
on each block of lines, summed): the same counts give the trainer the same
words, so the same `vocab.txt`.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Any, Sequence

import numpy as np
import tensorflow as tf
from tokenizers import Tokenizer
from tokenizers import models
from tokenizers import normalizers
from tokenizers import pre_tokenizers
from tokenizers import trainers

from kbert.data import text_files
from kbert.files import write_text


# Repetitions of a word per string when `learn_vocab` replays counts.
_REPLAY_BATCH = 1 << 16


def reserved_tokens(num_unused: int = 99) -> list[str]:
    """`[PAD]`, `[unused0..num_unused-1]`, `[UNK]`, `[CLS]`, `[SEP]`, `[MASK]`."""
    return ["[PAD]", *(f"[unused{i}]" for i in range(num_unused)), "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def learn_vocab_from_files(
    files: Sequence[str], output_file: str, input_encoding: str, **settings: Any
) -> dict[str, Any]:
    """Learns a WordPiece vocabulary from text files on this machine and writes it as `vocab.txt`.

    `build_vocab` without a runner: an alphabet pass over the files, then the
    trainer reads their lines.

    Args:
        files: list of str. The corpus (expanded, checked file names).
        output_file: str. Where to write `vocab.txt`.
        input_encoding: str. Codec of the files.
        **settings: `vocab_size`, `do_lower_case`, `num_unused`,
            `min_frequency`, `limit_alphabet`, as for `build_vocab`.

    Returns:
        A dict with `vocab_size` (written) and `lines` (non-blank lines read).

    Raises:
        ValueError: undecodable text (naming file and line), no text, or a
            `vocab_size` too small.

    Example:

    >>> learn_vocab_from_files(["corpus.txt"], "vocab.txt", "utf-8", vocab_size=8000,
    ...     do_lower_case=True, num_unused=99, min_frequency=2, limit_alphabet=1000)
    """
    normalizer = bert_normalizer(settings["do_lower_case"])
    raw: collections.Counter[str] = collections.Counter()
    for path in files:
        for piece in text_files.iter_text_pieces(path, text_files.READ_BLOCK_BYTES):
            raw.update(count_characters(text_files.decode_piece(piece, piece.data, input_encoding)))
    lines = text_files.NonBlankLines(files, input_encoding)

    def train(trainer: trainers.Trainer) -> Tokenizer:
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
        tokenizer.normalizer = normalizer
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.train_from_iterator(lines, trainer=trainer)
        return tokenizer

    size = _learn(raw, output_file, train, files, **settings)
    return {"vocab_size": size, "lines": lines.count}


def learn_vocab(
    word_counts: Iterable[tuple[str, int]],
    char_counts: Mapping[str, int],
    output_file: str,
    vocab_size: int = 30522,
    do_lower_case: bool = True,
    num_unused: int = 99,
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
) -> int:
    """Learns a WordPiece vocabulary from a corpus' counts and writes it as `vocab.txt`.

    The second half of `build_vocab` when a Beam pipeline counted the corpus:
    for the counts of a corpus (`count_words`, `count_characters`, summed),
    the same file as `build_vocab` on that corpus. The trainer has no API to
    take counts (huggingface/tokenizers#760), so each word is replayed to it
    `count` times in long strings that its Rust side splits and counts on all
    cores: time grows with the corpus' words (about half of what the trainer
    spends per word reading text: no normalization), memory with the distinct
    words only.

    Args:
        word_counts: iterable of `(word, count)`. Each distinct word once (as
            `count_words` gives them: normalized, pre-tokenized).
        char_counts: mapping of str to int. The raw characters of the corpus
            (`count_characters`).
        output_file: str. Where to write `vocab.txt`.
        vocab_size, do_lower_case, num_unused, min_frequency, limit_alphabet:
            as for `build_vocab`.

    Returns:
        The number of tokens written.

    Raises:
        ValueError: no text, or a `vocab_size` too small.

    Example:

    >>> words = count_words(["Hello world.", "Hello again."], bert_normalizer(True))
    >>> learn_vocab(words.items(), count_characters(b"Hello world."), "vocab.txt", vocab_size=200)
    """

    def train(trainer: trainers.Trainer) -> Tokenizer:
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
        # The words are normalized and pre-tokenized already, and hold no
        # whitespace (BertPreTokenizer splits on it): split only there.
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tokenizer.train_from_iterator(replay_counts(word_counts), trainer=trainer)
        return tokenizer

    return _learn(char_counts, output_file, train, None, vocab_size=vocab_size,
                  do_lower_case=do_lower_case, num_unused=num_unused,
                  min_frequency=min_frequency, limit_alphabet=limit_alphabet)


def _learn(
    raw_counts: Mapping[str, int],
    output_file: str,
    train: Callable[[trainers.Trainer], Tokenizer],
    files: Sequence[str] | None,
    vocab_size: int,
    do_lower_case: bool,
    num_unused: int,
    min_frequency: int,
    limit_alphabet: int,
) -> int:
    """Fixes the alphabet, trains (`train` feeds the trainer), orders and writes the vocabulary."""
    reserved = reserved_tokens(num_unused)
    alphabet = _alphabet(raw_counts, bert_normalizer(do_lower_case), limit_alphabet)
    if not alphabet:
        where = f"--input_file={','.join(files)!r}" if files else "The corpus"
        raise ValueError(f"{where} holds no text: nothing to learn.")
    continuations = ["##" + c for c in alphabet]
    if vocab_size < len(reserved) + 2 * len(alphabet):
        raise ValueError(
            f"--vocab_size={vocab_size} is too small: the {len(reserved)} reserved tokens, the "
            f"{len(alphabet)} characters of the corpus and their ## forms need "
            f"{len(reserved) + 2 * len(alphabet)}; raise --vocab_size or lower --limit_alphabet."
        )
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        show_progress=False,
        # The ## forms as special tokens get fixed ids (see the module docstring).
        special_tokens=reserved + continuations,
        # Exactly this alphabet: the initial one is kept first, the rest cut.
        initial_alphabet=alphabet,
        limit_alphabet=len(alphabet),
        continuing_subword_prefix="##",
    )
    tokenizer = train(trainer)
    fixed = set(reserved) | set(alphabet) | set(continuations)
    learned = [t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]) if t not in fixed]
    # As the released vocabularies: reserved tokens, characters, their ## forms,
    # then the learned pieces in the order they were learned.
    ordered = (reserved + alphabet + continuations + learned)[:vocab_size]
    try:
        write_text(output_file, "".join(t + "\n" for t in ordered))
    except (tf.errors.OpError, OSError) as e:
        raise ValueError(f"--output_file={output_file!r} cannot be written: {e}") from None
    return len(ordered)


def replay_counts(word_counts: Iterable[tuple[str, int]]) -> Iterator[str]:
    """Each word `count` times, space-separated, in strings of at most 65,536 repetitions.

    How counted words reach Hugging Face's trainers, which take text only
    (huggingface/tokenizers#760): with a `WhitespaceSplit` pre-tokenizer the
    trainer counts each word `count` times, splitting and counting on all cores.

    Args:
        word_counts: iterable of `(word, count)`; no word holds whitespace.

    Yields:
        str: `"word word ... "`.
    """
    for word, count in word_counts:
        while count > 0:
            n = min(count, _REPLAY_BATCH)
            yield (word + " ") * n
            count -= n


def bert_normalizer(do_lower_case: bool) -> normalizers.Normalizer:
    """BERT's normalization as the trainer applies it (control characters, CJK spacing, case, accents)."""
    return normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=True,
        strip_accents=do_lower_case,
        lowercase=do_lower_case,
    )


def count_characters(data: bytes) -> collections.Counter[str]:
    """The raw characters of UTF-8 text and their counts (what `learn_vocab` fixes the alphabet from).

    A byte histogram for ASCII text, which is most of a typical corpus;
    `collections.Counter` otherwise.

    Args:
        data: bytes. UTF-8 text (`text_files.decode_piece`'s output).

    Returns:
        Counter of characters, whitespace and control characters included.
    """
    if data.isascii():
        counts = np.bincount(np.frombuffer(data, np.uint8), minlength=128)
        return collections.Counter({chr(b): int(n) for b, n in enumerate(counts) if n})
    return collections.Counter(data.decode("utf-8"))


def count_words(
    lines: Sequence[str], normalizer: normalizers.Normalizer, lines_per_call: int = 10_000
) -> collections.Counter[str]:
    """The words the trainer counts in `lines`: BERT-normalized and pre-tokenized.

    Normalizes many lines in one call (BERT's normalization maps each
    character on its own, and a line end becomes a space, which ends a word
    as a line end does), then splits with `BertPreTokenizer`, as the trainer
    does line by line.

    Args:
        lines: list of str. Stripped, non-blank lines, cut to
            `text_files.MAX_LINE_CHARS` characters (as `text_files.iter_lines`
            gives them).
        normalizer: `bert_normalizer(do_lower_case)`.
        lines_per_call: int. Lines normalized together (bounds memory).

    Returns:
        Counter of words.

    Example:

    >>> count_words(["Hello, world."], bert_normalizer(True))
    Counter({'hello': 1, ',': 1, 'world': 1, '.': 1})
    """
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    counts: collections.Counter[str] = collections.Counter()
    for i in range(0, len(lines), lines_per_call):
        text = normalizer.normalize_str("\n".join(lines[i : i + lines_per_call]))
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(text))
    return counts


def _alphabet(raw_counts: Mapping[str, int], normalizer: normalizers.Normalizer, limit: int) -> list[str]:
    """The characters the trainer starts from: normalized, no whitespace, the `limit` most frequent.

    Normalizes each distinct raw character once: BERT's normalization (lower
    case, accents stripped, control characters dropped, CJK characters
    spaced) works character by character, so this gives the trainer's
    alphabet without normalizing the corpus twice.

    Args:
        raw_counts: mapping of str to int. The corpus' raw characters
            (`count_characters`).
        normalizer: the trainer's `BertNormalizer`.
        limit: int. Most characters kept.

    Returns:
        The characters, sorted by code point.
    """
    counts: collections.Counter[str] = collections.Counter()
    for char, n in raw_counts.items():
        for normalized in normalizer.normalize_str(char):
            if not normalized.isspace():
                counts[normalized] += n
    kept = sorted(counts, key=lambda c: (-counts[c], c))[:limit]
    return sorted(kept)
