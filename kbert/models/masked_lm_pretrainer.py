"""`MaskedLMPretrainer`: the masked-LM objective (and optional NSP), once, for every MLM pre-trainer."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from kbert.layers import sparse_softmax_cross_entropy_and_hits
from kbert.models.encoder import Encoder
from kbert.models.packed_rows import PackedRows
from kbert.models.packed_rows import select_encoder_inputs
from kbert.models.task_model import TaskModel


class MaskedLMPretrainer(PackedRows, TaskModel):
    """An encoder, a masked-LM head and an optional next-sentence head, with their objective.

    What every masked-LM pre-trainer shares, whatever the architecture: the
    functional model (the encoder's three inputs plus `mask_positions`;
    outputs `mlm`, float32 logits at the masked positions, and `nsp` when
    there is an NSP head), packed rows through one `_forward`
    (`kbert.models.packed_rows.PackedRows`), `compile()` with the
    pre-training losses and metrics, and the `kbert.models.Pretrainer`
    contract `kbert.training.run_pretraining` trains through
    (`loss_normalizers`, `pretraining_losses`, `pretraining_metrics`).
    Each architecture's pre-trainer is a registered subclass that builds its
    own heads and hands them here: `kbert.models.BertPretrainer` (BERT's
    masked-LM head and NSP) and `kbert.models.ModernBertPretrainer`
    (ModernBERT's head, no NSP).

    `compile()` with no arguments sets the pre-training losses and metrics: MLM
    cross-entropy averaged over the masked positions' weights (the
    `masked_lm_weights` of the data, passed as `sample_weight["mlm"]`), NSP
    cross-entropy, and `masked_lm_accuracy` / `next_sentence_accuracy`. Train it
    on `kbert.data.pretraining_dataset(...)`, which yields
    `(features, labels, sample_weights)` in the layout the model expects.

    Packed rows (`pretraining_dataset(..., packing=...)`): the features also
    hold `instance_ids`, `position_ids` (see `BertEncoder`) and
    `cls_positions` `[batch, instances]`, each instance's `[CLS]`; the NSP
    head reads each instance's own `[CLS]` through the encoder's pooler, and
    `nsp` is `[batch, instances, 2]`. `mask_positions` index the packed row.

    Args:
        encoder: a `kbert.models.Encoder`.
        masked_lm_head: a layer called as `head(sequence_output,
            mask_positions=...)` giving vocabulary logits at those positions
            (a `kbert.layers.FastMaskedLMHead`), named `masked_lm_head`.
        next_sentence_head: a layer mapping the pooled output to two logits
            (`kbert.layers.NextSentenceHead`), or None for MLM-only
            pre-training. Defaults to None.
        **kwargs: other keyword arguments passed to `keras.Model`, such as `name`.

    Example:

    >>> class MyPretrainer(MaskedLMPretrainer):
    ...     def __init__(self, encoder, **kwargs):
    ...         head = kbert.layers.BertMaskedLMHead(
    ...             token_embedding=encoder.token_embedding, name="masked_lm_head")
    ...         super().__init__(encoder, head, **kwargs)
    >>> pretrainer = MyPretrainer(encoder)
    >>> pretrainer.compile(optimizer=keras.optimizers.AdamW(1e-4))
    """

    # Metrics of `pretraining_metrics` on the progress line, with their labels.
    progress_labels = {"masked_lm_accuracy": "mlm_acc"}

    def __init__(self, encoder: Encoder, masked_lm_head: keras.layers.Layer,
                 next_sentence_head: keras.layers.Layer | None = None, **kwargs):
        # === Layers ===
        self.encoder = encoder
        self.masked_lm_head = masked_lm_head
        self.masked_lm_logits = keras.layers.Activation(
            "linear", dtype="float32", name="masked_lm_logits"
        )
        self.next_sentence_head = next_sentence_head

        # === Functional model ===
        inputs = self._encoder_inputs()
        inputs["mask_positions"] = keras.Input(shape=(None,), dtype="int32", name="mask_positions")
        super().__init__(inputs=inputs, outputs=self._forward(inputs), **kwargs)

        # === Config ===
        # Whether the data must carry NSP labels (`kbert.models.Pretrainer`).
        self.next_sentence = next_sentence_head is not None

    def _forward(self, inputs, training=None):
        """The encoder and heads: the functional graph, and packed rows (NSP per `cls_positions`)."""
        encoded = self.encoder(select_encoder_inputs(inputs), training=training)
        outputs = {"mlm": self.masked_lm_logits(self.masked_lm_head(
            encoded["sequence_output"], mask_positions=inputs["mask_positions"]))}
        if self.next_sentence_head is not None:
            outputs["nsp"] = self.next_sentence_head(encoded["pooled_output"])
        return outputs

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        *,
        metrics="auto",
        weighted_metrics="auto",
        **kwargs,
    ):
        """Configures training; "auto" arguments get the pre-training defaults.

        Args:
            optimizer: optimizer or "auto" (AdamW, learning rate 1e-4, weight
                decay 0.01 except LayerNorm and biases, epsilon 1e-6, global
                norm clipping 1.0).
            loss: loss dict or "auto": the MLM cross-entropy averaged over the
                `masked_lm_weights` plus the NSP cross-entropy averaged over
                the NSP weights; `evaluate` and `fit` report them as
                `mlm_loss` and `nsp_loss`, each averaged over every masked
                position (every instance) of the data seen, exactly as
                `kbert-pretrain --eval_input_file` does.
            metrics: metrics or "auto" (none beyond the weighted ones).
            weighted_metrics: metrics or "auto" (`masked_lm_accuracy` weighted
                by `masked_lm_weights`, `next_sentence_accuracy` by the NSP
                weights; Keras reports them as `mlm_masked_lm_accuracy` and
                `nsp_next_sentence_accuracy`).
            **kwargs: passed to `keras.Model.compile`, such as
                `steps_per_execution` and `jit_compile`.
        """
        if optimizer == "auto":
            optimizer = keras.optimizers.AdamW(
                learning_rate=1e-4, weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0
            )
            optimizer.exclude_from_weight_decay(var_names=["layer_norm", "bias"])
        # "auto": `compute_loss` computes the losses itself, weighted by the data's
        # `masked_lm_weights` (and NSP weights), and tracks `mlm_loss` / `nsp_loss`
        # as sums over every evaluated position: Keras' per-output loss trackers
        # average per-batch means, which is not the loss of the data.
        self._pretraining_loss = loss == "auto"
        if self._pretraining_loss:
            loss = None
            self.mlm_loss_tracker = keras.metrics.Mean(name="mlm_loss")
            if self.next_sentence:
                self.nsp_loss_tracker = keras.metrics.Mean(name="nsp_loss")
        if metrics == "auto":
            metrics = None
        if weighted_metrics == "auto":
            weighted_metrics = {
                "mlm": [keras.metrics.SparseCategoricalAccuracy(name="masked_lm_accuracy")]
            }
            if self.next_sentence:
                # Weighted: packed rows carry empty NSP slots of weight 0.
                weighted_metrics["nsp"] = [
                    keras.metrics.SparseCategoricalAccuracy(name="next_sentence_accuracy")]
        super().compile(
            optimizer=optimizer,
            loss=loss,
            metrics=metrics,
            weighted_metrics=weighted_metrics,
            **kwargs,
        )

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The pre-training loss when compiled with `loss="auto"`; tracks `mlm_loss` and `nsp_loss`.

        Each loss is this batch's weighted mean, as in `pretraining_losses`.
        The trackers are weighted `keras.metrics.Mean`s of the per-position
        cross-entropies, so an epoch's `mlm_loss` is the mean over all its
        masked positions (`masked_lm_weights`), not a mean of per-batch means.
        """
        if not getattr(self, "_pretraining_loss", False):
            return super().compute_loss(x, y, y_pred, sample_weight, training)
        weights = _ones_if_none(sample_weight, "mlm", y["mlm"])
        mlm_losses = keras.losses.sparse_categorical_crossentropy(
            y["mlm"], y_pred["mlm"], from_logits=True)
        loss = tf.math.divide_no_nan(tf.reduce_sum(mlm_losses * weights), tf.reduce_sum(weights))
        self.mlm_loss_tracker.update_state(mlm_losses, sample_weight=weights)
        if self.next_sentence:
            nsp_labels = tf.reshape(y["nsp"], [-1])
            nsp_weights = tf.reshape(_ones_if_none(sample_weight, "nsp", nsp_labels), [-1])
            nsp_losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
                nsp_labels, tf.reshape(y_pred["nsp"], [-1, 2]))
            loss += tf.math.divide_no_nan(tf.reduce_sum(nsp_losses * nsp_weights),
                                          tf.reduce_sum(nsp_weights))
            self.nsp_loss_tracker.update_state(nsp_losses, sample_weight=nsp_weights)
        if self.losses:
            loss += tf.add_n(self.losses)
        # Keras sums the replicas' gradients: each replica contributes its share.
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            loss /= context.num_replicas_in_sync
        return loss

    def loss_normalizers(self, features, labels, sample_weights) -> dict[str, tf.Tensor]:
        """This batch's part of what the losses are averaged over.

        The training loop sums these over every micro-batch and replica of an
        optimizer step before calling `pretraining_losses`, so the MLM loss is
        averaged over the masked positions of the whole global batch (padded
        prediction slots, weight 0, not diluting it) and the NSP loss over its
        instances (one per row, or the filled slots of packed rows), and two
        replicas give the same loss as one.

        Args:
            features: dict of Tensors: the model's inputs.
            labels: dict of Tensors: `mlm` (and `nsp`).
            sample_weights: dict of Tensors: `mlm` (and `nsp`: 1 per instance,
                0 for the empty instance slots of packed rows).

        Returns:
            A dict of float32 scalars: `mlm_weight` and, with NSP, `nsp_weight`.
        """
        normalizers = {"mlm_weight": tf.reduce_sum(sample_weights["mlm"])}
        if self.next_sentence:
            normalizers["nsp_weight"] = tf.reduce_sum(_nsp_weights(labels, sample_weights))
        return normalizers

    def pretraining_losses(self, features, labels, sample_weights, totals,
                           training: bool = True) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """Runs the model and returns this batch's share of the loss, and its statistics.

        The MLM cross-entropy is summed over the masked positions (times their
        weights) and divided by `totals["mlm_weight"]`; the NSP cross-entropy
        is summed over the instances (times their weights) and divided by
        `totals["nsp_weight"]`, so the
        shares of all micro-batches and replicas add up to the global-batch
        mean. The cross-entropy is kbert's fused one
        (`kbert.layers.sparse_softmax_cross_entropy_and_hits`).

        Args:
            features: dict of Tensors: the model's inputs.
            labels: dict of Tensors: `mlm` (and `nsp`).
            sample_weights: dict of Tensors: `mlm` (and `nsp`).
            totals: dict of float32 scalars: `loss_normalizers` summed over the
                global batch.
            training: bool. Whether dropout is on. Defaults to True.

        Returns:
            `(loss, statistics)`: the float32 scalar loss, and a dict of float32
            sums that `pretraining_metrics` turns into metrics: `mlm_loss`,
            `mlm_correct` (and `nsp_correct`).

        Example:

        >>> totals = pretrainer.loss_normalizers(features, labels, weights)
        >>> loss, statistics = pretrainer.pretraining_losses(features, labels, weights, totals)
        """
        outputs = self(features, training=training)
        mlm_losses, mlm_hits = sparse_softmax_cross_entropy_and_hits(labels["mlm"], outputs["mlm"])
        mlm_loss = tf.reduce_sum(mlm_losses * sample_weights["mlm"])
        loss = tf.math.divide_no_nan(mlm_loss, totals["mlm_weight"])
        statistics = {"mlm_loss": mlm_loss,
                      "mlm_correct": tf.reduce_sum(mlm_hits * sample_weights["mlm"])}
        if self.next_sentence:
            # Packed rows give `[batch, instances]` labels and `[batch, instances, 2]` logits.
            nsp_labels = tf.reshape(labels["nsp"], [-1])
            nsp_weights = tf.reshape(_nsp_weights(labels, sample_weights), [-1])
            nsp_logits = tf.reshape(outputs["nsp"], [-1, 2])
            nsp_losses = tf.nn.sparse_softmax_cross_entropy_with_logits(nsp_labels, nsp_logits)
            nsp_loss = tf.reduce_sum(nsp_losses * nsp_weights)
            loss += tf.math.divide_no_nan(nsp_loss, totals["nsp_weight"])
            statistics["nsp_loss"] = nsp_loss
            predicted = tf.argmax(nsp_logits, axis=-1, output_type=tf.int32)
            statistics["nsp_correct"] = tf.reduce_sum(
                tf.cast(tf.equal(predicted, nsp_labels), tf.float32) * nsp_weights)
        return loss, statistics

    def pretraining_metrics(self, sums: dict[str, np.ndarray]) -> dict[str, float | None]:
        """Turns summed normalizers and statistics into the metrics training reports.

        Args:
            sums: dict of numpy values: `loss_normalizers` and
                `pretraining_losses` statistics, each summed over the steps
                of a reporting interval.

        Returns:
            `masked_lm_accuracy`, `masked_lm_loss`, `next_sentence_accuracy`
            and `next_sentence_loss` (the last two None without the NSP head).
        """
        weight = max(float(sums["mlm_weight"]), 1e-9)
        nsp_weight = max(float(sums["nsp_weight"]), 1e-9) if self.next_sentence else None
        return {
            "masked_lm_accuracy": float(sums["mlm_correct"]) / weight,
            "masked_lm_loss": float(sums["mlm_loss"]) / weight,
            "next_sentence_accuracy": (float(sums["nsp_correct"]) / nsp_weight
                                       if self.next_sentence else None),
            "next_sentence_loss": (float(sums["nsp_loss"]) / nsp_weight
                                   if self.next_sentence else None),
        }


def _ones_if_none(sample_weight, key: str, like: tf.Tensor) -> tf.Tensor:
    """`sample_weight[key]` as float32, or ones shaped like `like` when not given."""
    if sample_weight is None or (isinstance(sample_weight, dict) and key not in sample_weight):
        return tf.ones_like(like, tf.float32)
    return tf.reshape(tf.cast(sample_weight[key], tf.float32), tf.shape(like))


def _nsp_weights(labels, sample_weights) -> tf.Tensor:
    """The NSP instances' weights: the data's `nsp` weights, or 1 per label without them."""
    if "nsp" in sample_weights:
        return tf.cast(sample_weights["nsp"], tf.float32)
    return tf.ones_like(labels["nsp"], tf.float32)
