"""Learning a byte-level BPE `tokenizer.json` laid out as ModernBERT's, from text or from counts.

The trainer is Hugging Face `tokenizers`' `BpeTrainer` (Rust, multi-threaded),
over ModernBERT's pre-tokenization: NFC normalization, then the `ByteLevel`
pre-tokenizer (GPT-2's regex, no prefix space), so that every byte of any text
has a symbol (the 256 of `ByteLevel.alphabet()`, "Ġ" for a space) and no text
is unknown. The file it writes is what ModernBERT's `tokenizer.json`
(answerdotai/ModernBERT-base) holds, and what `kbert.data.ByteLevelBpeTokenizer`
and Hugging Face `tokenizers` read:

- the learned BPE model first (ids 0..: the 256 byte symbols in code-point
  order, then each merge's token in the order learned), no unknown token;
- then the special tokens as ModernBERT orders them, `[UNK]`, `[CLS]`, `[SEP]`,
  `[PAD]`, `[MASK]` (added tokens matched in the raw text; `[MASK]` with
  `lstrip`, so "a [MASK]" is "a" then `[MASK]`);
- then `[unused0]`, `[unused1]`, ... up to a multiple of 64 ids: ModernBERT
  pads its vocabulary so (50,368 = 64 x 787), which keeps the embedding's
  rows a multiple of 64 for the matrix units. The size asked for is rounded up
  to a multiple of 64 and learned as far as the corpus allows, so there are
  `[unusedN]` tokens only when a small corpus gives fewer merges (its size is
  then the next multiple of 64, not the one asked for);
- the post-processor `[CLS] $A [SEP]` and `[CLS] $A [SEP] $B [SEP]` (type ids
  0 and 1) and the `ByteLevel` decoder.

ModernBERT's own extras from OLMo's tokenizer (`|||IP_ADDRESS|||`,
`<|padding|>`, `<|endoftext|>`, runs of spaces as added tokens) are left out:
they are for its corpus's redacted text and code, not for the model.

Determinism: the same corpus and settings give the same file, byte for byte,
whatever the threads (`TOKENIZERS_PARALLELISM`, `RAYON_NUM_THREADS`): the
alphabet is fixed (all 256 bytes), the trainer numbers symbols in code-point
order and breaks ties between equally frequent pairs by their ids
(`tests/data/vocab/test_bpe_learning.py` checks it). Unlike its WordPiece
trainer (see `kbert.data.vocab.learning`) nothing else is needed.

Two ways in, one file: `learn_bpe_from_files` has the trainer read the lines on
this machine; `learn_bpe` takes the word counts an Apache Beam pipeline made
(`count_words` on each block of lines, summed; `kbert.data.vocab.beam`): the
same words with the same counts give the trainer the same pairs.
"""

from __future__ import annotations

import collections
import json
import math
from collections.abc import Iterable
from typing import Any, Sequence

import tensorflow as tf
from tokenizers import AddedToken
from tokenizers import Tokenizer
from tokenizers import decoders
from tokenizers import models
from tokenizers import normalizers
from tokenizers import pre_tokenizers
from tokenizers import processors
from tokenizers import trainers

from kbert.data import text_files
from kbert.data.vocab.learning import replay_counts
from kbert.files import write_text

# ModernBERT's special tokens, in its order (its ids 50280..50284).
SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")
# ModernBERT pads its vocabulary with [unusedN] tokens to a multiple of this.
VOCABULARY_MULTIPLE = 64
# The 256 byte symbols, the special tokens and at least one merge.
MIN_VOCAB_SIZE = 256 + len(SPECIAL_TOKENS) + 1
# The one word a line end becomes when `count_words` pre-tokenizes lines joined by "\n".
_LINE_END = "Ċ"


def normalizer() -> normalizers.Normalizer:
    """ModernBERT's normalizer: NFC."""
    return normalizers.NFC()


def pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    """ModernBERT's pre-tokenizer: byte-level, GPT-2's regex, no space added before a text."""
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def rounded_size(num_tokens: int) -> int:
    """`num_tokens` rounded up to a multiple of 64, as ModernBERT pads its vocabulary.

    Example:

    >>> rounded_size(50285)
    50368
    """
    return math.ceil(num_tokens / VOCABULARY_MULTIPLE) * VOCABULARY_MULTIPLE


def learn_bpe_from_files(files: Sequence[str], output_file: str, input_encoding: str,
                         vocab_size: int, min_frequency: int = 2) -> dict[str, Any]:
    """Learns a byte-level BPE from text files on this machine and writes its `tokenizer.json`.

    The trainer reads the files' stripped, non-blank lines (`text_files.iter_lines`),
    each a text of its own.

    Args:
        files: list of str. The corpus (expanded, checked file names).
        output_file: str. Where to write `tokenizer.json`.
        input_encoding: str. Codec of the files.
        vocab_size: int. Ids, rounded up to a multiple of 64: that many less
            the 5 special tokens are learned, as far as the corpus allows (a
            small corpus gives fewer ids, `[unusedN]` padding them to a
            multiple of 64).
        min_frequency: int. Least count of a merged pair. Defaults to 2.

    Returns:
        A dict with `vocab_size` (ids written), `learned`, `special` and
        `unused` (how many of each) and `lines` (non-blank lines read).

    Raises:
        ValueError: undecodable text (naming file and line), no text, or a
            `vocab_size` too small.

    Example:

    >>> learn_bpe_from_files(["corpus.txt"], "tokenizer.json", "utf-8", vocab_size=8192)
    """
    lines = text_files.NonBlankLines(files, input_encoding)
    tokenizer = _new_tokenizer()
    tokenizer.train_from_iterator(lines, trainer=_trainer(vocab_size, min_frequency))
    where = f"--input_file={','.join(files)!r}"
    return {**_write(tokenizer, output_file, lines.count, where), "lines": lines.count}


