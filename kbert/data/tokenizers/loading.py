"""`load_tokenizer`: a model directory's tokenizer, or a tokenizer file, as a `Tokenizer`.

`TOKENIZERS` lists every kind kbert reads, in the order a directory is
searched for its file: a directory holding both a `vocab.txt` and a
`tokenizer.json` tokenizes with the `vocab.txt`, and a file is of the kind
whose file name has its extension (any other file is a WordPiece `vocab.txt`,
as google-research/bert names them freely: `bert-base-uncased-vocab.txt`).
"""

from __future__ import annotations

import os

import tensorflow as tf

from kbert.data.tokenizers.byte_level_bpe import ByteLevelBpeTokenizer
from kbert.data.tokenizers.tokenizer import TOKENIZER_CONFIG
from kbert.data.tokenizers.tokenizer import Tokenizer
from kbert.data.tokenizers.wordpiece_tokenizer import WordpieceTokenizer
from kbert.files import read_json

# Every kind of tokenizer, in the order a model directory is searched; the
# first is also the kind of a file whose extension no kind claims.
TOKENIZERS: tuple[type[Tokenizer], ...] = (WordpieceTokenizer, ByteLevelBpeTokenizer)


def tokenizer_class(path: str) -> type[Tokenizer]:
    """The kind of a tokenizer file, by its extension.

    Args:
        path: str. A tokenizer file.

    Returns:
        The `Tokenizer` subclass: `ByteLevelBpeTokenizer` for a `.json`
        file, else `WordpieceTokenizer`.

    Example:

    >>> tokenizer_class("modernbert/tokenizer.json").file_name
    'tokenizer.json'
    """
    for kind in TOKENIZERS:
        if path.endswith(os.path.splitext(kind.file_name)[1]):
            return kind
    return TOKENIZERS[0]


def tokenizer_file(directory: str) -> str | None:
    """A model directory's tokenizer file (its `vocab.txt`, else its `tokenizer.json`), or None."""
    for kind in TOKENIZERS:
        path = os.path.join(directory, kind.file_name)
        if tf.io.gfile.exists(path):
            return path
    return None


def recorded_lower_case(directory: str) -> bool | None:
    """The `do_lower_case` a model directory records in `tokenizer_config.json`, None if none."""
    path = os.path.join(directory, TOKENIZER_CONFIG)
    if not tf.io.gfile.exists(path):
        return None
    return read_json(path).get("do_lower_case")


def load_tokenizer(directory_or_file: str, do_lower_case: bool | None = None) -> Tokenizer:
    """Reads a model directory's tokenizer, or a tokenizer file.

    Args:
        directory_or_file: str. A model directory (its `vocab.txt`, else its
            byte-level BPE `tokenizer.json`) or one such file (`gs://` works).
        do_lower_case: bool or None. The WordPiece setting; None: the one the
            directory records in `tokenizer_config.json`, else True. A kind
            without lower casing (byte-level BPE) ignores it.

    Returns:
        The `Tokenizer` (`WordpieceTokenizer` or `ByteLevelBpeTokenizer`).

    Raises:
        FileNotFoundError: no such file, or a directory without a tokenizer file.
        ValueError: the file is unreadable or lacks what kbert needs (named).

    Example:

    >>> tokenizer = kbert.data.tokenizers.load_tokenizer("minilm/")
    >>> type(tokenizer).__name__, tokenizer.do_lower_case, tokenizer.vocabulary_size
    ('WordpieceTokenizer', True, 30522)
    """
    path = directory_or_file
    if tf.io.gfile.isdir(directory_or_file):
        path = tokenizer_file(directory_or_file)
        if path is None:
            names = " or ".join(kind.file_name for kind in TOKENIZERS)
            raise FileNotFoundError(f"{directory_or_file} has no {names}.")
        if do_lower_case is None and tokenizer_class(path).lower_casing:
            do_lower_case = recorded_lower_case(directory_or_file)
    return tokenizer_class(path).from_file(path, do_lower_case)
