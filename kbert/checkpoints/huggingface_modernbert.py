"""Hugging Face ModernBERT (`config.json`, `model.safetensors`, `tokenizer.json`) <-> kbert.

Hugging Face's `ModernBertModel` / `ModernBertForMaskedLM` tensors map
one-to-one onto `ModernBertEncoder` / `ModernBertPretrainer` weights
(`hf_weight_map` is the one table, both ways). torch `Linear` weights are
`[out, in]` and Keras kernels `[in, out]`, so kernels are transposed; nothing
else changes, so HF -> kbert -> HF gives back the same float32 bytes.
Both forms of Hugging Face's config are read: the hub's
(`global_attn_every_n_layers`, `global_rope_theta`, `local_rope_theta`) and
transformers 5's (`layer_types`, `rope_parameters`); both are written.
Reading uses the `safetensors` package with numpy; torch is not needed.
"""

from __future__ import annotations

import json
import os
from typing import Any

import keras
import numpy as np

from kbert.checkpoints.converted_model import ConvertedModel
from kbert.checkpoints.safetensors_files import SafetensorsFiles
from kbert.data.tokenizers import TOKENIZER_JSON
from kbert.data.tokenizers import read_tokenizer_json
from kbert.files import atomic_directory
from kbert.files import copy_file
from kbert.files import local_output
from kbert.files import read_json
from kbert.files import write_text
from kbert.models.modernbert import ModernBertEncoder
from kbert.models.modernbert import ModernBertPretrainer

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
# Tensors HF keeps as buffers or ties; never weights of their own.
_DECODER_WEIGHT = "decoder.weight"
_DECODER_BIAS = "decoder.bias"


def _layer_types(every: int, num_layers: int) -> list[str]:
    return [_LOCAL if i % every else _GLOBAL for i in range(num_layers)]


def modernbert_config_to_arguments(
    config: dict[str, Any], source: str = "config.json"
) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
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
        `(encoder_arguments, pretrainer_arguments, notes)`: the
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
    return encoder_arguments, pretrainer_arguments, notes


def modernbert_arguments_to_config(encoder: ModernBertEncoder,
                                   pretrainer: ModernBertPretrainer | None = None,
                                   tokenizer_file: str | None = None) -> dict[str, Any]:
    """A Hugging Face `config.json` dict for a kbert ModernBERT (both config forms).

    Args:
        encoder: `ModernBertEncoder`.
        pretrainer: `ModernBertPretrainer` or None. Makes the config a
            `ModernBertForMaskedLM`'s.
        tokenizer_file: str or None. A `tokenizer.json` whose `[PAD]`,
            `[CLS]` and `[SEP]` give the special token ids (null without one).

    Returns:
        The dict.
    """
    ids = {}
    spec = read_tokenizer_json(tokenizer_file) if tokenizer_file else None
    for key, token in (("pad_token_id", "[PAD]"), ("bos_token_id", "[CLS]"),
                       ("cls_token_id", "[CLS]"), ("eos_token_id", "[SEP]"),
                       ("sep_token_id", "[SEP]")):
        ids[key] = spec.token_id(token) if spec is not None else None
    every, num_layers = encoder.global_attention_every_n_layers, encoder.num_layers
    return {
        "architectures": ["ModernBertForMaskedLM" if pretrainer is not None
                          else "ModernBertModel"],
        "model_type": MODEL_TYPE,
        "vocab_size": encoder.vocabulary_size,
        "hidden_size": encoder.hidden_dim,
        "intermediate_size": encoder.intermediate_dim,
        "num_hidden_layers": num_layers,
        "num_attention_heads": encoder.num_heads,
        "hidden_activation": _ACTIVATIONS_TO_HF[encoder.activation],
        "max_position_embeddings": encoder.max_sequence_length,
        "initializer_range": encoder.initializer_range,
        "norm_eps": encoder.layer_norm_epsilon,
        "norm_bias": encoder.norm_bias,
        "attention_bias": encoder.attention_bias,
        "mlp_bias": encoder.mlp_bias,
        "embedding_dropout": encoder.dropout,
        "attention_dropout": encoder.dropout,
        "mlp_dropout": encoder.dropout,
        "local_attention": encoder.local_attention_window,
        "global_attn_every_n_layers": every,
        "global_rope_theta": encoder.global_rope_theta,
        "local_rope_theta": encoder.local_rope_theta,
        "layer_types": _layer_types(every, num_layers),
        "rope_parameters": {
            _GLOBAL: {"rope_type": "default", "rope_theta": encoder.global_rope_theta},
            _LOCAL: {"rope_type": "default", "rope_theta": encoder.local_rope_theta}},
        "classifier_pooling": encoder.classifier_pooling,
        "classifier_activation": _ACTIVATIONS_TO_HF[
            pretrainer.activation if pretrainer is not None else "gelu_exact"],
        "classifier_bias": bool(pretrainer.dense_bias) if pretrainer is not None else False,
        "decoder_bias": True,
        "tie_word_embeddings": True,
        **ids,
    }


