"""ELECTRA pre-training model: a small masked-LM generator and a replaced-token discriminator."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from kbert.layers import BertMaskedLMHead
from kbert.layers import ReplacedTokenDetectionHead
from kbert.layers import ReplacedTokenSampler
from kbert.layers import get_activation
from kbert.layers import sparse_softmax_cross_entropy_and_hits
from kbert.models.initializers import truncated_normal
from kbert.models.task_model import TaskModel
from kbert.models.encoder import Encoder
from kbert.models.packed_rows import PackedRows
from kbert.models.packed_rows import select_encoder_inputs

# Buckets of the discriminator's probabilities for the streaming AUC (the
# 200 thresholds of google-research/electra's `tf.metrics.auc`).
AUC_BUCKETS = 200


@keras.saving.register_keras_serializable(package="kbert")
class ElectraPretrainer(PackedRows, TaskModel):
    """Replaced-token detection: ELECTRA pre-training of an encoder, the discriminator.

    A small generator (a masked LM) predicts the masked tokens; a token is
    sampled from its distribution at every masked position
    (`kbert.layers.ReplacedTokenSampler`, Gumbel-max at `temperature`), and the
    discriminator, the `encoder` passed in, reads the corrupted sequence and
    predicts for every token whether it was replaced
    (`kbert.layers.ReplacedTokenDetectionHead`). The loss is
    `generator_weight x MLM cross-entropy + discriminator_weight x the
    discriminator's sigmoid cross-entropy over all non-padding tokens`, as in
    the paper and google-research/electra (1 and 50). Sampling stops the
    gradient, so the generator learns from the MLM loss only.

    The generator is built here from the discriminator's sizes, as
    google-research/electra's `get_generator_config` does: hidden size
    `round(generator_hidden_size x hidden_dim)`, `round(generator_layers x
    num_layers)` layers, one attention head per 64 dimensions and a 4x
    feed-forward. It shares the discriminator's token, position and segment
    embeddings and embedding LayerNorm (the same variables, as the paper's
    "we only share the embeddings"), projecting them to its own width; its
    masked-LM head is tied to the shared token embedding. Give the encoder an
    `embedding_dim` (ELECTRA-Small: 128 with hidden 256) to keep the shared
    embeddings narrow.

    Only the discriminator is the pre-trained model: `kbert-pretrain` saves
    `encoder` as the pre-trained directory that fine-tuning and export read.
    It trains on the data `BertPretrainer` reads (static or dynamic masking:
    `features` with the masked `token_ids` and `mask_positions`, labels `mlm`
    with the original tokens, weights `mlm`); NSP labels, if present, are
    not used. Packed rows (`pretraining_dataset(..., packing=...)`, with
    `instance_ids` and `position_ids`, see `BertEncoder`) go through both
    encoders with each instance kept to itself, by the same method, `_forward`,
    that builds the functional graph (`kbert.models.packed_rows.PackedRows`).

    The generator is of the discriminator's class (its `get_config()` with
    the generator's sizes), so any `kbert.models.Encoder` that takes
    `embedding_dim` and `shared_embeddings` can be pre-trained this way.

    Args:
        encoder: `kbert.models.BertEncoder` or another `kbert.models.Encoder`.
            The discriminator.
        generator_hidden_size: float. The generator's width as a fraction of
            the discriminator's; above 1 is an error. Defaults to 0.25
            (ELECTRA-Small; Base and Large use 1/3).
        generator_layers: float. The generator's depth as a fraction of the
            discriminator's. Defaults to 1.0.
        generator_weight: float. Weight of the MLM loss. Defaults to 1.0.
        discriminator_weight: float. Weight of the replaced-token-detection
            loss (lambda in the paper). Defaults to 50.0.
        temperature: float. Sampling temperature. Defaults to 1.0.
        **kwargs: other keyword arguments passed to `keras.Model`, such as `name`.

    Example:

    >>> discriminator = kbert.models.BertEncoder(
    ...     vocabulary_size=30522, num_layers=12, num_heads=4, hidden_dim=256,
    ...     intermediate_dim=1024, max_sequence_length=512, embedding_dim=128)
    >>> pretrainer = kbert.models.ElectraPretrainer(discriminator)
    >>> pretrainer.generator.hidden_dim
    64

    Reference:
        - [Clark et al., 2020](https://arxiv.org/abs/2003.10555)
    """

    _config_keys = ("generator_hidden_size", "generator_layers", "generator_weight",
                    "discriminator_weight", "temperature")
    # Metrics of `pretraining_metrics` on the progress line, with their labels.
    progress_labels = {
        "masked_lm_loss": "mlm_loss", "masked_lm_accuracy": "mlm_acc",
        "discriminator_loss": "disc_loss", "discriminator_accuracy": "disc_acc",
        "discriminator_auc": "disc_auc",
    }

    def __init__(
        self,
        encoder: Encoder,
        generator_hidden_size: float = 0.25,
        generator_layers: float = 1.0,
        generator_weight: float = 1.0,
        discriminator_weight: float = 50.0,
        temperature: float = 1.0,
        **kwargs,
    ):
        # === Layers ===
        self.encoder = encoder
        self.generator = _build_generator(encoder, generator_hidden_size, generator_layers)
        initializer = truncated_normal(encoder.initializer_range)
        self.masked_lm_head = BertMaskedLMHead(
            token_embedding=encoder.token_embedding,
            intermediate_activation=get_activation(encoder.activation),
            layer_norm_epsilon=encoder.layer_norm_epsilon,
            kernel_initializer=initializer,
            dtype=encoder.dtype_policy,
            name="generator_masked_lm_head",
        )
        self.masked_lm_logits = keras.layers.Activation(
            "linear", dtype="float32", name="masked_lm_logits"
        )
        self.sampler = ReplacedTokenSampler(temperature=temperature, name="sampler")
        self.replaced_token_head = ReplacedTokenDetectionHead(
            activation=encoder.activation, kernel_initializer=initializer,
            dtype=encoder.dtype_policy, name="replaced_token_head",
        )

        # === Functional model ===
        inputs = self._encoder_inputs()
        inputs["mask_positions"] = keras.Input(shape=(None,), dtype="int32", name="mask_positions")
        inputs["mask_labels"] = keras.Input(shape=(None,), dtype="int32", name="mask_labels")
        inputs["mask_weights"] = keras.Input(shape=(None,), dtype="float32", name="mask_weights")
        super().__init__(inputs=inputs, outputs=self._forward(inputs), **kwargs)

        # === Config ===
        self.generator_hidden_size = generator_hidden_size
        self.generator_layers = generator_layers
        self.generator_weight = generator_weight
        self.discriminator_weight = discriminator_weight
        self.temperature = temperature
        # The training loop and checks ask every pre-trainer; ELECTRA has no NSP.
        self.next_sentence = False

    def _forward(self, inputs, training=None):
        """Generator, sampling and discriminator: the functional graph, and packed rows."""
        encoder_inputs = select_encoder_inputs(inputs)
        generated = self.generator(encoder_inputs, training=training)
        mlm = self.masked_lm_logits(self.masked_lm_head(
            generated["sequence_output"], mask_positions=inputs["mask_positions"]))
        replaced_ids, rtd_labels = self.sampler(
            mlm, inputs["token_ids"], inputs["mask_positions"], inputs["mask_labels"],
            inputs["mask_weights"])
        discriminated = self.encoder({**encoder_inputs, "token_ids": replaced_ids},
                                     training=training)
        return {"mlm": mlm, "rtd": self.replaced_token_head(discriminated["sequence_output"]),
                "rtd_labels": rtd_labels, "replaced_ids": replaced_ids}

    def loss_normalizers(self, features, labels, sample_weights) -> dict[str, tf.Tensor]:
        """This batch's part of what the losses are averaged over.

        The training loop sums these over every micro-batch and replica of an
        optimizer step before calling `pretraining_losses`, so the MLM loss is
        averaged over the masked positions and the discriminator's over the
        non-padding tokens of the whole global batch.

        Args:
            features: dict of Tensors: `token_ids`, `segment_ids`,
                `padding_mask`, `mask_positions`.
            labels: dict of Tensors: `mlm`, the original tokens.
            sample_weights: dict of Tensors: `mlm`.

        Returns:
            A dict of float32 scalars: `mlm_weight` and `tokens`.
        """
        return {"mlm_weight": tf.reduce_sum(sample_weights["mlm"]),
                "tokens": tf.reduce_sum(tf.cast(features["padding_mask"], tf.float32))}

    def pretraining_losses(self, features, labels, sample_weights, totals,
                           training: bool = True) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """Runs generator, sampling and discriminator; returns this batch's loss share and statistics.

        Args:
            features: dict of Tensors: the masked input and `mask_positions`.
            labels: dict of Tensors: `mlm`, the original tokens at `mask_positions`.
            sample_weights: dict of Tensors: `mlm` (0 for padded slots).
            totals: dict of float32 scalars: `loss_normalizers` summed over the
                global batch.
            training: bool. Whether dropout is on. Defaults to True.

        Returns:
            `(loss, statistics)`: the float32 scalar loss, and float32 sums for
            `pretraining_metrics`: `mlm_loss`, `mlm_correct`, `rtd_loss`,
            `rtd_correct`, `replaced` and `rtd_histogram` (`[2, AUC_BUCKETS]`
            counts of replaced and original tokens by predicted probability).

        Example:

        >>> totals = pretrainer.loss_normalizers(features, labels, weights)
        >>> loss, statistics = pretrainer.pretraining_losses(features, labels, weights, totals)
        """
        weights = sample_weights["mlm"]
        outputs = self({**features, "mask_labels": labels["mlm"], "mask_weights": weights},
                       training=training)
        mlm_losses, mlm_hits = sparse_softmax_cross_entropy_and_hits(labels["mlm"], outputs["mlm"])
        mlm_loss = tf.reduce_sum(mlm_losses * weights)
        tokens = tf.cast(features["padding_mask"], tf.float32)
        rtd_labels = tf.cast(outputs["rtd_labels"], tf.float32)
        rtd_losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=rtd_labels, logits=outputs["rtd"])
        rtd_loss = tf.reduce_sum(rtd_losses * tokens)
        loss = (self.generator_weight * tf.math.divide_no_nan(mlm_loss, totals["mlm_weight"])
                + self.discriminator_weight * tf.math.divide_no_nan(rtd_loss, totals["tokens"]))
        predicted = tf.cast(outputs["rtd"] > 0, tf.float32)
        statistics = {
            "mlm_loss": mlm_loss,
            "mlm_correct": tf.reduce_sum(mlm_hits * weights),
            "rtd_loss": rtd_loss,
            "rtd_correct": tf.reduce_sum(tf.cast(tf.equal(predicted, rtd_labels), tf.float32)
                                         * tokens),
            "replaced": tf.reduce_sum(rtd_labels * tokens),
            "rtd_histogram": _probability_histogram(outputs["rtd"], rtd_labels, tokens),
        }
        return loss, statistics

    def pretraining_metrics(self, sums: dict[str, np.ndarray]) -> dict[str, float | None]:
        """Turns summed normalizers and statistics into the metrics training reports.

        Args:
            sums: dict of numpy values: `loss_normalizers` and
                `pretraining_losses` statistics, each summed over the steps
                of a reporting interval.

        Returns:
            `masked_lm_loss` and `masked_lm_accuracy` (the generator's),
            `discriminator_loss`, `discriminator_accuracy` and
            `discriminator_auc` (over the interval's tokens, streaming), and
            `replaced_fraction` (tokens the generator changed).
        """
        weight = max(float(sums["mlm_weight"]), 1e-9)
        tokens = max(float(sums["tokens"]), 1e-9)
        return {
            "masked_lm_loss": float(sums["mlm_loss"]) / weight,
            "masked_lm_accuracy": float(sums["mlm_correct"]) / weight,
            "discriminator_loss": float(sums["rtd_loss"]) / tokens,
            "discriminator_accuracy": float(sums["rtd_correct"]) / tokens,
            "discriminator_auc": auc_from_histogram(np.asarray(sums["rtd_histogram"])),
            "replaced_fraction": float(sums["replaced"]) / tokens,
        }


def _build_generator(encoder: Encoder, hidden_size: float, layers: float) -> Encoder:
    """The generator of `ElectraPretrainer`: the discriminator's class and config, its own sizes.

    It shares the discriminator's embeddings (`shared_embeddings`, at their width
    `embedding_dim`) and never outputs its layers or attention scores.
    """
    hidden_dim = int(round(encoder.hidden_dim * hidden_size))
    num_layers = int(round(encoder.num_layers * layers))
    if hidden_size > 1:
        raise ValueError(
            f"ElectraPretrainer.generator_hidden_size={hidden_size} makes the generator wider "
            f"(hidden {hidden_dim}) than the discriminator (hidden {encoder.hidden_dim}); "
            "ELECTRA's generator is a fraction of it (0.25 for ELECTRA-Small, 1/3 for Base): "
            "a generator as strong as the discriminator makes the task too hard.")
    if hidden_dim < 1 or num_layers < 1:
        raise ValueError(
            f"ElectraPretrainer.generator_hidden_size={hidden_size} and generator_layers="
            f"{layers} give a generator of {num_layers} layer(s) of width {hidden_dim} for a "
            f"discriminator of {encoder.num_layers} x {encoder.hidden_dim}; use larger fractions.")
    # One head per 64 dimensions, as google-research/electra's generator config.
    num_heads = max(1, hidden_dim // 64)
    if hidden_dim % num_heads:
        raise ValueError(
            f"ElectraPretrainer.generator_hidden_size={hidden_size} gives the generator hidden "
            f"size {hidden_dim}, which its {num_heads} heads (one per 64) do not divide; pick a "
            "fraction giving a multiple of 64 (or a width under 128).")
    config = {**encoder.get_config(), "num_layers": num_layers, "num_heads": num_heads,
              "hidden_dim": hidden_dim, "intermediate_dim": 4 * hidden_dim,
              "embedding_dim": encoder.embedding_width, "dtype": encoder.dtype_policy,
              "name": "generator"}
    for key in ("trainable", "output_all_layers", "output_attention_scores"):
        config.pop(key, None)
    return type(encoder)(**config, shared_embeddings=encoder)


def _probability_histogram(logits: tf.Tensor, labels: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
    """`[2, AUC_BUCKETS]` weighted counts of replaced (row 0) and original (row 1) tokens.

    Bucket `b` holds the tokens whose predicted probability of "replaced" is
    in `[b / AUC_BUCKETS, (b + 1) / AUC_BUCKETS)`; summed over steps and
    replicas they are the state of a streaming AUC.
    """
    probabilities = tf.reshape(tf.sigmoid(logits), [-1])
    buckets = tf.clip_by_value(tf.cast(tf.floor(probabilities * AUC_BUCKETS), tf.int32),
                               0, AUC_BUCKETS - 1)
    labels, weights = tf.reshape(labels, [-1]), tf.reshape(weights, [-1])
    return tf.stack([tf.math.unsorted_segment_sum(labels * weights, buckets, AUC_BUCKETS),
                     tf.math.unsorted_segment_sum((1 - labels) * weights, buckets, AUC_BUCKETS)])


def auc_from_histogram(histogram: np.ndarray) -> float:
    """The ROC AUC of bucketed counts, computed by `keras.metrics.AUC`.

    Keras's metric keeps true/false positive counts at `AUC_BUCKETS + 1`
    evenly spaced thresholds; a prediction is positive at threshold `k /
    AUC_BUCKETS` exactly when its bucket is `k` or above, so the counts are
    suffix sums of the histogram. They are loaded into the metric, which
    computes the AUC as it would from the predictions themselves.

    Args:
        histogram: array `[2, AUC_BUCKETS]`: counts of positives and negatives
            by bucket, as `ElectraPretrainer.pretraining_losses` returns.

    Returns:
        The AUC (0.0 when there are no positives or no negatives).

    Example:

    >>> auc_from_histogram(np.array([[0, 0, 3, 7] + [0] * 196, [5, 5] + [0] * 198]))
    1.0
    """
    positives, negatives = (np.asarray(row, np.float64) for row in histogram)
    true_positives = np.append(np.cumsum(positives[::-1])[::-1], 0.0)
    false_positives = np.append(np.cumsum(negatives[::-1])[::-1], 0.0)
    metric = keras.metrics.AUC(num_thresholds=len(positives) + 1)
    metric.true_positives.assign(true_positives.astype("float32"))
    metric.false_positives.assign(false_positives.astype("float32"))
    metric.false_negatives.assign((positives.sum() - true_positives).astype("float32"))
    metric.true_negatives.assign((negatives.sum() - false_positives).astype("float32"))
    return float(metric.result())
