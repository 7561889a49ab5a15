"""google-research/bert's `bert_config.json` <-> kbert's keras-hub argument names.

kbert's Python API uses keras-hub names (`hidden_dim`, `num_layers`, ...); on
disk it keeps the original names so released checkpoints' configs keep working.
This module is the one place that maps between the two.
"""

from __future__ import annotations

import json
from typing import Any

import tensorflow as tf

# bert_config.json key -> BertEncoder argument.
_KEY_TO_ARGUMENT = {
    "vocab_size": "vocabulary_size",
    "hidden_size": "hidden_dim",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_dim",
    "hidden_act": "activation",
    "hidden_dropout_prob": "dropout",
    "max_position_embeddings": "max_sequence_length",
    "type_vocab_size": "num_segments",
    "initializer_range": "initializer_range",
}
# Present in google-research/bert's configs but not mapped to an argument: the
# attention dropout is the same rate as the hidden dropout in every released
# config, and keras-hub's TransformerEncoder takes a single rate.
_REQUIRED_UNMAPPED = ("attention_probs_dropout_prob",)
# Optional keys kbert reads or accepts: `layer_norm_eps` (written by kbert and
# Hugging Face) and the pooler/directionality keys of the multilingual releases.
_OPTIONAL_KEYS = (
    "layer_norm_eps",
    "directionality",
    "pooler_fc_size",
    "pooler_num_attention_heads",
    "pooler_num_fc_layers",
    "pooler_size_per_head",
    "pooler_type",
)
# The original code's `gelu` is the tanh approximation.
_ACTIVATION_FROM_CONFIG = {"gelu": "gelu_approximate"}
_ACTIVATION_TO_CONFIG = {"gelu_approximate": "gelu"}


def bert_config_to_arguments(config: dict[str, Any], source: str = "bert_config") -> dict[str, Any]:
    """Maps a `bert_config.json` dict to `BertEncoder` arguments.

    Args:
        config: dict. The parsed JSON.
        source: str. Where the dict came from, named in error messages.

    Returns:
        A dict of `BertEncoder` keyword arguments.

    Example:

    >>> bert_config_to_arguments(json.load(open("bert_config.json")))["hidden_dim"]
    768
    """
    required = set(_KEY_TO_ARGUMENT) | set(_REQUIRED_UNMAPPED)
    missing = sorted(required - set(config))
    unknown = sorted(set(config) - required - set(_OPTIONAL_KEYS))
    problems = []
    if missing:
        problems.append(f"missing key(s) {missing}")
    if unknown:
        problems.append(f"unknown key(s) {unknown}")
    if problems:
        raise ValueError(
            f"{source}: not a google-research/bert config: {'; '.join(problems)}. "
            f"Expected exactly the keys {sorted(required)} (optionally {list(_OPTIONAL_KEYS)})."
        )
    arguments = {argument: config[key] for key, argument in _KEY_TO_ARGUMENT.items()}
    arguments["activation"] = _ACTIVATION_FROM_CONFIG.get(
        arguments["activation"], arguments["activation"]
    )
    if "layer_norm_eps" in config:
        arguments["layer_norm_epsilon"] = config["layer_norm_eps"]
    return arguments


def arguments_to_bert_config(arguments: dict[str, Any]) -> dict[str, Any]:
    """Maps `BertEncoder` arguments (e.g. its `get_config()`) to a `bert_config.json` dict.

    Args:
        arguments: dict. At least the sizes; extra Keras keys (`name`,
            `trainable`, `dtype`) are ignored.

    Returns:
        A dict with the original key names, plus `layer_norm_eps`.
    """
    config = {key: arguments[argument] for key, argument in _KEY_TO_ARGUMENT.items()
              if argument in arguments}
    config.setdefault("hidden_act", "gelu_approximate")
    config.setdefault("hidden_dropout_prob", 0.1)
    config.setdefault("max_position_embeddings", 512)
    config.setdefault("type_vocab_size", 2)
    config.setdefault("initializer_range", 0.02)
    config["hidden_act"] = _ACTIVATION_TO_CONFIG.get(config["hidden_act"], config["hidden_act"])
    config["attention_probs_dropout_prob"] = config["hidden_dropout_prob"]
    config["layer_norm_eps"] = arguments.get("layer_norm_epsilon", 1e-12)
    return config


def read_bert_config(path: str) -> dict[str, Any]:
    """Reads a `bert_config.json` (via `tf.io.gfile`) into `BertEncoder` arguments.

    Args:
        path: str. Path of the JSON file.

    Returns:
        A dict of `BertEncoder` keyword arguments.
    """
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"bert_config.json not found: {path}")
    with tf.io.gfile.GFile(path, "r") as f:
        try:
            config = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON: {e}") from None
    return bert_config_to_arguments(config, source=path)


def write_bert_config(arguments: dict[str, Any], path: str) -> None:
    """Writes `BertEncoder` arguments as a `bert_config.json`, atomically.

    Args:
        arguments: dict. `BertEncoder` arguments, e.g. `encoder.get_config()`.
        path: str. Destination path.
    """
    temporary = path + ".tmp"
    with tf.io.gfile.GFile(temporary, "w") as f:
        f.write(json.dumps(arguments_to_bert_config(arguments), indent=2, sort_keys=True) + "\n")
    tf.io.gfile.rename(temporary, path, overwrite=True)
