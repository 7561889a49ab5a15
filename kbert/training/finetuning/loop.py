"""The fine-tuning loop: one generic function, `run_finetuning`, over any registered `Task`.

`kbert-finetune` calls it with paths from flags and hyperparameters from gin
(`gin/finetune.gin`). The loop knows only generic settings (batch size,
learning rate, epochs, warm-up, decay, seed, evaluation schedule, strategy);
everything about the task — reading data, the head, metrics, prediction files
— is the task's (`kbert.tasks.TASKS`). It checks every input before writing
anything, trains with `kbert.training.create_optimizer` (AdamW with
google-research/bert's linear warm-up and linear decay), evaluates on the dev
split during training and keeps the best model by the task's `main_metric`
(`kbert.training.finetuning.dev_evaluation`), optionally over several seeds
(`num_restarts`) or a grid of settings (`kbert.training.finetuning.hparam_search`), writes
predictions and saves a fine-tuned model directory
(`kbert.checkpoints.save_finetuned`).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import math
import os
import warnings
from typing import Any

import keras
import tensorflow as tf

from kbert.checkpoints.finetuned import TaskConfig
from kbert.checkpoints.model_dir import ModelDir
from kbert.checkpoints.model_dir import open_model_dir
from kbert.data.packing import PackingConfig
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.files import write_text
from kbert.tasks import Evaluation
from kbert.tasks import Task
from kbert.tasks import TaskData
from kbert.tasks import get_task
from kbert.training.finetuning import auto_settings
from kbert.training.finetuning import hparam_search
from kbert.training.finetuning.dev_evaluation import CurvePoint
from kbert.training.finetuning.dev_evaluation import DevEvaluation
from kbert.training.finetuning.dev_evaluation import best_checkpoint_callbacks
from kbert.training.finetuning.finetuned_dir import save_task_model
from kbert.training.finetuning.outcome_checks import outcome_warnings
from kbert.training.finetuning.selection_split import DEFAULT_SELECTION_FRACTION
from kbert.training.finetuning.selection_split import carve_selection_split
from kbert.training.finetuning.selection_split import check_selection_fraction
from kbert.training.finetuning.training_schedule import TrainingSchedule
from kbert.training.finetuning.training_schedule import training_schedule
from kbert.training.optimizer import build_optimizer_state
from kbert.training.optimizer import create_optimizer
from kbert.training.strategy import create_strategy

# Fine-tuning batches are padded per batch (dynamic shapes, which TPUs would
# recompile for) and every process writes model_dir, so the TPU and
# multi-worker strategies of `create_strategy` are not offered here.
STRATEGIES = ("default", "one_device", "mirrored")
EVAL_RESULTS = "eval_results.json"
BEST_HPARAMS = "best_hparams.gin"
# Arguments that are runtime data (flags of kbert-finetune), never gin bindings.
RUNTIME_ARGUMENTS = (
    "task", "init_checkpoint", "model_dir", "task_name", "data_dir", "train_file",
    "predict_file", "validation_file", "test_file", "text_column_names", "label_column_name",
    "vocab_file", "do_lower_case", "do_train", "do_eval", "do_predict",
    "strategy", "verbose", "task_options", "num_restarts", "hparam_grid",
)

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class _Settings:
    """`run_finetuning`'s arguments (see its docstring), held once; `validate` checks them."""

    task: str
    init_checkpoint: str
    model_dir: str
    task_name: str | None
    data_dir: str | None
    train_file: str | None
    predict_file: str | None
    validation_file: str | None
    test_file: str | None
    text_column_names: tuple[str, ...] | None
    label_column_name: str | None
    vocab_file: str | None
    do_lower_case: bool | None
    do_train: bool
    do_eval: bool
    do_predict: bool
    strategy: str
    train_batch_size: int | str
    eval_batch_size: int
    learning_rate: float | str
    num_train_epochs: float | str
    warmup_proportion: float | str
    weight_decay: float
    max_seq_length: int
    seed: int
    eval_every_steps: int
    keep_best_checkpoint: bool
    early_stopping_patience: int
    num_restarts: int
    hparam_grid: hparam_search.HparamGrid | None
    verbose: str | int
    task_options: Any
    packing: PackingConfig | None
    selection_fraction: float

    @property
    def selection_split(self) -> str:
        """The name of the split that chooses the kept model: `dev`, or `heldout` when it is
        carved from the training data (`selection_fraction`)."""
        return "heldout" if self.selection_fraction else "dev"

    def validate(self) -> None:
        """Refuses arguments that are wrong whatever the data, naming the flag or binding."""
        task_class = get_task(self.task)
        if self.packing is not None:
            if not task_class.supports_packing:
                raise ValueError(f"run_finetuning.packing is set but --task={self.task} cannot "
                                 "pack its rows; drop the binding (its batches are "
                                 "length-bucketed).")
            self.packing.validate()
        if not task_class.trainable:
            raise ValueError(f"--task={self.task!r} is export-only; kbert-finetune cannot "
                             "train it.")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"--strategy={self.strategy!r}; fine-tuning supports "
                             f"{', '.join(STRATEGIES)}.")
        if not (self.do_train or self.do_eval or self.do_predict):
            raise ValueError("nothing to do: pass at least one of --do_train, --do_eval, "
                             "--do_predict.")
        if self.eval_batch_size < 1:
            raise ValueError(f"run_finetuning.eval_batch_size={self.eval_batch_size}; it "
                             "must be >= 1.")
        auto_settings.check_train_batch_size(self.train_batch_size)
        for name in ("eval_every_steps", "early_stopping_patience"):
            if getattr(self, name) < 0:
                raise ValueError(f"run_finetuning.{name}={getattr(self, name)}; it must be >= 0 "
                                 "(0 turns it off).")
        auto_settings.check_num_train_epochs(self.num_train_epochs)
        auto_settings.check_learning_rate(self.learning_rate)
        check_selection_fraction("run_finetuning", self.selection_fraction, self.do_train)
        auto_settings.check_warmup_proportion(self.warmup_proportion)
        if self.num_restarts < 1:
            raise ValueError(f"--num_restarts={self.num_restarts}; it must be >= 1.")
        if self.hparam_grid is not None:
            self.hparam_grid.check()


