"""Sentence and sentence-pair classification or regression on the pooled output."""

from __future__ import annotations

import keras

from kbert.layers.layer_mix import EncoderLayerMix
from kbert.models.task_model import TaskModel
from kbert.models.task_model import InferenceMode
from kbert.models.packed_rows import PackedRows
from kbert.models.packed_rows import select_encoder_inputs


@keras.saving.register_keras_serializable(package="kbert")
class BertClassifier(PackedRows, TaskModel):
    """Encoder + dropout + dense layer on the pooled `[CLS]` output.

    With `num_classes >= 2` it outputs class logits and `compile()` defaults to
    sparse categorical cross-entropy and accuracy; with `num_classes=1` it is a
    regressor (STS-B) outputting a score of shape `[batch, 1]` with mean squared
    error. Outputs are float32 under mixed precision.

    Packed rows (`classification_dataset(..., packing=...)`, training only):
    with `instance_ids`, `position_ids` (see `BertEncoder`) and `cls_positions`
    `[batch, instances]` among the inputs, each instance's `[CLS]` goes
    through the pooler and the head, giving `[batch, instances, classes]`
    (the same layers as unpacked rows, through `_forward`; see
    `kbert.models.packed_rows.PackedRows`).

    Feature-based use (the BERT paper, 5.3): `freeze_encoder=True` keeps the
    encoder's weights fixed (and runs it without dropout), so only the head
    learns; `features` makes the head read a mix of the encoder's layers at
    `[CLS]` instead of the pooled output.

    Args:
        encoder: `kbert.models.BertEncoder` (`with_all_layers()` when
            `features` is set).
        num_classes: int. Number of classes, or 1 for regression.
        dropout: float. Dropout before the output layer. Defaults to 0.1.
        features: str or None. None: the head reads `pooled_output`. Else a
            mode of `kbert.layers.EncoderLayerMix` (`last`, `sum_last_4`,
            `concat_last_4`, `weighted`) applied to the blocks' `[CLS]` vectors.
        freeze_encoder: bool. Train the head only. Defaults to False.
        **kwargs: other keyword arguments passed to `keras.Model`.

    Example:

    >>> classifier = kbert.models.BertClassifier(
    ...     kbert.checkpoints.load_encoder("minilm/"), num_classes=2)
    >>> classifier.compile(optimizer=keras.optimizers.AdamW(2e-5))
    >>> classifier.fit(dataset, epochs=3)
    """

    _config_keys = ("num_classes", "dropout", "features", "freeze_encoder")

    def __init__(self, encoder, num_classes: int, dropout: float = 0.1,
                 features: str | None = None, freeze_encoder: bool = False, **kwargs):
        if num_classes < 1:
            raise ValueError(f"`num_classes` must be >= 1 (1 means regression), got {num_classes}.")
        if features is not None and not getattr(encoder, "output_all_layers", False):
            raise ValueError(f"features={features!r} mixes the encoder's layers, but the encoder "
                             "does not output them; pass encoder.with_all_layers().")
        self.encoder = encoder
        self.layer_mix = None if features is None else EncoderLayerMix(
            features, dtype=encoder.dtype_policy, name="layer_mix")
        self._build_output_head(encoder, num_classes, dropout)

        inputs = self._encoder_inputs()
        if freeze_encoder:
            encoder.trainable = False
        encoded = (InferenceMode(encoder, name="frozen_encoder")(inputs) if freeze_encoder
                   else encoder(inputs))
        outputs = self._head(encoded)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        self.num_classes = num_classes
        self.dropout = dropout
        self.features = features
        self.freeze_encoder = bool(freeze_encoder)

    def _head(self, encoded: dict, training=None):
        """The encoder's outputs -> logits: the pooled output, or the layer mix at `[CLS]`."""
        if self.layer_mix is None:
            sentence = encoded["pooled_output"]
        else:  # each block's [CLS] vector, mixed ([batch, 1, hidden]: the mix is per position)
            cls_vectors = [layer[:, :1] for layer in encoded["encoder_outputs"]]
            sentence = self.layer_mix(cls_vectors)[:, 0]
        return self._output_head(sentence, training=training)

    def _forward(self, inputs, training=None):
        """Packed rows: the encoder pools each instance's `[CLS]`, then the same head."""
        if self.freeze_encoder or self.features is not None:
            raise ValueError("packed rows (PackingConfig) train the whole encoder on the "
                             "pooled output; they do not combine with freeze_encoder or "
                             "features: drop run_finetuning.packing.")
        return self._head(self.encoder(select_encoder_inputs(inputs), training=training),
                          training=training)

    def compile(self, optimizer="auto", loss="auto", *, metrics="auto", **kwargs):
        """Configures training; "auto" picks AdamW(2e-5) and the task's loss and metric.

        Args:
            optimizer: optimizer or "auto".
            loss: loss or "auto" (cross-entropy from logits; MSE when regressing).
            metrics: metrics or "auto" (accuracy; none when regressing).
            **kwargs: passed to `keras.Model.compile`.
        """
        regression = self.num_classes == 1
        if optimizer == "auto":
            optimizer = keras.optimizers.AdamW(2e-5, weight_decay=0.01, epsilon=1e-6)
        if loss == "auto":
            # Weighted mean: packed rows weight their empty instance slots 0
            # (unpacked batches have no weights: the plain mean, as before).
            loss = (
                keras.losses.MeanSquaredError(reduction="mean_with_sample_weight")
                if regression
                else keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True, reduction="mean_with_sample_weight")
            )
        if metrics == "auto":
            metrics = None if regression else [keras.metrics.SparseCategoricalAccuracy("accuracy")]
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)
