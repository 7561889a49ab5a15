"""Learning a BERT WordPiece vocabulary from raw text.

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
slightly different vocabulary. `build_vocab` therefore counts the alphabet
first (one cheap pass, `_alphabet`), fixes it with `initial_alphabet`, and
hands the trainer every `##c` up front as a special token so that all ids
are assigned in a fixed order. Giving every character a `##` form is also
what the released vocabularies do (bert-base-uncased has 997 of each).
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
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


def reserved_tokens(num_unused: int = 99) -> list[str]:
    """`[PAD]`, `[unused0..num_unused-1]`, `[UNK]`, `[CLS]`, `[SEP]`, `[MASK]`."""
    return ["[PAD]", *(f"[unused{i}]" for i in range(num_unused)), "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def build_vocab(
    input_file: str | Sequence[str],
    output_file: str,
    vocab_size: int = 30522,
    do_lower_case: bool = True,
    num_unused: int = 99,
    input_encoding: str = "utf-8",
    min_frequency: int = 2,
    limit_alphabet: int = 1000,
) -> dict[str, Any]:
    """Learns a WordPiece vocabulary and writes it as `vocab.txt`.

    Args:
        input_file: str or list of str. Comma-separated file names or globs
            of raw text.
        output_file: str. Where to write `vocab.txt` (atomically: `kbert.files.write_text`).
        vocab_size: int. Size of the vocabulary including reserved tokens.
            A small corpus may give fewer. Defaults to 30522.
        do_lower_case: bool. Lower case and strip accents, as for uncased
            models. Defaults to True.
        num_unused: int. `[unusedN]` placeholders after `[PAD]`. Defaults to 99.
        input_encoding: str. Codec of the input. Defaults to "utf-8".
        min_frequency: int. Least count of a merged pair. Defaults to 2.
        limit_alphabet: int. Most distinct characters kept (the most frequent;
            ties go to the lower code point). Defaults to 1000.

    Returns:
        A dict with `vocab_size` (written), `input_files`, `input_bytes`.

    Raises:
        ValueError: for missing input, undecodable text (naming file and
            line), an empty corpus, a `vocab_size` too small for the reserved
            tokens and the alphabet, or an output directory that does not
            exist.

    Example:

    >>> kbert.data.build_vocab("corpus/*.txt", "vocab.txt", vocab_size=8000)
    """
    reserved = reserved_tokens(num_unused)
    if num_unused < 0:
        raise ValueError(f"--num_unused={num_unused} must be non-negative.")
    if vocab_size <= len(reserved):
        raise ValueError(
            f"--vocab_size={vocab_size} leaves no room after {len(reserved)} reserved tokens."
        )
    files = text_files.expand_file_patterns(input_file, "input_file")
    directory = output_file.rsplit("/", 1)[0] if "/" in output_file else ""
    if directory and not tf.io.gfile.isdir(directory):
        raise ValueError(
            f"--output_file={output_file!r}: directory {directory!r} does not exist; create it first."
        )
    normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=True,
        strip_accents=do_lower_case,
        lowercase=do_lower_case,
    )
    alphabet = _alphabet(files, input_encoding, normalizer, limit_alphabet)
    if not alphabet:
        raise ValueError(f"--input_file={','.join(files)!r} holds no text: nothing to learn.")
    continuations = ["##" + c for c in alphabet]
    if vocab_size < len(reserved) + 2 * len(alphabet):
        raise ValueError(
            f"--vocab_size={vocab_size} is too small: the {len(reserved)} reserved tokens, the "
            f"{len(alphabet)} characters of the corpus and their ## forms need "
            f"{len(reserved) + 2 * len(alphabet)}; raise --vocab_size or lower --limit_alphabet."
        )
    num_lines = 0

    def lines() -> Iterator[str]:
        nonlocal num_lines
        for path in files:
            for _, text, _, _ in text_files.iter_lines(path, input_encoding):
                if text:
                    num_lines += 1
                    yield text

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
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
    tokenizer.train_from_iterator(lines(), trainer=trainer)
    fixed = set(reserved) | set(alphabet) | set(continuations)
    learned = [t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1]) if t not in fixed]
    # As the released vocabularies: reserved tokens, characters, their ## forms,
    # then the learned pieces in the order they were learned.
    ordered = (reserved + alphabet + continuations + learned)[:vocab_size]
    try:
        write_text(output_file, "".join(t + "\n" for t in ordered))
    except (tf.errors.OpError, OSError) as e:
        raise ValueError(f"--output_file={output_file!r} cannot be written: {e}") from None
    return {
        "vocab_size": len(ordered),
        "input_files": files,
        "input_bytes": sum(tf.io.gfile.stat(f).length for f in files),
        "lines": num_lines,
    }


def _alphabet(
    files: Sequence[str], encoding: str, normalizer: normalizers.Normalizer, limit: int
) -> list[str]:
    """The characters the trainer starts from: normalized, no whitespace, the `limit` most frequent.

    Counts raw characters (a byte histogram for ASCII text, which is most of
    a typical corpus, `collections.Counter` otherwise) and normalizes each
    distinct character once: BERT's normalization (lower case, accents
    stripped, control characters dropped, CJK characters spaced) works
    character by character, so this gives the trainer's alphabet without
    normalizing the corpus twice.

    Args:
        files: list of str. The corpus.
        encoding: str. Codec of the files.
        normalizer: the trainer's `BertNormalizer`.
        limit: int. Most characters kept.

    Returns:
        The characters, sorted by code point.

    Raises:
        ValueError: naming file and line when the text does not decode.
    """
    ascii_counts = np.zeros(128, np.int64)
    raw: collections.Counter[str] = collections.Counter()  # Raw characters of non-ASCII pieces.
    for path in files:
        for piece in text_files.iter_text_pieces(path, text_files.READ_BLOCK_BYTES):
            data = text_files.decode_piece(piece, piece.data, encoding)
            if data.isascii():
                ascii_counts += np.bincount(np.frombuffer(data, np.uint8), minlength=128)
            else:
                raw.update(data.decode("utf-8"))
    raw.update({chr(b): int(n) for b, n in enumerate(ascii_counts) if n})
    counts: collections.Counter[str] = collections.Counter()
    for char, n in raw.items():
        for normalized in normalizer.normalize_str(char):
            if not normalized.isspace():
                counts[normalized] += n
    kept = sorted(counts, key=lambda c: (-counts[c], c))[:limit]
    return sorted(kept)
