"""A toy task written the way a new kbert task is: one module, then one registry line.

Sentences labelled by whether they mention a colour, read from `<data_dir>/<split>.tsv`
(`text<TAB>label`). It reuses kbert's pieces (classification batches, the
classifier head, the accuracy metric, the classifier serving module) and knows
nothing of the loop, the binaries or export.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from kbert.data import classification_dataset
from kbert.models import BertClassifier
from kbert.tasks import Evaluation
from kbert.tasks import Task
from kbert.tasks import metrics
from kbert.tasks.base import encoder_inputs
from kbert.tasks.base import outputs_in_order
from kbert.tasks.classifier_serving import ClassifierServingModule

LABELS = ["plain", "colour"]


@dataclasses.dataclass
class ToyConfig:
    """The toy task's one setting."""

    lowercase_labels: bool = True


class ToyTask(Task):
    name = "toy"
    config_class = ToyConfig

    @property
    def model_type(self):
        return "classifier"

    @property
    def label_names(self):
        return LABELS

    def read(self, data, split):
        path = os.path.join(data.data_dir, f"{split}.tsv")
        with open(path, encoding="utf-8") as f:
            rows = [line.rstrip("\n").split("\t") for line in f if line.strip()]
        return [(text, int(label)) for text, label in rows]

    def dataset(self, examples, preprocessor, batch_size, is_training, seed=None):
        return classification_dataset(preprocessor, [t for t, _ in examples], None,
                                      [label for _, label in examples], batch_size,
                                      is_training=is_training, seed=seed)

    def training_batch(self, batch):
        return encoder_inputs(batch), batch["label"]

    def build_model(self, encoder):
        return BertClassifier(encoder, num_classes=len(LABELS))

    def evaluate(self, model, examples, preprocessor, batch_size):
        predicted = self._predicted(model, examples, preprocessor, batch_size)
        accuracy = metrics.accuracy([label for _, label in examples], predicted)
        return Evaluation({"accuracy": accuracy, "num_examples": len(examples)})

    def predict(self, model, examples, preprocessor, batch_size):
        predicted = self._predicted(model, examples, preprocessor, batch_size)
        return {"toy_predictions.txt": "".join(f"{LABELS[p]}\n" for p in predicted)}

    def _predicted(self, model, examples, preprocessor, batch_size):
        dataset = self.dataset(examples, preprocessor, batch_size, is_training=False)
        return np.argmax(outputs_in_order(model, dataset), axis=-1)

    def serving_module(self, model, preprocessor):
        return ClassifierServingModule(model, preprocessor, LABELS, text_pair=False,
                                       regression=False)