@dataclasses.dataclass(frozen=True)
class Hyperparameters:
    """What differs between the runs of restarts and of a grid search."""

    learning_rate: float
    train_batch_size: int
    num_train_epochs: float | str  # "auto" until a run resolves it for its batch size
    seed: int


@dataclasses.dataclass
class _Setup:
    """Everything a training run needs besides its `Hyperparameters`: settings, derived objects."""

    task: Task
    init_checkpoint: ModelDir  # the opened --init_checkpoint
    preprocessor: TextPreprocessor
    train_rows: list
    num_rows: int  # rows of one training epoch: the examples, or packed rows
    dev_examples: list | None  # the examples that choose the kept step: dev or held out
    distribution: tf.distribute.Strategy
    settings: _Settings


@dataclasses.dataclass
class _TrainedRun:
    """One training run: the kept model and how it came about."""

    model: keras.Model
    hparams: Hyperparameters
    schedule: TrainingSchedule
    train_loss: list[float]
    steps_run: int = 0  # fewer than `schedule.total_steps` when stopped early
    evaluation: Evaluation | None = None  # of the kept model, when evaluated during training
    best_step: int | None = None
    curve: list[CurvePoint] = dataclasses.field(default_factory=list)

    def value(self, metric: str) -> float:
        return self.evaluation.metrics[metric]


