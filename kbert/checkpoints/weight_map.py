"""kbert variable paths <-> google-research/bert (and /electra) TF1 variable names, in one table.

Every conversion goes through the original TF1 names: a TF1 checkpoint uses
them directly, Hugging Face names map onto them (`kbert.checkpoints.huggingface`),
and writing a TF1 checkpoint reads the same table backwards. So there is one
place that knows which kbert variable is which original variable, and how the
arrays are laid out. google-research/electra's discriminator uses the same
names under `electra/` instead of `bert/`, has no pooler, and projects
narrower embeddings with `electra/embeddings_project` (kbert's
`embeddings_projection`):

- keras-hub's `MultiHeadAttention` keeps query/key/value kernels as
  `[hidden, heads, head_dim]` and biases as `[heads, head_dim]`, the output
  kernel as `[heads, head_dim, hidden]`; TF1 keeps `[hidden, hidden]` and
  `[hidden]`. Same memory order, so a reshape converts them.
- `cls/seq_relationship/output_weights` is `[2, hidden]` (the original code
  multiplies with `transpose_b=True`); kbert's NSP dense kernel is `[hidden, 2]`.
- Everything else has the same shape on both sides.
"""

from __future__ import annotations

import re
from typing import Callable, Mapping, NamedTuple

import keras
import numpy as np

from kbert.models.bert.bert_encoder import BertEncoder

# How an array is laid out in TF1 compared with the kbert variable.
SAME = "same"
MERGE_HEADS_LAST = "merge_heads_last"  # kbert [..., heads, head_dim] <-> TF1 [..., hidden]
MERGE_HEADS_FIRST = "merge_heads_first"  # kbert [heads, head_dim, H] <-> TF1 [hidden, H]
TRANSPOSE = "transpose"  # kbert [H, 2] <-> TF1 [2, H]

# TF1 names a pre-training checkpoint holds besides the model: optimizer slots
# and the step counter. Skipped, and counted in the conversion report.
_OPTIMIZER_STATE = re.compile(r"(^global_step$)|(/adam_[mv]$)")


class WeightName(NamedTuple):
    """One row of the table: a kbert variable path, its TF1 name, the layout change."""

    path: str
    tf1_name: str
    layout: str


# The scope of the encoder's variables in google-research/bert and /electra.
BERT_PREFIX = "bert"
ELECTRA_PREFIX = "electra"


def _layer_rows(i: int, prefix: str) -> list[WeightName]:
    kbert = f"transformer_layer_{i}"
    tf1 = f"{prefix}/encoder/layer_{i}"
    rows = []
    for part in ("query", "key", "value"):
        rows += [
            WeightName(f"{kbert}/self_attention_layer/{part}/kernel",
                       f"{tf1}/attention/self/{part}/kernel", MERGE_HEADS_LAST),
            WeightName(f"{kbert}/self_attention_layer/{part}/bias",
                       f"{tf1}/attention/self/{part}/bias", MERGE_HEADS_LAST),
        ]
    return rows + [
        WeightName(f"{kbert}/self_attention_layer/attention_output/kernel",
                   f"{tf1}/attention/output/dense/kernel", MERGE_HEADS_FIRST),
        WeightName(f"{kbert}/self_attention_layer/attention_output/bias",
                   f"{tf1}/attention/output/dense/bias", SAME),
        WeightName(f"{kbert}/self_attention_layer_norm/gamma",
                   f"{tf1}/attention/output/LayerNorm/gamma", SAME),
        WeightName(f"{kbert}/self_attention_layer_norm/beta",
                   f"{tf1}/attention/output/LayerNorm/beta", SAME),
        WeightName(f"{kbert}/feedforward_intermediate_dense/kernel",
                   f"{tf1}/intermediate/dense/kernel", SAME),
        WeightName(f"{kbert}/feedforward_intermediate_dense/bias",
                   f"{tf1}/intermediate/dense/bias", SAME),
        WeightName(f"{kbert}/feedforward_output_dense/kernel", f"{tf1}/output/dense/kernel", SAME),
        WeightName(f"{kbert}/feedforward_output_dense/bias", f"{tf1}/output/dense/bias", SAME),
        WeightName(f"{kbert}/feedforward_layer_norm/gamma", f"{tf1}/output/LayerNorm/gamma", SAME),
        WeightName(f"{kbert}/feedforward_layer_norm/beta", f"{tf1}/output/LayerNorm/beta", SAME),
    ]


