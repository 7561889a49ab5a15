"""kbert's pre-trained model directory: what fine-tuning, export and conversion share.

A pre-trained directory holds:

    bert_config.json        encoder sizes, google-research/bert key names (another
                            architecture: its `model_type` and keras-hub names, see
                            `kbert.checkpoints.config_files`)
    vocab.txt               the WordPiece vocabulary (when known)
    tokenizer_config.json   {"do_lower_case": bool}
    encoder.weights.h5      the encoder's weights (Keras weights file)
    tokenizer.json          instead of vocab.txt: a byte-level BPE tokenizer (ModernBERT's)
    pretrainer.weights.h5   optional: the whole `BertPretrainer`, MLM/NSP heads included
                            (another architecture: its pre-trainer, e.g. `ModernBertPretrainer`)
    electra_pretrainer.weights.h5
                            optional, instead: the whole `ElectraPretrainer` (generator,
                            heads), whose discriminator is the encoder
    sentence_config.json    optional: how the encoder pools sentence vectors (pooling,
                            normalize, max_seq_length), e.g. from a sentence-transformers model

`kbert-pretrain` writes it into its `model_dir`, `kbert-convert` writes it from
TF1 checkpoints and Hugging Face weights, and `--init_checkpoint` of pre-training
and fine-tuning reads it.
"""

from __future__ import annotations

import json
import os

import keras
import tensorflow as tf

from kbert.checkpoints.config_files import read_encoder_config
from kbert.checkpoints.config_files import write_encoder_config
from kbert.data.tokenizers import TOKENIZER_CONFIG
from kbert.data.tokenizers import VOCAB  # noqa: F401  The directory's file names, for importers.
from kbert.data.tokenizers import recorded_lower_case
from kbert.data.tokenizers import tokenizer_class
from kbert.data.tokenizers import tokenizer_file
from kbert.files import copy_file
from kbert.files import local_copy
from kbert.files import local_output
from kbert.files import read_json
from kbert.files import write_text
from kbert.models.bert.bert_pretrainer import BertPretrainer
from kbert.models.electra_pretrainer import ElectraPretrainer
from kbert.models.encoder import Encoder
from kbert.models.registry import architecture_of

BERT_CONFIG = "bert_config.json"
ENCODER_WEIGHTS = "encoder.weights.h5"
PRETRAINER_WEIGHTS = "pretrainer.weights.h5"
SENTENCE_CONFIG = "sentence_config.json"
ELECTRA_PRETRAINER_WEIGHTS = "electra_pretrainer.weights.h5"


def pretrainer_weights_name(pretrainer: keras.Model) -> str:
    """The file name a pre-trainer's weights have in a pre-trained directory.

    Each kind of pre-trainer has its own name, so a directory says which heads
    it holds and `--init_checkpoint` loads only heads that fit.

    Args:
        pretrainer: `BertPretrainer` or `ElectraPretrainer`.

    Returns:
        `pretrainer.weights.h5` or `electra_pretrainer.weights.h5`.
    """
    return ELECTRA_PRETRAINER_WEIGHTS if isinstance(pretrainer, ElectraPretrainer) else (
        PRETRAINER_WEIGHTS)


def _save_weights(model: keras.Model, path: str) -> None:
    # Keras writes h5 to local files only; `local_output` publishes it atomically.
    with local_output(path) as local_path:
        model.save_weights(local_path)


def _load_weights(model: keras.Model, path: str) -> None:
    with local_copy(path) as local_path:
        try:
            model.load_weights(local_path)
        except OSError as e:
            # h5py's OSError for a cut or foreign file ("truncated file: eof = 100, ...
            # stored_eof = 170176", "file signature not found"): one line naming the file.
            reason = (str(e).splitlines() or [type(e).__name__])[0]
            raise ValueError(
                f"{path} is not a readable Keras weights file ({reason}); it may have been cut "
                "short in a copy: copy the model directory again, or save it again.") from None


