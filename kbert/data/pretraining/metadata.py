"""The JSON sidecar written next to each pre-training TFRecord file.

`<output_file>.meta.json` records how the file was made: every flag, the
tokenizer (`tokenizer_kind`, `vocab_file`, `vocab_size` and `vocab_sha256`, the
hash of what its ids mean: `kbert.data.tokenizers.tokenizer_sha256`), and the
run's counts. The trainer reads it with `read_pretraining_metadata` to refuse
data whose `max_seq_length`, `max_predictions_per_seq` or tokenizer disagree
with its config (`recorded_tokenizer`). Files made by other tools have no
sidecar and read as `None`.
"""

from __future__ import annotations

import json
from typing import Any

import tensorflow as tf

from kbert.data.tokenizers.identity import TokenizerIdentity
from kbert.data.tokenizers.wordpiece_tokenizer import WordpieceTokenizer
from kbert.files import read_json
from kbert.files import write_text

METADATA_SUFFIX = ".meta.json"
METADATA_FORMAT = "kbert.pretraining_data.v1"
# Keys that must agree across the files a trainer reads together.
CONSISTENT_KEYS = (
    "max_seq_length",
    "max_predictions_per_seq",
    "next_sentence",
    "masking",
    "tokenizer_kind",
    "vocab_sha256",
    "vocab_size",
    "do_lower_case",
)


def metadata_path(data_file: str) -> str:
    """Returns the sidecar path of a TFRecord file: `<data_file>.meta.json`."""
    return data_file + METADATA_SUFFIX


def write_metadata(data_file: str, metadata: dict[str, Any]) -> str:
    """Writes `metadata` as the sidecar of `data_file`, atomically (`kbert.files.write_text`).

    Returns:
        The sidecar path.
    """
    path = metadata_path(data_file)
    write_text(path, json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    return path


def list_data_files(file_pattern: str | list[str]) -> list[str]:
    """Lists the pre-training TFRecord files matching comma-separated globs.

    Skips the sidecars and the temporaries that `create_pretraining_data`
    writes next to the data (all end in `.incomplete`: its data files'
    `<output>.incomplete` and `kbert.files.temporary_name`'s for the
    sidecars), so that "data/train-*" still works.

    Args:
        file_pattern: str or list of str. File names or globs.

    Returns:
        The matching data files, each pattern's matches sorted.

    Raises:
        ValueError: nothing matches.
    """
    patterns = file_pattern if isinstance(file_pattern, (list, tuple)) else file_pattern.split(",")
    files: list[str] = []
    for pattern in patterns:
        pattern = pattern.strip()
        if pattern:
            files.extend(
                f for f in sorted(tf.io.gfile.glob(pattern))
                if not (is_metadata_file(f) or f.endswith(".incomplete"))
            )
    if not files:
        raise ValueError(f"No pre-training files match {file_pattern!r}.")
    return files


def is_metadata_file(path: str) -> bool:
    """Whether `path` is a sidecar (or its temporary) rather than data."""
    return path.endswith(METADATA_SUFFIX) or path.endswith(METADATA_SUFFIX + ".incomplete")


def read_pretraining_metadata(file_pattern: str | list[str]) -> dict[str, Any] | None:
    """Reads the sidecars of the pre-training files matching a pattern.

    Args:
        file_pattern: str or list of str. Comma-separated file names or globs
            of TFRecord files (sidecars among the matches are skipped).

    Returns:
        The metadata dict of the first file that has a sidecar (keys include
        `max_seq_length`, `max_predictions_per_seq`, `next_sentence`,
        `vocab_sha256`, `vocab_size`, `do_lower_case`, `flags`, `counts`,
        `output_files`, `masking`; `sidecar`: the path it was read from), or
        None when no matching file has one (e.g. files from
        google-research/bert's tool).

    Raises:
        ValueError: if nothing matches, or two sidecars disagree on a key of
            `CONSISTENT_KEYS`.

    Example:

    >>> meta = kbert.data.read_pretraining_metadata("data/train-*.tfrecord")
    >>> meta["max_seq_length"], meta["vocab_sha256"]
    """
    first: dict[str, Any] | None = None
    first_path = ""
    for data_file in list_data_files(file_pattern):
        path = metadata_path(data_file)
        if not tf.io.gfile.exists(path):
            continue
        metadata = read_json(path)
        if first is None:
            first, first_path = metadata, path
            continue
        for key in CONSISTENT_KEYS:
            if _value(metadata, key) != _value(first, key):
                raise ValueError(
                    f"{path} records {key}={_value(metadata, key)!r} but {first_path} records "
                    f"{_value(first, key)!r}; read files made with the same settings together."
                )
    if first is not None:
        first = {**first, "sidecar": first_path}
    return first


def recorded_masking(metadata: dict[str, Any] | None) -> str:
    """The `masking` a sidecar records: sidecars from before dynamic masking (and none) mean "static"."""
    return _value(metadata or {}, "masking")


def recorded_tokenizer(metadata: dict[str, Any] | None) -> TokenizerIdentity | None:
    """The tokenizer a sidecar records the data was made with, None without a sidecar.

    Sidecars from before byte-level BPE data record no `tokenizer_kind`: their
    data is WordPiece.

    Args:
        metadata: dict or None. `read_pretraining_metadata`'s result.

    Returns:
        The `TokenizerIdentity` (its `sha256` and `size` None where not recorded).
    """
    if not metadata:
        return None
    flags = metadata.get("flags") or {}
    return TokenizerIdentity(_value(metadata, "tokenizer_kind"),
                             metadata.get("vocab_file") or flags.get("vocab_file")
                             or flags.get("tokenizer_file"),
                             metadata.get("vocab_sha256"), metadata.get("vocab_size"))


def _value(metadata: dict[str, Any], key: str) -> Any:
    defaults = {"masking": "static", "tokenizer_kind": WordpieceTokenizer.kind}
    return metadata.get(key, defaults[key]) if key in defaults else metadata.get(key)
