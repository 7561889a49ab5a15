"""What every task's serving module shares: the module holding model and preprocessor.

A task's `serving_module(model, preprocessor)` returns a `ServingModule`
subclass whose `tf.function`s become the SavedModel's signatures
(`kbert.export.export_saved_model` saves it). Every module has
`serving_default` (raw text in, answers out) and `serve_ids` (`token_ids`,
`segment_ids`, `padding_mask`, int32 `[batch, length]`, for callers that
tokenize themselves).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from kbert.data.text_preprocessor import TextPreprocessor

IDS_SIGNATURE = [
    tf.TensorSpec([None, None], tf.int32, name="token_ids"),
    tf.TensorSpec([None, None], tf.int32, name="segment_ids"),
    tf.TensorSpec([None, None], tf.int32, name="padding_mask"),
]


def text_spec(name: str) -> tf.TensorSpec:
    """A `[batch]` string input named `name`."""
    return tf.TensorSpec([None], tf.string, name=name)


def ids_inputs(token_ids: tf.Tensor, segment_ids: tf.Tensor, padding_mask: tf.Tensor) -> dict:
    """The encoder inputs dict of the `serve_ids` signature's arguments."""
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def label_table(label_names: list[str], num_outputs: int) -> tf.Tensor:
    """Label names as a string tensor; `"0", "1", ...` when the model has none recorded."""
    return tf.constant(list(label_names) or [str(i) for i in range(num_outputs)])


class ServingModule(tf.Module):
    """Holds the model and preprocessor so the SavedModel tracks their variables and tables.

    Subclasses define their `tf.function`s in `__init__` and return them from
    `signatures()`.

    Args:
        model: the Keras model to serve.
        preprocessor: `kbert.data.TextPreprocessor` with the training settings.
    """

    def __init__(self, model: keras.Model, preprocessor: TextPreprocessor):
        super().__init__(name="kbert_serving")
        self.model = model
        self.preprocessor = preprocessor

    def run(self, inputs: dict):
        """The model in inference mode."""
        return self.model(inputs, training=False)

    def signatures(self) -> dict:
        """Signature name -> `tf.function`."""
        raise NotImplementedError