def run_finetuning(
    task: str,
    init_checkpoint: str,
    model_dir: str,
    task_name: str | None = None,
    data_dir: str | None = None,
    train_file: str | None = None,
    predict_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
    text_column_names: tuple[str, ...] | None = None,
    label_column_name: str | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    do_train: bool = True,
    do_eval: bool = True,
    do_predict: bool = False,
    strategy: str = "default",
    train_batch_size: int | str = "auto",
    eval_batch_size: int = 64,
    learning_rate: float | str = "auto",
    num_train_epochs: float | str = "auto",
    warmup_proportion: float | str = "auto",
    weight_decay: float = 0.01,
    max_seq_length: int = 128,
    seed: int = 12345,
    eval_every_steps: int = 0,
    keep_best_checkpoint: bool = True,
    early_stopping_patience: int = 0,
    num_restarts: int = 1,
    hparam_grid: hparam_search.HparamGrid | None = None,
    verbose: str | int = "auto",
    task_options: Any = None,
    packing: PackingConfig | None = None,
    selection_fraction: float = 0.0,
) -> dict[str, Any]:
    """Fine-tunes, evaluates and predicts on one task; writes a fine-tuned model directory.

    All inputs (data files, vocabulary, sizes) are checked before anything is
    written. With `do_train`, `init_checkpoint` is a pre-trained directory
    (`kbert-pretrain` model_dir or `kbert-convert` output); without it, it may
    also be a fine-tuned directory to evaluate or predict with. With `do_train`
    and `do_eval`, the model is scored on the dev split after every data epoch
    (or every `eval_every_steps` steps) and the best one by the task's
    `main_metric` is the one saved, evaluated and exported.

    Args:
        task: str. A trainable task of `kbert.tasks.TASKS` (`glue`, `ner`, `squad`,
            `similarity`, `retrieval`, `rerank`; `kbert.tasks.trainable_tasks()`).
        init_checkpoint: str. Pre-trained (or, without training, fine-tuned) directory.
        model_dir: str. Output: fine-tuned model directory, `eval_results.json`,
            predictions (`predictions.tsv`; `predictions.json` for SQuAD).
        task_name: str or None. GLUE task (`sst-2`, `mrpc`, ...); the NER
            dataset name (defaults to `conll2003`).
        data_dir: str or None. GLUE task folder, CoNLL folder, STS-B folder
            (similarity) or BEIR dataset folder (retrieval, rerank).
        train_file: str or None. SQuAD training JSON; the similarity pairs
            JSONL; the first-stage TREC run of retrieval/rerank training; a
            user's labelled file (classification, token classification: CSV,
            TSV, JSON lines or Parquet).
        predict_file: str or None. The same for evaluation/prediction.
        validation_file: str or None. A user's dev file (Hugging Face's
            `--validation_file`). Without one, a task reading users' files
            has no dev split: with `do_train` and `do_eval` the kept model is
            chosen on a held-out share of the training file
            (`selection_fraction`, `DEFAULT_SELECTION_FRACTION` when 0) and no
            reported figure exists (`results["reported_split"]` is None).
        test_file: str or None. A user's test file, predicted with `do_predict`.
        text_column_names: tuple of str or None. The input columns of a
            user's files (one, or two for text pairs); None: the task's default.
        label_column_name: str or None. Their label column; None: the task's default.
        vocab_file: str or None. Defaults to `init_checkpoint`'s `vocab.txt`.
        do_lower_case: bool or None. Defaults to `init_checkpoint`'s
            `tokenizer_config.json`, else True.
        do_train: bool. Train on the train split / `train_file`.
        do_eval: bool. Evaluate on the dev split / `predict_file`.
        do_predict: bool. Predict the test split / `predict_file`.
        strategy: str. `default`, `one_device` or `mirrored`, built by
            `kbert.training.create_strategy`.
        train_batch_size: int or `"auto"`. Global batch size; `"auto"` is 32,
            or 8 for training sets under 2,000 rows. Defaults to "auto".
        eval_batch_size: int. Defaults to 64.
        learning_rate: float or `"auto"`. Peak AdamW learning rate; `"auto"`
            takes it from the encoder's width
            (`kbert.training.finetuning.auto_settings.AUTO_LEARNING_RATES`). Defaults to "auto".
        num_train_epochs: float or `"auto"`. Passes over the training data;
            `"auto"` is 3, or more (up to 10) for small training sets so that
            the run makes at least 300 steps and sees at least 10,000 rows.
            Defaults to "auto".
        warmup_proportion: float or `"auto"`. Fraction of steps warming up;
            `"auto"` is 0.1 but at least 20 steps (at most a third of the run).
            Defaults to "auto".
        weight_decay: float. Decoupled weight decay (not on LayerNorm and
            biases). Defaults to 0.01.
        max_seq_length: int. Packed length. Defaults to 128.
        seed: int. Shuffling, dropout and head initialization; restart `i`
            uses `seed + i`. Defaults to 12345.
        eval_every_steps: int. Evaluate on dev every this many steps (the run
            is rounded up to whole intervals); 0 evaluates after each epoch.
            Defaults to 0.
        keep_best_checkpoint: bool. Keep the weights of the best dev
            evaluation, else the last ones. Defaults to True.
        early_stopping_patience: int. Stop after this many evaluations without
            improvement; 0 never stops early. Defaults to 0.
        num_restarts: int. Train this many times (seeds `seed`, `seed + 1`, ...)
            and keep the best on dev, as the BERT paper did for small GLUE
            tasks. Needs `do_eval`. Defaults to 1.
        hparam_grid: `kbert.training.finetuning.hparam_search.HparamGrid` or None. Train
            every point of the grid (each with `num_restarts` seeds) in its time
            budget, keep the best on dev and write its configuration to
            `best_hparams.gin`. Needs `do_eval`.
        verbose: Keras `fit` verbosity. Defaults to "auto".
        task_options: the task's config dataclass (e.g. `SquadConfig(doc_stride=64)`),
            or None for its defaults; gin binds it as `SquadConfig.doc_stride`.
        packing: `PackingConfig` or None. Train on packed rows (several
            examples per row of `max_seq_length`, attention kept inside each;
            tasks with `supports_packing`, e.g. GLUE); `train_batch_size` then
            counts rows and an epoch is the packed rows of the training set.
            None trains on length-bucketed batches. Evaluation is bucketed
            either way. Defaults to None.
        selection_fraction: float. 0 picks the kept step, restart and grid
            point on the dev split, as the BERT paper did (the dev score is then
            a selected figure). Above 0, that fraction of the training examples
            (SQuAD: of its paragraphs), drawn with `seed`, is held out as the
            selection split instead and not trained on; the dev split is
            scored once, on the kept model, so its figure is clean.
            `results["selection"]` records which. Defaults to 0.

    Returns:
        dict with the evaluation metrics (if `do_eval`), `train_loss` (per
        evaluation interval), `train_steps`, `learning_rate`, `warmup_steps`
        and, when evaluated during training, `main_metric`, `best_step` and
        `eval_curve`; `restarts` and `hparam_search` when asked for.

    Example:

    >>> kbert.training.run_finetuning(
    ...     task="glue", task_name="sst-2", data_dir="glue_data/SST-2",
    ...     init_checkpoint="minilm/", model_dir="runs/sst2")
    """
    settings = _Settings(
        task=task, init_checkpoint=init_checkpoint, model_dir=model_dir, task_name=task_name,
        data_dir=data_dir, train_file=train_file, predict_file=predict_file,
        validation_file=validation_file, test_file=test_file,
        text_column_names=tuple(text_column_names) if text_column_names else None,
        label_column_name=label_column_name, vocab_file=vocab_file,
        do_lower_case=do_lower_case, do_train=do_train, do_eval=do_eval,
        do_predict=do_predict, strategy=strategy, train_batch_size=train_batch_size,
        eval_batch_size=eval_batch_size, learning_rate=learning_rate,
        num_train_epochs=num_train_epochs, warmup_proportion=warmup_proportion,
        weight_decay=weight_decay, max_seq_length=max_seq_length, seed=seed,
        eval_every_steps=eval_every_steps, keep_best_checkpoint=keep_best_checkpoint,
        early_stopping_patience=early_stopping_patience, num_restarts=num_restarts,
        hparam_grid=hparam_grid, verbose=verbose, task_options=task_options, packing=packing,
        selection_fraction=selection_fraction)
    settings.validate()
    checkpoint = open_model_dir(init_checkpoint, flag="--init_checkpoint", vocab_file=vocab_file,
                                do_lower_case=do_lower_case, vocab_flag="--vocab_file")
    task_object, saved = _resolve_task(task, task_name, task_options, checkpoint, do_train)
    if saved is not None:
        max_seq_length = saved.max_seq_length
    data = TaskData(task_name, data_dir, train_file, predict_file, validation_file, test_file,
                    settings.text_column_names, label_column_name)
    wanted = [split for split, on in (("train", do_train), ("dev", do_eval),
                                      ("test", do_predict)) if on]
    task_object.check_data(data, wanted)
    splits = [split for split in wanted if task_object.has_split(data, split)]
    _check_selection(task_object, do_train, do_eval, num_restarts, hparam_grid)
    preprocessor = checkpoint.preprocessor(max_seq_length)
    encoder_config = checkpoint.encoder_config
    examples = _read_splits(task_object, data, splits)
    results: dict[str, Any] = {}
    truncated = _truncation_counts(task_object, examples, preprocessor)
    if truncated:
        results["truncated"] = truncated
    reported = do_eval and "dev" in examples
    if do_train and do_eval and not reported and not selection_fraction:
        # No dev split to choose on: hold some training examples out instead.
        selection_fraction = DEFAULT_SELECTION_FRACTION
        settings = dataclasses.replace(settings, selection_fraction=selection_fraction)
    selection_examples = examples.get("dev") if task_object.main_metric else None
    selection = {"split": "dev"}
    if selection_fraction:
        examples["train"], selection_examples = carve_selection_split(
            task_object, examples["train"], selection_fraction, seed)
        selection = {"split": "train_holdout", "fraction": selection_fraction, "seed": seed,
                     "num_examples": len(selection_examples)}
    train_rows = task_object.training_rows(examples["train"], preprocessor) if do_train else []
    if do_train and not train_rows:
        raise ValueError("no training examples after reading the data.")

    distribution = create_strategy(strategy)
    _check_replicas(distribution, train_batch_size, eval_batch_size, do_train, hparam_grid)
    num_rows = (_packed_rows(task_object, train_rows, preprocessor, packing)
                if do_train and packing is not None else len(train_rows))
    train_batch_size = auto_settings.resolve_train_batch_size(
        train_batch_size, num_rows, distribution.num_replicas_in_sync)
    extra_files: dict[str, str] = {}
    trained = None
    if do_train:
        setup = _Setup(task_object, checkpoint, preprocessor, train_rows, num_rows,
                       selection_examples, distribution, settings)
        frozen = bool(getattr(task_object.config, "freeze_encoder", False))
        base = Hyperparameters(
            auto_settings.resolve_learning_rate(learning_rate, encoder_config, frozen),
            train_batch_size, num_train_epochs, seed)
        trained = _train_selected(setup, base, num_restarts, hparam_grid,
                                  encoder_config["hidden_dim"], results)
        if hparam_grid is not None:
            extra_files[BEST_HPARAMS] = _best_hparams_gin(task_object, settings, trained, results)
        model = trained.model
    else:
        keras.utils.set_random_seed(seed)
        with distribution.scope():
            model = (checkpoint.model() if saved is not None
                     else task_object.build_model(checkpoint.encoder()))
    if trained is not None and trained.evaluation is not None:
        metric = task_object.main_metric
        results["selection"] = {**selection, metric: trained.value(metric)}
        # What the kept model's selection evaluation chose (a decision threshold) is
        # kept before the reported split is scored, so it is never chosen there.
        task_object.keep_chosen(trained.evaluation.chosen)
        if do_eval and not reported:
            results["selection"]["metrics"] = trained.evaluation.metrics
    if do_eval and not reported:
        results["reported_split"] = None
    # Selected on dev, the kept model's dev evaluation is already there; else dev is scored now.
    kept_evaluation = (trained.evaluation if trained is not None and not selection_fraction
                       else None)
    files = _evaluate_and_predict(model, task_object, examples, preprocessor, eval_batch_size,
                                  results, reported, do_predict, kept_evaluation)
    warnings = outcome_warnings({"main_metric": task_object.main_metric, **results})
    if warnings:
        results["warnings"] = warnings
    _write_outputs(model_dir, model if do_train else None, task_object, preprocessor,
                   checkpoint.vocab_file, {**files, **extra_files}, results if do_eval else None,
                   data)
    return results


