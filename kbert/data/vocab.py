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
`[SEP]`, `[MASK]`, then the learned tokens with `##` marking word
continuations. With the default `num_unused=99` the special ids are those of
bert-base (`[UNK]`=100, `[CLS]`=101, `[SEP]`=102, `[MASK]`=103).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Sequence

import tensorflow as tf
from tokenizers import Tokenizer
from tokenizers import models
from tokenizers import normalizers
from tokenizers import pre_tokenizers
from tokenizers import trainers

from kbert.data import text_files


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
        output_file: str. Where to write `vocab.txt` (temp name, then rename).
        vocab_size: int. Size of the vocabulary including reserved tokens.
            A small corpus may give fewer. Defaults to 30522.
        do_lower_case: bool. Lower case and strip accents, as for uncased
            models. Defaults to True.
        num_unused: int. `[unusedN]` placeholders after `[PAD]`. Defaults to 99.
        input_encoding: str. Codec of the input. Defaults to "utf-8".
        min_frequency: int. Least count of a merged pair. Defaults to 2.
        limit_alphabet: int. Most distinct characters kept. Defaults to 1000.

    Returns:
        A dict with `vocab_size` (written), `input_files`, `input_bytes`.

    Raises:
        ValueError: for missing input, undecodable text (naming file and
            line), an empty corpus, a too small `vocab_size` or an output
            directory that does not exist.

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
    num_lines = 0

    def lines() -> Iterator[str]:
        nonlocal num_lines
        for path in files:
            for _, text, _, _ in text_files.iter_lines(path, input_encoding):
                if text:
                    num_lines += 1
                    yield text

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    tokenizer.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=True,
        strip_accents=do_lower_case,
        lowercase=do_lower_case,
    )
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        show_progress=False,
        special_tokens=reserved,
        limit_alphabet=limit_alphabet,
        continuing_subword_prefix="##",
    )
    tokenizer.train_from_iterator(lines(), trainer=trainer)
    if num_lines == 0:
        raise ValueError(f"--input_file={','.join(files)!r} holds no text: nothing to learn.")
    learned = tokenizer.get_vocab()
    tokens = [t for t, _ in sorted(learned.items(), key=lambda kv: kv[1])]
    # Reserved tokens come first in the given order (the trainer assigns them
    # ids 0..k-1); keep that and drop any duplicate just in case.
    ordered = list(reserved) + [t for t in tokens if t not in set(reserved)]
    ordered = ordered[:vocab_size]
    tmp = output_file + ".incomplete"
    try:
        with tf.io.gfile.GFile(tmp, "w") as f:
            f.write("".join(t + "\n" for t in ordered))
        tf.io.gfile.rename(tmp, output_file, overwrite=True)
    except (tf.errors.OpError, OSError) as e:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.remove(tmp)
        raise ValueError(f"--output_file={output_file!r} cannot be written: {e}") from None
    return {
        "vocab_size": len(ordered),
        "input_files": files,
        "input_bytes": sum(tf.io.gfile.stat(f).length for f in files),
        "lines": num_lines,
    }
