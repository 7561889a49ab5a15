"""ELECTRA's corruption step: sample the generator's tokens into the masked positions."""

from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="kbert")
class ReplacedTokenSampler(keras.layers.Layer):
    """Builds the discriminator's input and labels from the generator's masked-LM logits.

    At every masked position (a `mask_positions` slot whose `mask_weights` is
    positive) a token is drawn from `softmax(logits / temperature)` with the
    Gumbel-max trick (`argmax(logits / temperature + Gumbel noise)`, as
    google-research/electra and Model Garden's `ElectraPretrainer` sample) and
    written into `token_ids`; every other position keeps its token. Since the
    masked positions get a sample whatever the data put there (`[MASK]`, a
    random token or the original), this also undoes the masking. The label of
    a position is 1 where the token written differs from the original
    (`mask_labels`) and 0 elsewhere, so a sample that happens to be the
    original token counts as original, as in the paper. Padded prediction
    slots (weight 0) change nothing. No gradient flows through the sample.

    keras-hub has no ELECTRA sampler; Model Garden's scatters with
    `tf.scatter_nd` and drops position 0 to skip padded slots, where this
    layer reads the slot weights, so it also serves data whose padded slots
    point elsewhere.

    Args:
        temperature: float. Divides the logits before sampling; 1.0 samples
            from the generator's distribution. Defaults to 1.0.
        seed: int or None. Seed of the layer's `keras.random.SeedGenerator`;
            None draws it from Keras's global seed
            (`keras.utils.set_random_seed`). Defaults to None.
        **kwargs: other keyword arguments passed to `keras.layers.Layer`, such as
            `name`.

    Call arguments:
        logits: float Tensor `[batch, predictions, vocabulary]`: the
            generator's masked-LM logits at `mask_positions`.
        token_ids: int Tensor `[batch, sequence]`: the masked input.
        mask_positions: int Tensor `[batch, predictions]`.
        mask_labels: int Tensor `[batch, predictions]`: the original tokens at
            `mask_positions`.
        mask_weights: float Tensor `[batch, predictions]`: 0 for padded slots.

    Returns:
        `(replaced_ids, labels)`: int32 Tensors `[batch, sequence]`, the
        discriminator's input and its targets (1 = replaced).

    Example:

    >>> sampler = kbert.layers.ReplacedTokenSampler()
    >>> replaced_ids, labels = sampler(mlm_logits, token_ids, mask_positions,
    ...                                mask_labels, mask_weights)

    Reference:
        - [Clark et al., 2020](https://arxiv.org/abs/2003.10555)
    """

    def __init__(self, temperature: float = 1.0, seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        if not temperature > 0:
            raise ValueError(f"temperature={temperature!r} must be positive.")
        self.temperature = temperature
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.built = True

    def call(self, logits, token_ids, mask_positions, mask_labels, mask_weights):
        logits = tf.stop_gradient(tf.cast(logits, tf.float32))
        sampled = _gumbel_argmax(logits / self.temperature, self._seed())
        token_ids = tf.cast(token_ids, tf.int32)
        chosen = tf.cast(mask_weights > 0, tf.int32)
        # [batch, predictions, sequence]: which position each used slot points at.
        slots = tf.one_hot(tf.cast(mask_positions, tf.int32), tf.shape(token_ids)[1],
                           dtype=tf.int32) * chosen[:, :, None]
        replaced = tf.reduce_max(slots, axis=1) > 0
        samples = tf.reduce_max(slots * sampled[:, :, None], axis=1)
        differs = tf.cast(tf.not_equal(sampled, tf.cast(mask_labels, tf.int32)), tf.int32)
        labels = tf.reduce_max(slots * differs[:, :, None], axis=1)
        return tf.where(replaced, samples, token_ids), labels

    def _seed(self) -> tf.Tensor:
        seed = self.seed_generator.next()
        context = tf.distribute.get_replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            # Under a tf.distribute strategy every replica reads the same
            # generator state; its own id keeps the replicas' samples independent.
            replica = tf.cast(context.replica_id_in_sync_group, seed.dtype)
            seed = seed + tf.stack([tf.zeros_like(replica), replica])
        return seed

    def compute_output_spec(self, logits, token_ids, *args, **kwargs):
        spec = keras.KerasTensor(token_ids.shape, dtype="int32")
        return spec, keras.KerasTensor(token_ids.shape, dtype="int32")

    def get_config(self):
        config = super().get_config()
        config.update({"temperature": self.temperature, "seed": self.seed})
        return config


def _gumbel_argmax(logits: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """`argmax(logits + Gumbel noise)` over the last axis: one sample of `softmax(logits)`."""
    if seed.dtype != tf.int32:
        # As Keras does for TF's stateless ops, which take int32 seeds.
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    uniform = tf.random.stateless_uniform(tf.shape(logits), seed, dtype=logits.dtype)
    # The 1e-9 guards of google-research/electra keep log(0) out.
    gumbel = -tf.math.log(-tf.math.log(uniform + 1e-9) + 1e-9)
    return tf.argmax(logits + gumbel, axis=-1, output_type=tf.int32)
