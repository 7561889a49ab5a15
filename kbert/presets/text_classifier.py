"""`TextClassifier`: texts (or text pairs) to classes or scores, on the classification task."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from kbert.checkpoints.finetuned import TaskConfig
from kbert.checkpoints.model_dir import ModelDir
from kbert.presets.task_preset_model import TaskPresetModel
from kbert.tasks import ClassificationConfig
from kbert.tasks import ClassificationTask
from kbert.tasks.base import outputs_in_order

# The kinds of model `task_config.json` records for a classification head.
MODEL_TYPES = ("classifier", "regressor")


class TextClassifier(TaskPresetModel):
    """Single-label, multi-label or regression heads on texts or text pairs, raw strings in.

    The task is `kbert-finetune --task=classification`'s
    (`kbert.tasks.ClassificationTask`): labels are given as users have them
    (class names, integer ids, lists of names for multi-label, floats for
    regression) and checked as its file reader checks them; the problem type
    and the classes are learned from `fit`'s labels unless given
    (`num_classes`, `label_names`, `problem_type`); text pairs are a tuple of
    two lists. A fine-tuned classification directory (`kbert-finetune` or
    `save_to_preset` output) reloads with its head.

    `predict` gives the head's logits (scores for regression), one row per
    input, as keras-hub's classifiers do; `predict_records` the answers
    `kbert-predict` writes and the exported model serves (`label`, `score`,
    `probabilities`; multi-label `labels`; regression `prediction`).

    Example:

    >>> classifier = kbert.TextClassifier.from_preset("minilm/", num_classes=2)
    >>> classifier.fit(["a gorgeous film", "a dull film"], [1, 0], epochs=3)
    >>> classifier.predict(["a gorgeous, witty film"]).argmax(axis=-1)
    array([1])
    >>> classifier.save_to_preset("runs/sst2")
    """

    @classmethod
    def from_preset(cls, preset: str, *, num_classes: int | None = None,
                    label_names: list[str] | None = None, problem_type: str | None = None,
                    max_seq_length: int | None = None, **config) -> "TextClassifier":
        """Opens a pre-trained directory with a fresh head, or a fine-tuned classifier with its head.

        Args:
            preset: str. A kbert model directory (any registered architecture).
            num_classes: int or None. Classes of a fresh head (their names
                "0", "1", ...; labels are then those ids); 1 is a regression head.
            label_names: list of str or None. The classes in logit order
                (labels may be these names or their ids).
            problem_type: str or None. `single_label`, `multi_label` or
                `regression`; None: single-label when the classes are given,
                else learned from `fit`'s labels.
            max_seq_length: int or None. Pieces per input (pairs together);
                defaults to the fine-tuned directory's, else 128 (capped).
            **config: other `kbert.tasks.ClassificationConfig` fields of a
                fresh head, such as `class_weights="balanced"` or `freeze_encoder=True`.

        Returns:
            The `TextClassifier`. Without `num_classes`, `label_names` or a
            regression `problem_type` its head is built by the first `fit`.

        Raises:
            ValueError: `num_classes`, `label_names` or `problem_type`
                disagreeing with each other or with a fine-tuned head; a
                directory fine-tuned for another task.
        """
        given = {name: value for name, value in (("num_classes", num_classes),
                                                 ("label_names", label_names),
                                                 ("problem_type", problem_type))
                 if value is not None}
        return super().from_preset(preset, max_seq_length=max_seq_length, **given, **config)

    @classmethod
    def opens(cls, record: TaskConfig) -> bool:
        return record.model_type in MODEL_TYPES

    @classmethod
    def _new_task(cls, directory: ModelDir, num_classes: int | None = None,
                  **config) -> ClassificationTask:
        names = {field.name for field in dataclasses.fields(ClassificationConfig)}
        unknown = sorted(set(config) - names)
        if unknown:
            raise TypeError(f"TextClassifier.from_preset got {unknown}; it takes num_classes, "
                            f"max_seq_length and ClassificationConfig's {sorted(names)}.")
        if num_classes is not None:
            _head_from_num_classes(num_classes, config)
        elif config.get("label_names") and not config.get("problem_type"):
            config["problem_type"] = "single_label"
        return ClassificationTask(ClassificationConfig(**config))

    @classmethod
    def _sized(cls, task: ClassificationTask) -> bool:
        return bool(task.label_names) or task.model_type == "regressor"

    @classmethod
    def _check_head(cls, task: ClassificationTask, kwargs: dict[str, Any], where: str) -> None:
        recorded = {"num_classes": 1 if task.model_type == "regressor" else len(task.label_names),
                    "label_names": task.label_names, "problem_type": task.problem_type}
        for name in ("num_classes", "label_names", "problem_type"):
            given = kwargs.pop(name, None)
            if given is not None and (list(given) if name == "label_names" else given) != (
                    recorded[name]):
                raise ValueError(
                    f"{where} was fine-tuned with {name}={recorded[name]!r} "
                    f"({task.problem_type}, classes {task.label_names}); {name}={given!r} "
                    "disagrees. Drop it to use the fine-tuned head, or start from the "
                    "pre-trained directory it was fine-tuned from for a new head.")
        super()._check_head(task, kwargs, where)

    def predict(self, x: Any, batch_size: int | None = None,
                verbose: str | int = "auto") -> np.ndarray:
        """The head's outputs for each input, in input order.

        Args:
            x: texts, a tuple of two lists for text pairs, or a
                `tf.data.Dataset` of texts.
            batch_size: int or None. Defaults to 32.
            verbose: accepted for Keras' signature.

        Returns:
            float32 `[len(x), classes]` logits (softmax for single-label
            probabilities, sigmoid for multi-label), or `[len(x), 1]` scores.
        """
        return super().predict(x, batch_size, verbose)

    def _predict(self, examples, batch_size):
        if not examples:
            return np.zeros((0, self.task_model.num_classes), np.float32)
        return outputs_in_order(self.task_model, self.task.dataset(
            examples, self.preprocessor, batch_size, is_training=False))


def _head_from_num_classes(num_classes: int, config: dict[str, Any]) -> None:
    """Fills `config`'s classes from `num_classes` (ids as names; 1 is regression)."""
    if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1:
        raise ValueError(f"num_classes={num_classes!r}; it must be an integer >= 1 (1: a "
                         "regression head).")
    names = config.get("label_names")
    if names is not None and len(names) != num_classes:
        raise ValueError(f"num_classes={num_classes} but label_names has {len(names)} names "
                         f"{list(names)}; give one of them, or make them agree.")
    if num_classes == 1:
        if config.get("problem_type") not in (None, "regression"):
            raise ValueError(f"num_classes=1 is a regression head, but problem_type="
                             f"{config['problem_type']!r}; a classifier has at least 2 classes.")
        config["problem_type"] = "regression"
        config.pop("label_names", None)
        return
    config.setdefault("problem_type", "single_label")
    if names is None:
        config["label_names"] = [str(i) for i in range(num_classes)]