def weight_names(
    num_layers: int,
    masked_lm: bool = False,
    next_sentence: bool = False,
    prefix: str = BERT_PREFIX,
    embeddings_projection: bool = False,
) -> list[WeightName]:
    """Returns the table of kbert variable paths and their TF1 names.

    Args:
        num_layers: int. Number of Transformer blocks.
        masked_lm: bool. Include the masked-LM head (`cls/predictions/*`).
        next_sentence: bool. Include the NSP head (`cls/seq_relationship/*`).
        prefix: str. `"bert"` (google-research/bert) or `"electra"`
            (google-research/electra's discriminator, which has no pooler).
            Defaults to `"bert"`.
        embeddings_projection: bool. Include the projection of embeddings
            narrower than the hidden size (`<prefix>/embeddings_project/*`).
            Defaults to False.

    Returns:
        A list of `WeightName(path, tf1_name, layout)` in checkpoint order.

    Example:

    >>> weight_names(12)[0]
    WeightName(path='token_embedding/embeddings',
               tf1_name='bert/embeddings/word_embeddings', layout='same')
    """
    if prefix not in (BERT_PREFIX, ELECTRA_PREFIX):
        raise ValueError(f"prefix={prefix!r} is not {BERT_PREFIX!r} or {ELECTRA_PREFIX!r}.")
    embeddings = f"{prefix}/embeddings"
    rows = [
        WeightName("token_embedding/embeddings", f"{embeddings}/word_embeddings", SAME),
        WeightName("position_embedding/embeddings", f"{embeddings}/position_embeddings", SAME),
        WeightName("segment_embedding/embeddings", f"{embeddings}/token_type_embeddings", SAME),
        WeightName("embeddings_layer_norm/gamma", f"{embeddings}/LayerNorm/gamma", SAME),
        WeightName("embeddings_layer_norm/beta", f"{embeddings}/LayerNorm/beta", SAME),
    ]
    if embeddings_projection:
        rows += [
            WeightName("embeddings_projection/kernel", f"{prefix}/embeddings_project/kernel", SAME),
            WeightName("embeddings_projection/bias", f"{prefix}/embeddings_project/bias", SAME),
        ]
    for i in range(num_layers):
        rows += _layer_rows(i, prefix)
    if prefix == BERT_PREFIX:  # ELECTRA's pooled output is the [CLS] vector itself.
        rows += [
            WeightName("pooled_dense/kernel", "bert/pooler/dense/kernel", SAME),
            WeightName("pooled_dense/bias", "bert/pooler/dense/bias", SAME),
        ]
    if masked_lm:
        # The output projection is tied to the word embeddings, as in the original.
        rows += [
            WeightName("masked_lm_head/intermediate_dense/kernel",
                       "cls/predictions/transform/dense/kernel", SAME),
            WeightName("masked_lm_head/intermediate_dense/bias",
                       "cls/predictions/transform/dense/bias", SAME),
            WeightName("masked_lm_head/intermediate_layer_norm/gamma",
                       "cls/predictions/transform/LayerNorm/gamma", SAME),
            WeightName("masked_lm_head/intermediate_layer_norm/beta",
                       "cls/predictions/transform/LayerNorm/beta", SAME),
            WeightName("masked_lm_head/output_bias", "cls/predictions/output_bias", SAME),
        ]
    if next_sentence:
        rows += [
            WeightName("next_sentence_head/dense/kernel",
                       "cls/seq_relationship/output_weights", TRANSPOSE),
            WeightName("next_sentence_head/dense/bias", "cls/seq_relationship/output_bias", SAME),
        ]
    return rows