# The gin-bindable hyperparameters of `run_finetuning` (its other arguments are flags).
HYPERPARAMETERS = tuple(name for name in inspect.signature(run_finetuning).parameters
                        if name not in RUNTIME_ARGUMENTS)


def _read_splits(task: Task, data: TaskData, splits: list[str]) -> dict[str, list]:
    """Reads every split now, so that bad files fail before anything is written.

    The training split comes first and the task adapts to it (label names,
    problem type) before the others are read, so they are checked against it.
    """
    examples = {}
    for split in splits:
        examples[split] = task.read(data, split)
        if split == "train":
            task.adapt(examples["train"])
    return examples


def _truncation_counts(task: Task, examples: dict[str, list],
                       preprocessor: TextPreprocessor) -> dict[str, Any]:
    """Per split, how many examples are cut at `max_seq_length` (for tasks that count)."""
    counts = {split: task.count_truncated(rows, preprocessor) for split, rows in examples.items()}
    counts = {split: {"truncated": count, "examples": len(examples[split])}
              for split, count in counts.items() if count}
    if not counts:
        return {}
    return {"max_seq_length": preprocessor.max_seq_length, "how": task.long_inputs, **counts}


def _check_selection(task: Task, do_train: bool, do_eval: bool, num_restarts: int,
                     hparam_grid) -> None:
    """Restarts and searches pick the best on dev: they need training, dev data and a metric."""
    wanted = [name for name, on in (("--num_restarts", num_restarts > 1),
                                    ("--hparam_search", hparam_grid is not None)) if on]
    if not wanted:
        return
    if not (do_train and do_eval):
        raise ValueError(f"{' and '.join(wanted)} compare runs on the dev split: pass "
                         "--do_train and --do_eval.")
    if not task.main_metric:
        raise ValueError(f"{' and '.join(wanted)}: task {task.name!r} names no main_metric "
                         "to compare runs by.")


