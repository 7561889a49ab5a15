"""Hugging Face ModernBERT `config.json` <-> kbert's `ModernBertEncoder` / `ModernBertPretrainer` arguments.

Pure dicts, no file I/O: `kbert.checkpoints.huggingface_modernbert` reads
and writes the files. Both forms of Hugging Face's config are read: the
hub's (`global_attn_every_n_layers`, `global_rope_theta`,
`local_rope_theta`) and transformers 5's (`layer_types`, `rope_parameters`);
both are written.
"""

from __future__ import annotations

import json
from typing import Any

from kbert.models.architecture import ConvertedArguments
from kbert.models.architecture import HuggingFaceConfig

MODEL_TYPE = "modernbert"
# Hugging Face activation names -> kbert's (`kbert.layers.get_activation`); HF's
# `gelu` is the exact erf form.
_ACTIVATIONS = {"gelu": "gelu_exact", "gelu_new": "gelu_approximate",
                "gelu_pytorch_tanh": "gelu_approximate", "relu": "relu", "tanh": "tanh"}
_ACTIVATIONS_TO_HF = {"gelu_exact": "gelu", "gelu_approximate": "gelu_pytorch_tanh",
                      "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_pytorch_tanh",
                      "relu": "relu", "tanh": "tanh"}
# `ModernBertConfig`'s defaults, for keys a config.json leaves out.
_DEFAULTS = {
    "vocab_size": 50368, "hidden_size": 768, "intermediate_size": 1152,
    "num_hidden_layers": 22, "num_attention_heads": 12, "hidden_activation": "gelu",
    "max_position_embeddings": 8192, "initializer_range": 0.02, "norm_eps": 1e-5,
    "norm_bias": False, "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
    "embedding_dropout": 0.0, "mlp_dropout": 0.0, "local_attention": 128,
    "global_attn_every_n_layers": 3, "global_rope_theta": 160000.0,
    "local_rope_theta": 10000.0, "decoder_bias": True, "classifier_pooling": "cls",
    "classifier_bias": False, "classifier_activation": "gelu", "tie_word_embeddings": True,
}
_GLOBAL, _LOCAL = "full_attention", "sliding_attention"
# `rope_parameters` entries that leave RoPE as kbert computes it.
_NEUTRAL_ROPE = {"rope_type": "default", "partial_rotary_factor": 1.0}


def _layer_types(every: int, num_layers: int) -> list[str]:
    return [_LOCAL if i % every else _GLOBAL for i in range(num_layers)]


