"""google-research/electra TF1 checkpoints: the discriminator in, kbert encoders out as one.

ELECTRA's discriminator is a BERT encoder under the scope `electra/`
(`electra/embeddings/word_embeddings`, `electra/encoder/layer_N/...`), with
`electra/embeddings_project` where the embeddings are narrower than the
hidden size (ELECTRA-Small: 128 and 256) and no pooler (its classifier reads
the `[CLS]` vector). The same weight table as google-research/bert's
(`kbert.checkpoints.weight_map`) maps the names, with that prefix.

The original's `gelu` is the exact (erf) GELU, so a read checkpoint becomes
`activation="gelu_exact"`. Its pre-training checkpoints also hold the
generator (`generator/...`, `generator_predictions/...`) and the
discriminator's head (`discriminator_predictions/...`); only the
discriminator is converted, the rest is listed as not converted.
"""

from __future__ import annotations

import os
import re

import tensorflow as tf

from kbert.checkpoints.bert_tf1 import read_checkpoint_shapes
from kbert.checkpoints.bert_tf1 import resolve_checkpoint
from kbert.checkpoints.bert_tf1 import tokenizer_beside
from kbert.checkpoints.bert_tf1 import write_tf1_directory
from kbert.checkpoints.config_files import read_bert_config
from kbert.checkpoints.converted_model import ConvertedModel
from kbert.checkpoints.converted_model import from_tf1_arrays
from kbert.checkpoints.weight_map import ELECTRA_PREFIX
from kbert.checkpoints.weight_map import tf1_arrays

CHECKPOINT_NAME = "electra_model.ckpt"
# Pre-training parts of an ELECTRA checkpoint that are not the discriminator.
_NOT_DISCRIMINATOR = re.compile(r"^(generator|generator_predictions|discriminator_predictions)/")
_LAYER = re.compile(r"^electra/encoder/layer_(\d+)/")
_NO_POOLER = ("google-research/electra has no pooler (its classifier reads the [CLS] vector), "
              "so pooled_dense starts freshly initialised; fine-tuning trains it")


def load_electra_tf1(
    checkpoint: str,
    bert_config: str | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    ignore_unknown: bool = False,
) -> ConvertedModel:
    """Reads the discriminator of a google-research/electra TF1 checkpoint by variable name.

    Sizes come from `bert_config` (kbert writes one beside its ELECTRA
    checkpoints) or, as google-research/electra keeps them in its `--hparams`
    rather than beside the checkpoint, from the tensors' shapes: vocabulary,
    embedding and hidden size, layers, feed-forward width, positions and
    segments, with one attention head per 64 dimensions (the original's rule:
    Small 4, Base 12, Large 16), exact GELU and LayerNorm epsilon 1e-12.

    Args:
        checkpoint: str. Checkpoint prefix or its directory.
        bert_config: str or None. A `bert_config.json` (with `embedding_size`
            where it differs from `hidden_size`); defaults to the one next to
            the checkpoint, else the sizes are read from the shapes.
        vocab_file: str or None. Defaults to `vocab.txt` next to the checkpoint.
        do_lower_case: bool or None. None reads `tokenizer_config.json` next to
            the checkpoint, else guesses from the vocabulary.
        ignore_unknown: bool. Convert even if the checkpoint has tensors that
            are neither the discriminator nor ELECTRA's pre-training parts.

    Returns:
        A `ConvertedModel` holding the discriminator as a `BertEncoder`.

    Example:

    >>> converted = kbert.checkpoints.load_electra_tf1("electra_small/", do_lower_case=True)
    >>> converted.save_pretrained("electra_small_kbert/")
    """
    checkpoint = resolve_checkpoint(checkpoint, CHECKPOINT_NAME, "electra_small/electra_small")
    directory = os.path.dirname(checkpoint)
    reader, shapes = read_checkpoint_shapes(checkpoint)
    if not any(name.startswith(f"{ELECTRA_PREFIX}/") for name in shapes):
        raise ValueError(
            f"{checkpoint} has no electra/* variables, so it is not a google-research/electra "
            f"checkpoint (it has e.g. {sorted(shapes)[:5]}); for google-research/bert "
            "checkpoints use --source=bert_tf1.")
    notes = [_NO_POOLER]
    beside = os.path.join(directory, "bert_config.json")
    if bert_config is None and tf.io.gfile.exists(beside):
        bert_config = beside
    if bert_config:
        arguments, config_source = read_bert_config(bert_config), bert_config
    else:
        arguments, config_source = electra_arguments_from_shapes(shapes, checkpoint), checkpoint
        notes.append(
            f"sizes read from the tensors' shapes (no bert_config.json beside the checkpoint): "
            f"num_attention_heads={arguments['num_heads']} (one per 64 dimensions, "
            "google-research/electra's rule), hidden_act=gelu (exact), layer_norm_eps=1e-12; "
            "pass --bert_config if the model was trained otherwise")
    vocabulary, do_lower_case = tokenizer_beside(directory, vocab_file, do_lower_case)
    converted = from_tf1_arrays(
        arguments, shapes, reader.get_tensor, source=checkpoint, config_source=config_source,
        vocabulary=vocabulary, do_lower_case=do_lower_case, ignore_unknown=ignore_unknown,
        prefix=ELECTRA_PREFIX, known=lambda name: bool(_NOT_DISCRIMINATOR.match(name)))
    converted.notes += notes
    return converted


