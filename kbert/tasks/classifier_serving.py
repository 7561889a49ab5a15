"""Serving signatures of text (pair) classifiers and regressors: GLUE's and users' own labels.

| model                  | `serving_default` inputs -> outputs                              |
|------------------------|------------------------------------------------------------------|
| single-label classifier| `text` (+ `text_pair`) -> `logits`, `probabilities`, `label`     |
| multi-label classifier | `text` (+ `text_pair`) -> `logits`, `probabilities`, `labels`    |
| regressor              | `text` (+ `text_pair`) -> `score`                                |

`serve_ids` takes `token_ids`, `segment_ids`, `padding_mask` and returns the same outputs.
A multi-label classifier's `probabilities` are each class's own (sigmoid), and
`labels` `[batch, classes]` holds the classes at or over its recorded threshold,
most probable first, then empty strings. TF Serving's Classify (`:classify`)
answers every class with its probability, named as recorded.

Used by the glue task and the classification task, hence here beside `base.py`:
task folders never import each other.
"""

from __future__ import annotations

import tensorflow as tf

from kbert.tasks.serving import ServingModule
from kbert.tasks.serving import Signature
from kbert.tasks.serving import ids_signature
from kbert.tasks.serving import label_table
from kbert.tasks.serving import text_spec


class ClassifierServingModule(ServingModule):
    """Raw sentences (or pairs) in; class logits, probabilities and label(s) (or a score) out.

    Args:
        model: `kbert.models.BertClassifier`.
        preprocessor: `kbert.data.TextPreprocessor`.
        label_names: list of str. Classes in logit order (ignored when regressing).
        text_pair: bool. Inputs are sentence pairs (`text`, `text_pair`).
        regression: bool. One score instead of classes.
        multi_label: bool. Each class is decided on its own (sigmoid) at
            `threshold`. Defaults to False.
        threshold: float. The multi-label decision threshold. Defaults to 0.5.

    Example:

    >>> module = ClassifierServingModule(classifier, preprocessor, ["neg", "pos"], False, False)
    >>> module.signatures()["serving_default"](tf.constant(["a gorgeous film"]))["label"]
    """

    def __init__(self, model, preprocessor, label_names: list[str], text_pair: bool,
                 regression: bool, multi_label: bool = False, threshold: float = 0.5):
        super().__init__(model, preprocessor)
        self.regression = regression
        self.text_pair = text_pair
        self.multi_label = multi_label
        self.threshold = float(threshold)
        self.label_names = label_table(label_names, model.output_shape[-1])

    def declared_signatures(self):
        if self.text_pair:
            text = Signature([text_spec("text"), text_spec("text_pair")], before=self._pack_pair,
                             after=self._finish)
        else:
            text = Signature([text_spec("text")], before=self._pack_single, after=self._finish)
        return {"serving_default": text, "serve_ids": ids_signature(self._finish)}

    def _finish(self, outputs, padding_mask=None):
        logits = tf.cast(outputs, tf.float32)
        if self.regression:
            return {"score": logits[:, 0]}
        if self.multi_label:
            return self._multi_label(logits)
        return {
            "logits": logits,
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "label": tf.gather(self.label_names, tf.argmax(logits, axis=-1, output_type=tf.int32)),
        }

    def _multi_label(self, logits):
        probabilities = tf.sigmoid(logits)
        order = tf.argsort(probabilities, axis=-1, direction="DESCENDING", stable=True)
        chosen = tf.gather(probabilities, order, batch_dims=1) >= self.threshold
        names = tf.gather(self.label_names, order)
        return {"logits": logits, "probabilities": probabilities,
                "labels": tf.where(chosen, names, tf.zeros_like(names))}

    def _pack_single(self, text):
        return self.preprocessor.pack([self.preprocessor.tokenize(text)])

    def _pack_pair(self, text, text_pair):
        tokenize = self.preprocessor.tokenize
        return self.preprocessor.pack([tokenize(text), tokenize(text_pair)])
