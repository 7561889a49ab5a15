"""Hugging Face ModernBERT (`config.json`, `model.safetensors`, `tokenizer.json`) <-> kbert.

Hugging Face's `ModernBertModel` / `ModernBertForMaskedLM` tensors map
one-to-one onto `ModernBertEncoder` / `ModernBertPretrainer` weights
(`hf_weight_map` is the one table, both ways). torch `Linear` weights are
`[out, in]` and Keras kernels `[in, out]`, so kernels are transposed; nothing
else changes, so HF -> kbert -> HF gives back the same float32 bytes. The
config's key map is ModernBERT's own (`kbert.models.modernbert.modernbert_config`,
both of Hugging Face's config forms); `kbert.checkpoints.load_huggingface` and
`save_huggingface` apply it and call the reader and writer here.
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
from kbert.files import write_text
from kbert.models.architecture import ConvertedArguments
from kbert.models.modernbert import ModernBertEncoder
from kbert.models.modernbert import ModernBertPretrainer

# Tensors HF keeps as buffers or ties; never weights of their own.
_DECODER_WEIGHT = "decoder.weight"
_DECODER_BIAS = "decoder.bias"


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


def _special_token_ids(tokenizer_file: str | None) -> dict[str, int | None]:
    """`config.json`'s special token ids from a `tokenizer.json`'s `[PAD]`, `[CLS]`, `[SEP]`.

    Null without a tokenizer, as Hugging Face writes them then.
    """
    spec = read_tokenizer_json(tokenizer_file) if tokenizer_file else None
    return {key: spec.token_id(token) if spec is not None else None
            for key, token in (("pad_token_id", "[PAD]"), ("bos_token_id", "[CLS]"),
                               ("cls_token_id", "[CLS]"), ("eos_token_id", "[SEP]"),
                               ("sep_token_id", "[SEP]"))}


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


def read_huggingface_modernbert(hf_dir: str, config: dict[str, Any],
                                arguments: ConvertedArguments,
                                ignore_unknown: bool = False) -> ConvertedModel:
    """Reads a Hugging Face ModernBERT directory, its config mapped already, into a `ConvertedModel`.

    What `kbert.checkpoints.load_huggingface` runs for a `config.json` of
    `model_type: modernbert`, after ModernBERT's key map
    (`kbert.models.modernbert.modernbert_config`) has read the config.
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
        config: dict. Its parsed `config.json` (`architectures`,
            `decoder_bias` are read here).
        arguments: `ConvertedArguments`: the encoder's and pre-trainer's
            arguments and the mapping's notes.
        ignore_unknown: bool. Convert even if there are tensors kbert doesn't
            know (such as a classifier); they are listed as not converted.

    Returns:
        The `ConvertedModel`.

    Raises:
        ValueError: missing or unknown tensors (named), shapes that don't fit
            the config (named, with both shapes): all in one line.

    Example:

    >>> converted = kbert.checkpoints.load_huggingface("ModernBERT-base/")
    >>> type(converted.pretrainer).__name__
    'ModernBertPretrainer'
    """
    config_path = os.path.join(hf_dir, "config.json")
    encoder_arguments, pretrainer_arguments = arguments.encoder, arguments.pretrainer
    notes = list(arguments.notes)
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


def write_huggingface_modernbert(converted: ConvertedModel, config: dict[str, Any],
                                 output_dir: str, overwrite: bool = False) -> list[str]:
    """Writes a kbert ModernBERT as a Hugging Face directory `transformers` loads.

    What `kbert.checkpoints.save_huggingface` (`kbert-convert --to=hf`) runs
    for a ModernBERT, with the config ModernBERT's key map made:
    `config.json` (both config forms, plus the special token ids of the
    `tokenizer.json`), `model.safetensors` (float32, torch layout:
    `ModernBertForMaskedLM` names when there is a pre-trainer, else
    `ModernBertModel`'s; the tied `decoder.weight` is left out, as
    `transformers` saves it) and the `tokenizer.json`, written atomically.

    Args:
        converted: `ConvertedModel` with a `ModernBertEncoder` (such as
            `kbert.checkpoints.load_kbert(dir)` of a ModernBERT directory).
        config: dict. The `config.json` without token ids
            (`modernbert_arguments_to_config`).
        output_dir: str. Must not exist unless `overwrite`.
        overwrite: bool. Replace an existing directory. Defaults to False.

    Returns:
        Notes for the user (what was left out).

    Example:

    >>> kbert.checkpoints.save_huggingface(kbert.checkpoints.load_kbert("modernbert/"), "hf_out/")
    """
    from safetensors.numpy import save_file

    encoder, pretrainer = converted.encoder, converted.pretrainer
    tensors = {}
    for name, (variable, transposed) in hf_weight_map(encoder, pretrainer).items():
        array = keras.ops.convert_to_numpy(variable).astype(np.float32)
        tensors[name] = np.ascontiguousarray(array.T if transposed else array)
    config = {**config, **_special_token_ids(converted.tokenizer_file)}
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
