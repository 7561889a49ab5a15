"""Serving signatures of sentence (pair) classifiers and regressors.

| model type  | `serving_default` inputs -> outputs                          |
|-------------|--------------------------------------------------------------|
| classifier  | `text` (+ `text_pair`) -> `logits`, `probabilities`, `label` |
| regressor   | `text` (+ `text_pair`) -> `score`                            |

`serve_ids` takes `token_ids`, `segment_ids`, `padding_mask` and returns the same outputs.
"""

from __future__ import annotations

import tensorflow as tf

from kbert.tasks.serving import IDS_SIGNATURE
from kbert.tasks.serving import ServingModule
from kbert.tasks.serving import ids_inputs
from kbert.tasks.serving import label_table
from kbert.tasks.serving import text_spec


class ClassifierServingModule(ServingModule):
    """Raw sentences (or pairs) in; class logits, probabilities and label (or a score) out.

    Args:
        model: `kbert.models.BertClassifier`.
        preprocessor: `kbert.data.TextPreprocessor`.
        label_names: list of str. Classes in logit order (ignored when regressing).
        text_pair: bool. Inputs are sentence pairs (`text`, `text_pair`).
        regression: bool. One score instead of classes.

    Example:

    >>> module = ClassifierServingModule(classifier, preprocessor, ["neg", "pos"], False, False)
    >>> module.signatures()["serving_default"](tf.constant(["a gorgeous film"]))["label"]
    """

    def __init__(self, model, preprocessor, label_names: list[str], text_pair: bool,
                 regression: bool):
        super().__init__(model, preprocessor)
        self.regression = regression
        self.text_pair = text_pair
        self.label_names = label_table(label_names, model.output_shape[-1])
        if text_pair:
            self.serve_text = tf.function(self._serve_pair, autograph=False,
                                          input_signature=[text_spec("text"), text_spec("text_pair")])
        else:
            self.serve_text = tf.function(self._serve_single, autograph=False,
                                          input_signature=[text_spec("text")])
        self.serve_ids = tf.function(self._serve_ids, autograph=False, input_signature=IDS_SIGNATURE)

    def _outputs(self, inputs):
        return self._finish(self.run(inputs))

    def _finish(self, outputs, padding_mask=None):
        logits = tf.cast(outputs, tf.float32)
        if self.regression:
            return {"score": logits[:, 0]}
        return {
            "logits": logits,
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "label": tf.gather(self.label_names, tf.argmax(logits, axis=-1, output_type=tf.int32)),
        }

    def _pack_single(self, text):
        return self.preprocessor.pack([self.preprocessor.tokenize(text)])

    def _pack_pair(self, text, text_pair):
        tokenize = self.preprocessor.tokenize
        return self.preprocessor.pack([tokenize(text), tokenize(text_pair)])

    def _serve_single(self, text):
        return self._outputs(self._pack_single(text))

    def _serve_pair(self, text, text_pair):
        return self._outputs(self._pack_pair(text, text_pair))

    def _serve_ids(self, token_ids, segment_ids, padding_mask):
        return self._outputs(ids_inputs(token_ids, segment_ids, padding_mask))

    def signatures(self):
        return {"serving_default": self.serve_text, "serve_ids": self.serve_ids}

    def split_signatures(self):
        if self.text_pair:
            before = tf.function(self._pack_pair, autograph=False,
                                 input_signature=[text_spec("text"), text_spec("text_pair")])
        else:
            before = tf.function(self._pack_single, autograph=False,
                                 input_signature=[text_spec("text")])
        after = self.after_function(self._finish)
        return {"serving_default": (before, after), "serve_ids": (self.checked_ids_function(), after)}