def learn_bpe(word_counts: Iterable[tuple[str, int]], output_file: str, vocab_size: int,
              min_frequency: int = 2, lines: int = 0) -> dict[str, Any]:
    """Learns a byte-level BPE from a corpus' word counts and writes its `tokenizer.json`.

    The second half of `build_bpe_tokenizer` when a Beam pipeline counted the
    corpus: for the counts `count_words` makes of a corpus, the same file as
    `learn_bpe_from_files` on it. The trainer has no API to take counts
    (huggingface/tokenizers#760), so each word (byte-level symbols, which hold
    no whitespace) is replayed to it `count` times, split at spaces.

    Args:
        word_counts: iterable of `(word, count)`. Each distinct word once.
        output_file: str. Where to write `tokenizer.json`.
        vocab_size, min_frequency: as for `learn_bpe_from_files`.
        lines: int. Non-blank lines counted (reported; 0 means no text).

    Returns:
        As `learn_bpe_from_files`.

    Raises:
        ValueError: no text, or a `vocab_size` too small.

    Example:

    >>> learn_bpe(count_words(["Hello world.", "Hello again."]).items(), "tokenizer.json", 300)
    """
    tokenizer = Tokenizer(models.BPE())
    # The words are normalized and pre-tokenized already: split only at the spaces
    # between their repetitions.
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.train_from_iterator(replay_counts(word_counts),
                                  trainer=_trainer(vocab_size, min_frequency))
    tokenizer.normalizer, tokenizer.pre_tokenizer = normalizer(), pre_tokenizer()
    tokenizer.decoder = decoders.ByteLevel()
    return {**_write(tokenizer, output_file, lines, "The corpus"), "lines": lines}


def count_words(lines: Sequence[str], lines_per_call: int = 10_000) -> collections.Counter[str]:
    """The words the trainer counts in `lines`: NFC-normalized, byte-level pre-tokenized.

    Normalizes and pre-tokenizes many lines in one call, joined by line ends:
    a line end ("Ċ") is a word of its own between two stripped lines, so
    dropping it leaves each line's words, as the trainer sees the lines one
    by one.

    Args:
        lines: list of str. Stripped, non-blank lines, cut to
            `text_files.MAX_LINE_CHARS` characters (as `text_files.iter_lines`
            gives them).
        lines_per_call: int. Lines handled together (bounds memory).

    Returns:
        Counter of words, in byte-level symbols ("Ġworld").

    Example:

    >>> count_words(["Hello, world."])
    Counter({'Hello': 1, ',': 1, 'Ġworld': 1, '.': 1})
    """
    normalize, split = normalizer(), pre_tokenizer()
    counts: collections.Counter[str] = collections.Counter()
    for i in range(0, len(lines), lines_per_call):
        text = normalize.normalize_str("\n".join(lines[i:i + lines_per_call]))
        counts.update(word for word, _ in split.pre_tokenize_str(text) if word != _LINE_END)
    return counts


def check_vocab_size(vocab_size: int) -> None:
    """Refuses a `vocab_size` with no room for a merge after the bytes and special tokens."""
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(f"--vocab_size={vocab_size} is too small for a byte-level BPE: its 256 "
                         f"byte symbols and {len(SPECIAL_TOKENS)} special tokens leave no room "
                         f"for a merge; use at least {MIN_VOCAB_SIZE}.")


def _new_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer, tokenizer.pre_tokenizer = normalizer(), pre_tokenizer()
    tokenizer.decoder = decoders.ByteLevel()
    return tokenizer


def _trainer(vocab_size: int, min_frequency: int) -> trainers.BpeTrainer:
    check_vocab_size(vocab_size)
    return trainers.BpeTrainer(
        vocab_size=rounded_size(vocab_size) - len(SPECIAL_TOKENS), min_frequency=min_frequency,
        show_progress=False,
        # Every byte, seen or not: any text tokenizes, and the alphabet (so the
        # ids) does not depend on the corpus.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())


def _write(tokenizer: Tokenizer, output_file: str, lines: int, where: str) -> dict[str, int]:
    """Adds the special and `[unusedN]` tokens and the post-processor, and writes the file."""
    if not lines:
        raise ValueError(f"{where} holds no text: nothing to learn.")
    learned = tokenizer.get_vocab_size()
    size = rounded_size(learned + len(SPECIAL_TOKENS))
    unused = [f"[unused{i}]" for i in range(size - learned - len(SPECIAL_TOKENS))]
    tokenizer.add_special_tokens(
        [AddedToken(token, lstrip=token == "[MASK]", normalized=False, special=True)
         for token in SPECIAL_TOKENS + tuple(unused)])
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    # `to_str` orders the vocabulary and the added tokens by id: the same
    # tokenizer gives the same text. Indented as Hugging Face's saved files.
    text = json.dumps(json.loads(tokenizer.to_str()), indent=2, ensure_ascii=False)
    try:
        write_text(output_file, text + "\n")
    except (tf.errors.OpError, OSError) as e:
        raise ValueError(f"{output_file!r} cannot be written: {e}") from None
    return {"vocab_size": size, "learned": learned, "special": len(SPECIAL_TOKENS),
            "unused": len(unused)}