def save_pretrained(
    directory: str,
    encoder: Encoder,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    pretrainer: keras.Model | None = None,
    sentence_config: dict | None = None,
) -> None:
    """Writes a pre-trained model directory (each file atomically).

    Args:
        directory: str. Created if missing (`gs://` works).
        encoder: `BertEncoder` or another registered `kbert.models.Encoder`.
            Its config and weights are saved (for ELECTRA, the discriminator).
        vocab_file: str or None. Copied to `vocab.txt` when given (to
            `tokenizer.json` when it is a byte-level BPE `.json` file).
        do_lower_case: bool or None. Written to `tokenizer_config.json` when given.
        pretrainer: `BertPretrainer`, `ElectraPretrainer` or None. When given,
            its weights (heads and generator included) go to
            `pretrainer.weights.h5` or `electra_pretrainer.weights.h5` so
            pre-training can continue from them.
        sentence_config: dict or None. How the encoder makes sentence vectors
            (`pooling`, `normalize`, `max_seq_length`), written to
            `sentence_config.json` when given.

    Example:

    >>> kbert.checkpoints.save_pretrained("out/", encoder, vocab_file="vocab.txt",
    ...                              do_lower_case=True)
    """
    tf.io.gfile.makedirs(directory)
    write_encoder_config(encoder, os.path.join(directory, BERT_CONFIG))
    if vocab_file is not None:
        copy_file(vocab_file, os.path.join(directory, tokenizer_file_name(vocab_file)))
    if do_lower_case is not None:
        write_text(os.path.join(directory, TOKENIZER_CONFIG),
                   json.dumps({"do_lower_case": bool(do_lower_case)}) + "\n")
    if sentence_config is not None:
        write_text(os.path.join(directory, SENTENCE_CONFIG),
                   json.dumps(sentence_config, indent=2, sort_keys=True) + "\n")
    _save_weights(encoder, os.path.join(directory, ENCODER_WEIGHTS))
    if pretrainer is not None:
        _save_weights(pretrainer, os.path.join(directory, pretrainer_weights_name(pretrainer)))


def _check_directory(directory: str) -> None:
    for name in (BERT_CONFIG, ENCODER_WEIGHTS):
        if not tf.io.gfile.exists(os.path.join(directory, name)):
            raise FileNotFoundError(
                f"{directory} is not a kbert pre-trained directory: {name} is missing. "
                "Point to a kbert-pretrain model_dir or a kbert-convert output_dir."
            )


def load_encoder(directory: str, **overrides) -> Encoder:
    """Builds a pre-trained directory's encoder and loads its weights.

    The class is the architecture `bert_config.json` records
    (`kbert.checkpoints.config_files.read_encoder_config`): `BertEncoder`
    unless it names another.

    Args:
        directory: str. A pre-trained model directory.
        **overrides: encoder arguments to change, such as `dtype` or
            `dropout` (sizes must stay as saved).

    Returns:
        The encoder.
    """
    _check_directory(directory)
    encoder_class, arguments = read_encoder_config(os.path.join(directory, BERT_CONFIG))
    return build_encoder(directory, encoder_class, arguments, **overrides)


def build_encoder(directory: str, encoder_class: type, arguments: dict, **overrides) -> Encoder:
    """Builds an encoder from an already read config and loads the directory's weights.

    What `load_encoder` and `kbert.checkpoints.open_model_dir` share; the
    directory is not checked again here.

    Args:
        directory: str. A pre-trained (or fine-tuned) model directory.
        encoder_class: type. The registered encoder class, as
            `read_encoder_config` returns it (`BertEncoder` for BERT files).
        arguments: dict. Its constructor arguments, as `read_encoder_config`
            returns them.
        **overrides: encoder arguments to change, such as `dtype` or
            `dropout` (sizes must stay as saved).

    Returns:
        The encoder with the weights of `encoder.weights.h5`.
    """
    encoder = encoder_class(**{**arguments, **overrides})
    _load_weights(encoder, os.path.join(directory, ENCODER_WEIGHTS))
    return encoder


