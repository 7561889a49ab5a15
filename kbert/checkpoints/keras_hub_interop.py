"""kbert <-> keras-hub: `BertEncoder` and `keras_hub.models.BertBackbone` share layer names.

The two models have the same layers under the same names and variable paths,
so conversion copies variables path by path (checked, not by position). What
`BertBackbone` cannot express is its fixed numerics: tanh GELU and LayerNorm
epsilon 1e-12. An encoder with another activation (such as the exact GELU of a
converted Hugging Face model) would give different outputs as a `BertBackbone`,
so that is an error unless the caller accepts the difference.
"""

from __future__ import annotations

import keras
import keras_hub

from kbert.files import atomic_directory
from kbert.checkpoints.converted_model import ConvertedModel
from kbert.models.bert.bert_encoder import BertEncoder

# The arguments `BertBackbone` and `BertEncoder` share: BERT's sizes but the
# embedding width (`BertBackbone` has no embedding projection; `to_keras_hub`
# refuses an encoder with one), plus the dropout rate.
_SHARED_ARGUMENTS = tuple(key for key in BertEncoder.size_keys if key != "embedding_width") + (
    "dropout",)


def _copy_variables(source: keras.Model, target: keras.Model) -> None:
    targets = {v.path: v for v in target.weights}
    sources = {v.path: v for v in source.weights}
    if set(targets) != set(sources):
        raise ValueError(
            f"{source.name} and {target.name} have different variables: only in the source "
            f"{sorted(set(sources) - set(targets))}, only in the target "
            f"{sorted(set(targets) - set(sources))}."
        )
    for path, variable in targets.items():
        if tuple(variable.shape) != tuple(sources[path].shape):
            raise ValueError(f"{path}: shape {tuple(sources[path].shape)} in {source.name}, "
                             f"{tuple(variable.shape)} in {target.name}.")
        variable.assign(sources[path])


def to_keras_hub(
    encoder: BertEncoder, allow_numeric_mismatch: bool = False
) -> keras_hub.models.BertBackbone:
    """Returns a `keras_hub.models.BertBackbone` holding an encoder's weights.

    Args:
        encoder: `kbert.models.BertEncoder`.
        allow_numeric_mismatch: bool. `BertBackbone` always uses tanh GELU and
            LayerNorm epsilon 1e-12; with an encoder that doesn't (such as a
            converted Hugging Face model, exact GELU), the outputs would differ
            slightly. False raises; True converts anyway. Defaults to False.

    Returns:
        A `BertBackbone` giving the same outputs as `encoder` (bitwise, when the
        numerics match).

    Example:

    >>> backbone = kbert.checkpoints.to_keras_hub(kbert.checkpoints.load_encoder("out/"))
    >>> classifier = keras_hub.models.BertTextClassifier(backbone, num_classes=2,
    ...                                                  preprocessor=None)
    """
    if encoder.embeddings_projection is not None:
        raise ValueError(
            f"keras_hub.models.BertBackbone has no embedding projection, and this encoder "
            f"projects embedding_dim={encoder.embedding_dim} to hidden_dim={encoder.hidden_dim} "
            "(an ELECTRA discriminator); keep it as a kbert directory or write it with "
            "--to=electra_tf1.")
    differences = []
    if encoder.activation != "gelu_approximate":
        differences.append(f"activation={encoder.activation!r} (BertBackbone: gelu_approximate)")
    if encoder.layer_norm_epsilon != 1e-12:
        differences.append(f"layer_norm_epsilon={encoder.layer_norm_epsilon:g} "
                           "(BertBackbone: 1e-12)")
    if differences and not allow_numeric_mismatch:
        raise ValueError(
            "keras_hub.models.BertBackbone cannot reproduce this encoder: "
            + "; ".join(differences)
            + ". Its outputs would differ slightly; pass --allow_numeric_mismatch "
            "(allow_numeric_mismatch=True) to convert anyway, or use the kbert encoder."
        )
    backbone = keras_hub.models.BertBackbone(
        **{name: getattr(encoder, name) for name in _SHARED_ARGUMENTS},
        dtype=encoder.dtype_policy,
    )
    _copy_variables(encoder, backbone)
    return backbone


def from_keras_hub(backbone: keras_hub.models.BertBackbone) -> BertEncoder:
    """Returns a `BertEncoder` holding a `keras_hub.models.BertBackbone`'s weights.

    Args:
        backbone: `keras_hub.models.BertBackbone`.

    Returns:
        A `BertEncoder` (tanh GELU, epsilon 1e-12, as `BertBackbone`) with the
        same outputs.

    Example:

    >>> encoder = kbert.checkpoints.from_keras_hub(
    ...     keras_hub.models.BertBackbone.from_preset("bert_base_en_uncased"))
    """
    encoder = BertEncoder(**{name: getattr(backbone, name) for name in _SHARED_ARGUMENTS},
                          dtype=backbone.dtype_policy)
    _copy_variables(backbone, encoder)
    return encoder


def load_keras_hub(preset: str) -> ConvertedModel:
    """Reads a keras-hub BERT preset (a directory or a preset handle) as a `ConvertedModel`.

    Args:
        preset: str. A directory written by `save_to_preset` or
            `save_keras_hub_preset`, or a handle such as `bert_base_en_uncased`.

    Returns:
        A `ConvertedModel` with the encoder, and the vocabulary and lower-casing
        when the preset has a tokenizer.
    """
    backbone = keras_hub.models.BertBackbone.from_preset(preset)
    vocabulary, do_lower_case = None, None
    try:
        tokenizer = keras_hub.models.BertTokenizer.from_preset(preset)
    except (ValueError, FileNotFoundError):
        tokenizer = None
    if tokenizer is not None:
        vocabulary = list(tokenizer.get_vocabulary())
        do_lower_case = bool(tokenizer.lowercase)
    return ConvertedModel(from_keras_hub(backbone), None, vocabulary, do_lower_case, preset)


def save_keras_hub_preset(
    converted: ConvertedModel,
    output_dir: str,
    overwrite: bool = False,
    allow_numeric_mismatch: bool = False,
) -> None:
    """Writes a keras-hub preset directory: the `BertBackbone` and its `BertTokenizer`.

    `keras_hub.models.BertBackbone.from_preset(output_dir)` (and
    `BertTextClassifier.from_preset(output_dir, num_classes=...)` when the
    vocabulary is known) load it. Written atomically. The pre-training heads are
    not part of a keras-hub backbone preset and are left out.

    Args:
        converted: `ConvertedModel`. What to write (see `load_kbert`).
        output_dir: str. Must not exist unless `overwrite`.
        overwrite: bool. Replace an existing directory. Defaults to False.
        allow_numeric_mismatch: bool. See `to_keras_hub`.

    Example:

    >>> kbert.checkpoints.save_keras_hub_preset(kbert.checkpoints.load_kbert("out/"), "out_keras_hub/")
    """
    backbone = to_keras_hub(converted.encoder, allow_numeric_mismatch)
    with atomic_directory(output_dir, overwrite) as temporary:
        backbone.save_to_preset(temporary)
        if converted.vocabulary is not None:
            tokenizer = keras_hub.models.BertTokenizer(
                vocabulary=converted.vocabulary, lowercase=bool(converted.do_lower_case)
            )
            tokenizer.save_to_preset(temporary)
