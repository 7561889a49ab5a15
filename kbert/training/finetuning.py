"""The fine-tuning loop: one generic function, `run_finetuning`, over any registered `Task`.

`kbert-finetune` calls it with paths from flags and hyperparameters from gin
(`gin/finetune.gin`). The loop knows only generic settings (batch size,
learning rate, epochs, warm-up, decay, seed, strategy); everything about the
task — reading data, the head, metrics, prediction files — is the task's
(`kbert.tasks.TASKS`). It checks every input before writing anything, trains
with `kbert.training.create_optimizer` (AdamW with google-research/bert's
linear warm-up and linear decay), evaluates, writes predictions and saves a
fine-tuned model directory (`kbert.checkpoints.save_finetuned`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import warnings
from typing import Any

import keras
import tensorflow as tf

from kbert.checkpoints.config_files import read_bert_config
from kbert.checkpoints.finetuned import TaskConfig
from kbert.checkpoints.finetuned import is_finetuned
from kbert.checkpoints.finetuned import load_finetuned
from kbert.checkpoints.finetuned import read_task_config
from kbert.checkpoints.finetuned import save_finetuned
from kbert.checkpoints.pretrained import BERT_CONFIG
from kbert.checkpoints.pretrained import load_encoder
from kbert.checkpoints.pretrained import pretrained_settings
from kbert.checkpoints.pretrained import read_tokenizer_config
from kbert.data.packing import PackingConfig
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.data.text_preprocessor import check_max_seq_length
from kbert.data.vocabulary import INPUT_TOKENS
from kbert.data.vocabulary import read_vocab
from kbert.files import write_text
from kbert.tasks import Task
from kbert.tasks import TaskData
from kbert.tasks import get_task
from kbert.training.optimizer import create_optimizer
from kbert.training.strategy import create_strategy

# Fine-tuning batches are padded per batch (dynamic shapes, which TPUs would
# recompile for) and every process writes model_dir, so the TPU and
# multi-worker strategies of `create_strategy` are not offered here.
STRATEGIES = ("default", "one_device", "mirrored")
EVAL_RESULTS = "eval_results.json"
# Arguments that are runtime data (flags of kbert-finetune), never gin bindings.
RUNTIME_ARGUMENTS = (
    "task", "init_checkpoint", "model_dir", "task_name", "data_dir", "train_file",
    "predict_file", "vocab_file", "do_lower_case", "do_train", "do_eval", "do_predict",
    "strategy", "verbose", "task_options",
)

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class _Schedule:
    """How long training runs: `epochs` x `steps_per_epoch`, with `warmup_steps`."""

    epochs: int
    steps_per_epoch: int
    warmup_steps: int

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch


def run_finetuning(
    task: str,
    init_checkpoint: str,
    model_dir: str,
    task_name: str | None = None,
    data_dir: str | None = None,
    train_file: str | None = None,
    predict_file: str | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    do_train: bool = True,
    do_eval: bool = True,
    do_predict: bool = False,
    strategy: str = "default",
    train_batch_size: int = 32,
    eval_batch_size: int = 64,
    learning_rate: float = 2e-5,
    num_train_epochs: float = 3.0,
    warmup_proportion: float = 0.1,
    weight_decay: float = 0.01,
    max_seq_length: int = 128,
    seed: int = 12345,
    verbose: str | int = "auto",
    task_options: Any = None,
    packing: PackingConfig | None = None,
) -> dict[str, Any]:
    """Fine-tunes, evaluates and predicts on one task; writes a fine-tuned model directory.

    All inputs (data files, vocabulary, sizes) are checked before anything is
    written. With `do_train`, `init_checkpoint` is a pre-trained directory
    (`kbert-pretrain` model_dir or `kbert-convert` output); without it, it may
    also be a fine-tuned directory to evaluate or predict with.

    Args:
        task: str. A trainable task of `kbert.tasks.TASKS` (`glue`, `ner`, `squad`).
        init_checkpoint: str. Pre-trained (or, without training, fine-tuned) directory.
        model_dir: str. Output: fine-tuned model directory, `eval_results.json`,
            predictions (`predictions.tsv`; `predictions.json` for SQuAD).
        task_name: str or None. GLUE task (`sst-2`, `mrpc`, ...); the NER
            dataset name (defaults to `conll2003`).
        data_dir: str or None. GLUE task folder, or CoNLL folder.
        train_file: str or None. SQuAD training JSON.
        predict_file: str or None. SQuAD JSON to evaluate/predict.
        vocab_file: str or None. Defaults to `init_checkpoint`'s `vocab.txt`.
        do_lower_case: bool or None. Defaults to `init_checkpoint`'s
            `tokenizer_config.json`, else True.
        do_train: bool. Train on the train split / `train_file`.
        do_eval: bool. Evaluate on the dev split / `predict_file`.
        do_predict: bool. Predict the test split / `predict_file`.
        strategy: str. `default`, `one_device` or `mirrored`, built by
            `kbert.training.create_strategy`.
        train_batch_size: int. Global batch size. Defaults to 32.
        eval_batch_size: int. Defaults to 64.
        learning_rate: float. Peak AdamW learning rate. Defaults to 2e-5.
        num_train_epochs: float. Defaults to 3.0.
        warmup_proportion: float. Fraction of steps warming up. Defaults to 0.1.
        weight_decay: float. Decoupled weight decay (not on LayerNorm and
            biases). Defaults to 0.01.
        max_seq_length: int. Packed length. Defaults to 128.
        seed: int. Shuffling, dropout and head initialization. Defaults to 12345.
        verbose: Keras `fit` verbosity. Defaults to "auto".
        task_options: the task's config dataclass (e.g. `SquadConfig(doc_stride=64)`),
            or None for its defaults; gin binds it as `SquadConfig.doc_stride`.
        packing: `PackingConfig` or None. Train on packed rows (several
            examples per row of `max_seq_length`, attention kept inside each;
            tasks with `supports_packing`, e.g. GLUE); `train_batch_size` then
            counts rows and an epoch is the packed rows of the training set.
            None trains on length-bucketed batches. Evaluation is bucketed
            either way. Defaults to None.

    Returns:
        dict with the evaluation metrics (if `do_eval`), `train_loss` (per epoch,
        if `do_train`) and `train_steps`.

    Example:

    >>> kbert.training.run_finetuning(
    ...     task="glue", task_name="sst-2", data_dir="glue_data/SST-2",
    ...     init_checkpoint="minilm/", model_dir="runs/sst2")
    """
    _check_arguments(task, strategy, do_train, do_eval, do_predict, train_batch_size,
                     eval_batch_size, num_train_epochs, warmup_proportion, packing)
    task_object, saved = _resolve_task(task, task_name, task_options, init_checkpoint, do_train)
    if saved is not None:
        max_seq_length = saved.max_seq_length
    data = TaskData(task_name, data_dir, train_file, predict_file)
    splits = [split for split, wanted in (("train", do_train), ("dev", do_eval),
                                          ("test", do_predict)) if wanted]
    task_object.check_data(data, splits)
    preprocessor, vocab_file = _preprocessor(init_checkpoint, vocab_file, do_lower_case,
                                             max_seq_length)
    keras.utils.set_random_seed(seed)
    # Read every split needed now, so bad files fail before anything is written.
    examples = {split: task_object.read(data, split) for split in splits}
    train_rows = task_object.training_rows(examples["train"], preprocessor) if do_train else []
    if do_train and not train_rows:
        raise ValueError("no training examples after reading the data.")

    distribution = create_strategy(strategy)
    _check_replicas(distribution, train_batch_size, eval_batch_size, do_train)
    num_rows = (_packed_rows(task_object, train_rows, preprocessor, packing)
                if do_train and packing is not None else len(train_rows))
    results: dict[str, Any] = {}
    with distribution.scope():
        model = (load_finetuned(init_checkpoint)[0] if saved is not None
                 else task_object.build_model(load_encoder(init_checkpoint)))
        if do_train:
            schedule = _schedule(num_rows, train_batch_size, num_train_epochs,
                                 warmup_proportion)
            _compile(model, task_object, schedule, learning_rate, weight_decay)
    if do_train:
        results.update(_train(model, task_object, train_rows, preprocessor, schedule,
                              train_batch_size, seed, verbose, packing))
    files = _evaluate_and_predict(model, task_object, examples, preprocessor, eval_batch_size,
                                  results, do_eval, do_predict)
    _write_outputs(model_dir, model if do_train else None, task_object, preprocessor,
                   vocab_file, files, results if do_eval else None)
    return results


def _check_arguments(task, strategy, do_train, do_eval, do_predict, train_batch_size,
                     eval_batch_size, num_train_epochs, warmup_proportion, packing) -> None:
    task_class = get_task(task)
    if packing is not None:
        if not task_class.supports_packing:
            raise ValueError(f"run_finetuning.packing is set but --task={task} cannot pack its "
                             "rows; drop the binding (its batches are length-bucketed).")
        packing.validate()
    if not task_class.trainable:
        raise ValueError(f"--task={task!r} is export-only; kbert-finetune cannot train it.")
    if strategy not in STRATEGIES:
        raise ValueError(f"--strategy={strategy!r}; fine-tuning supports {', '.join(STRATEGIES)}.")
    if not (do_train or do_eval or do_predict):
        raise ValueError("nothing to do: pass at least one of --do_train, --do_eval, --do_predict.")
    for name, value in (("train_batch_size", train_batch_size),
                        ("eval_batch_size", eval_batch_size)):
        if value < 1:
            raise ValueError(f"{name}={value}; it must be >= 1.")
    if do_train and num_train_epochs <= 0:
        raise ValueError(f"num_train_epochs={num_train_epochs}; it must be > 0.")
    if not 0 <= warmup_proportion < 1:
        raise ValueError(f"warmup_proportion={warmup_proportion}; it must be in [0, 1).")


def _check_replicas(distribution: tf.distribute.Strategy, train_batch_size: int,
                    eval_batch_size: int, do_train: bool) -> None:
    """Every replica gets the same shape: a bucketed batch is padded once, then split evenly.

    Model Garden's trick for bucketing under `tf.distribute`: batches are
    formed (and padded to one length) for all replicas together, in
    multiples of the replica count, so each replica's share has the same
    length and size.
    """
    replicas = distribution.num_replicas_in_sync
    for name, value, used in (("train_batch_size", train_batch_size, do_train),
                              ("eval_batch_size", eval_batch_size, True)):
        if used and value % replicas:
            raise ValueError(
                f"run_finetuning.{name}={value} is not divisible by {replicas} replicas; use a "
                f"multiple of {replicas} so that every replica gets the same shape.")


def _packed_rows(task: Task, rows: list, preprocessor: TextPreprocessor,
                 packing: PackingConfig) -> int:
    """How many packed rows one epoch of `rows` makes (one pass of packing)."""
    dataset = task.dataset(rows, preprocessor, 256, is_training=False, packing=packing)
    return int(sum(int(tf.shape(batch["token_ids"])[0]) for batch in dataset))


def _resolve_task(task: str, task_name: str | None, task_options: Any, init_checkpoint: str,
                  do_train: bool) -> tuple[Task, TaskConfig | None]:
    """The task to run, and the saved record when evaluating a fine-tuned directory."""
    task_class = get_task(task)
    if not tf.io.gfile.isdir(init_checkpoint):
        raise FileNotFoundError(f"--init_checkpoint={init_checkpoint} is not a directory.")
    if do_train or not is_finetuned(init_checkpoint):
        task_object = task_class(task_options, task_name=task_name)
        task_object.use_pretrained_settings(pretrained_settings(init_checkpoint))
        return task_object, None
    saved = read_task_config(init_checkpoint)
    if saved.task != task:
        raise ValueError(f"--init_checkpoint={init_checkpoint} was fine-tuned for "
                         f"--task={saved.task}, not {task}.")
    task_object = task_class.from_description(saved.to_dict())
    if task_options is not None and task_class.evaluation_fields:
        run_values = {name: getattr(task_options, name) for name in task_class.evaluation_fields}
        task_object.config = dataclasses.replace(task_object.config, **run_values)
    return task_object, saved


def _preprocessor(init_checkpoint: str, vocab_file: str | None, do_lower_case: bool | None,
                  max_seq_length: int) -> tuple[TextPreprocessor, str]:
    """Checks the pre-trained directory and vocabulary; the preprocessor and vocab file."""
    if not tf.io.gfile.exists(os.path.join(init_checkpoint, BERT_CONFIG)):
        raise FileNotFoundError(
            f"--init_checkpoint={init_checkpoint} is not a kbert pre-trained directory: "
            f"{BERT_CONFIG} is missing. Point to a kbert-pretrain model_dir or a kbert-convert "
            "output_dir.")
    encoder_config = read_bert_config(os.path.join(init_checkpoint, BERT_CONFIG))
    check_max_seq_length(max_seq_length, encoder_config["max_sequence_length"])
    vocab_file, vocabulary = _resolve_vocabulary(init_checkpoint, vocab_file,
                                                 encoder_config["vocabulary_size"])
    if do_lower_case is None:
        recorded = read_tokenizer_config(init_checkpoint)["do_lower_case"]
        do_lower_case = True if recorded is None else recorded
    return TextPreprocessor(vocabulary, do_lower_case, max_seq_length), vocab_file


def _resolve_vocabulary(init_checkpoint: str, vocab_file: str | None,
                        vocabulary_size: int) -> tuple[str, list[str]]:
    recorded = read_tokenizer_config(init_checkpoint)["vocab_file"]
    if vocab_file is None:
        if recorded is None:
            raise FileNotFoundError(
                f"--init_checkpoint={init_checkpoint} has no vocab.txt; pass --vocab_file.")
        vocab_file = recorded
    vocabulary = read_vocab(vocab_file, INPUT_TOKENS)
    if recorded is not None and vocab_file != recorded:
        if read_vocab(recorded) != vocabulary:
            raise ValueError(
                f"--vocab_file={vocab_file} differs from the vocabulary {recorded} of "
                f"--init_checkpoint={init_checkpoint}; drop --vocab_file to use the model's own.")
    if len(vocabulary) != vocabulary_size:
        raise ValueError(
            f"{vocab_file} has {len(vocabulary)} tokens but the encoder of --init_checkpoint="
            f"{init_checkpoint} has {vocabulary_size} embedding rows; use the vocab.txt the "
            "model was trained with.")
    return vocab_file, vocabulary


def _schedule(num_rows: int, batch_size: int, num_train_epochs: float,
              warmup_proportion: float) -> _Schedule:
    # Fractional epochs round to whole steps, spread evenly over whole epochs.
    steps_per_epoch = math.ceil(num_rows / batch_size)
    total_steps = max(1, round(steps_per_epoch * num_train_epochs))
    epochs = math.ceil(num_train_epochs)
    steps_per_epoch = math.ceil(total_steps / epochs)
    return _Schedule(epochs, steps_per_epoch, int(epochs * steps_per_epoch * warmup_proportion))


def _compile(model: keras.Model, task: Task, schedule: _Schedule, learning_rate: float,
             weight_decay: float) -> None:
    optimizer = create_optimizer(learning_rate, num_train_steps=schedule.total_steps,
                                 num_warmup_steps=schedule.warmup_steps,
                                 weight_decay_rate=weight_decay)
    # XLA compiles once per shape; batches here have many lengths.
    model.compile(optimizer=optimizer, jit_compile=False, **task.compile_arguments())


def _train(model: keras.Model, task: Task, rows: list, preprocessor: TextPreprocessor,
           schedule: _Schedule, batch_size: int, seed: int, verbose,
           packing: PackingConfig | None = None) -> dict[str, Any]:
    logger.info("Training %s on %d examples: %d steps (%d warmup), batch %d%s.", task.task_name,
                len(rows), schedule.total_steps, schedule.warmup_steps, batch_size,
                " packed rows" if packing else "")
    options = {"packing": packing} if packing is not None else {}
    dataset = task.dataset(rows, preprocessor, batch_size, is_training=True, seed=seed,
                           **options)
    with warnings.catch_warnings():
        # The token and span heads do not use the pooler; Keras warns each step.
        warnings.filterwarnings("ignore", message="Gradients do not exist for variables")
        history = model.fit(dataset.map(task.training_batch), epochs=schedule.epochs,
                            steps_per_epoch=schedule.steps_per_epoch, shuffle=False,
                            verbose=verbose)
    return {"train_loss": [float(v) for v in history.history["loss"]],
            "train_steps": schedule.total_steps}


def _evaluate_and_predict(model, task: Task, examples: dict[str, list],
                          preprocessor: TextPreprocessor, batch_size: int,
                          results: dict[str, Any], do_eval: bool, do_predict: bool) -> dict[str, str]:
    """Adds dev metrics to `results`; returns the files to write (name -> text)."""
    files: dict[str, str] = {}
    if do_eval:
        evaluation = task.evaluate(model, examples["dev"], preprocessor, batch_size)
        results.update(evaluation.metrics)
        files.update(evaluation.files)
    if do_predict and not (do_eval and task.evaluation_writes_predictions):
        files.update(task.predict(model, examples["test"], preprocessor, batch_size))
    return files


def _write_outputs(model_dir: str, trained: keras.Model | None, task: Task,
                   preprocessor: TextPreprocessor, vocab_file: str, files: dict[str, str],
                   results: dict[str, Any] | None) -> None:
    """Writes the fine-tuned directory (when trained), prediction files and eval results."""
    tf.io.gfile.makedirs(model_dir)
    if trained is not None:
        record = TaskConfig.from_dict({**task.describe(),
                                       "max_seq_length": preprocessor.max_seq_length,
                                       "do_lower_case": preprocessor.do_lower_case})
        save_finetuned(model_dir, _uncompiled(trained), record, vocab_file)
    for name, text in files.items():
        write_text(os.path.join(model_dir, name), text)
    if results is not None:
        write_text(os.path.join(model_dir, EVAL_RESULTS),
                   json.dumps(results, indent=2, sort_keys=True) + "\n")


def _uncompiled(model: keras.Model) -> keras.Model:
    # `task_model.keras` should hold the model, not AdamW's two extra copies
    # of every weight.
    copy = model.__class__.from_config(model.get_config())
    copy.set_weights(model.get_weights())
    return copy
