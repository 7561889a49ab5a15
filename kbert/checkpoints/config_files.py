"""Reading and writing encoder configs on disk: `bert_config.json` and Hugging Face `config.json`.

The name mappings themselves are `kbert.models.bert.bert_config` (no file I/O
there); this module reads and writes the files, through `tf.io.gfile` so
`gs://` works.

A pre-trained directory's `bert_config.json` is google-research/bert's file
for a BERT encoder (as every directory before there was a second
architecture); another architecture's names it in a `model_type` key (a name
in `kbert.models.registry.ARCHITECTURES`, as Hugging Face's `config.json` does)
beside its keras-hub argument names. `read_encoder_config` and
`write_encoder_config` read and write both.
"""

from __future__ import annotations

import json
from typing import Any

from kbert.files import read_json
from kbert.files import write_text
from kbert.models.bert.bert_config import arguments_to_bert_config
from kbert.models.bert.bert_config import bert_config_to_arguments
from kbert.models.bert.bert_config import hf_config_to_arguments
from kbert.models.registry import DEFAULT_ARCHITECTURE
from kbert.models.registry import encoder_architecture
from kbert.models.registry import get_encoder_class

# Keras config entries that are not the architecture: not written to disk.
_NOT_ARCHITECTURE = ("name", "trainable", "dtype", "output_all_layers", "output_attention_scores")


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


def read_encoder_config(path: str) -> tuple[type, dict[str, Any]]:
    """Reads a pre-trained directory's `bert_config.json`: the encoder's class and arguments.

    Without a `model_type` key the file is google-research/bert's and the
    class `BertEncoder`; with one, the class is that registered architecture
    (`kbert.models.registry.ARCHITECTURES`) and the other keys its arguments.

    Args:
        path: str. Path of the JSON file.

    Returns:
        `(encoder_class, arguments)`: build the encoder as
        `encoder_class(**arguments)`.

    Example:

    >>> encoder_class, arguments = read_encoder_config("out/bert_config.json")
    >>> encoder_class.__name__, arguments["hidden_dim"]
    ('BertEncoder', 768)
    """
    config = read_json(path, "bert_config.json")
    if "model_type" not in config:
        return (get_encoder_class(DEFAULT_ARCHITECTURE),
                bert_config_to_arguments(config, source=path))
    arguments = dict(config)
    return get_encoder_class(arguments.pop("model_type"), source=path), arguments


def write_encoder_config(encoder, path: str) -> None:
    """Writes an encoder's config as a pre-trained directory's `bert_config.json`, atomically.

    A BERT encoder gets google-research/bert's file, exactly as
    `write_bert_config`; another architecture its registry name as
    `model_type` and its Keras config's arguments (not its name, dtype or
    output switches).

    Args:
        encoder: an encoder of a registered architecture.
        path: str. Destination path.
    """
    architecture = encoder_architecture(encoder)
    if architecture == DEFAULT_ARCHITECTURE:
        write_bert_config(encoder.get_config(), path)
        return
    arguments = {key: value for key, value in encoder.get_config().items()
                 if key not in _NOT_ARCHITECTURE}
    write_text(path, json.dumps({"model_type": architecture, **arguments}, indent=2,
                                sort_keys=True) + "\n")