def tf1_shape(layout: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """Returns the TF1 shape of a kbert variable of `shape` with the given layout."""
    shape = tuple(shape)
    if layout == MERGE_HEADS_LAST:
        return shape[:-2] + (shape[-2] * shape[-1],)
    if layout == MERGE_HEADS_FIRST:
        return (shape[0] * shape[1],) + shape[2:]
    if layout == TRANSPOSE:
        return tuple(reversed(shape))
    return shape


def to_tf1(layout: str, array: np.ndarray) -> np.ndarray:
    """Converts a kbert variable's value to its TF1 layout."""
    if layout == TRANSPOSE:
        return np.ascontiguousarray(array.T)
    return np.reshape(array, tf1_shape(layout, array.shape))


def from_tf1(layout: str, array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Converts a TF1 array to the layout of a kbert variable of `shape`."""
    if layout == TRANSPOSE:
        return np.ascontiguousarray(array.T)
    return np.reshape(array, shape)


def has_heads(names) -> tuple[bool, bool]:
    """Returns whether TF1 `names` include the (masked-LM, next-sentence) heads."""
    names = list(names)
    return (any(n.startswith("cls/predictions/") for n in names),
            any(n.startswith("cls/seq_relationship/") for n in names))


def is_optimizer_state(name: str) -> bool:
    """Whether a TF1 name is optimizer state (`adam_m`, `adam_v`, `global_step`)."""
    return bool(_OPTIMIZER_STATE.search(name))


def check_config_matches(
    arguments: dict,
    shapes: Mapping[str, tuple],
    config_source: str,
    checkpoint_source: str,
    display: Callable[[str], str] = str,
    prefix: str = BERT_PREFIX,
) -> None:
    """Raises if encoder sizes disagree with the sizes the TF1-named tensors imply.

    Reports every disagreement at once, in the config's key names.

    Args:
        arguments: dict. `BertEncoder` arguments read from the config.
        shapes: mapping of TF1 name to shape.
        config_source: str. The config file, named in the message.
        checkpoint_source: str. The checkpoint, named in the message.
        display: callable. How to name a TF1 name in messages (a source with
            other names shows its own). Defaults to the TF1 name.
        prefix: str. `"bert"` or `"electra"`: the scope of the names.
    """
    problems = []

    # BERT's sizes (`BertEncoder.size_keys`), each compared with the tensor that has it.
    sizes = BertEncoder.sizes_from_arguments(arguments)

    def compare(key, size, name, axis):
        shape = shapes.get(name)
        if shape is not None and len(shape) > axis and shape[axis] != sizes[size]:
            problems.append(f"{key}={sizes[size]} but {display(name)} has shape "
                            f"{list(shapes[name])}")

    compare("vocab_size", "vocabulary_size", f"{prefix}/embeddings/word_embeddings", 0)
    compare("embedding_size" if arguments.get("embedding_dim") else "hidden_size",
            "embedding_width", f"{prefix}/embeddings/word_embeddings", 1)
    compare("hidden_size", "hidden_dim", f"{prefix}/encoder/layer_0/attention/self/query/kernel", 1)
    compare("max_position_embeddings", "max_sequence_length",
            f"{prefix}/embeddings/position_embeddings", 0)
    compare("type_vocab_size", "num_segments", f"{prefix}/embeddings/token_type_embeddings", 0)
    compare("intermediate_size", "intermediate_dim",
            f"{prefix}/encoder/layer_0/intermediate/dense/kernel", 1)
    layers = {int(m.group(1)) for n in shapes
              if (m := re.match(rf"{prefix}/encoder/layer_(\d+)/", n))}
    if layers and len(layers) != sizes["num_layers"]:
        problems.append(f"num_hidden_layers={sizes['num_layers']} but the checkpoint has "
                        f"{len(layers)} layers (layer_{min(layers)} .. layer_{max(layers)})")
    if problems:
        raise ValueError(
            f"{config_source} does not match the checkpoint {checkpoint_source}: "
            + "; ".join(problems)
            + ". Use the config released with this checkpoint."
        )


def assign_from_tf1(
    model: keras.Model,
    shapes: Mapping[str, tuple],
    read: Callable[[str], np.ndarray],
    source: str,
    ignore_unknown: bool = False,
    display: Callable[[str], str] = str,
    prefix: str = BERT_PREFIX,
    known: Callable[[str], bool] = lambda name: False,
) -> list[str]:
    """Loads TF1-named tensors into a kbert encoder or pre-trainer, checking everything first.

    All problems are collected before anything is assigned, and reported in one
    error: every missing tensor, every shape mismatch (name, the source's shape
    and the shape the model needs) and every unknown tensor.

    Args:
        model: a `BertEncoder` or `BertPretrainer` (its heads decide which
            `cls/*` tensors are expected).
        shapes: mapping of every TF1 name in the source to its shape.
        read: returns the array of a TF1 name.
        source: str. The checkpoint, named in error messages.
        ignore_unknown: bool. When True, tensors the table doesn't know are
            skipped (and returned) instead of being an error.
        display: callable. How to name a TF1 name in messages and in the
            returned list. Defaults to the TF1 name.
        prefix: str. `"bert"` or `"electra"`: which names to read.
        known: callable. Source names it accepts are skipped like optimizer
            state (and returned), not reported as unknown: ELECTRA's
            generator and heads when reading its discriminator.

    Returns:
        The source names that were not loaded (optimizer state, known
        skipped tensors, and unknown tensors when `ignore_unknown`), for the
        conversion report.
    """
    rows = _model_weight_names(model, prefix)
    variables = {v.path: v for v in model.weights}
    expected = {row.tf1_name for row in rows}
    missing, mismatched = [], []
    for row in rows:
        if row.path not in variables:
            raise ValueError(f"kbert model has no variable {row.path}; the weight table and "
                             "the model disagree (a kbert bug).")
        needed = tf1_shape(row.layout, variables[row.path].shape)
        if row.tf1_name not in shapes:
            missing.append(display(row.tf1_name))
        elif tuple(shapes[row.tf1_name]) != needed:
            mismatched.append(f"{display(row.tf1_name)}: source has {list(shapes[row.tf1_name])}, "
                              f"the model needs {list(needed)}")
    skipped = sorted(display(n) for n in shapes
                     if n not in expected and (is_optimizer_state(n) or known(n)))
    unknown = sorted(display(n) for n in shapes
                     if n not in expected and not (is_optimizer_state(n) or known(n)))
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing tensor(s): {', '.join(missing)}")
    if mismatched:
        problems.append(f"{len(mismatched)} shape mismatch(es): {'; '.join(mismatched)}")
    if unknown and not ignore_unknown:
        problems.append(
            f"{len(unknown)} unknown tensor(s) that kbert would drop: {', '.join(unknown)} "
            "(pass --ignore_unknown_tensors / ignore_unknown=True to convert without them)"
        )
    if problems:
        raise ValueError(f"Cannot convert {source}: " + ". ".join(problems) + ".")
    for row in rows:
        variable = variables[row.path]
        value = from_tf1(row.layout, np.asarray(read(row.tf1_name)), tuple(variable.shape))
        variable.assign(value.astype(keras.backend.standardize_dtype(variable.dtype)))
    return skipped + (unknown if ignore_unknown else [])


def tf1_arrays(model: keras.Model, prefix: str = BERT_PREFIX) -> dict[str, np.ndarray]:
    """Returns a kbert encoder's or pre-trainer's weights under their TF1 names.

    Args:
        model: a `BertEncoder` or `BertPretrainer`.
        prefix: str. `"bert"` or `"electra"` (the encoder only, no pooler).
            Defaults to `"bert"`.

    Returns:
        A dict of TF1 name to float32 array, in the original layout.
    """
    rows = _model_weight_names(model, prefix)
    variables = {v.path: v for v in model.weights}
    return {
        row.tf1_name: to_tf1(row.layout, keras.ops.convert_to_numpy(variables[row.path]))
        for row in rows
    }


def _model_weight_names(model: keras.Model, prefix: str = BERT_PREFIX) -> list[WeightName]:
    """The weight table of an encoder, or of a pre-trainer with the heads it has."""
    encoder = getattr(model, "encoder", model)
    return weight_names(
        encoder.num_layers,
        masked_lm=getattr(model, "masked_lm_head", None) is not None,
        next_sentence=getattr(model, "next_sentence_head", None) is not None,
        prefix=prefix,
        embeddings_projection=getattr(encoder, "embeddings_projection", None) is not None,
    )
