"""google-research/bert's `bert_config.json` and Hugging Face's BERT `config.json` <-> keras-hub argument names.

kbert's Python API uses keras-hub names (`hidden_dim`, `num_layers`, ...); on
disk it keeps the original names so released checkpoints' configs keep working.
This module is the one place that maps between the two.
"""

from __future__ import annotations

from typing import Any

from kbert.models.architecture import ConvertedArguments
from kbert.models.architecture import HuggingFaceConfig

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
# Hugging Face), `embedding_size` (ELECTRA's embedding width where it differs
# from hidden_size, Hugging Face's ElectraConfig name) and the
# pooler/directionality keys of the multilingual releases.
_OPTIONAL_KEYS = (
    "layer_norm_eps",
    "embedding_size",
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
    if config.get("embedding_size") not in (None, config["hidden_size"]):
        arguments["embedding_dim"] = config["embedding_size"]
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
    # Written only for an encoder with an embedding projection, so BERT
    # configs keep exactly the keys google-research/bert reads.
    if arguments.get("embedding_dim") not in (None, config.get("hidden_size")):
        config["embedding_size"] = arguments["embedding_dim"]
    return config


# Hugging Face `config.json` (model_type "bert") -> BertEncoder argument. The
# size keys have the same names as in `bert_config.json`.
_HF_KEY_TO_ARGUMENT = {**_KEY_TO_ARGUMENT, "layer_norm_eps": "layer_norm_epsilon"}
_HF_REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size")
# Hugging Face's `gelu` is the exact erf form; its tanh forms are `gelu_new` and
# `gelu_pytorch_tanh` (original BERT's `gelu`).
_HF_ACTIVATIONS = {
    "gelu": "gelu_exact",
    "gelu_new": "gelu_approximate",
    "gelu_pytorch_tanh": "gelu_approximate",
    "relu": "relu",
    "tanh": "tanh",
}
# Hugging Face's defaults for keys a config.json may leave out (BertConfig).
_HF_DEFAULTS = {
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
}


def hf_config_to_arguments(config: dict[str, Any], source: str = "config.json") -> dict[str, Any]:
    """Maps a Hugging Face BERT `config.json` dict to `BertEncoder` arguments.

    Hugging Face's `hidden_act: "gelu"` is the exact (erf) GELU and becomes
    `activation="gelu_exact"`; `gelu_new` and `gelu_pytorch_tanh` are original
    BERT's tanh form, `gelu_approximate`. `layer_norm_eps` is kept, so the
    encoder reproduces the source model's numbers. Keys that don't describe the
    encoder (`architectures`, `pad_token_id`, ...) are ignored; settings kbert's
    encoder cannot reproduce (relative position embeddings, decoder
    cross-attention, a `model_type` other than `bert`) are errors.

    Args:
        config: dict. The parsed `config.json`.
        source: str. Where the dict came from, named in error messages.

    Returns:
        A dict of `BertEncoder` keyword arguments.

    Example:

    >>> hf_config_to_arguments(json.load(open("all-MiniLM-L6-v2/config.json")))["activation"]
    'gelu_exact'
    """
    problems = []
    missing = [key for key in _HF_REQUIRED if key not in config]
    if missing:
        problems.append(f"missing key(s) {missing}")
    if config.get("model_type", "bert") != "bert":
        problems.append(f"model_type={config['model_type']!r} (only 'bert' is supported)")
    if config.get("position_embedding_type", "absolute") != "absolute":
        problems.append(
            f"position_embedding_type={config['position_embedding_type']!r} "
            "(kbert's encoder has absolute position embeddings only)"
        )
    if config.get("is_decoder") or config.get("add_cross_attention"):
        problems.append("is_decoder/add_cross_attention is set (kbert's encoder is bidirectional "
                        "and has no cross-attention)")
    config = {**_HF_DEFAULTS, **config}
    if config["hidden_act"] not in _HF_ACTIVATIONS:
        problems.append(
            f"hidden_act={config['hidden_act']!r} (supported: {sorted(_HF_ACTIVATIONS)})"
        )
    if problems:
        raise ValueError(
            f"{source}: cannot convert this Hugging Face config: {'; '.join(problems)}."
        )
    arguments = {argument: config[key] for key, argument in _HF_KEY_TO_ARGUMENT.items()}
    arguments["activation"] = _HF_ACTIVATIONS[config["hidden_act"]]
    return arguments


def hf_arguments(config: dict[str, Any], source: str = "config.json") -> ConvertedArguments:
    """`hf_config_to_arguments` as an architecture's Hugging Face map returns it.

    Args:
        config: dict. The parsed `config.json`.
        source: str. Where the dict came from, named in error messages.

    Returns:
        `ConvertedArguments`: the `BertEncoder` arguments; `BertPretrainer`
        takes none from the config (its heads come with the file's tensors).

    Example:

    >>> hf_arguments(json.load(open("all-MiniLM-L6-v2/config.json"))).encoder["activation"]
    'gelu_exact'
    """
    return ConvertedArguments(hf_config_to_arguments(config, source), {}, [])


# The architecture's Hugging Face side, for `kbert.models.registry.ARCHITECTURES`:
# BERT is read (`kbert-convert --source=hf`), not written back.
HUGGING_FACE = HuggingFaceConfig(model_types=("bert",), to_arguments=hf_arguments)
