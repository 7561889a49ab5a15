"""Text classification on your own labels (`--task=classification`): single-label, multi-label,
regression, single texts or pairs, from CSV, TSV, JSON lines or Parquet.

Hugging Face's `run_classification.py` in kbert's terms: `--train_file`,
`--validation_file`, `--test_file`, `--text_column_names`, `--label_column_name`;
the problem type and label names are learned from the training file (`adapt`)
unless `ClassificationConfig` gives them, and recorded in `task_config.json`,
so that the export, `kbert-serve`'s `:classify` and `kbert-predict` answer with
the label names.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

from kbert.data.table_files import prediction_row
from kbert.data.text_datasets import classification_dataset
from kbert.data.text_datasets import count_truncated
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.models.bert_classifier import BertClassifier
from kbert.tasks import metrics
from kbert.tasks.base import Evaluation
from kbert.tasks.base import INPUT_NAMES
from kbert.tasks.base import PACKED_INPUT_NAMES
from kbert.tasks.base import Task
from kbert.tasks.base import TaskData
from kbert.tasks.base import encoder_inputs
from kbert.tasks.base import outputs_in_order
from kbert.tasks.classification import labels as label_kinds
from kbert.tasks.classification.labels import LabelSpace
from kbert.tasks.classification.losses import MultiLabelCrossentropy
from kbert.tasks.classification.reader import DEFAULT_LABEL_COLUMN
from kbert.tasks.classification.reader import DEFAULT_TEXT_COLUMNS
from kbert.tasks.classification.reader import ClassificationExample
from kbert.tasks.classification.reader import read_classification_file
from kbert.tasks.classification.reader import text_value
from kbert.tasks.classifier_serving import ClassifierServingModule

SINGLE_LABEL, MULTI_LABEL, REGRESSION = (label_kinds.SINGLE_LABEL, label_kinds.MULTI_LABEL,
                                         label_kinds.REGRESSION)
# The dev metric that chooses the kept model, per problem type (higher is better).
MAIN_METRICS = {SINGLE_LABEL: "accuracy", MULTI_LABEL: "micro_f1", REGRESSION: "pearson"}
# The multi-label threshold of a model never evaluated (trained without --do_eval).
DEFAULT_THRESHOLD = 0.5
# What task_config.json records beside the config's fields.
_RECORDED = ("text_column_names", "label_column_name", "resolved_class_weights")
_FILES = {"train": "train_file", "dev": "validation_file", "test": "test_file"}


@dataclasses.dataclass
class ClassificationConfig:
    """What to learn from your labels; every field may be left to the training file.

    Args:
        problem_type: str or None. `single_label`, `multi_label` or
            `regression`; None infers it from the training labels as Hugging
            Face does (a list -> multi-label, a float -> regression, otherwise
            single-label). Defaults to None.
        label_names: list of str or None. The classes in logit order; None:
            the training labels, sorted (integers by value). Labels outside
            this list are refused. Defaults to None.
        class_weights: `"balanced"`, a dict of label -> weight, or None.
            Single-label: each example's loss is scaled by its class's weight
            (`"balanced"`: `n / (classes * count)`, scikit-learn's). Multi-label:
            each class's positive term (`"balanced"`: its negatives over its
            positives). Defaults to None.
        threshold: float or None. Multi-label: a class is predicted when its
            probability reaches it. None chooses it on the selection split
            (the best micro F1), never on the reported one. Defaults to None.
        freeze_encoder: bool. Train the head only (`--freeze_encoder`).
            Defaults to False.
        features: str or None. What the head reads (`--features`; see
            `GlueConfig`). Defaults to None.

    Example:

    >>> ClassificationConfig(problem_type="multi_label", class_weights="balanced")
    """

    problem_type: str | None = None
    label_names: list[str] | None = None
    class_weights: str | dict[str, float] | None = None
    threshold: float | None = None
    freeze_encoder: bool = False
    features: str | None = None


class ClassificationTask(Task):
    """Classification or regression of texts (or pairs) by your own labels.

    The head is `BertClassifier` on the pooled `[CLS]` output: softmax
    cross-entropy over the classes (single-label), a sigmoid per class
    (multi-label, `MultiLabelCrossentropy`) or one score by mean squared error
    (regression). Dev metrics: `accuracy`, `macro_f1`, `per_class`,
    `confusion_matrix`; multi-label `micro_f1`, `macro_f1`,
    `subset_accuracy`, `per_class` and the decision `threshold`; regression
    `pearson`, `spearman`, `mse`; each with the `baseline` a constant answer
    reaches. `--do_predict` writes `predictions.jsonl` for `--test_file`, as
    `kbert-predict` writes.

    Args:
        config: `ClassificationConfig` or None.
        task_name: str or None. A name for the data, recorded (defaults to
            `classification`).
        text_column_names: tuple of str or None. The text columns (recorded
            ones when rebuilt from a fine-tuned directory).
        label_column_name: str or None. The label column.

    Example:

    >>> task = ClassificationTask()
    >>> data = TaskData(train_file="tickets.csv", validation_file="tickets_dev.csv")
    >>> train = task.read(data, "train")
    >>> task.adapt(train)
    >>> task.label_names
    ['billing', 'bug', 'other']
    """

    name = "classification"
    config_class = ClassificationConfig
    supports_packing = True

    def __init__(self, config: ClassificationConfig | None = None, task_name: str | None = None,
                 text_column_names: Sequence[str] | None = None,
                 label_column_name: str | None = None):
        super().__init__(config, task_name or "classification")
        label_kinds.check_problem_type(self.config.problem_type)
        self.text_column_names = tuple(text_column_names) if text_column_names else None
        self.label_column_name = label_column_name
        self._space: LabelSpace | None = None
        if self.config.problem_type and (self.config.label_names
                                         or self.config.problem_type == REGRESSION):
            self._space = LabelSpace(self.config.problem_type,
                                     tuple(map(str, self.config.label_names or ())))
        self._weights: list[float] | None = None
        self._chosen_threshold: float | None = None

    # -- What a fine-tuned model remembers --------------------------------------------

    @classmethod
    def from_description(cls, description: Mapping[str, Any]) -> "ClassificationTask":
        values = {key: value for key, value in description.items() if key not in _RECORDED}
        config = cls.config_from_description(values)
        config.label_names = list(description.get("label_names") or []) or None
        return cls(config, description.get("task_name"),
                   description.get("text_column_names"), description.get("label_column_name"))

    def describe(self) -> dict[str, Any]:
        recorded = {**super().describe(), "label_names": list(self.label_names),
                    "problem_type": self.problem_type,
                    "text_column_names": list(self.text_column_names or ()),
                    "label_column_name": self.label_column_name or DEFAULT_LABEL_COLUMN,
                    "threshold": self.threshold if self.problem_type == MULTI_LABEL else None}
        if self._weights is not None:
            recorded["resolved_class_weights"] = dict(zip(self.label_names, self._weights))
        return recorded

    @property
    def problem_type(self) -> str | None:
        """`single_label`, `multi_label` or `regression`; None until adapted (or configured)."""
        return self._space.problem_type if self._space else self.config.problem_type

    @property
    def distillation_target(self) -> str | None:
        # kbert-distill: class logits by temperature-scaled KL, a score by MSE (as GLUE's);
        # multi-label: each label's sigmoid probability by binary cross-entropy.
        return "sigmoid_logits" if self.problem_type == MULTI_LABEL else "logits"

    @property
    def model_type(self) -> str:
        return "regressor" if self.problem_type == REGRESSION else "classifier"

    @property
    def main_metric(self) -> str:
        return MAIN_METRICS[self.problem_type or SINGLE_LABEL]

    @property
    def label_names(self) -> list[str]:
        return list(self._space.label_names) if self._space else []

    @property
    def text_pair(self) -> bool:
        return len(self.text_column_names or ()) == 2

    @property
    def threshold(self) -> float:
        """The multi-label decision threshold: configured, chosen, or 0.5."""
        if self.config.threshold is not None:
            return float(self.config.threshold)
        if self._chosen_threshold is not None:
            return self._chosen_threshold
        return DEFAULT_THRESHOLD

    # -- Data ---------------------------------------------------------------------------

    def check_data(self, data: TaskData, splits) -> None:
        for split in splits:
            flag = _FILES[split]
            if split == "dev" and not data.validation_file and "train" in splits:
                continue  # chosen on a held-out share of the training file; nothing reported
            if not getattr(data, flag):
                needs = {"train": "--do_train", "dev": "--do_eval", "test": "--do_predict"}[split]
                raise ValueError(f"--task=classification {needs} needs --{flag} (a .csv, .tsv, "
                                 ".jsonl/.json or .parquet file).")

    def has_split(self, data: TaskData, split: str) -> bool:
        return bool(getattr(data, _FILES[split]))

    def read(self, data: TaskData, split: str) -> list[ClassificationExample]:
        flag = _FILES[split]
        path = getattr(data, flag)
        wanted = data.text_column_names or self.text_column_names
        label_column = data.label_column_name or self.label_column_name
        examples, columns = read_classification_file(path, flag, wanted, label_column,
                                                     labels_required=split != "test")
        if split == "train" or self.text_column_names is None:
            self.text_column_names = columns
            self.label_column_name = label_column or DEFAULT_LABEL_COLUMN
        elif columns != self.text_column_names:
            raise ValueError(f"--{flag}={path}: its text columns {list(columns)} are not the "
                             f"training file's {list(self.text_column_names)}; name them with "
                             "--text_column_names.")
        if split != "train":
            self._check_labels(examples, "the training file")
        return examples

    def adapt(self, train_examples: list[ClassificationExample]) -> None:
        """Learns the problem type and label names from the training labels (unless configured).

        Also resolves `class_weights` (`"balanced"` counts these labels).
        Every training label is checked against the problem type and the
        configured label names; the first bad one is named by its row.
        """
        labelled = [e for e in train_examples if e.label is not None]
        if not labelled:
            raise ValueError("the training examples have no labels to learn from.")
        problem_type = self.config.problem_type or label_kinds.infer_problem_type(
            [e.label for e in labelled])
        if self.config.label_names:
            names = tuple(map(str, self.config.label_names))
        elif problem_type == REGRESSION:
            names = ()
        else:
            values = [label_kinds.label_value(e.label, problem_type, e.source) for e in labelled]
            names = tuple(label_kinds.sorted_names(values, [e.label for e in labelled]))
        if problem_type == SINGLE_LABEL and len(names) < 2:
            raise ValueError(f"the training labels name only {list(names)}; a classifier needs "
                             "at least two classes (set ClassificationConfig.label_names to add "
                             "some, or problem_type='regression' for numbers).")
        self._space = LabelSpace(problem_type, names)
        origin = ("ClassificationConfig.label_names" if self.config.label_names
                  else "the training file")
        targets = self._targets(labelled, origin)
        self._weights = label_kinds.class_weights(self.config.class_weights, problem_type,
                                                  names, targets)

    def examples_from_values(self, inputs, labels=None, source="values"):
        """Examples from texts (a list of str, or a tuple of two lists for pairs) and labels.

        Example:

        >>> task.examples_from_values(["refund please", "app crashes"], ["billing", "bug"])
        """
        texts, pairs = _input_lists(inputs)
        sources = ([f"{source} item {i + 1}" for i in range(len(texts))]
                   if isinstance(source, str) else list(source))
        if len(sources) != len(texts) or (labels is not None and len(labels) != len(texts)):
            raise ValueError(f"{len(texts)} inputs but {len(sources)} sources and "
                             f"{'no' if labels is None else len(labels)} labels; give one each.")
        if self.text_column_names is None:
            self.text_column_names = DEFAULT_TEXT_COLUMNS[1 if pairs is not None else 0]
        if (pairs is not None) != self.text_pair:
            raise ValueError(f"the model reads {'text pairs' if self.text_pair else 'one text'} "
                             f"per input ({', '.join(self.text_column_names)}); got "
                             f"{'pairs' if pairs is not None else 'single texts'}.")
        names = self.text_column_names
        examples = []
        for i, text in enumerate(texts):
            label = None if labels is None else _given_label(labels[i], sources[i])
            examples.append(ClassificationExample(
                text_value(text, names[0], sources[i]),
                text_value(pairs[i], names[1], sources[i]) if pairs is not None else None,
                label, sources[i]))
        if labels is not None and self._space is not None:
            self._check_labels(examples, "the training labels")
        return examples

    def input_columns(self, text_column_names=None) -> tuple[str, ...]:
        if not text_column_names:
            return tuple(self.text_column_names or DEFAULT_TEXT_COLUMNS[0])
        if len(text_column_names) != len(self.text_column_names or DEFAULT_TEXT_COLUMNS[0]):
            raise ValueError(f"--text_column_names={','.join(text_column_names)}: the model "
                             f"reads {'two texts' if self.text_pair else 'one text'} per input "
                             f"(trained on {', '.join(self.text_column_names or ())}).")
        return tuple(text_column_names)

    def input_texts(self, examples: list[ClassificationExample]) -> list[list[str]]:
        """Each example a document: its text, or its two texts for pairs."""
        return [[e.text] + ([e.text_pair] if e.text_pair is not None else []) for e in examples]

    def unlabelled_examples(self, lines, source) -> list[ClassificationExample]:
        """One input per non-empty line: `text`, or `text<TAB>text_pair` for pairs."""
        rows = [(number, line.split("\t")) for number, line in enumerate(lines, 1)
                if line.strip()]
        for number, fields in rows:
            if len(fields) != (2 if self.text_pair else 1):
                form = "text<TAB>text_pair" if self.text_pair else "one text without tabs"
                raise ValueError(f"{source}:{number}: expected {form}, got {len(fields)} "
                                 "field(s).")
        inputs = [fields[0] for _, fields in rows]
        if self.text_pair:
            inputs = (inputs, [fields[1] for _, fields in rows])
        return self.examples_from_values(inputs, source=[f"{source}:{n}" for n, _ in rows])

    def count_truncated(self, examples, preprocessor: TextPreprocessor) -> int:
        return count_truncated(preprocessor, [e.text for e in examples],
                               [e.text_pair for e in examples] if self.text_pair else None)

    def dataset(self, examples, preprocessor, batch_size, is_training, seed=None, packing=None):
        if packing is not None and self.problem_type == MULTI_LABEL:
            raise ValueError("run_finetuning.packing packs single-label and regression rows; a "
                             "multi-label problem trains on length-bucketed batches: drop it.")
        labelled = all(e.label is not None for e in examples)
        targets = self._targets(examples) if labelled and examples else None
        return classification_dataset(
            preprocessor, [e.text for e in examples],
            [e.text_pair for e in examples] if self.text_pair else None,
            targets if targets is not None else np.zeros(self._target_shape(len(examples))),
            batch_size, is_training=is_training,
            regression=self.problem_type in (REGRESSION, MULTI_LABEL), seed=seed,
            packing=packing)

    def training_batch(self, batch):
        weights = None
        if self._weights is not None and self.problem_type == SINGLE_LABEL:
            # Keras' class_weight, as sample weights (multi-label weighs in its loss).
            weights = tf.gather(tf.constant(self._weights, tf.float32), batch["label"])
        if "cls_positions" in batch:  # packed rows: one label and weight per instance slot
            inputs = {key: batch[key] for key in (*INPUT_NAMES, *PACKED_INPUT_NAMES)}
            slot_weights = batch["label_weight"] * (1.0 if weights is None else weights)
            return inputs, batch["label"], slot_weights
        if weights is not None:
            return encoder_inputs(batch), batch["label"], weights
        return encoder_inputs(batch), batch["label"]

    # -- Model --------------------------------------------------------------------------

    def build_model(self, encoder: keras.Model) -> keras.Model:
        self._require_labels()
        if self.config.features is not None:
            encoder = encoder.with_all_layers()
        return BertClassifier(encoder, num_classes=1 if self.problem_type == REGRESSION
                              else len(self.label_names), features=self.config.features,
                              freeze_encoder=self.config.freeze_encoder)

    def compile_arguments(self) -> dict[str, Any]:
        if self.problem_type != MULTI_LABEL:
            return {}  # BertClassifier's: softmax cross-entropy and accuracy, or MSE
        return {"loss": MultiLabelCrossentropy(
                    self._weights, reduction="mean_with_sample_weight"),
                "metrics": [keras.metrics.BinaryAccuracy("label_accuracy", threshold=0.0)]}

    # -- Evaluation and prediction ------------------------------------------------------

    def evaluate(self, model, examples, preprocessor, batch_size) -> Evaluation:
        outputs = outputs_in_order(model, self.evaluation_dataset(examples, preprocessor,
                                                                   batch_size))
        targets = self._targets(examples)
        if self.problem_type == REGRESSION:
            results = _regression_metrics(targets, outputs[:, 0])
        elif self.problem_type == MULTI_LABEL:
            return self._multi_label_evaluation(targets, _sigmoid(outputs))
        else:
            results = _single_label_metrics(targets, outputs.argmax(axis=-1), self.label_names)
        return Evaluation({**results, "num_examples": len(examples)})

    def _multi_label_evaluation(self, targets: np.ndarray, probabilities: np.ndarray
                                ) -> Evaluation:
        chosen = {}
        threshold = self.threshold
        if self.config.threshold is None and self._chosen_threshold is None:
            threshold = metrics.choose_threshold(targets, probabilities)
            chosen = {"threshold": threshold}
        results = metrics.multi_label_scores(targets, probabilities >= threshold,
                                             self.label_names)
        sets, counts = np.unique(targets.astype(bool), axis=0, return_counts=True)
        constant = np.broadcast_to(sets[counts.argmax()], targets.shape)
        baseline = metrics.multi_label_scores(targets, constant, self.label_names)
        common = [name for name, on in zip(self.label_names, sets[counts.argmax()]) if on]
        results["baseline"] = {"predicts": f"the most frequent label set {common}",
                               **{key: baseline[key] for key in
                                  ("micro_f1", "macro_f1", "subset_accuracy")}}
        results["majority_baseline"] = baseline["micro_f1"]
        return Evaluation({**results, "threshold": threshold, "num_examples": len(targets)},
                          chosen=chosen)

    def keep_chosen(self, chosen: Mapping[str, Any]) -> None:
        if "threshold" in chosen:
            self._chosen_threshold = float(chosen["threshold"])

    def predict_records(self, model, examples, preprocessor, batch_size) -> list[dict[str, Any]]:
        self._require_labels()
        if not examples:
            return []
        outputs = outputs_in_order(model, self.dataset(examples, preprocessor, batch_size,
                                                       is_training=False))
        if self.problem_type == REGRESSION:
            return [{"prediction": round(float(value), 6)} for value in outputs[:, 0]]
        names = self.label_names
        if self.problem_type == MULTI_LABEL:
            records = []
            for row in _sigmoid(outputs):
                order = np.argsort(-row, kind="stable")
                records.append({"labels": [names[i] for i in order if row[i] >= self.threshold],
                                "probabilities": _probabilities(names, row)})
            return records
        probabilities = _softmax(outputs)
        return [{"label": names[int(row.argmax())], "score": round(float(row.max()), 6),
                 "probabilities": _probabilities(names, row)} for row in probabilities]

    def predict(self, model, examples, preprocessor, batch_size) -> dict[str, str]:
        records = self.predict_records(model, examples, preprocessor, batch_size)
        lines = [json.dumps(prediction_row(example.row or {"text": example.text}, record),
                            ensure_ascii=False) for example, record in zip(examples, records)]
        return {"predictions.jsonl": "".join(line + "\n" for line in lines)}

    def serving_module(self, model, preprocessor):
        self._require_labels()
        return ClassifierServingModule(model, preprocessor, self.label_names, self.text_pair,
                                       self.problem_type == REGRESSION,
                                       multi_label=self.problem_type == MULTI_LABEL,
                                       threshold=self.threshold)

    # -- Labels -------------------------------------------------------------------------

    def _require_labels(self) -> None:
        if self._space is None:
            raise ValueError("the classification task has not learned its labels: train it on "
                             "a --train_file (adapt), or set ClassificationConfig.problem_type "
                             "and label_names.")

    def _check_labels(self, examples, origin: str) -> None:
        """Dev and test labels must be the training labels (the first stranger is named)."""
        labelled = [e for e in examples if e.label is not None]
        if labelled:
            self._require_labels()
            self._targets(labelled, origin)

    def _targets(self, examples, origin: str = "the training file") -> np.ndarray:
        self._require_labels()
        targets = [self._space.target(e.label, e.source, origin) for e in examples]
        if self.problem_type == MULTI_LABEL:
            return np.asarray(targets, np.float32).reshape(len(examples), len(self.label_names))
        return np.asarray(targets, np.float32 if self.problem_type == REGRESSION else np.int32)

    def _target_shape(self, count: int) -> tuple[int, ...]:
        return (count, len(self.label_names)) if self.problem_type == MULTI_LABEL else (count,)


def _input_lists(inputs) -> tuple[list, list | None]:
    """`inputs` as (texts, pairs or None): a sequence of str, or a tuple of two sequences."""
    if isinstance(inputs, str):
        raise ValueError(f"inputs: a single string {inputs[:40]!r}; pass a list of texts.")
    if (isinstance(inputs, tuple) and len(inputs) == 2
            and not any(isinstance(part, str) for part in inputs)):
        texts, pairs = list(inputs[0]), list(inputs[1])
        if len(texts) != len(pairs):
            raise ValueError(f"text pairs: {len(texts)} first texts but {len(pairs)} second.")
        return texts, pairs
    return list(inputs), None


def _given_label(label: Any, source: str) -> Any:
    if isinstance(label, np.generic):
        label = label.item()
    elif isinstance(label, np.ndarray):
        label = label.tolist()
    if label is None or (isinstance(label, str) and not label.strip()):
        raise ValueError(f"{source}: the label is {'missing' if label is None else 'empty'}.")
    return label


def _single_label_metrics(targets: np.ndarray, predicted: np.ndarray,
                          names: list[str]) -> dict[str, Any]:
    results = {"accuracy": metrics.accuracy(targets, predicted),
               "macro_f1": metrics.macro_f1(targets, predicted),
               "per_class": metrics.class_scores(targets, predicted, names),
               "confusion_matrix": metrics.confusion_matrix(targets, predicted, names)}
    values, counts = np.unique(targets, return_counts=True)
    majority = np.full_like(targets, values[counts.argmax()])
    results["baseline"] = {"predicts": f"the majority class {names[values[counts.argmax()]]!r}",
                           "accuracy": metrics.accuracy(targets, majority),
                           "macro_f1": metrics.macro_f1(targets, majority)}
    results["majority_baseline"] = results["baseline"]["accuracy"]
    return results


def _regression_metrics(targets: np.ndarray, predicted: np.ndarray) -> dict[str, Any]:
    mean = float(np.mean(targets))
    constant = np.full_like(targets, mean)
    return {"pearson": metrics.pearson_corrcoef(targets, predicted),
            "spearman": metrics.spearman_corrcoef(targets, predicted),
            "mse": metrics.mean_squared_error(targets, predicted),
            "baseline": {"predicts": f"the mean {mean:.4g}", "pearson": 0.0, "spearman": 0.0,
                         "mse": metrics.mean_squared_error(targets, constant)},
            "majority_baseline": 0.0}


def _probabilities(names: list[str], row: np.ndarray) -> dict[str, float]:
    return {name: round(float(p), 6) for name, p in zip(names, row)}


def _sigmoid(logits: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits.astype(np.float64) - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)
