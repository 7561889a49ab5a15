"""`TaskPresetModel`: a preset model over a `kbert.tasks.Task`: the task's own examples, pipeline and files.

`TextClassifier` and `TokenClassifier` are this class with a task chosen:
raw values become the task's examples through `Task.examples_from_values`
(the checks and messages of its file reader), a fresh head learns its labels
with `Task.adapt`, batches come from `Task.dataset` and `Task.training_batch`,
answers from `Task.predict_records`, and `save_to_preset` writes the
fine-tuned directory `kbert-finetune` writes (`kbert.training.finetuning.
finetuned_dir`). Nothing here knows which task it runs.
"""

from __future__ import annotations

from typing import Any, ClassVar

import keras

from kbert.checkpoints.finetuned import TaskConfig
from kbert.checkpoints.model_dir import ModelDir
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.presets.preset_model import PresetModel
from kbert.tasks import Task
from kbert.tasks import get_task
from kbert.training.finetuning.finetuned_dir import save_task_model


class TaskPresetModel(PresetModel):
    """A preset model whose `task_model` a `kbert.tasks.Task` builds, feeds and saves.

    Subclasses name the task of a fresh head (`_new_task`), the fine-tuned
    directories they open (`opens`), and how a head given to `from_preset`
    must agree with a fine-tuned one (`_check_head`).

    Args:
        task: `kbert.tasks.Task`. Its labels, pipeline, losses and record.
        task_model: `keras.Model` or None. `task.build_model`'s model (None
            until `fit` has adapted the task to its labels).
        preprocessor: `kbert.data.TextPreprocessor`.
        model_dir: `kbert.checkpoints.ModelDir`. The directory it came from.
        **kwargs: passed to `keras.Model`.
    """

    # Whether fit/predict hand raw values to the task (`Task.examples_from_values`).
    takes_raw_values: ClassVar[bool] = True

    def __init__(self, task: Task, task_model: keras.Model | None,
                 preprocessor: TextPreprocessor, model_dir: ModelDir, **kwargs):
        super().__init__(task_model, preprocessor, model_dir, **kwargs)
        self.task = task

    # -- Opening and saving ------------------------------------------------------------------

    @classmethod
    def from_preset(cls, preset: str, *, max_seq_length: int | None = None,
                    **kwargs) -> "TaskPresetModel":
        """Opens a pre-trained directory with a fresh head, or a fine-tuned one with its head.

        Args:
            preset: str. A kbert model directory: `kbert-pretrain`,
                `kbert-convert` or `kbert-finetune` output, or a
                `save_to_preset` one.
            max_seq_length: int or None. Longest input in pieces; defaults to
                the fine-tuned directory's, else 128 (capped at the encoder's
                positions).
            **kwargs: what sizes a fresh head (see the subclass).

        Returns:
            The model, built in the current `tf.distribute` strategy's scope.
        """
        directory = cls._open_preset(preset)
        if directory.is_finetuned:
            record = directory.task_config
            cls._check_kind(directory, record)
            task = get_task(record.task).from_description(record.to_dict())
            cls._check_head(task, kwargs, directory.where)
            model = directory.model()
            length = cls._max_seq_length(directory, max_seq_length, record.max_seq_length)
        else:
            task = cls._new_task(directory, **kwargs)
            task.use_pretrained_settings(directory.pretrained_settings)
            model = task.build_model(directory.encoder()) if cls._sized(task) else None
            length = cls._max_seq_length(directory, max_seq_length)
        return cls(task, model, directory.preprocessor(length), directory)

    def save_to_preset(self, preset_dir: str) -> None:
        """Writes the fine-tuned directory `kbert-finetune` writes.

        `from_preset`, `kbert-export` (and so `kbert-serve`), `kbert-predict`
        and `kbert-distill --teacher_dir` take it.

        Args:
            preset_dir: str. Created if missing (`gs://` works); its files are
                replaced one by one, each atomically.

        Example:

        >>> classifier.save_to_preset("runs/sst2")
        """
        save_task_model(preset_dir, self._model("save_to_preset"), self.task, self.preprocessor,
                        self.model_dir.vocab_file)

    @classmethod
    def opens(cls, record: TaskConfig) -> bool:
        """Whether this class opens a fine-tuned directory with this `task_config.json`."""
        raise NotImplementedError

    @classmethod
    def _new_task(cls, directory: ModelDir, **kwargs) -> Task:
        """The task of a fresh head on a pre-trained directory, from `from_preset`'s arguments."""
        raise NotImplementedError

    @classmethod
    def _sized(cls, task: Task) -> bool:
        """Whether the task knows enough to build its head before seeing data."""
        return True

    @classmethod
    def _check_head(cls, task: Task, kwargs: dict[str, Any], where: str) -> None:
        """Refuses `from_preset` arguments that disagree with a fine-tuned head."""
        if kwargs:
            raise TypeError(f"{cls.__name__}.from_preset got {sorted(kwargs)} for {where}, "
                            "which is fine-tuned: its head is as recorded.")

    @classmethod
    def _check_kind(cls, directory: ModelDir, record: TaskConfig) -> None:
        if cls.opens(record):
            if (cls.takes_raw_values
                    and get_task(record.task).examples_from_values is Task.examples_from_values):
                raise ValueError(
                    f"{directory.where} is fine-tuned for task {record.task!r}, which reads its "
                    f"own files but no Python values, so {cls.__name__} cannot feed it; "
                    "kbert-export serves it on raw text, and kbert-finetune "
                    "--task=classification or --task=token_classification trains on yours.")
            return
        others = [other.__name__ for other in _preset_classes() if other.opens(record)]
        hint = (f"; open it with kbert.{others[0]}.from_preset" if others else
                "; no preset model opens it (kbert-export and kbert-predict do)")
        raise ValueError(f"{directory.where} is fine-tuned for task {record.task!r} "
                         f"({record.model_type}), which {cls.__name__} does not run{hint}.")

    # -- The task's pipeline -----------------------------------------------------------------

    def _examples(self, texts, labels, where):
        return self.task.examples_from_values(texts, labels, source=where)

    def _prepare(self, examples):
        # As run_finetuning does before building: the task learns (or checks) its labels on
        # the first training data, unless they come recorded with a fine-tuned head.
        if not (self.model_dir.is_finetuned or getattr(self, "_adapted", False)):
            self.task.adapt(examples)
            self._adapted = True
        if self.task_model is None:
            with self._strategy.scope():
                self.task_model = self.task.build_model(self.model_dir.encoder())

    def _training_rows(self, examples):
        return self.task.training_rows(examples, self.preprocessor)

    def _training_dataset(self, rows, batch_size, seed):
        return self.task.dataset(rows, self.preprocessor, batch_size, is_training=True,
                                 seed=seed).map(self.task.training_batch)

    def _evaluation_dataset(self, examples, batch_size):
        return self.task.dataset(examples, self.preprocessor, batch_size,
                                 is_training=False).map(self.task.training_batch)

    def _compile_arguments(self):
        return self.task.compile_arguments()

    def _frozen_encoder(self):
        # As kbert-finetune decides it: the task's `freeze_encoder` setting.
        return bool(getattr(self.task.config, "freeze_encoder", False))

    def predict_records(self, x: Any, batch_size: int | None = None) -> list[dict[str, Any]]:
        """One answer per input, as `kbert-predict` writes it and the exported model serves it.

        Args:
            x: texts (or a `tf.data.Dataset` of texts), as for `predict`.
            batch_size: int or None. Defaults to 32.

        Returns:
            list of dicts in input order (the task's `predict_records`: e.g.
            `label`, `score`, `probabilities` for a single-label classifier).

        Example:

        >>> classifier.predict_records(["a gorgeous film"])[0]["label"]
        'positive'
        """
        where = f"{type(self).__name__}.predict_records"
        examples = self._examples_of(x, None, where, labelled=False)
        return self.task.predict_records(self._model(where), examples, self.preprocessor,
                                         self._batch_size(batch_size, where))


def _preset_classes() -> list[type[TaskPresetModel]]:
    """Every concrete `TaskPresetModel` class defined, for naming the one that opens a directory."""
    found, pending = [], list(TaskPresetModel.__subclasses__())
    while pending:
        cls = pending.pop(0)
        found.append(cls)
        pending.extend(cls.__subclasses__())
    return found

