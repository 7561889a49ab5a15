"""Hugging Face BERT (safetensors) -> kbert, through the original TF1 names.

Hugging Face names (`BertModel`, or `BertForPreTraining`/`BertForMaskedLM`
with their `bert.` prefix) map one-to-one onto google-research/bert's TF1
names (HF's own TF1 converter defines them that way), so a Hugging Face model
goes through the same weight table and checks as a TF1 checkpoint. torch
`Linear` weights are `[out, in]`; TF1 kernels are `[in, out]`, so every tensor
whose TF1 name ends in `kernel` is transposed. Reading uses the `safetensors`
package with numpy; torch is not needed.
"""

from __future__ import annotations

import os
import re

import numpy as np

from kbert.checkpoints.converted_model import ConvertedModel
from kbert.checkpoints.converted_model import from_tf1_arrays
from kbert.checkpoints.safetensors_files import SafetensorsFiles
from kbert.checkpoints.tokenizer_files import infer_do_lower_case
from kbert.checkpoints.tokenizer_files import lowercase_from_tokenizer_json
from kbert.data.vocabulary import read_vocab
from kbert.checkpoints.tokenizer_files import vocab_from_tokenizer_json
from kbert.models.architecture import ConvertedArguments
from kbert.checkpoints.sentence_transformers import read_sentence_transformers_config
from kbert.files import read_json

# Names whose TF1 counterpart is not the mechanical rewrite of `hf_to_tf1_name`.
_SPECIAL_TO_TF1 = {
    "cls.predictions.bias": "cls/predictions/output_bias",
    "cls.seq_relationship.weight": "cls/seq_relationship/output_weights",
    "cls.seq_relationship.bias": "cls/seq_relationship/output_bias",
}
_SPECIAL_TO_HF = {v: k for k, v in _SPECIAL_TO_TF1.items()}
# Tied copies Hugging Face may store: the decoder shares the word embeddings and
# the output bias. Checked equal, then skipped.
_DECODER_WEIGHT = "cls.predictions.decoder.weight"
_DECODER_BIAS = "cls.predictions.decoder.bias"


def hf_to_tf1_name(name: str) -> str:
    """Maps a Hugging Face BERT tensor name to the google-research/bert TF1 name.

    Args:
        name: str. Such as `encoder.layer.0.attention.self.query.weight` or
            `bert.encoder.layer.0.attention.self.query.weight`.

    Returns:
        The TF1 name, such as `bert/encoder/layer_0/attention/self/query/kernel`.
        Names with no BERT counterpart map mechanically too (and are then
        reported as unknown).

    Example:

    >>> hf_to_tf1_name("embeddings.LayerNorm.weight")
    'bert/embeddings/LayerNorm/gamma'
    """
    name = name.removeprefix("bert.")
    if name in _SPECIAL_TO_TF1:
        return _SPECIAL_TO_TF1[name]
    parts = re.sub(r"\blayer\.(\d+)\b", r"layer_\1", name).split(".")
    if parts[0] != "cls":
        parts.insert(0, "bert")
    if len(parts) > 2 and parts[-2] == "LayerNorm":
        parts[-1] = {"weight": "gamma", "bias": "beta"}.get(parts[-1], parts[-1])
    elif len(parts) > 2 and parts[-2].endswith("embeddings") and parts[-1] == "weight":
        parts.pop()
    elif parts[-1] == "weight":
        parts[-1] = "kernel"
    return "/".join(parts)


def tf1_to_hf_name(tf1_name: str) -> str:
    """The inverse of `hf_to_tf1_name`, without the `bert.` prefix (`BertModel` names)."""
    if tf1_name in _SPECIAL_TO_HF:
        return _SPECIAL_TO_HF[tf1_name]
    parts = tf1_name.split("/")
    if parts[0] == "bert":
        parts.pop(0)
    if len(parts) > 1 and parts[-2] == "LayerNorm":
        parts[-1] = {"gamma": "weight", "beta": "bias"}[parts[-1]]
    elif parts[-1].endswith("embeddings"):
        parts.append("weight")
    elif parts[-1] == "kernel":
        parts[-1] = "weight"
    return re.sub(r"\blayer_(\d+)\b", r"layer.\1", ".".join(parts))


def _tokenizer_settings(hf_dir: str) -> tuple[list[str] | None, bool | None]:
    vocab_txt = os.path.join(hf_dir, "vocab.txt")
    tokenizer_json = os.path.join(hf_dir, "tokenizer.json")
    vocabulary = None
    if os.path.exists(vocab_txt):
        vocabulary = read_vocab(vocab_txt)
    elif os.path.exists(tokenizer_json):
        vocabulary = vocab_from_tokenizer_json(tokenizer_json)
    do_lower_case = None
    tokenizer_config = os.path.join(hf_dir, "tokenizer_config.json")
    if os.path.exists(tokenizer_config):
        do_lower_case = read_json(tokenizer_config).get("do_lower_case")
    if do_lower_case is None and os.path.exists(tokenizer_json):
        do_lower_case = lowercase_from_tokenizer_json(tokenizer_json)
    if do_lower_case is None and vocabulary is not None:
        do_lower_case = infer_do_lower_case(vocabulary)
    return vocabulary, do_lower_case