def _check_replicas(distribution: tf.distribute.Strategy, train_batch_size: int | str,
                    eval_batch_size: int, do_train: bool, hparam_grid=None) -> None:
    """Every replica gets the same shape: a bucketed batch is padded once, then split evenly.

    Model Garden's trick for bucketing under `tf.distribute`: batches are
    formed (and padded to one length) for all replicas together, in
    multiples of the replica count, so each replica's share has the same
    length and size.
    """
    replicas = distribution.num_replicas_in_sync
    # "auto" is resolved to a multiple of the replicas later.
    checked = [("run_finetuning.train_batch_size", train_batch_size,
                do_train and train_batch_size != auto_settings.AUTO),
               ("run_finetuning.eval_batch_size", eval_batch_size, True)]
    if hparam_grid is not None:
        checked += [("--search_batch_sizes", size, do_train)
                     for size in hparam_grid.train_batch_sizes]
    for name, value, used in checked:
        if used and value % replicas:
            raise ValueError(
                f"{name}={value} is not divisible by {replicas} replicas; use a "
                f"multiple of {replicas} so that every replica gets the same shape.")


def _packed_rows(task: Task, rows: list, preprocessor: TextPreprocessor,
                 packing: PackingConfig) -> int:
    """How many packed rows one epoch of `rows` makes (one pass of packing)."""
    dataset = task.dataset(rows, preprocessor, 256, is_training=False, packing=packing)
    return int(sum(int(tf.shape(batch["token_ids"])[0]) for batch in dataset))