def electra_arguments_from_shapes(shapes: dict[str, tuple], source: str) -> dict:
    """`BertEncoder` arguments of an ELECTRA discriminator, read off its tensors' shapes.

    Args:
        shapes: dict of TF1 name to shape.
        source: str. The checkpoint, named in errors.

    Returns:
        A dict of `BertEncoder` keyword arguments.
    """
    needed = ["electra/embeddings/word_embeddings", "electra/embeddings/position_embeddings",
              "electra/embeddings/token_type_embeddings",
              "electra/encoder/layer_0/attention/self/query/kernel",
              "electra/encoder/layer_0/intermediate/dense/kernel"]
    missing = [name for name in needed if name not in shapes]
    if missing:
        raise ValueError(f"Cannot read the sizes of {source} from its tensors: missing "
                         f"{', '.join(missing)}; pass --bert_config.")
    vocabulary_size, embedding_width = shapes[needed[0]]
    hidden_dim = shapes[needed[3]][1]
    arguments = {
        "vocabulary_size": vocabulary_size,
        "num_layers": len({int(m.group(1)) for n in shapes if (m := _LAYER.match(n))}),
        "num_heads": max(1, hidden_dim // 64),
        "hidden_dim": hidden_dim,
        "intermediate_dim": shapes[needed[4]][1],
        "max_sequence_length": shapes[needed[1]][0],
        "num_segments": shapes[needed[2]][0],
        "activation": "gelu_exact",
        "layer_norm_epsilon": 1e-12,
    }
    if embedding_width != hidden_dim:
        arguments["embedding_dim"] = embedding_width
    return arguments


def save_electra_tf1(converted: ConvertedModel, output_dir: str,
                     overwrite: bool = False) -> list[str]:
    """Writes an encoder as a google-research/electra discriminator TF1 checkpoint.

    `output_dir` gets `electra_model.ckpt.{index,data-00000-of-00001}`, a
    `checkpoint` state file, `bert_config.json` (so kbert reads it back with
    the same sizes), `vocab.txt` and `tokenizer_config.json` when known. Only
    the encoder is written, under `electra/...`; google-research/electra's
    fine-tuning restores it with `model_size` (or `model_hparam_overrides`)
    and `embedding_size` set to match. The directory is written atomically.

    Args:
        converted: `ConvertedModel`. What to write (see `load_kbert`).
        output_dir: str. Must not exist unless `overwrite`.
        overwrite: bool. Replace an existing directory. Defaults to False.

    Returns:
        Notes on what was left out or what the original code would compute
        differently; empty when nothing was.

    Example:

    >>> converted = kbert.checkpoints.load_kbert("electra_model_dir/")
    >>> kbert.checkpoints.save_electra_tf1(converted, "electra_tf1/")
    """
    encoder = converted.encoder
    notes = ["the pooler (pooled_dense) is not written: google-research/electra has none"]
    if converted.pretrainer is not None:
        notes.append("the BERT pre-training heads are not written: an ELECTRA checkpoint holds "
                     "the discriminator's encoder only")
    if encoder.activation != "gelu_exact":
        notes.append(f"activation {encoder.activation!r}: google-research/electra's gelu is the "
                     "exact (erf) form, so its outputs will differ slightly from kbert's.")
    if encoder.layer_norm_epsilon != 1e-12:
        notes.append(f"layer_norm_eps={encoder.layer_norm_epsilon:g}: google-research/electra "
                     "always uses 1e-12.")
    write_tf1_directory(converted, tf1_arrays(encoder, prefix=ELECTRA_PREFIX), output_dir,
                        overwrite, CHECKPOINT_NAME)
    return notes
