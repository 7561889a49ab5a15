"""Reading and writing encoder configs on disk: `bert_config.json` and Hugging Face `config.json`.

The name mapping itself is `kbert.models.bert_config` (no file I/O there); this
module reads and writes the files, through `tf.io.gfile` so `gs://` works.
"""

from __future__ import annotations

import json
from typing import Any

from kbert.files import read_json
from kbert.files import write_text
from kbert.models.bert_config import arguments_to_bert_config
from kbert.models.bert_config import bert_config_to_arguments
from kbert.models.bert_config import hf_config_to_arguments


def read_bert_config(path: str) -> dict[str, Any]:
    """Reads a `bert_config.json` (via `tf.io.gfile`) into `BertEncoder` arguments.

    Args:
        path: str. Path of the JSON file.

    Returns:
        A dict of `BertEncoder` keyword arguments.
    """
    return bert_config_to_arguments(read_json(path, "bert_config.json"), source=path)


def write_bert_config(arguments: dict[str, Any], path: str) -> None:
    """Writes `BertEncoder` arguments as a `bert_config.json`, atomically.

    Args:
        arguments: dict. `BertEncoder` arguments, e.g. `encoder.get_config()`.
        path: str. Destination path.
    """
    write_text(path, json.dumps(arguments_to_bert_config(arguments), indent=2, sort_keys=True) + "\n")


def read_hf_config(path: str) -> dict[str, Any]:
    """Reads a Hugging Face `config.json` (via `tf.io.gfile`) into `BertEncoder` arguments.

    Args:
        path: str. Path of the JSON file.

    Returns:
        A dict of `BertEncoder` keyword arguments (see `hf_config_to_arguments`).
    """
    return hf_config_to_arguments(read_json(path, "Hugging Face config.json"), source=path)