def hf_weight_map(encoder: ModernBertEncoder, pretrainer: ModernBertPretrainer | None = None
                  ) -> dict[str, tuple[keras.Variable, bool]]:
    """Every ModernBERT weight under its Hugging Face name: the one table, both ways.

    Args:
        encoder: `ModernBertEncoder`.
        pretrainer: `ModernBertPretrainer` over `encoder`, or None. With it the
            names are `ModernBertForMaskedLM`'s (`model.` before the encoder's,
            `head.*` and `decoder.bias`); without, `ModernBertModel`'s.

    Returns:
        dict of HF name to `(variable, transposed)`: `transposed` when the
        HF tensor is the variable's transpose (a `Linear` weight).

    Example:

    >>> sorted(hf_weight_map(encoder))[:2]
    ['embeddings.norm.weight', 'embeddings.tok_embeddings.weight']
    """
    prefix = "model." if pretrainer is not None else ""
    parts = {prefix + "embeddings.norm": encoder.embeddings_layer_norm}
    for index, layer in enumerate(encoder.transformer_layers):
        name = f"{prefix}layers.{index}."
        if layer.attention_layer_norm is not None:  # HF's layer 0 has none either
            parts[name + "attn_norm"] = layer.attention_layer_norm
        parts[name + "attn.Wqkv"] = layer.qkv
        parts[name + "attn.Wo"] = layer.attention_output
        parts[name + "mlp_norm"] = layer.mlp_layer_norm
        parts[name + "mlp.Wi"] = layer.mlp_input
        parts[name + "mlp.Wo"] = layer.mlp_output
    parts[prefix + "final_norm"] = encoder.final_layer_norm
    if pretrainer is not None:
        head = pretrainer.masked_lm_head
        parts["head.dense"] = head._intermediate_dense
        parts["head.norm"] = head._intermediate_layer_norm
    weights = {prefix + "embeddings.tok_embeddings.weight":
               (encoder.token_embedding.embeddings, False)}
    for name, layer in parts.items():
        is_dense = isinstance(layer, keras.layers.Dense)
        weight, bias = (layer.kernel, layer.bias) if is_dense else (layer.gamma, layer.beta)
        weights[name + ".weight"] = (weight, is_dense)
        if bias is not None:
            weights[name + ".bias"] = (bias, False)
    if pretrainer is not None:
        weights[_DECODER_BIAS] = (pretrainer.masked_lm_head._bias, False)
    return weights


def _tokenizer(hf_dir: str, vocabulary_size: int, notes: list[str]) -> str | None:
    path = os.path.join(hf_dir, TOKENIZER_JSON)
    if not os.path.exists(path):
        notes.append(f"{hf_dir} has no {TOKENIZER_JSON}: the directory has no tokenizer; copy "
                     "the model's tokenizer.json into it before fine-tuning or export")
        return None
    tokens = len(read_tokenizer_json(path).vocabulary)  # refuses what kbert can't tokenize
    if tokens > vocabulary_size:
        raise ValueError(f"{path} has {tokens} tokens but the token embeddings have "
                         f"{vocabulary_size} rows (vocab_size); use the tokenizer.json "
                         "released with these weights.")
    return path


