"""`TaskModel`: the base of every kbert model made of an encoder (any architecture) plus a head."""

from __future__ import annotations

import keras

from kbert.models.initializers import truncated_normal


class InferenceMode(keras.layers.Layer):
    """Runs a layer in inference mode whatever the caller's mode (a frozen encoder: no dropout).

    A functional graph does not keep `training=False` given at construction;
    the outer call's mode wins. This wrapper is built anew by its model and
    never serialized on its own.

    Args:
        layer: the layer to run with `training=False`.
        **kwargs: passed to `keras.layers.Layer`.

    Example:

    >>> encoder.trainable = False
    >>> encoded = InferenceMode(encoder, name="frozen_encoder")(inputs)
    """

    def __init__(self, layer, **kwargs):
        super().__init__(**kwargs)
        self.layer = layer

    def call(self, inputs):
        return self.layer(inputs, training=False)

    def compute_output_spec(self, inputs):
        return self.layer.compute_output_spec(inputs)


class TaskModel(keras.Model):
    """A functional model wrapping an encoder of any architecture; shared config and loading logic.

    The base of the task heads (`BertClassifier`, `BertTokenClassifier`, ...)
    and of the pre-trainers. Subclasses build their head in `__init__`, call
    `super().__init__(inputs=..., outputs=...)`, set `self.encoder` and list
    their own constructor arguments in `_config_keys`. The encoder is
    serialized whole, so `.keras` files and `from_config` never rebuild it
    from gin or from a directory. The base itself is never serialized (only
    its registered subclasses are), so its name is in no saved file.

    Example:

    >>> class Scorer(TaskModel):
    ...     def __init__(self, encoder, **kwargs):
    ...         self.encoder = encoder
    ...         inputs = self._encoder_inputs()
    ...         self._build_output_head(encoder, num_classes=1, dropout=0.1)
    ...         pooled = encoder(inputs)["pooled_output"]
    ...         super().__init__(inputs=inputs, outputs=self._output_head(pooled), **kwargs)
    """

    _config_keys: tuple[str, ...] = ()

    @staticmethod
    def _encoder_inputs() -> dict:
        return {
            "token_ids": keras.Input(shape=(None,), dtype="int32", name="token_ids"),
            "segment_ids": keras.Input(shape=(None,), dtype="int32", name="segment_ids"),
            "padding_mask": keras.Input(shape=(None,), dtype="int32", name="padding_mask"),
        }

    def _build_output_head(self, encoder, num_classes: int, dropout: float) -> None:
        """Creates the dropout + dense + float32 output layers of a classification head."""
        self.output_dropout = keras.layers.Dropout(
            dropout, dtype=encoder.dtype_policy, name="output_dropout"
        )
        self.output_dense = keras.layers.Dense(
            num_classes,
            kernel_initializer=truncated_normal(getattr(encoder, "initializer_range", 0.02)),
            dtype=encoder.dtype_policy,
            name="logits",
        )
        self.output_float32 = keras.layers.Activation("linear", dtype="float32", name="outputs")

    def _output_head(self, features, training=None):
        # Logits in float32 even under mixed precision, so losses are computed in full precision.
        return self.output_float32(self.output_dense(self.output_dropout(features,
                                                                         training=training)))

    def get_config(self):
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "encoder": keras.saving.serialize_keras_object(self.encoder),
        }
        config.update({key: getattr(self, key) for key in self._config_keys})
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("encoder"), dict):
            config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)