def load_pretrainer(directory: str, next_sentence: bool = True, **overrides) -> keras.Model:
    """Builds the pre-trainer of a pre-trained directory's architecture.

    The class is the architecture's record's
    (`kbert.models.registry.ARCHITECTURES`): a `BertPretrainer` for BERT
    (with the NSP head when `next_sentence`), e.g. a `ModernBertPretrainer`
    for ModernBERT, which is MLM-only (`next_sentence` does not apply). The
    heads' weights are loaded when the directory has `pretrainer.weights.h5`
    (and they fit how it is built; the record's `head_variants` are tried in
    turn); otherwise only the encoder's weights are loaded and the heads
    start fresh.

    Args:
        directory: str. A pre-trained model directory.
        next_sentence: bool. Whether a `BertPretrainer` has the NSP head.
        **overrides: encoder arguments to change, such as `dtype`.

    Returns:
        The `BertPretrainer` or the architecture's pre-trainer.

    Example:

    >>> pretrainer = kbert.checkpoints.load_pretrainer("ModernBERT-base-kbert/")
    >>> logits = pretrainer({**inputs, "mask_positions": positions})["mlm"]
    """
    encoder = load_encoder(directory, **overrides)
    architecture = architecture_of(encoder)
    # `next_sentence` is BertPretrainer's switch (also for an architecture it pre-trains).
    base = {"next_sentence": next_sentence} if architecture.pretrainer is BertPretrainer else {}
    # bert_config.json records the encoder, not the head's switches; the saved
    # weights load only into the matching structure, so they pick the variant.
    variants = architecture.head_variants
    heads = os.path.join(directory, PRETRAINER_WEIGHTS)
    if not tf.io.gfile.exists(heads):
        return architecture.pretrainer(encoder, **base, **variants[0])
    for index, arguments in enumerate(variants):
        pretrainer = architecture.pretrainer(encoder, **base, **arguments)
        try:
            _load_weights(pretrainer, heads)
            return pretrainer
        except ValueError:
            if index == len(variants) - 1:
                raise


def load_pretrainer_weights(pretrainer: keras.Model, directory: str) -> bool:
    """Loads a pre-trained directory's heads into a built pre-trainer of the same kind.

    Args:
        pretrainer: `BertPretrainer` or `ElectraPretrainer`, built with the
            sizes the directory was saved with.
        directory: str. A pre-trained model directory.

    Returns:
        True when the directory held weights of this kind of pre-trainer and
        they were loaded; False when it holds none (then nothing changes).

    Raises:
        ValueError: the weights file does not fit the pre-trainer (other
            sizes, an NSP head where there is none, another generator size).
    """
    path = os.path.join(directory, pretrainer_weights_name(pretrainer))
    if not tf.io.gfile.exists(path):
        return False
    try:
        _load_weights(pretrainer, path)
    except ValueError as e:
        raise ValueError(f"{path} does not fit the {type(pretrainer).__name__} being built "
                         f"(saved with other settings?): {str(e).splitlines()[0]}") from None
    return True


def read_tokenizer_config(directory: str) -> dict:
    """Returns the tokenizer settings of a pre-trained directory.

    Args:
        directory: str. A pre-trained model directory.

    Returns:
        A dict with `vocab_file` (the `vocab.txt`, else a byte-level BPE
        `tokenizer.json`, else None: `kbert.data.tokenizers.tokenizer_file`)
        and `do_lower_case` (bool or None when not recorded).
    """
    return {"vocab_file": tokenizer_file(directory),
            "do_lower_case": recorded_lower_case(directory)}


def tokenizer_file_name(vocab_file: str) -> str:
    """The name a tokenizer file has in a model directory: `tokenizer.json` or `vocab.txt`.

    A `.json` file is a Hugging Face `tokenizer.json` (byte-level BPE); any
    other is a WordPiece `vocab.txt` (`kbert.data.tokenizers.tokenizer_class`).
    """
    return tokenizer_class(vocab_file).file_name


def read_sentence_config(directory: str) -> dict | None:
    """How a pre-trained directory's encoder makes sentence vectors, if it records it.

    Args:
        directory: str. A pre-trained (or fine-tuned) model directory.

    Returns:
        None when there is no `sentence_config.json`; else its dict
        (`pooling`, `normalize`, `max_seq_length`, `source`).

    Example:

    >>> kbert.checkpoints.read_sentence_config("minilm/")
    {'max_seq_length': 256, 'normalize': True, 'pooling': 'mean', 'source': 'sentence-transformers'}
    """
    path = os.path.join(directory, SENTENCE_CONFIG)
    if not tf.io.gfile.exists(path):
        return None
    values = read_json(path)
    if not isinstance(values, dict) or "pooling" not in values:
        raise ValueError(f"{path}: expected an object with 'pooling' and 'normalize'.")
    return values


def pretrained_settings(directory: str) -> dict:
    """What a pre-trained directory records about how its encoder is used, for `Task`s.

    Args:
        directory: str. A pre-trained model directory.

    Returns:
        dict: `sentence_config` (see `read_sentence_config`; None when absent).
    """
    return {"sentence_config": read_sentence_config(directory)}
