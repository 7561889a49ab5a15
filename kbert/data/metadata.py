"""Reads the JSON sidecar the data tool writes next to each pre-training file.

Minimal reader until the data tool's own module lands: `<file>.meta.json`
holds how the file was made (`max_seq_length`, `max_predictions_per_seq`,
`vocab_size`, `vocab_sha256`, ...). Files without one (e.g. written by
google-research/bert's tool) read as None.
"""

from __future__ import annotations

import json
from typing import Any

import tensorflow as tf

METADATA_SUFFIX = ".meta.json"


def read_pretraining_metadata(file_pattern: str | list[str]) -> dict[str, Any] | None:
    """Returns the sidecar dict of the first matching file that has one, else None.

    Args:
        file_pattern: str or list of str. Comma-separated TFRecord names or globs.

    Returns:
        The parsed `<file>.meta.json` of the first file (in sorted order) that
        has a sidecar, or None.

    Example:

    >>> kbert.data.read_pretraining_metadata("data/train-*.tfrecord")["max_seq_length"]
    128
    """
    patterns = file_pattern if isinstance(file_pattern, (list, tuple)) else file_pattern.split(",")
    for pattern in patterns:
        for path in sorted(tf.io.gfile.glob(pattern.strip())) if pattern.strip() else []:
            if path.endswith(METADATA_SUFFIX):
                continue
            sidecar = path + METADATA_SUFFIX
            if tf.io.gfile.exists(sidecar):
                with tf.io.gfile.GFile(sidecar) as f:
                    try:
                        return json.load(f)
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{sidecar}: not valid JSON ({e}).") from None
    return None