def _resolve_task(task: str, task_name: str | None, task_options: Any, checkpoint: ModelDir,
                  do_train: bool) -> tuple[Task, TaskConfig | None]:
    """The task to run, and the saved record when evaluating a fine-tuned directory."""
    task_class = get_task(task)
    if do_train or not checkpoint.is_finetuned:
        task_object = task_class(task_options, task_name=task_name)
        task_object.use_pretrained_settings(checkpoint.pretrained_settings)
        return task_object, None
    saved = checkpoint.task_config
    if saved.task != task:
        raise ValueError(f"{checkpoint.where} was fine-tuned for --task={saved.task}, not {task}.")
    task_object = task_class.from_description(saved.to_dict())
    if task_options is not None and task_class.evaluation_fields:
        run_values = {name: getattr(task_options, name) for name in task_class.evaluation_fields}
        task_object.config = dataclasses.replace(task_object.config, **run_values)
    return task_object, saved


def _train_selected(setup: _Setup, base: Hyperparameters, num_restarts: int, hparam_grid,
                    hidden_dim: int, results: dict[str, Any]) -> _TrainedRun:
    """Trains once, over restarts, or over a grid; the best run, its figures in `results`."""
    metric = setup.task.main_metric
    if hparam_grid is None:
        best = _train_with_restarts(setup, base, num_restarts, results)
    else:
        def train(point: hparam_search.Point) -> hparam_search.Outcome:
            hparams = dataclasses.replace(base, **dataclasses.asdict(point))
            run = _train_with_restarts(setup, hparams, num_restarts, {})
            return hparam_search.Outcome(run.value(metric), run.best_step, run)

        outcome, trials = hparam_search.search(hparam_grid.points(hidden_dim), train,
                                               hparam_grid.time_budget_minutes)
        best = outcome.payload
        results["hparam_search"] = [trial.as_dict(metric) for trial in trials]
    results.update(train_loss=best.train_loss, train_steps=best.schedule.total_steps,
                   learning_rate=best.hparams.learning_rate,
                   train_batch_size=best.hparams.train_batch_size,
                   num_train_epochs=best.hparams.num_train_epochs,
                   warmup_steps=best.schedule.warmup_steps, seed=best.hparams.seed)
    if best.steps_run < best.schedule.total_steps:
        results["early_stopped_at_step"] = best.steps_run
    if best.evaluation is not None:
        results.update(main_metric=metric, best_step=best.best_step,
                       eval_curve=[{"step": p.step, "epoch": p.epoch, **p.metrics}
                                   for p in best.curve])
    return best


