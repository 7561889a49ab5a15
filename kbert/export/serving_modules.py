"""The one way from a model to its serving module: what `kbert-export` saves and `kbert-index` runs.

A serving module (`kbert.tasks.serving.ServingModule`) is a task's model with
its `TextPreprocessor`: raw text in, answers out. A fine-tuned directory serves
its task as recorded in `task_config.json`; a pre-trained directory serves
sentence embeddings (`kbert.tasks.encoder_task`, pooling as its
`sentence_config.json` says). `serving_module(model_dir)` builds it from an opened directory
(`kbert.checkpoints.open_model_dir`); `task_model_serving_module` and
`encoder_serving_module` build it from models in memory (`kbert-finetune
--export_dir`, `export_embedding_model`). All three end in `_module`, the one
place where serving options (such as a cheaper numeric format) belong.
"""

from __future__ import annotations

import keras

from kbert.checkpoints.finetuned import TaskConfig
from kbert.checkpoints.model_dir import ModelDir
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.data.text_preprocessor import check_max_seq_length
from kbert.data.tokenizers import load_tokenizer
from kbert.tasks import Task
from kbert.tasks import encoder_task
from kbert.tasks import get_task
from kbert.tasks.serving import ServingModule

# A pre-trained directory's embedding length when none is asked for (capped at
# the encoder's positions).
DEFAULT_EMBEDDING_LENGTH = 128


def serving_task(model_dir: ModelDir, feature_layers: str | None = None) -> Task:
    """The task a model directory serves as.

    Args:
        model_dir: `ModelDir` from `kbert.checkpoints.open_model_dir`.
        feature_layers: str or None. Pre-trained directories only: the blocks
            of the embedding's `features` signature (None: the last four).

    Returns:
        The fine-tuned directory's task as recorded, or for a pre-trained
        directory `kbert.tasks.encoder_task` (sentence embeddings pooling as its
        `sentence_config.json` says).

    Example:

    >>> serving_task(kbert.checkpoints.open_model_dir("minilm/")).config.pooling
    'mean'
    """
    if model_dir.is_finetuned:
        task_config = model_dir.task_config
        return get_task(task_config.task).from_description(task_config.to_dict())
    return encoder_task(model_dir.sentence_config, feature_layers)


def serving_module(model_dir: ModelDir, max_seq_length: int | None = None,
                   feature_layers: str | None = None,
                   quantize: str | None = None) -> ServingModule:
    """Builds the serving module of an opened model directory.

    Args:
        model_dir: `ModelDir` from `kbert.checkpoints.open_model_dir`.
        max_seq_length: int or None. Pre-trained directories only: the longest
            input in pieces; defaults to 128 (capped at the encoder's
            positions). A fine-tuned directory uses its recorded length.
        feature_layers: str or None. Pre-trained directories only: the blocks
            of the `features` signature, such as `"-1,-2,-3,-4"` (None: the
            last four).
        quantize: str or None. `int8` serves a quantized copy of the model
            (`kbert.export.quantization`); None serves float32.

    Returns:
        The task's `ServingModule` (the embedding module for a pre-trained directory).

    Raises:
        ValueError: `max_seq_length` or `feature_layers` given for a fine-tuned
            directory; a length beyond the encoder's positions.

    Example:

    >>> module = serving_module(kbert.checkpoints.open_model_dir("runs/sst2"))
    >>> sorted(module.signatures())
    ['serve_ids', 'serving_default']
    """
    if model_dir.is_finetuned:
        for flag, value in (("max_seq_length", max_seq_length), ("feature_layers", feature_layers)):
            if value is not None:
                raise ValueError(f"--{flag} applies to embedding exports only; {model_dir.path} "
                                 "is fine-tuned and exports its task as recorded in "
                                 "task_config.json.")
        return _module(serving_task(model_dir), model_dir.model(),
                       model_dir.preprocessor(model_dir.task_config.max_seq_length), quantize)
    encoder = model_dir.encoder(dropout=0.0)
    length = max_seq_length or min(DEFAULT_EMBEDDING_LENGTH, encoder.max_sequence_length)
    return _module(serving_task(model_dir, feature_layers), encoder,
                   model_dir.preprocessor(length), quantize)


def task_model_serving_module(model: keras.Model, task_config: TaskConfig,
                              vocab_file: str) -> ServingModule:
    """Builds the serving module of a fine-tuned task model in memory.

    Args:
        model: the task model (`BertClassifier`, `BertSpanLabeler`, ...).
        task_config: its `TaskConfig`: the task, length and tokenizer setting.
        vocab_file: str. Its `vocab.txt` (or byte-level BPE `tokenizer.json`).

    Returns:
        The task's `ServingModule`.

    Example:

    >>> module = task_model_serving_module(classifier, task_config, "runs/sst2/vocab.txt")
    """
    task = get_task(task_config.task).from_description(task_config.to_dict())
    return _module(task, model, _preprocessor(model.encoder, vocab_file, task_config.do_lower_case,
                                              task_config.max_seq_length))


def encoder_serving_module(encoder: keras.Model, vocab_file: str, do_lower_case: bool,
                           max_seq_length: int, sentence_config: dict | None = None,
                           feature_layers: str | None = None) -> ServingModule:
    """Builds the sentence-embedding serving module of an encoder in memory.

    Args:
        encoder: `BertEncoder`.
        vocab_file: str. Its `vocab.txt` (or byte-level BPE `tokenizer.json`).
        do_lower_case: bool. Tokenizer setting.
        max_seq_length: int. Longest input in pieces.
        sentence_config: dict or None. The pooling to use (`sentence_config.json`);
            None pools by mean and L2-normalises.
        feature_layers: str or None. Blocks of the `features` signature (None:
            the last four).

    Returns:
        The embedding `ServingModule`.

    Example:

    >>> module = encoder_serving_module(encoder, "minilm/vocab.txt", True, 128)
    """
    task = encoder_task(sentence_config, feature_layers)
    return _module(task, encoder, _preprocessor(encoder, vocab_file, do_lower_case,
                                                max_seq_length))


def _preprocessor(encoder, vocab_file: str, do_lower_case: bool,
                  max_seq_length: int) -> TextPreprocessor:
    """A preprocessor over a model in memory, its length checked against the encoder's positions."""
    check_max_seq_length(max_seq_length, getattr(encoder, "max_sequence_length", None))
    return TextPreprocessor(load_tokenizer(vocab_file, do_lower_case), max_seq_length)


def _module(task: Task, model: keras.Model, preprocessor: TextPreprocessor,
            quantize: str | None = None) -> ServingModule:
    # Every serving module is made here, so options that change how a model is
    # served (a numeric format, ...) are added once for export and index alike.
    if quantize is None:
        return task.serving_module(model, preprocessor)
    from kbert.export.numeric_formats import quantize_model

    # A copy: functions already traced over the float model keep its float
    # kernels. The task builds its serving model first (the embedding task
    # rebuilds the encoder), then that model is quantized.
    copy = model.__class__.from_config(model.get_config())
    copy.set_weights(model.get_weights())
    module = task.serving_module(copy, preprocessor)
    quantize_model(module.model, quantize)
    module.hold_models(model=module.model)  # int8 kernels in, the float ones out
    return module