def load_huggingface_modernbert(hf_dir: str, ignore_unknown: bool = False) -> ConvertedModel:
    """Reads a Hugging Face ModernBERT directory into a `ConvertedModel`.

    `ModernBertModel` names (`embeddings.*`, `layers.N.*`, `final_norm.*`)
    and `ModernBertForMaskedLM` names (the same under `model.`, plus
    `head.*` and `decoder.bias`) both work; with the masked-LM head the
    result has a `ModernBertPretrainer`. A stored `decoder.weight` must equal
    the token embedding (it is tied). `tokenizer.json` is checked and copied
    as the directory's tokenizer.

    Args:
        hf_dir: str. A directory as `save_pretrained` of `transformers` writes
            it: `config.json` (`model_type: modernbert`), `model.safetensors`
            (float32 or float16), `tokenizer.json`.
        ignore_unknown: bool. Convert even if there are tensors kbert doesn't
            know (such as a classifier); they are listed as not converted.

    Returns:
        The `ConvertedModel`.

    Raises:
        ValueError: an unsupported config setting, missing or unknown tensors
            (named), shapes that don't fit the config (named, with both
            shapes): all in one line.

    Example:

    >>> converted = kbert.checkpoints.load_huggingface("ModernBERT-base/")
    >>> type(converted.pretrainer).__name__
    'ModernBertPretrainer'
    """
    config_path = os.path.join(hf_dir, "config.json")
    config = read_json(config_path, "Hugging Face config.json")
    encoder_arguments, pretrainer_arguments, notes = modernbert_config_to_arguments(
        config, config_path)
    files = SafetensorsFiles(hf_dir)
    stored = files.shapes()
    # Both naming forms: the encoder's tensors with or without `model.`.
    by_short = {}
    for name in stored:
        short = name.removeprefix("model.")
        if short in by_short:
            raise ValueError(f"{files.path}: {by_short[short]} and {name} are the same tensor "
                             "(with and without the model. prefix); keep one.")
        by_short[short] = name
    # `ModernBertForMaskedLM`: `decoder.bias`, or (without a decoder bias) the
    # head of a model that says it is one; a classifier's `head.*` is unknown.
    masked_lm = (any(short.startswith("decoder.") for short in by_short)
                 or ("head.dense.weight" in by_short
                     and "ModernBertForMaskedLM" in (config.get("architectures") or [])))
    tokenizer_file = _tokenizer(hf_dir, encoder_arguments["vocabulary_size"], notes)

    encoder = ModernBertEncoder(**encoder_arguments)
    pretrainer = ModernBertPretrainer(encoder, **pretrainer_arguments) if masked_lm else None
    expected = {name.removeprefix("model."): value
                for name, value in hf_weight_map(encoder, pretrainer).items()}
    if pretrainer is not None and config.get("decoder_bias", True) is False:
        expected.pop(_DECODER_BIAS)  # HF's decoder has no bias: kbert's stays zeros
        pretrainer.masked_lm_head._bias.assign(np.zeros(encoder.vocabulary_size, "float32"))
    skipped = []
    if _DECODER_WEIGHT in by_short:  # tied: a copy of the token embedding
        embedding = by_short.get("embeddings.tok_embeddings.weight")
        if embedding is not None and not np.array_equal(files.get(by_short[_DECODER_WEIGHT]),
                                                        files.get(embedding)):
            raise ValueError(f"{files.path}: {_DECODER_WEIGHT} differs from {embedding}; kbert's "
                             "masked-LM head ties them as ModernBERT does, so it can't "
                             "reproduce this model.")
        skipped.append(by_short.pop(_DECODER_WEIGHT))

    prefix = "model." if any(name.startswith("model.") for name in stored) else ""

    def shown(short: str) -> str:  # a missing tensor's name as this file would have it
        return short if short.startswith(("head.", "decoder.")) else prefix + short

    problems = []
    missing = sorted(shown(short) for short in expected if short not in by_short)
    if missing:
        problems.append(f"missing tensor(s) {missing}")
    unknown = sorted(by_short[short] for short in by_short if short not in expected)
    if unknown and not ignore_unknown:
        problems.append(f"unknown tensor(s) {unknown} (pass --ignore_unknown_tensors "
                        "(ignore_unknown=True) to convert without them)")
    for short, (variable, transposed) in expected.items():
        if short not in by_short:
            continue
        needed = tuple(variable.shape)[::-1] if transposed else tuple(variable.shape)
        if tuple(stored[by_short[short]]) != needed:
            problems.append(f"{by_short[short]} has shape {list(stored[by_short[short]])} but "
                            f"{config_path} needs {list(needed)}")
    if problems:
        raise ValueError(f"{files.path}: cannot convert to kbert's ModernBERT: "
                         f"{'; '.join(problems)}.")
    for short, (variable, transposed) in expected.items():
        array = files.get(by_short[short]).astype(np.float32)
        variable.assign(array.T if transposed else array)
    return ConvertedModel(encoder, pretrainer, source=files.path,
                          skipped=sorted(skipped + (unknown if ignore_unknown else [])),
                          notes=notes, tokenizer_file=tokenizer_file)