def _train_with_restarts(setup: _Setup, hparams: Hyperparameters, num_restarts: int,
                         results: dict[str, Any]) -> _TrainedRun:
    """Trains with seeds `seed`, `seed + 1`, ...; keeps the best on dev (the first maximum)."""
    best = None
    summary = []
    for restart in range(num_restarts):
        run = _train_once(setup, dataclasses.replace(hparams, seed=hparams.seed + restart))
        if num_restarts == 1:
            return run
        metric = setup.task.main_metric
        summary.append({"seed": run.hparams.seed, metric: run.value(metric),
                        "best_step": run.best_step})
        logger.info("restart %d/%d (seed %d): %s %s %.4f at step %d", restart + 1,
                    num_restarts, run.hparams.seed, setup.settings.selection_split, metric,
                    run.value(metric), run.best_step)
        if best is None or run.value(metric) > best.value(metric):
            best = run
    results["restarts"] = summary
    return best


def _train_once(setup: _Setup, hparams: Hyperparameters) -> _TrainedRun:
    """One training run from the pre-trained encoder; with dev data, the best step is kept."""
    task = setup.task
    keras.utils.set_random_seed(hparams.seed)
    evaluating = setup.dev_examples is not None
    steps_per_epoch = math.ceil(setup.num_rows / hparams.train_batch_size)
    epochs = auto_settings.resolve_num_train_epochs(hparams.num_train_epochs, steps_per_epoch,
                                                    setup.num_rows)
    hparams = dataclasses.replace(hparams, num_train_epochs=epochs)
    settings = setup.settings
    schedule = training_schedule(setup.num_rows, hparams.train_batch_size,
                                 hparams.num_train_epochs, settings.warmup_proportion,
                                 settings.eval_every_steps if evaluating else 0)
    with setup.distribution.scope():
        model = task.build_model(setup.init_checkpoint.encoder())
        _compile(model, task, schedule, hparams.learning_rate, settings.weight_decay)
    callbacks, evaluation = [], None
    if evaluating:
        evaluation = DevEvaluation(
            lambda m: task.evaluate(m, setup.dev_examples, setup.preprocessor,
                                    settings.eval_batch_size),
            task.main_metric, schedule.interval, schedule.steps_per_data_epoch,
            schedule.total_steps, split=setup.settings.selection_split)
        callbacks = best_checkpoint_callbacks(evaluation, settings.keep_best_checkpoint,
                                              settings.early_stopping_patience,
                                              schedule.num_intervals)
    logger.info("Training %s on %d examples: %d steps (%d warmup), batch %d%s, learning rate %g, "
                "seed %d.", task.task_name, len(setup.train_rows), schedule.total_steps,
                schedule.warmup_steps, hparams.train_batch_size,
                " packed rows" if settings.packing else "", hparams.learning_rate, hparams.seed)
    options = {"packing": settings.packing} if settings.packing is not None else {}
    dataset = task.dataset(setup.train_rows, setup.preprocessor, hparams.train_batch_size,
                           is_training=True, seed=hparams.seed, **options)
    with warnings.catch_warnings():
        # The token and span heads do not use the pooler; Keras warns each step.
        warnings.filterwarnings("ignore", message="Gradients do not exist for variables")
        history = model.fit(dataset.map(task.training_batch), epochs=schedule.num_intervals,
                            steps_per_epoch=schedule.interval, shuffle=False,
                            callbacks=callbacks, verbose=settings.verbose)
    losses = [float(v) for v in history.history["loss"]]
    run = _TrainedRun(model, hparams, schedule, losses, len(losses) * schedule.interval)
    if evaluation is not None:
        keep_best = settings.keep_best_checkpoint
        run.evaluation = evaluation.best if keep_best else evaluation.last
        run.best_step = evaluation.best_step if keep_best else evaluation.curve[-1].step
        run.curve = evaluation.curve
    return run


