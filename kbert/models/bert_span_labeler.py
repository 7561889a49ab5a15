"""Extractive question answering: start and end logits over the sequence."""

from __future__ import annotations

import keras

from kbert.models.initializers import truncated_normal
from kbert.models.task_model import TaskModel


@keras.saving.register_keras_serializable(package="kbert")
class BertSpanLabeler(TaskModel):
    """Encoder + a dense layer to two logits per position: answer start and end.

    Positions outside the input (padding) get a large negative logit so they are
    never chosen. The `[CLS]` position (index 0) stands for "no answer" in
    SQuAD 2.0 training, as in `run_squad.py`.

    Args:
        encoder: `kbert.models.BertEncoder`.
        **kwargs: other keyword arguments passed to `keras.Model`.

    Example:

    >>> qa = kbert.models.BertSpanLabeler(kbert.checkpoints.load_encoder("minilm/"))
    >>> qa.compile(optimizer=keras.optimizers.AdamW(3e-5))
    >>> outputs = qa.predict(features)  # {"start_logits", "end_logits"}
    """

    def __init__(self, encoder, **kwargs):
        self.encoder = encoder
        self.span_dense = keras.layers.Dense(
            2,
            kernel_initializer=truncated_normal(getattr(encoder, "initializer_range", 0.02)),
            dtype=encoder.dtype_policy,
            name="span_logits",
        )

        inputs = self._encoder_inputs()
        logits = keras.ops.cast(self.span_dense(encoder(inputs)["sequence_output"]), "float32")
        padding = keras.ops.cast(keras.ops.equal(inputs["padding_mask"], 0), "float32")
        start_logits = keras.layers.Activation("linear", dtype="float32", name="start_logits")(
            logits[..., 0] - 1e9 * padding
        )
        end_logits = keras.layers.Activation("linear", dtype="float32", name="end_logits")(
            logits[..., 1] - 1e9 * padding
        )
        super().__init__(
            inputs=inputs,
            outputs={"start_logits": start_logits, "end_logits": end_logits},
            **kwargs,
        )

    def compile(self, optimizer="auto", loss="auto", **kwargs):
        """Configures training; "auto" picks AdamW(3e-5) and start/end cross-entropy.

        Labels are `{"start_logits": start_positions, "end_logits": end_positions}`.

        Args:
            optimizer: optimizer or "auto".
            loss: loss or "auto".
            **kwargs: passed to `keras.Model.compile`.
        """
        if optimizer == "auto":
            optimizer = keras.optimizers.AdamW(3e-5, weight_decay=0.01, epsilon=1e-6)
        if loss == "auto":
            loss = {
                "start_logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                "end_logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            }
        super().compile(optimizer=optimizer, loss=loss, **kwargs)
