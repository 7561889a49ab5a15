"""google-research/bert TF1 checkpoints: read them into kbert, write kbert models as them.

Reading uses `tf.train.load_checkpoint` by variable name (no TF1 graph); writing
uses the `SaveV2` op, which produces the same files `tf.compat.v1.train.Saver`
does, under the original names, so `modeling.py` + `tf.train.init_from_checkpoint`
(or a `Saver`) of the original code restores them.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from kbert.files import atomic_directory
from kbert.files import read_json
from kbert.checkpoints.converted_model import ConvertedModel
from kbert.checkpoints.converted_model import from_tf1_arrays
from kbert.checkpoints.tokenizer_files import infer_do_lower_case
from kbert.data.vocabulary import read_vocab
from kbert.checkpoints.tokenizer_files import write_vocab
from kbert.checkpoints.weight_map import tf1_arrays
from kbert.checkpoints.config_files import read_bert_config
from kbert.checkpoints.config_files import write_bert_config
from kbert.checkpoints.pretrained import TOKENIZER_CONFIG

CHECKPOINT_NAME = "bert_model.ckpt"
# Activations the original modeling.py's `get_activation` understands.
_ORIGINAL_ACTIVATIONS = ("gelu_approximate", "relu", "tanh")


def resolve_checkpoint(checkpoint: str, name: str = CHECKPOINT_NAME,
                       example: str = "uncased_L-12_H-768_A-12/bert_model.ckpt") -> str:
    """The checkpoint prefix of `checkpoint`: a prefix, or a directory holding one.

    Args:
        checkpoint: str. A prefix (`<prefix>.index` exists) or a directory
            with a `checkpoint` state file or a `<name>.index`.
        name: str. The prefix looked for in a directory without a state file.
        example: str. A prefix shown in the error message.

    Returns:
        The prefix.
    """
    if tf.io.gfile.isdir(checkpoint):
        latest = tf.train.latest_checkpoint(checkpoint)
        if latest is None:
            candidate = os.path.join(checkpoint, name)
            if tf.io.gfile.exists(candidate + ".index"):
                return candidate
            raise FileNotFoundError(
                f"No TF1 checkpoint in directory {checkpoint}; pass the checkpoint prefix, "
                f"e.g. --checkpoint={os.path.join(checkpoint, name)}"
            )
        return latest
    if not tf.io.gfile.exists(checkpoint + ".index"):
        raise FileNotFoundError(
            f"TF1 checkpoint {checkpoint} not found ({checkpoint}.index is missing); pass the "
            f"prefix, e.g. --checkpoint={example}"
        )
    return checkpoint


def read_checkpoint_shapes(checkpoint: str):
    """Returns `(reader, {name: shape})` of a TF1 checkpoint, with a clear error if unreadable."""
    try:
        reader = tf.train.load_checkpoint(checkpoint)
    except (tf.errors.NotFoundError, tf.errors.DataLossError) as e:
        raise ValueError(f"Cannot read TF1 checkpoint {checkpoint}: {e.message}") from None
    return reader, {name: tuple(shape)
                    for name, shape in reader.get_variable_to_shape_map().items()}


def tokenizer_beside(directory: str, vocab_file: str | None, do_lower_case: bool | None):
    """`(vocabulary, do_lower_case)` for a checkpoint: the flags, else the files beside it."""
    if vocab_file is None and tf.io.gfile.exists(os.path.join(directory, "vocab.txt")):
        vocab_file = os.path.join(directory, "vocab.txt")
    vocabulary = read_vocab(vocab_file) if vocab_file else None
    if do_lower_case is None:
        do_lower_case = _lower_case_beside(directory)
    if do_lower_case is None and vocabulary is not None:
        do_lower_case = infer_do_lower_case(vocabulary)
    return vocabulary, do_lower_case


def write_tf1_directory(converted: ConvertedModel, arrays: dict, output_dir: str,
                        overwrite: bool, checkpoint_name: str) -> None:
    """Writes `arrays` as a TF1 checkpoint plus `bert_config.json` and the tokenizer files, atomically."""
    with atomic_directory(output_dir, overwrite) as temporary:
        names = list(arrays)
        tf.raw_ops.SaveV2(
            prefix=os.path.join(temporary, checkpoint_name),
            tensor_names=names,
            shape_and_slices=[""] * len(names),
            tensors=[tf.constant(arrays[name]) for name in names],
        )
        with tf.io.gfile.GFile(os.path.join(temporary, "checkpoint"), "w") as f:
            f.write(f'model_checkpoint_path: "{checkpoint_name}"\n'
                    f'all_model_checkpoint_paths: "{checkpoint_name}"\n')
        write_bert_config(converted.encoder.get_config(),
                          os.path.join(temporary, "bert_config.json"))
        if converted.vocabulary is not None:
            write_vocab(converted.vocabulary, os.path.join(temporary, "vocab.txt"))
        if converted.do_lower_case is not None:
            with tf.io.gfile.GFile(os.path.join(temporary, TOKENIZER_CONFIG), "w") as f:
                f.write(json.dumps({"do_lower_case": bool(converted.do_lower_case)}) + "\n")


def _lower_case_beside(directory: str) -> bool | None:
    path = os.path.join(directory, TOKENIZER_CONFIG)
    if tf.io.gfile.exists(path):
        return read_json(path).get("do_lower_case")
    return None


def load_bert_tf1(
    checkpoint: str,
    bert_config: str | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    ignore_unknown: bool = False,
) -> ConvertedModel:
    """Reads a google-research/bert TF1 checkpoint by variable name.

    The masked-LM (`cls/predictions/*`) and NSP (`cls/seq_relationship/*`)
    heads come along when the checkpoint has them. Optimizer slots (`adam_m`,
    `adam_v`) and `global_step` are skipped and listed in `skipped`; any other
    tensor the weight table doesn't know is an error unless `ignore_unknown`.

    Args:
        checkpoint: str. Checkpoint prefix (`.../bert_model.ckpt`) or its directory.
        bert_config: str or None. `bert_config.json`; defaults to the one next
            to the checkpoint.
        vocab_file: str or None. `vocab.txt`; defaults to the one next to the
            checkpoint when present.
        do_lower_case: bool or None. None reads `tokenizer_config.json` next to
            the checkpoint, else guesses from the vocabulary (uncased
            vocabularies have no upper-case tokens).
        ignore_unknown: bool. Convert even if the checkpoint has tensors kbert
            doesn't know (such as a fine-tuned classifier's `output_weights`).

    Returns:
        A `ConvertedModel`.

    Example:

    >>> converted = kbert.checkpoints.load_bert_tf1(
    ...     "uncased_L-12_H-768_A-12/bert_model.ckpt", do_lower_case=True)
    >>> converted.save_pretrained("bert_base_uncased/")
    """
    checkpoint = resolve_checkpoint(checkpoint)
    directory = os.path.dirname(checkpoint)
    bert_config = bert_config or os.path.join(directory, "bert_config.json")
    arguments = read_bert_config(bert_config)
    vocabulary, do_lower_case = tokenizer_beside(directory, vocab_file, do_lower_case)
    reader, shapes = read_checkpoint_shapes(checkpoint)
    if not any(name.startswith("bert/") for name in shapes):
        raise ValueError(
            f"{checkpoint} has no bert/* variables, so it is not a google-research/bert "
            f"checkpoint (it has e.g. {sorted(shapes)[:5]}). TF2 object-based checkpoints "
            "are not supported; kbert models are saved with kbert.checkpoints.save_pretrained."
        )
    return from_tf1_arrays(
        arguments, shapes, reader.get_tensor, source=checkpoint, config_source=bert_config,
        vocabulary=vocabulary, do_lower_case=do_lower_case, ignore_unknown=ignore_unknown,
    )


def save_bert_tf1(converted: ConvertedModel, output_dir: str, overwrite: bool = False) -> list[str]:
    """Writes an original-layout TF1 checkpoint, `bert_config.json` and `vocab.txt`.

    `output_dir` gets `bert_model.ckpt.{index,data-00000-of-00001}`, a
    `checkpoint` state file, `bert_config.json` (original keys plus
    `layer_norm_eps`), `vocab.txt` and `tokenizer_config.json` when known. The
    heads are written under `cls/*` when `converted` has them. The directory is
    written atomically.

    Args:
        converted: `ConvertedModel`. What to write (see `load_kbert`).
        output_dir: str. Must not exist unless `overwrite`.
        overwrite: bool. Replace an existing directory. Defaults to False.

    Returns:
        Notes on what the original code would not reproduce (an activation or
        LayerNorm epsilon its `modeling.py` lacks); empty when it reproduces
        the model exactly.

    Example:

    >>> converted = kbert.checkpoints.load_kbert("model_dir/")
    >>> kbert.checkpoints.save_bert_tf1(converted, "tf1_out/")
    """
    encoder = converted.encoder
    notes = []
    if encoder.activation not in _ORIGINAL_ACTIVATIONS:
        notes.append(
            f"activation {encoder.activation!r} is written as hidden_act={encoder.activation!r}, "
            "which kbert reads back but google-research/bert's modeling.py rejects (it knows "
            "gelu = tanh GELU, relu, tanh)."
        )
    if encoder.layer_norm_epsilon != 1e-12:
        notes.append(
            f"layer_norm_eps={encoder.layer_norm_epsilon:g} is written to bert_config.json; "
            "google-research/bert's modeling.py always uses 1e-12."
        )
    if encoder.embeddings_projection is not None:
        notes.append(
            f"the embedding projection (embedding_size={encoder.embedding_dim}, hidden_size="
            f"{encoder.hidden_dim}) is written as bert/embeddings_project/*, which kbert reads "
            "back but google-research/bert's modeling.py lacks; --to=electra_tf1 writes the "
            "names google-research/electra reads."
        )
    write_tf1_directory(converted, tf1_arrays(converted.model), output_dir, overwrite,
                        CHECKPOINT_NAME)
    return notes