def modernbert_config_to_arguments(
    config: dict[str, Any], source: str = "config.json"
) -> ConvertedArguments:
    """Maps a Hugging Face ModernBERT `config.json` dict to kbert arguments.

    Reads the hub's form (`global_attn_every_n_layers`, `global_rope_theta`,
    `local_rope_theta`) and transformers 5's (`layer_types`,
    `rope_parameters`, which win where both are given and must agree with
    the other form). `local_attention` stays the whole window, as in HF.
    Settings kbert's ModernBERT cannot reproduce are errors, all in one line.

    Args:
        config: dict. The parsed `config.json`.
        source: str. Where it came from, named in messages.

    Returns:
        `ConvertedArguments(encoder, pretrainer, notes)`: the
        `ModernBertEncoder` and `ModernBertPretrainer` keyword arguments, and
        what the mapping had to decide.

    Raises:
        ValueError: an unsupported setting (named with its value).

    Example:

    >>> encoder_arguments, _, _ = modernbert_config_to_arguments(
    ...     json.load(open("ModernBERT-base/config.json")))
    >>> encoder_arguments["global_attention_every_n_layers"]
    3
    """
    problems, notes = [], []
    if config.get("model_type") != MODEL_TYPE:
        problems.append(f"model_type={config.get('model_type')!r} (expected {MODEL_TYPE!r})")
    c = {**_DEFAULTS, **{key: value for key, value in config.items() if value is not None}}
    num_layers = c["num_hidden_layers"]

    every = c["global_attn_every_n_layers"]
    layer_types = config.get("layer_types")
    if layer_types is not None:
        # n is where the second global layer is (past the end when there is one).
        globals_at = [i for i, kind in enumerate(layer_types) if kind == _GLOBAL]
        derived = 0 if not globals_at else (
            globals_at[1] if len(globals_at) > 1 else max(num_layers, 1))
        if not derived or list(layer_types) != _layer_types(derived, num_layers):
            problems.append(
                f"layer_types={json.dumps(layer_types)} (kbert's ModernBertEncoder has "
                f"{num_layers} layers, '{_GLOBAL}' at 0, n, 2n, ... and '{_LOCAL}' elsewhere)")
        elif ("global_attn_every_n_layers" in config
              and _layer_types(every, num_layers) != list(layer_types)):
            problems.append(f"global_attn_every_n_layers={every} disagrees with layer_types "
                            f"{json.dumps(layer_types)}")
        else:
            every = derived
    if not isinstance(every, int) or every < 1:
        problems.append(f"global_attn_every_n_layers={every!r} (must be an integer >= 1)")

    thetas = {_GLOBAL: float(c["global_rope_theta"]), _LOCAL: float(c["local_rope_theta"])}
    if config.get("rope_scaling"):
        problems.append(f"rope_scaling={json.dumps(config['rope_scaling'])} (kbert's RoPE is "
                        "unscaled)")
    rope_parameters = config.get("rope_parameters") or {}
    for kind in sorted(set(rope_parameters) - {_GLOBAL, _LOCAL}):
        problems.append(f"rope_parameters.{kind} (expected only {_GLOBAL!r}, {_LOCAL!r})")
    for kind in (_GLOBAL, _LOCAL):
        parameters = dict(rope_parameters.get(kind) or {})
        if "rope_theta" in parameters:
            thetas[kind] = float(parameters.pop("rope_theta"))
        if any(_NEUTRAL_ROPE.get(key, object()) != value for key, value in parameters.items()):
            problems.append(f"rope_parameters.{kind}={json.dumps(rope_parameters[kind])} "
                            "(only rope_type 'default' with a rope_theta)")

    for key in ("hidden_activation", "classifier_activation"):
        if c[key] not in _ACTIVATIONS:
            problems.append(f"{key}={c[key]!r} (supported: {sorted(_ACTIVATIONS)})")
    if c["classifier_activation"] in _ACTIVATIONS and c["classifier_activation"] != "gelu":
        problems.append(f"classifier_activation={c['classifier_activation']!r} (kbert "
                        "directories hold ModernBERT's masked-LM head with 'gelu')")
    if not c["tie_word_embeddings"]:
        problems.append("tie_word_embeddings=false (kbert's decoder is the token embedding)")
    if c["classifier_pooling"] not in ("cls", "mean"):
        problems.append(f"classifier_pooling={c['classifier_pooling']!r} (expected cls, mean)")
    hidden, heads = c["hidden_size"], c["num_attention_heads"]
    if hidden % heads or (hidden // heads) % 2:
        problems.append(f"hidden_size={hidden} / num_attention_heads={heads} (must be a whole, "
                        "even head size)")
    if problems:
        raise ValueError(f"{source}: cannot convert this ModernBERT config: "
                         f"{'; '.join(problems)}.")

    dropouts = {key: c[key] for key in ("embedding_dropout", "attention_dropout", "mlp_dropout")}
    if len(set(dropouts.values())) > 1:
        notes.append(f"kbert's ModernBertEncoder has one dropout rate; {dropouts} became "
                     f"{max(dropouts.values())} (no effect on outputs at inference)")
    if not c["decoder_bias"]:
        notes.append("decoder_bias=false: the masked-LM head's output bias is zeros")
    encoder_arguments = {
        "vocabulary_size": c["vocab_size"],
        "num_layers": num_layers,
        "num_heads": heads,
        "hidden_dim": hidden,
        "intermediate_dim": c["intermediate_size"],
        "dropout": float(max(dropouts.values())),
        "max_sequence_length": c["max_position_embeddings"],
        "local_attention_window": c["local_attention"],
        "global_attention_every_n_layers": every,
        "global_rope_theta": thetas[_GLOBAL],
        "local_rope_theta": thetas[_LOCAL],
        "activation": _ACTIVATIONS[c["hidden_activation"]],
        "layer_norm_epsilon": float(c["norm_eps"]),
        "norm_bias": bool(c["norm_bias"]),
        "attention_bias": bool(c["attention_bias"]),
        "mlp_bias": bool(c["mlp_bias"]),
        "classifier_pooling": c["classifier_pooling"],
        "initializer_range": float(c["initializer_range"]),
    }
    pretrainer_arguments = {"activation": _ACTIVATIONS[c["classifier_activation"]],
                            "dense_bias": bool(c["classifier_bias"])}
    return ConvertedArguments(encoder_arguments, pretrainer_arguments, notes)


def modernbert_arguments_to_config(encoder: dict[str, Any],
                                   pretrainer: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Hugging Face `config.json` dict for a kbert ModernBERT (both config forms).

    The special token ids (`pad_token_id`, ...) come from the tokenizer, so
    the writer of the directory adds them
    (`kbert.checkpoints.huggingface_modernbert`).

    Args:
        encoder: dict. A `ModernBertEncoder`'s `get_config()`.
        pretrainer: dict or None. Its `ModernBertPretrainer`'s `get_config()`
            (`activation`, `dense_bias`); makes the config a
            `ModernBertForMaskedLM`'s.

    Returns:
        The dict.

    Example:

    >>> modernbert_arguments_to_config(encoder.get_config())["architectures"]
    ['ModernBertModel']
    """
    every, num_layers = encoder["global_attention_every_n_layers"], encoder["num_layers"]
    return {
        "architectures": ["ModernBertForMaskedLM" if pretrainer is not None
                          else "ModernBertModel"],
        "model_type": MODEL_TYPE,
        "vocab_size": encoder["vocabulary_size"],
        "hidden_size": encoder["hidden_dim"],
        "intermediate_size": encoder["intermediate_dim"],
        "num_hidden_layers": num_layers,
        "num_attention_heads": encoder["num_heads"],
        "hidden_activation": _ACTIVATIONS_TO_HF[encoder["activation"]],
        "max_position_embeddings": encoder["max_sequence_length"],
        "initializer_range": encoder["initializer_range"],
        "norm_eps": encoder["layer_norm_epsilon"],
        "norm_bias": encoder["norm_bias"],
        "attention_bias": encoder["attention_bias"],
        "mlp_bias": encoder["mlp_bias"],
        "embedding_dropout": encoder["dropout"],
        "attention_dropout": encoder["dropout"],
        "mlp_dropout": encoder["dropout"],
        "local_attention": encoder["local_attention_window"],
        "global_attn_every_n_layers": every,
        "global_rope_theta": encoder["global_rope_theta"],
        "local_rope_theta": encoder["local_rope_theta"],
        "layer_types": _layer_types(every, num_layers),
        "rope_parameters": {
            _GLOBAL: {"rope_type": "default", "rope_theta": encoder["global_rope_theta"]},
            _LOCAL: {"rope_type": "default", "rope_theta": encoder["local_rope_theta"]}},
        "classifier_pooling": encoder["classifier_pooling"],
        "classifier_activation": _ACTIVATIONS_TO_HF[
            pretrainer["activation"] if pretrainer is not None else "gelu_exact"],
        "classifier_bias": bool(pretrainer["dense_bias"]) if pretrainer is not None else False,
        "decoder_bias": True,
        "tie_word_embeddings": True,
    }


# The architecture's Hugging Face side, for `kbert.models.registry.ARCHITECTURES`.
HUGGING_FACE = HuggingFaceConfig(model_types=(MODEL_TYPE,),
                                 to_arguments=modernbert_config_to_arguments,
                                 from_arguments=modernbert_arguments_to_config)
