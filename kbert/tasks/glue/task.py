"""GLUE: sentence and sentence-pair classification and regression (`--task=glue`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import keras
import numpy as np

from kbert.data.text_datasets import classification_dataset
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
from kbert.tasks.classifier_serving import ClassifierServingModule
from kbert.tasks.glue_reader import GlueExample
from kbert.tasks.glue_reader import get_glue_spec
from kbert.tasks.glue_reader import read_glue

# The official metric of each name a GLUE task reports.
METRICS = {"accuracy": metrics.accuracy, "f1": metrics.f1_score,
           "matthews_corrcoef": metrics.matthews_corrcoef,
           "pearson": metrics.pearson_corrcoef, "spearman": metrics.spearman_corrcoef}


@dataclasses.dataclass
class GlueConfig:
    """GLUE's own hyperparameters; the task itself is chosen by `--task_name`.

    Args:
        freeze_encoder: bool. Feature-based use (the BERT paper, 5.3;
            `kbert-finetune --freeze_encoder`): the encoder's weights stay
            fixed and it runs without dropout; only the head learns.
            Defaults to False.
        features: str or None. What the head reads: None for the pooled
            `[CLS]` output, or a mix of the blocks' `[CLS]` vectors: `last`,
            `sum_last_4`, `concat_last_4` or `weighted` (see
            `kbert.layers.EncoderLayerMix`). Defaults to None.
    """

    freeze_encoder: bool = False
    features: str | None = None


class GlueTask(Task):
    """A GLUE task (`--task_name=sst-2`, `mrpc`, `sts-b`, ...) as `run_classifier.py` runs it.

    The head is a `BertClassifier` on the pooled `[CLS]` output (one output for
    STS-B's regression); dev metrics are GLUE's for the task (accuracy, F1,
    Matthews correlation, Pearson/Spearman); `predictions.tsv` has GLUE's
    submission layout (`index`, `prediction`).

    Args:
        config: `GlueConfig` or None.
        task_name: str. The GLUE task.
        label_names: list of str or None. Recorded class names of a saved model
            (defaults to the task's).

    Example:

    >>> task = GlueTask(task_name="sst-2")
    >>> examples = task.read(TaskData(task_name="sst-2", data_dir="glue_data/SST-2"), "dev")
    """

    name = "glue"
    config_class = GlueConfig
    supports_packing = True
    distillation_target = "logits"  # class logits (KL), or STS-B's score (MSE)

    def __init__(self, config: GlueConfig | None = None, task_name: str | None = None,
                 label_names: list[str] | None = None):
        super().__init__(config, task_name)
        if not task_name:
            raise ValueError("--task=glue needs --task_name (e.g. sst-2, mrpc, cola, sts-b).")
        self.spec = get_glue_spec(task_name)
        self.task_name = self.spec.name
        self._label_names = list(label_names) if label_names else list(self.spec.label_names)

    @classmethod
    def from_description(cls, description: Mapping[str, Any]) -> "GlueTask":
        return cls(cls.config_from_description(description), task_name=description["task_name"],
                   label_names=description.get("label_names"))

    @property
    def model_type(self) -> str:
        return "regressor" if self.spec.is_regression else "classifier"

    @property
    def main_metric(self) -> str:
        # The BERT paper's figure for each task: Spearman for STS-B, F1 for
        # MRPC and QQP, Matthews correlation for CoLA, accuracy for the others.
        return "spearman" if self.spec.is_regression else self.spec.metrics[0]

    @property
    def label_names(self) -> list[str]:
        return self._label_names

    @property
    def text_pair(self) -> bool:
        return self.spec.text_b is not None

    def check_data(self, data: TaskData, splits) -> None:
        if not data.data_dir:
            raise ValueError("--task=glue needs --data_dir.")

    def read(self, data: TaskData, split: str) -> list[GlueExample]:
        return read_glue(data.data_dir, self.spec.name, split)

    def input_texts(self, examples: list[GlueExample]) -> list[list[str]]:
        """Each example a document: its sentence, or its two sentences for pair tasks."""
        return [[e.text_a] + ([e.text_b] if e.text_b else []) for e in examples]

    def unlabelled_examples(self, lines, source) -> list[GlueExample]:
        """One input per non-empty line: `text`, or `text<TAB>text_pair` for pair tasks."""
        examples = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != (2 if self.text_pair else 1):
                form = "text<TAB>text_pair" if self.text_pair else "one text without tabs"
                raise ValueError(f"{source}:{number}: expected {form} for {self.task_name}, "
                                 f"got {len(fields)} field(s).")
            examples.append(GlueExample(f"transfer-{len(examples)}", fields[0],
                                        fields[1] if self.text_pair else None, None))
        return examples

    def dataset(self, examples, preprocessor, batch_size, is_training, seed=None, packing=None):
        return classification_dataset(
            preprocessor, [e.text_a for e in examples],
            [e.text_b for e in examples] if self.text_pair else None,
            [e.label if e.label is not None else 0 for e in examples],
            batch_size, is_training=is_training, regression=self.spec.is_regression, seed=seed,
            packing=packing)

    def training_batch(self, batch):
        if "cls_positions" in batch:  # Packed rows: one label and weight per instance slot.
            inputs = {key: batch[key] for key in (*INPUT_NAMES, *PACKED_INPUT_NAMES)}
            return inputs, batch["label"], batch["label_weight"]
        return encoder_inputs(batch), batch["label"]

    def build_model(self, encoder: keras.Model) -> keras.Model:
        if self.config.features is not None:
            encoder = encoder.with_all_layers()
        return BertClassifier(encoder, num_classes=1 if self.spec.is_regression
                              else len(self.label_names), features=self.config.features,
                              freeze_encoder=self.config.freeze_encoder)

    def _scores(self, model, examples, preprocessor, batch_size) -> np.ndarray:
        outputs = outputs_in_order(model, self.evaluation_dataset(examples, preprocessor,
                                                                   batch_size))
        return outputs[:, 0] if self.spec.is_regression else outputs.argmax(axis=-1)

    def evaluate(self, model, examples, preprocessor: TextPreprocessor, batch_size) -> Evaluation:
        predictions = self._scores(model, examples, preprocessor, batch_size)
        labels = np.asarray([e.label for e in examples])
        results = {name: METRICS[name](labels, predictions) for name in self.spec.metrics}
        if not self.spec.is_regression:
            # The main metric of a model that answers the most frequent label
            # every time: the level a model that learned nothing reaches.
            values, counts = np.unique(labels, return_counts=True)
            majority = np.full_like(labels, values[counts.argmax()])
            results["majority_baseline"] = METRICS[self.main_metric](labels, majority)
        results["num_examples"] = len(examples)
        return Evaluation(results)

    def predict(self, model, examples, preprocessor, batch_size) -> dict[str, str]:
        predictions = self._scores(model, examples, preprocessor, batch_size)
        lines = ["index\tprediction"]
        for example, value in zip(examples, predictions):
            text = f"{value:.3f}" if self.spec.is_regression else self.label_names[int(value)]
            lines.append(f"{example.guid.split('-', 1)[1]}\t{text}")
        return {"predictions.tsv": "\n".join(lines) + "\n"}

    def serving_module(self, model, preprocessor):
        return ClassifierServingModule(model, preprocessor, self.label_names, self.text_pair,
                                       self.spec.is_regression)