def _compile(model: keras.Model, task: Task, schedule: TrainingSchedule, learning_rate: float,
             weight_decay: float) -> None:
    optimizer = create_optimizer(learning_rate, num_train_steps=schedule.total_steps,
                                 num_warmup_steps=schedule.warmup_steps,
                                 weight_decay_rate=weight_decay)
    # XLA compiles once per shape; batches here have many lengths.
    model.compile(optimizer=optimizer, jit_compile=False, **task.compile_arguments())
    build_optimizer_state(model)


def _evaluate_and_predict(model, task: Task, examples: dict[str, list],
                          preprocessor: TextPreprocessor, batch_size: int,
                          results: dict[str, Any], do_eval: bool, do_predict: bool,
                          evaluation: Evaluation | None) -> dict[str, str]:
    """Adds dev metrics to `results`; returns the files to write (name -> text).

    `evaluation` is the kept model's evaluation during training, if any: it is
    not run again.
    """
    files: dict[str, str] = {}
    if do_eval:
        if evaluation is None:
            evaluation = task.evaluate(model, examples["dev"], preprocessor, batch_size)
        results.update(evaluation.metrics)
        files.update(evaluation.files)
    if do_predict and not (do_eval and task.evaluation_writes_predictions):
        files.update(task.predict(model, examples["test"], preprocessor, batch_size))
    return files


def _best_hparams_gin(task: Task, settings: _Settings, best: _TrainedRun,
                      results: dict[str, Any]) -> str:
    """`best_hparams.gin`: every hyperparameter of the search's best run, as gin bindings."""
    # The best run's own seed (a restart's, with --num_restarts), so that one run
    # with this file trains that very model again.
    # (Each setting as given: asdict would turn a PackingConfig into a dict.)
    chosen = {**{name: getattr(settings, name) for name in HYPERPARAMETERS},
              **dataclasses.asdict(best.hparams)}
    bindings = {f"run_finetuning.{name}": chosen[name] for name in HYPERPARAMETERS}
    # Config dataclasses are bound field by field and referenced by their
    # configurable's name (configurables.py registers each under its class name).
    for config, binding in ((task.config, None), (chosen["packing"], "run_finetuning.packing")):
        if config is None:
            continue
        config_name = type(config).__name__
        if binding is not None:
            bindings[binding] = hparam_search.GinReference(f"@{config_name}()")
        bindings.update({f"{config_name}.{field.name}": getattr(config, field.name)
                         for field in dataclasses.fields(config)})
    metric = task.main_metric
    header = (f"Best of kbert-finetune --hparam_search on {task.name} ({task.task_name}): "
              f"{settings.selection_split} {metric} {best.value(metric):.4f} at step "
              f"{best.best_step}.\n"
              f"Reuse with --gin_file=<this file> (it binds every fine-tuning hyperparameter).\n\n"
              + hparam_search.format_table(results["hparam_search"], metric))
    return hparam_search.gin_file_text(bindings, header)


def _write_outputs(model_dir: str, trained: keras.Model | None, task: Task,
                   preprocessor: TextPreprocessor, vocab_file: str, files: dict[str, str],
                   results: dict[str, Any] | None, data: TaskData | None = None) -> None:
    """Writes the fine-tuned directory (when trained), prediction files and eval results."""
    tf.io.gfile.makedirs(model_dir)
    if trained is not None:
        save_task_model(model_dir, trained, task, preprocessor, vocab_file,
                        _dev_data_record(data))
    for name, text in files.items():
        write_text(os.path.join(model_dir, name), text)
    if results is not None:
        write_text(os.path.join(model_dir, EVAL_RESULTS),
                   json.dumps(results, indent=2, sort_keys=True) + "\n")


def _dev_data_record(data: TaskData | None) -> dict[str, Any]:
    """`task_config.json`'s `dev_data`: where the dev split is, for `kbert-export --quantize`."""
    if data is None or not (data.data_dir or data.predict_file or data.validation_file):
        return {}

    def absolute(path):
        return path if path is None or "://" in path else os.path.abspath(path)

    record = {"task_name": data.task_name, "data_dir": absolute(data.data_dir),
              "predict_file": absolute(data.predict_file)}
    if data.validation_file:
        record["validation_file"] = absolute(data.validation_file)
    return record