def read_huggingface_bert(hf_dir: str, config: dict, arguments: ConvertedArguments,
                          ignore_unknown: bool = False) -> ConvertedModel:
    """Reads a Hugging Face BERT directory (safetensors, tokenizer) whose config is mapped already.

    What `kbert.checkpoints.load_huggingface` runs for a `config.json` of
    `model_type: bert` (`kbert.checkpoints.huggingface.CONVERTERS`), after
    BERT's key map (`kbert.models.bert.bert_config.hf_config_to_arguments`)
    has read the config: the encoder's activation and LayerNorm epsilon come
    from it (`hidden_act: gelu` is the exact GELU), so the converted model
    reproduces the source's numbers. Heads come along when the file has
    `cls.predictions.*` (and `cls.seq_relationship.*`). The vocabulary is
    `vocab.txt`, or the WordPiece vocabulary of `tokenizer.json` when that is
    all there is; `do_lower_case` comes from `tokenizer_config.json` or the
    `tokenizer.json` normalizer. A sentence-transformers directory
    (`modules.json`) also gives its pooling and normalisation
    (`ConvertedModel.sentence_config`).

    Args:
        hf_dir: str. A local directory as `save_pretrained` of `transformers`
            writes it (or a Hub snapshot).
        config: dict. Its parsed `config.json` (unused: BERT's map says all).
        arguments: `ConvertedArguments`: the `BertEncoder` arguments.
        ignore_unknown: bool. Convert even if there are tensors kbert doesn't
            know (such as a classifier head).

    Returns:
        A `ConvertedModel`.

    Example:

    >>> converted = kbert.checkpoints.load_huggingface(kbert.checkpoints.minilm_hf_dir())
    >>> converted.encoder.activation
    'gelu_exact'
    """
    del config  # BERT's key map has read everything it needs
    config_path = os.path.join(hf_dir, "config.json")
    files = SafetensorsFiles(hf_dir)
    vocabulary, do_lower_case = _tokenizer_settings(hf_dir)

    hf_shapes = files.shapes()
    skipped = sorted(n for n in hf_shapes if n.endswith("position_ids"))  # a buffer, not a weight
    to_hf, shapes = {}, {}
    for name, shape in hf_shapes.items():
        if name in skipped or name.removeprefix("bert.") in (_DECODER_WEIGHT, _DECODER_BIAS):
            continue
        tf1 = hf_to_tf1_name(name)
        if tf1 in to_hf:
            raise ValueError(f"{files.path}: {to_hf[tf1]} and {name} are the same tensor "
                             "(with and without the bert. prefix); keep one.")
        to_hf[tf1] = name
        shapes[tf1] = tuple(reversed(shape)) if tf1.endswith("/kernel") else shape

    def read(tf1: str) -> np.ndarray:
        array = files.get(to_hf[tf1]).astype(np.float32)
        return array.T if tf1.endswith("/kernel") else array

    # The decoder is tied to the word embeddings (and its bias to the output
    # bias) in BERT; a file that stores untied values can't be reproduced.
    for tied, original in ((_DECODER_WEIGHT, "bert/embeddings/word_embeddings"),
                           (_DECODER_BIAS, "cls/predictions/output_bias")):
        stored = next((n for n in hf_shapes if n.removeprefix("bert.") == tied), None)
        if stored is None:
            continue
        if original not in shapes and tied == _DECODER_BIAS:
            to_hf[original], shapes[original] = stored, hf_shapes[stored]
            continue
        if original in shapes and not np.array_equal(files.get(stored), files.get(to_hf[original])):
            raise ValueError(f"{files.path}: {stored} differs from {to_hf[original]}; kbert's "
                             "masked-LM head ties them as BERT does, so it can't reproduce "
                             "this model.")
        skipped.append(stored)

    def display(tf1: str) -> str:
        if tf1 in to_hf:
            return to_hf[tf1] + (" (as [in, out])" if tf1.endswith("/kernel") else "")
        return tf1_to_hf_name(tf1)

    if not any(name.startswith("bert/") for name in shapes):
        raise ValueError(f"{files.path} has no BERT encoder tensors (e.g. "
                         f"embeddings.word_embeddings.weight); found {sorted(hf_shapes)[:5]}.")
    converted = from_tf1_arrays(
        arguments.encoder, shapes, read, source=files.path, config_source=config_path,
        vocabulary=vocabulary, do_lower_case=do_lower_case, ignore_unknown=ignore_unknown,
        skipped=skipped, display=display,
    )
    converted.sentence_config = read_sentence_transformers_config(hf_dir)
    return converted