def save_huggingface_modernbert(converted: ConvertedModel, output_dir: str,
                                overwrite: bool = False) -> list[str]:
    """Writes a kbert ModernBERT as a Hugging Face directory `transformers` loads.

    `config.json` (both config forms), `model.safetensors` (float32, torch
    layout: `ModernBertForMaskedLM` names when there is a pre-trainer, else
    `ModernBertModel`'s; the tied `decoder.weight` is left out, as
    `transformers` saves it) and the `tokenizer.json`, written atomically.

    Args:
        converted: `ConvertedModel` with a `ModernBertEncoder` (such as
            `kbert.checkpoints.load_kbert(dir)` of a ModernBERT directory).
        output_dir: str. Must not exist unless `overwrite`.
        overwrite: bool. Replace an existing directory. Defaults to False.

    Returns:
        Notes for the user (what was left out).

    Example:

    >>> save_huggingface_modernbert(kbert.checkpoints.load_kbert("modernbert/"), "hf_out/")
    """
    from safetensors.numpy import save_file

    encoder, pretrainer = converted.encoder, converted.pretrainer
    if not isinstance(encoder, ModernBertEncoder):
        raise ValueError(f"--to=hf writes ModernBERT models; {converted.source or 'the source'} "
                         f"is a {type(encoder).__name__}: use --to=bert_tf1 or --to=keras_hub.")
    tensors = {}
    for name, (variable, transposed) in hf_weight_map(encoder, pretrainer).items():
        array = keras.ops.convert_to_numpy(variable).astype(np.float32)
        tensors[name] = np.ascontiguousarray(array.T if transposed else array)
    config = modernbert_arguments_to_config(encoder, pretrainer, converted.tokenizer_file)
    notes = []
    if converted.tokenizer_file is None:
        notes.append("no tokenizer.json: the Hugging Face directory has none either")
    with atomic_directory(output_dir, overwrite) as temporary:
        with local_output(os.path.join(temporary, "model.safetensors")) as local_path:
            # transformers reads only safetensors files that say they hold torch tensors.
            save_file(tensors, local_path, metadata={"format": "pt"})
        write_text(os.path.join(temporary, "config.json"),
                   json.dumps(config, indent=2, sort_keys=True) + "\n")
        if converted.tokenizer_file is not None:
            copy_file(converted.tokenizer_file, os.path.join(temporary, TOKENIZER_JSON))
    return notes
