"""The distillation loop: `run_distillation` trains a small student from a fine-tuned teacher.

`kbert-distill` calls it with paths from flags and hyperparameters from gin
(`gin/distill.gin`). The teacher is a fine-tuned directory (`kbert-finetune`'s
model_dir); its `task_config.json` gives the task, labels, tokenizer and
sequence length, and the student keeps them, so the result is an ordinary
fine-tuned directory that `kbert-export` and `kbert-serve` take unchanged.
The student is the teacher's width with chosen teacher blocks copied in
(`student_layers`, DistilBERT's initialisation) or any encoder that
`build_student_encoder` makes (from gin, optionally with pre-trained weights).
Training uses `kbert.training.distillation.distiller.TaskDistiller`; `eval_results.json`
holds the student's dev metrics, the teacher's beside them, both parameter
counts and the student's measured inference speed-up.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
import warnings
from typing import Any, Callable, Sequence

import keras
import numpy as np
import tensorflow as tf

from kbert.checkpoints.finetuned import TaskConfig
from kbert.checkpoints.model_dir import FinetunedDir
from kbert.checkpoints.model_dir import ModelDir
from kbert.checkpoints.model_dir import open_model_dir
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.files import write_text
from kbert.tasks import TASKS
from kbert.tasks import Evaluation
from kbert.tasks import Task
from kbert.tasks import TaskData
from kbert.tasks import get_task
from kbert.tasks.base import inference_function
from kbert.training.distillation import distiller as distillers
from kbert.training.finetuning import auto_settings
from kbert.training.finetuning.dev_evaluation import DevEvaluation
from kbert.training.finetuning.dev_evaluation import best_checkpoint_callbacks
from kbert.training.finetuning.finetuned_dir import save_task_model
from kbert.training.finetuning.outcome_checks import outcome_warnings
from kbert.training.finetuning.selection_split import carve_selection_split
from kbert.training.finetuning.selection_split import check_selection_fraction
from kbert.training.finetuning.training_schedule import training_schedule
from kbert.training.optimizer import build_optimizer_state
from kbert.training.optimizer import create_optimizer

EVAL_RESULTS = "eval_results.json"
# Arguments that are runtime data (flags of kbert-distill), never gin bindings.
RUNTIME_ARGUMENTS = ("teacher_dir", "model_dir", "student_layers", "build_student_encoder",
                     "student_init_checkpoint", "transfer_file", "task", "task_name",
                     "data_dir", "train_file", "validation_file", "do_train", "do_eval",
                     "verbose")
# Timed batches of the speed-up measurement, after as many warm-up calls.
SPEED_BATCH_SIZES = (1, 32)
SPEED_REPEATS = 5

logger = logging.getLogger(__name__)


def run_distillation(
    teacher_dir: str,
    model_dir: str,
    student_layers: Sequence[int] | None = None,
    build_student_encoder: Callable[..., keras.Model] | None = None,
    student_init_checkpoint: str | None = None,
    transfer_file: str | None = None,
    task: str | None = None,
    task_name: str | None = None,
    data_dir: str | None = None,
    train_file: str | None = None,
    validation_file: str | None = None,
    do_train: bool = True,
    do_eval: bool = True,
    train_batch_size: int = 32,
    eval_batch_size: int = 64,
    learning_rate: float | str = "auto",
    num_train_epochs: float = 3.0,
    warmup_proportion: float = 0.1,
    weight_decay: float = 0.01,
    temperature: float = 2.0,
    kl_weight: float = 1.0,
    hard_label_weight: float = 0.5,
    hidden_state_weight: float = 0.0,
    attention_weight: float = 0.0,
    attention_loss: str = "kl",
    seed: int = 12345,
    eval_every_steps: int = 0,
    keep_best_checkpoint: bool = True,
    early_stopping_patience: int = 0,
    selection_fraction: float = 0.0,
    verbose: str | int = "auto",
) -> dict[str, Any]:
    """Distills the fine-tuned model of `teacher_dir` into a student saved in `model_dir`.

    Every input is checked before anything is written. The loss is
    `h * label_loss + (1 - h) * (kl_weight * soft + hidden_state_weight * hidden
    + attention_weight * attention)` with `h = hard_label_weight`: `soft` is
    the temperature-scaled KL of the logits times T^2 (classification; per
    word for NER), the binary cross-entropy to the teacher's temperature-scaled
    sigmoid probabilities times T^2 (multi-label classification; the student
    keeps the teacher's decision threshold), the MSE to the teacher's score
    (regression) or to its sentence vectors (similarity); `hidden` the MSE of
    hidden states (through a learned projection when the widths differ);
    `attention` the KL (or MSE) of the attention probabilities of mapped
    blocks (same number of heads).

    Args:
        teacher_dir: str. A fine-tuned directory (`kbert-finetune --model_dir`).
        model_dir: str. Output: the student's fine-tuned directory and `eval_results.json`.
        student_layers: sequence of int or None. Teacher blocks to copy into a
            student of the teacher's width (with its embeddings and head).
        build_student_encoder: callable or None. Makes the student encoder from
            `vocabulary_size` and `max_sequence_length` keywords (gin's
            `BertEncoder`); exactly one of this and `student_layers`.
        student_init_checkpoint: str or None. Pre-trained directory whose
            encoder weights start the student (with `build_student_encoder`);
            its vocabulary must be the teacher's.
        transfer_file: str or None. Unlabelled inputs, one per line in the
            task's form (`Task.unlabelled_examples`); the label loss is then
            off. Defaults to the task's training split.
        task, task_name: str or None. When given, must be the teacher's.
        data_dir: str. The task's data folder (train and dev splits).
        train_file, validation_file: str or None. The train and dev files of a
            teacher fine-tuned on users' files (`--task=classification` or
            `token_classification`, kbert-finetune's flags of the same names),
            read with the columns it recorded.
        do_train, do_eval: bool. Train the student; evaluate both on dev.
        train_batch_size, eval_batch_size, num_train_epochs, warmup_proportion,
            weight_decay, seed: as `run_finetuning`.
        learning_rate: float or "auto" (by the student's width, as `run_finetuning`).
        temperature: float. Temperature T of the softmax of the KL (or of the
            sigmoids, multi-label). Defaults to 2.
        kl_weight: float. Weight of the output loss within the distillation term.
        hard_label_weight: float in [0, 1]. Weight of the label loss (h).
        hidden_state_weight: float. Weight of the hidden-state MSE; 0 is off.
        attention_weight: float. Weight of the attention-distribution loss; 0
            is off. Needs the teacher's number of heads.
        attention_loss: str. `kl` (MiniLM) or `mse` (TinyBERT, on probabilities).
        eval_every_steps, keep_best_checkpoint, early_stopping_patience: as
            `run_finetuning`: with `do_train` and `do_eval` the student is
            scored on dev after every data epoch (or every `eval_every_steps`
            steps) and the best one is kept, saved and reported.
        selection_fraction: float in [0, 1). As `run_finetuning`: 0 scores the
            student on dev during training and keeps its best dev step; above
            0, that share of the labelled training split (drawn with `seed`,
            so the same examples `run_finetuning` held out from a teacher
            fine-tuned with the same fraction and seed) is held out of training
            and chooses the kept step, and dev is scored once at the end: its
            figure is then clean. `results["selection"]` says which split chose.
        verbose: Keras `fit` verbosity (progress bar).

    Returns:
        dict: the student's dev metrics, `teacher` (its metrics), parameter
        counts, `speedup` by batch size, `train_loss`, the settings used and,
        when evaluated during training, `main_metric`, `best_step` and
        `eval_curve` (as `run_finetuning`).

    Example:

    >>> run_distillation("runs/sst2", "runs/sst2-l3", student_layers=[0, 2, 4],
    ...                  data_dir="glue_data/SST-2")
    """
    settings = _Settings(
        teacher_dir=teacher_dir, model_dir=model_dir, student_layers=student_layers,
        build_student_encoder=build_student_encoder,
        student_init_checkpoint=student_init_checkpoint, transfer_file=transfer_file, task=task,
        task_name=task_name, data_dir=data_dir, train_file=train_file,
        validation_file=validation_file, do_train=do_train, do_eval=do_eval,
        train_batch_size=train_batch_size, eval_batch_size=eval_batch_size,
        learning_rate=learning_rate, num_train_epochs=num_train_epochs,
        warmup_proportion=warmup_proportion, weight_decay=weight_decay, temperature=temperature,
        kl_weight=kl_weight, hard_label_weight=hard_label_weight,
        hidden_state_weight=hidden_state_weight, attention_weight=attention_weight,
        attention_loss=attention_loss, seed=seed, eval_every_steps=eval_every_steps,
        keep_best_checkpoint=keep_best_checkpoint,
        early_stopping_patience=early_stopping_patience, selection_fraction=selection_fraction,
        verbose=verbose)
    settings.validate()
    teacher_files = _open_teacher(teacher_dir, task, task_name)
    teacher, record, vocab_file = (teacher_files.model(), teacher_files.task_config,
                                   teacher_files.vocab_file)
    task_object = _student_task(record)
    if task_object.distillation_target is None:  # a task may say so per model
        raise ValueError(f"--teacher_dir={teacher_dir} is a {record.model_type} of "
                         f"--task={record.task} that names no distillation target "
                         "(Task.distillation_target); kbert-distill cannot distill it.")
    if (hidden_state_weight or attention_weight) and task_object.distillation_target == "embeddings":
        raise ValueError(f"run_distillation.hidden_state_weight={hidden_state_weight}, "
                         f"attention_weight={attention_weight}, but --teacher_dir={teacher_dir} "
                         f"is a {record.model_type}: its student learns the teacher's sentence "
                         "vectors; layer losses are not built for bi-encoders (bind both to 0).")
    preprocessor = teacher_files.preprocessor(record.max_seq_length)
    student_files = None
    if student_init_checkpoint:
        student_files = open_model_dir(student_init_checkpoint, flag="--student_init_checkpoint")
        _check_same_vocabulary(student_files, teacher_files)
    data = TaskData(record.task_name, data_dir, train_file=train_file,
                    validation_file=validation_file)
    task_object.check_data(data, [split for split, on in (("train", do_train), ("dev", do_eval))
                                  if on])
    if do_eval and not task_object.has_split(data, "dev"):
        raise ValueError(f"--do_eval scores student and teacher on the dev split: pass "
                         f"--validation_file (the --task={record.task} teacher's dev file).")
    examples = {"dev": task_object.read(data, "dev")} if do_eval else {}
    selection = {"split": "dev"}
    if do_train:
        labelled = task_object.read(data, "train")
        if selection_fraction:
            labelled, examples["selection"] = carve_selection_split(
                task_object, labelled, selection_fraction, seed)
            selection = {"split": "train_holdout", "fraction": selection_fraction, "seed": seed,
                         "num_examples": len(examples["selection"])}
        examples["train"] = (_transfer_examples(task_object, transfer_file) if transfer_file
                             else labelled)
        if transfer_file:
            settings = dataclasses.replace(settings, hard_label_weight=0.0)  # no labels
    keras.utils.set_random_seed(seed)
    student, layer_map = _build_student(task_object, teacher, student_layers,
                                        build_student_encoder, student_files)
    results: dict[str, Any] = {name: getattr(settings, name) for name in (
        "temperature", "kl_weight", "hard_label_weight", "hidden_state_weight",
        "attention_weight")}
    evaluation = None
    if do_train:
        evaluation = _distill(teacher, student, layer_map, task_object, examples, preprocessor,
                              settings, results)
    results.update(teacher_parameters=teacher.count_params(),
                   student_parameters=student.count_params(),
                   speedup=measure_speedup(teacher, student, task_object, preprocessor,
                                           examples.get("dev") or examples.get("train")))
    if evaluation is not None:
        metric = task_object.main_metric
        results["selection"] = {**selection, metric: evaluation.metrics[metric]}
    if do_eval:
        if evaluation is None or selection_fraction:  # selected on dev: already scored there
            evaluation = task_object.evaluate(student, examples["dev"], preprocessor,
                                              eval_batch_size)
        results.update(evaluation.metrics)
        results["teacher"] = task_object.evaluate(teacher, examples["dev"], preprocessor,
                                                  eval_batch_size).metrics
        # A task naming no main metric (similarity): its first one (Spearman for scored pairs).
        results["main_metric"] = task_object.main_metric or next(iter(evaluation.metrics))
    if do_train:
        save_task_model(model_dir, student, task_object, preprocessor, vocab_file)
    warnings = outcome_warnings(results)
    if warnings:
        results["warnings"] = warnings
    tf.io.gfile.makedirs(model_dir)
    write_text(os.path.join(model_dir, EVAL_RESULTS),
               json.dumps(results, indent=2, sort_keys=True, default=float) + "\n")
    return results


@dataclasses.dataclass(frozen=True)
class _Settings:
    """`run_distillation`'s arguments (see its docstring), held once; `validate` checks them."""

    teacher_dir: str
    model_dir: str
    student_layers: Sequence[int] | None
    build_student_encoder: Callable[..., keras.Model] | None
    student_init_checkpoint: str | None
    transfer_file: str | None
    task: str | None
    task_name: str | None
    data_dir: str | None
    train_file: str | None
    validation_file: str | None
    do_train: bool
    do_eval: bool
    train_batch_size: int
    eval_batch_size: int
    learning_rate: float | str
    num_train_epochs: float
    warmup_proportion: float
    weight_decay: float
    temperature: float
    kl_weight: float
    hard_label_weight: float
    hidden_state_weight: float
    attention_weight: float
    attention_loss: str
    seed: int
    eval_every_steps: int
    keep_best_checkpoint: bool
    early_stopping_patience: int
    selection_fraction: float
    verbose: str | int

    def validate(self) -> None:
        """Refuses arguments that are wrong whatever the teacher and data, naming the binding."""
        if (self.student_layers is None) == (self.build_student_encoder is None):
            raise ValueError("pass exactly one of --student_layers (teacher blocks to copy, e.g. "
                             "0,2,4) and --student_gin_file (the student encoder's sizes); got "
                             f"{'both' if self.student_layers is not None else 'neither'}.")
        if not 0.0 <= self.hard_label_weight <= 1.0:
            raise ValueError(f"run_distillation.hard_label_weight={self.hard_label_weight}; it "
                             "must be in [0, 1].")
        if self.temperature <= 0:
            raise ValueError(f"run_distillation.temperature={self.temperature}; it must be > 0.")
        if not (self.do_train or self.do_eval):
            raise ValueError("nothing to do: pass --do_train and/or --do_eval.")
        check_selection_fraction("run_distillation", self.selection_fraction, self.do_train)
        for name in ("eval_every_steps", "early_stopping_patience", "hidden_state_weight",
                     "attention_weight"):
            if getattr(self, name) < 0:
                raise ValueError(f"run_distillation.{name}={getattr(self, name)}; it must be >= 0 "
                                 "(0 turns it off).")
        if self.attention_loss not in distillers.ATTENTION_LOSSES:
            raise ValueError(f"run_distillation.attention_loss={self.attention_loss!r}; expected "
                             f"one of {distillers.ATTENTION_LOSSES}.")


def _open_teacher(teacher_dir: str, task: str | None, task_name: str | None) -> FinetunedDir:
    teacher = open_model_dir(teacher_dir, flag="--teacher_dir")
    if not teacher.is_finetuned:
        raise FileNotFoundError(
            f"--teacher_dir={teacher_dir} is not a fine-tuned model directory: task_config.json "
            "is missing. Point to the --model_dir of kbert-finetune.")
    record = teacher.task_config
    if task is not None and task != record.task:
        raise ValueError(f"--teacher_dir={teacher_dir} was fine-tuned for --task={record.task}, "
                         f"not --task={task}.")
    if task_name is not None and task_name.lower() != str(record.task_name).lower():
        raise ValueError(f"--teacher_dir={teacher_dir} was fine-tuned on "
                         f"--task_name={record.task_name}, not --task_name={task_name}.")
    if get_task(record.task).distillation_target is None:  # the task says what a student learns
        distillable = [name for name, task in TASKS.items() if task.distillation_target]
        raise ValueError(f"--teacher_dir={teacher_dir} is a {record.model_type} "
                         f"(--task={record.task}); kbert-distill distills the models of "
                         f"--task={', '.join(distillable)}.")
    return teacher


def _check_same_vocabulary(student: ModelDir, teacher: FinetunedDir) -> None:
    # Teacher and student read the same token ids in one batch; a student with
    # another vocabulary would need each input tokenized twice and aligned.
    if student.vocabulary != teacher.vocabulary:
        raise ValueError(
            f"{student.where} has a vocabulary ({student.vocab_file}) different from the "
            f"teacher's ({teacher.vocab_file} of {teacher.where}); kbert-distill needs the same "
            "vocabulary: start the student from scratch (no --student_init_checkpoint) or from a "
            "checkpoint with the teacher's vocab.txt.")


def _transfer_examples(task: Task, transfer_file: str) -> list:
    if not tf.io.gfile.exists(transfer_file):
        raise FileNotFoundError(f"--transfer_file={transfer_file} does not exist.")
    with tf.io.gfile.GFile(transfer_file) as f:
        lines = f.read().splitlines()
    examples = task.unlabelled_examples(lines, transfer_file)
    if not examples:
        raise ValueError(f"--transfer_file={transfer_file} has no inputs.")
    return examples


def _student_task(record: TaskConfig) -> Task:
    """The teacher's task, with a trainable encoder (a feature-based teacher's was frozen)."""
    task = get_task(record.task).from_description(record.to_dict())
    if getattr(task.config, "freeze_encoder", False):
        task.config = dataclasses.replace(task.config, freeze_encoder=False)
    return task


def _build_student(task: Task, teacher: keras.Model, student_layers, build_student_encoder,
                   init_checkpoint: ModelDir | None):
    """The student task model and, for hidden-state losses, its teacher layer of each block."""
    teacher_encoder = teacher.encoder
    if student_layers is not None:
        encoder = distillers.encoder_from_layers(teacher_encoder, student_layers)
        layer_map = list(student_layers)
    else:
        sizes = {"vocabulary_size": teacher_encoder.vocabulary_size,
                 "max_sequence_length": teacher_encoder.max_sequence_length}
        encoder = build_student_encoder(**sizes)
        if init_checkpoint:
            encoder = init_checkpoint.encoder(**sizes)
        layer_map = distillers.uniform_layer_map(encoder.num_layers, teacher_encoder.num_layers)
    student = task.build_model(encoder)
    if student_layers is not None:
        distillers.copy_head(teacher, student)
    return student, layer_map


def _logits_loss(teacher: keras.Model, temperature: float, target: str = "logits"):
    if target == "embeddings":  # the sentence vectors, not the scores
        return distillers.EmbeddingMSE()
    if target == "sigmoid_logits":  # independent labels: each one's sigmoid probability
        return distillers.TemperatureBinaryCrossentropy(temperature)
    if teacher.output.shape[-1] == 1:  # a regressor: the teacher's score is the target
        return keras.distillation.FeatureDistillation(loss="mse")
    return distillers.TemperatureKL(temperature)


def _label_loss(task: Task, teacher: keras.Model) -> keras.losses.Loss:
    if task.distillation_target in ("embeddings", "sigmoid_logits"):
        return task.compile_arguments()["loss"]  # the task's own (cosine, ranking, per-label)
    if teacher.output.shape[-1] == 1:
        return keras.losses.MeanSquaredError()
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                      reduction="mean_with_sample_weight")


def _distill(teacher: keras.Model, student: keras.Model, layer_map: list[int], task: Task,
             examples: dict[str, list], preprocessor: TextPreprocessor, settings: _Settings,
             results: dict[str, Any]) -> Evaluation | None:
    """Trains `student` in place (the best dev step's weights when evaluated during training).

    Returns the kept student's dev `Evaluation`, or None without dev data.
    """
    hidden, attention = bool(settings.hidden_state_weight), bool(settings.attention_weight)

    def with_layers(model):  # the same model whose encoder also outputs what the losses read
        if not (hidden or attention):
            return model
        return distillers.with_encoder_all_layers(model, hidden, attention_scores=attention)

    trained = with_layers(student)
    lr = auto_settings.resolve_learning_rate(settings.learning_rate,
                                             {"hidden_dim": student.encoder.hidden_dim})
    distiller = distillers.TaskDistiller(
        with_layers(teacher), trained,
        _logits_loss(teacher, settings.temperature, task.distillation_target),
        settings.hard_label_weight, settings.kl_weight, settings.hidden_state_weight, layer_map,
        attention_weight=settings.attention_weight, attention_loss=settings.attention_loss,
        target=task.distillation_target)
    evaluation = _train(distiller, task, examples, preprocessor, lr, settings, results)
    if trained is not student:  # the weights trained, into the model as the task builds it
        student.set_weights(trained.get_weights())
    return evaluation


def _train(distiller, task: Task, examples: dict[str, list], preprocessor: TextPreprocessor,
           lr: float, settings: _Settings, results: dict[str, Any]) -> Evaluation | None:
    """Fits `distiller`; scores the student after each interval on the selection data and keeps
    the best.

    The selection data is `examples["selection"]` (held out of training) when
    there, else dev. The schedule, evaluation and best-step machinery are
    kbert-finetune's (`DevEvaluation`, `best_checkpoint_callbacks`). Adds the
    training figures to `results`; returns the kept student's `Evaluation` on
    the selection data (None without it).
    """
    train = examples["train"]
    # As kbert-finetune: a task naming no main metric (similarity) keeps the last step.
    dev = examples.get("selection", examples.get("dev")) if task.main_metric else None
    batch_size = settings.train_batch_size
    schedule = training_schedule(len(train), batch_size, settings.num_train_epochs,
                                 settings.warmup_proportion,
                                 settings.eval_every_steps if dev else 0)
    distiller.compile(optimizer=create_optimizer(lr, num_train_steps=schedule.total_steps,
                                                 num_warmup_steps=schedule.warmup_steps,
                                                 weight_decay_rate=settings.weight_decay),
                      loss=_label_loss(task, distiller.teacher), jit_compile=False)
    build_optimizer_state(distiller)
    callbacks, evaluation = [], None
    if dev:
        # The student alone is scored (the distiller's `call` may return a dict).
        evaluation = DevEvaluation(
            lambda _: task.evaluate(distiller.student, dev, preprocessor,
                                    settings.eval_batch_size),
            task.main_metric, schedule.interval, schedule.steps_per_data_epoch,
            schedule.total_steps, split="heldout" if "selection" in examples else "dev")
        callbacks = best_checkpoint_callbacks(evaluation, settings.keep_best_checkpoint,
                                              settings.early_stopping_patience,
                                              schedule.num_intervals)
    logger.info("Distilling %s on %d examples: %d steps (%d warmup), batch %d, learning rate %g.",
                task.task_name, len(train), schedule.total_steps, schedule.warmup_steps,
                batch_size, lr)
    dataset = task.dataset(train, preprocessor, batch_size, is_training=True, seed=settings.seed)
    with warnings.catch_warnings():
        # The token heads do not use the pooler; Keras warns each step.
        warnings.filterwarnings("ignore", message="Gradients do not exist for variables")
        history = distiller.fit(dataset.map(task.training_batch), epochs=schedule.num_intervals,
                                steps_per_epoch=schedule.interval, shuffle=False,
                                callbacks=callbacks, verbose=settings.verbose)
    losses = [float(v) for v in history.history["total_loss"]]
    results.update(train_loss=losses, train_steps=schedule.total_steps, learning_rate=lr,
                   warmup_steps=schedule.warmup_steps, train_batch_size=batch_size)
    if len(losses) < schedule.num_intervals:
        results["early_stopped_at_step"] = len(losses) * schedule.interval
    if evaluation is None:
        return None
    keep_best = settings.keep_best_checkpoint
    results.update(best_step=evaluation.best_step if keep_best else evaluation.curve[-1].step,
                   eval_curve=[{"step": p.step, "epoch": p.epoch, **p.metrics}
                               for p in evaluation.curve])
    return evaluation.best if keep_best else evaluation.last


def measure_speedup(teacher: keras.Model, student: keras.Model, task: Task,
                    preprocessor: TextPreprocessor, examples: list) -> dict[str, Any]:
    """Teacher time / student time per batch, on the same real batches, in this process.

    Each model runs one traced inference function; after two warm-up calls,
    the best of `SPEED_REPEATS` timed calls counts (the least disturbed by
    other work on the machine). Each is timed on what serving one input runs
    (`Task.inference_model`: a bi-encoder's query tower on the first texts of
    the pairs, one vector per text).

    Args:
        teacher, student: task models.
        task: the `Task` (to batch `examples`).
        preprocessor: `TextPreprocessor`.
        examples: list. Inputs to time on (the first 32).

    Returns:
        dict: per batch size, `teacher_ms`, `student_ms` and `speedup`.
    """
    batch = next(iter(task.dataset(examples[:max(SPEED_BATCH_SIZES)], preprocessor,
                                   max(SPEED_BATCH_SIZES), is_training=False)))
    served = {name: task.inference_model(model, batch)
              for name, model in (("teacher", teacher), ("student", student))}
    inputs = served["teacher"][1]  # the same inputs for both: they are of one task
    functions = {name: inference_function(model) for name, (model, _) in served.items()}
    figures = {}
    for size in SPEED_BATCH_SIZES:
        rows = {k: tf.repeat(v, -(-size // int(v.shape[0])), axis=0)[:size]
                for k, v in inputs.items()}
        times = {}
        for name, forward in functions.items():
            for _ in range(2):
                forward(rows)
            runs = []
            for _ in range(SPEED_REPEATS):
                start = time.perf_counter()
                keras.tree.map_structure(lambda t: t.numpy(), forward(rows))
                runs.append(time.perf_counter() - start)
            times[name] = float(np.min(runs)) * 1000
        figures[f"batch_{size}"] = {"teacher_ms": round(times["teacher"], 3),
                                    "student_ms": round(times["student"], 3),
                                    "speedup": round(times["teacher"] / times["student"], 3)}
    return figures
