"""Token classification (NER): a label per word, predicted at its first wordpiece."""

from __future__ import annotations

import keras
import tensorflow as tf

from kbert.layers.crf import LinearChainCrf
from kbert.layers.layer_mix import EncoderLayerMix
from kbert.layers.crf import compact
from kbert.models.task_model import TaskModel
from kbert.models.task_model import InferenceMode


@keras.saving.register_keras_serializable(package="kbert")
class BertTokenClassifier(TaskModel):
    """Encoder + dropout + dense layer over every position of the sequence output.

    The model scores every wordpiece; training and prediction use only the
    first wordpiece of each word (the data gives those positions weight 1 and
    every other position weight 0), as in the BERT paper's NER setup.

    Args:
        encoder: `kbert.models.BertEncoder`.
        num_classes: int. Number of tags.
        dropout: float. Dropout before the output layer. Defaults to 0.1.
        crf: bool. Puts a linear-chain CRF (`kbert.layers.LinearChainCrf`) on
            the per-word scores: "auto" training maximises the log-likelihood
            of each sentence's tag sequence over its words (the positions of
            weight 1), and `decode` finds the best sequence with Viterbi. The
            model's output stays the per-position scores. Defaults to False.
        crf_allowed_starts: list of bools or None. Tags a sentence may start
            with (`kbert.layers.tag_transitions`). None allows all.
        crf_allowed_transitions: `[from][to]` list of lists of bools or None.
        crf_allowed_ends: list of bools or None. Tags a sentence may end with
            (IOBES's `E-`, `S-`, `O`). None allows all.
        crf_learning_rate_multiplier: float. The CRF's scores learn this many
            times faster than the rest. Defaults to 1.
        features: str or None. None: the head reads `sequence_output`. A mode
            of `kbert.layers.EncoderLayerMix` (`last`, `sum_last_4`,
            `concat_last_4`, `weighted`): the head reads that mix of the
            blocks' outputs (the encoder must output `encoder_outputs`:
            `encoder.with_all_layers()`). Defaults to None.
        freeze_encoder: bool. The encoder's weights stay fixed and it runs in
            inference mode (no dropout): the BERT paper's feature-based use.
            Defaults to False.
        **kwargs: other keyword arguments passed to `keras.Model`.

    Example:

    >>> tagger = kbert.models.BertTokenClassifier(
    ...     kbert.checkpoints.load_encoder("minilm/"), num_classes=9)
    >>> tagger.compile(optimizer=keras.optimizers.AdamW(5e-5))
    >>> logits = tagger.predict(features)  # [batch, sequence, 9]
    >>> tags = tagger.decode(logits, features["weight"])  # Viterbi with crf=True
    """

    _config_keys = ("num_classes", "dropout", "crf", "crf_allowed_starts",
                    "crf_allowed_transitions", "crf_learning_rate_multiplier", "features",
                    "freeze_encoder", "crf_allowed_ends")

    def __init__(self, encoder, num_classes: int, dropout: float = 0.1, crf: bool = False,
                 crf_allowed_starts=None, crf_allowed_transitions=None,
                 crf_learning_rate_multiplier: float = 1.0, features: str | None = None,
                 freeze_encoder: bool = False, crf_allowed_ends=None, **kwargs):
        if features is not None and not getattr(encoder, "output_all_layers", False):
            raise ValueError(f"features={features!r} mixes the encoder's layers, but the encoder "
                             "does not output them; pass encoder.with_all_layers().")
        self.encoder = encoder
        self.layer_mix = None if features is None else EncoderLayerMix(
            features, dtype=encoder.dtype_policy, name="layer_mix")
        self._build_output_head(encoder, num_classes, dropout)
        self.crf_layer = (LinearChainCrf(num_classes, crf_allowed_starts, crf_allowed_transitions,
                                         crf_learning_rate_multiplier, crf_allowed_ends,
                                         dtype="float32", name="crf")
                          if crf else None)

        inputs = self._encoder_inputs()
        if freeze_encoder:
            encoder.trainable = False
        encoded = (InferenceMode(encoder, name="frozen_encoder")(inputs) if freeze_encoder
                   else encoder(inputs))
        sequence = (encoded["sequence_output"] if self.layer_mix is None
                    else self.layer_mix(encoded["encoder_outputs"]))
        outputs = self._output_head(sequence)
        if self.crf_layer is not None:
            outputs = self.crf_layer(outputs)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        self.num_classes = num_classes
        self.dropout = dropout
        self.crf = bool(crf)
        self.crf_allowed_starts = self.crf_layer.allowed_starts if crf else None
        self.crf_allowed_transitions = self.crf_layer.allowed_transitions if crf else None
        self.crf_allowed_ends = self.crf_layer.allowed_ends if crf else None
        self.crf_learning_rate_multiplier = float(crf_learning_rate_multiplier)
        self.features = features
        self.freeze_encoder = bool(freeze_encoder)
        self._crf_loss = False

    def decode(self, logits, keep) -> tf.Tensor:
        """The best tag of each position: Viterbi over each row's kept positions with a CRF.

        Args:
            logits: float `[batch, time, num_classes]`, the model's output.
            keep: `[batch, time]` bool or 0/1: the positions that form the tag
                sequence (each word's first wordpiece).

        Returns:
            int32 `[batch, time]`: on kept positions the CRF's best sequence
            (the argmax without a CRF); elsewhere the argmax.
        """
        best = tf.argmax(logits, axis=-1, output_type=tf.int32)
        if self.crf_layer is None:
            return best
        keep = tf.cast(keep, tf.bool)
        order = tf.argsort(1 - tf.cast(keep, tf.int32), axis=1, stable=True)
        compacted, lengths = compact(logits, keep)
        tags = tf.gather(self.crf_layer.decode(compacted, lengths), tf.argsort(order, axis=1),
                         batch_dims=1)
        return tf.where(keep, tags, best)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The CRF's mean negative log-likelihood when compiled with the "auto" CRF loss."""
        if not self._crf_loss:
            return super().compute_loss(x, y, y_pred, sample_weight, training)
        # Without weights every real position is in the sequence.
        keep = (x["padding_mask"] if sample_weight is None else sample_weight) > 0
        emissions, lengths = compact(y_pred, keep)
        tags, _ = compact(y, keep)
        loss = -tf.reduce_mean(self.crf_layer.log_likelihood(emissions, tags, lengths))
        if self.losses:
            loss += tf.add_n(self.losses)
        return loss

    def compile(self, optimizer="auto", loss="auto", *, weighted_metrics="auto", **kwargs):
        """Configures training; "auto" picks AdamW(5e-5), cross-entropy and accuracy.

        Pass the first-wordpiece weights as `sample_weight` so other positions
        count for neither loss nor accuracy. With `crf=True`, "auto" loss is
        the CRF's negative log-likelihood of each row's tags at the positions
        of weight > 0, averaged over rows.

        Args:
            optimizer: optimizer or "auto".
            loss: loss or "auto".
            weighted_metrics: metrics or "auto" (token accuracy).
            **kwargs: passed to `keras.Model.compile`.
        """
        if optimizer == "auto":
            optimizer = keras.optimizers.AdamW(5e-5, weight_decay=0.01, epsilon=1e-6)
        self._crf_loss = self.crf_layer is not None and loss == "auto"
        if self._crf_loss:
            loss = None
        elif loss == "auto":
            loss = keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction="mean_with_sample_weight"
            )
        if weighted_metrics == "auto":
            weighted_metrics = [keras.metrics.SparseCategoricalAccuracy("accuracy")]
        super().compile(optimizer=optimizer, loss=loss, weighted_metrics=weighted_metrics, **kwargs)
