"""StableAdamW: AdamW whose step shrinks, per tensor, when the update's RMS passes 1."""

from __future__ import annotations

import keras
import tensorflow as tf

from kbert.training.fused_adamw import FusedAdamW


@keras.saving.register_keras_serializable(package="kbert")
class StableAdamW(FusedAdamW):
    """AdamW with Adafactor's update clipping per tensor (Wortsman et al. 2023), ModernBERT's optimizer.

    Each step, for each variable, with `g` the gradient and `v_hat` the
    bias-corrected second moment after this step's update:

        RMS = sqrt(mean(g**2 / max(v_hat, epsilon**2)))
        eta = learning_rate / max(1, RMS)
        variable -= eta * weight_decay * variable          (decoupled decay)
        variable -= eta * m_hat / (sqrt(v_hat) + epsilon)  (Adam's step)

    While RMS <= 1 this is AdamW (Loshchilov and Hutter's, as PyTorch and
    optimi compute it: `epsilon` added to `sqrt(v_hat)`); a tensor whose
    gradient jumps far above its running average (RMS > 1) takes a step, and
    a decay, 1/RMS as large. It replaces gradient clipping (ModernBERT trains
    without any: bind `global_clipnorm = None`). Keras has no such optimizer;
    this one keeps `FusedAdamW`'s variables, configuration, weight-decay
    exclusions and fused kernel: the clipped rate goes into TF's fused Adam
    update, with its epsilon rescaled so that the kernel's
    `m / (sqrt(v) + epsilon')` is the published `m_hat / (sqrt(v_hat) + epsilon)`.

    ModernBERT's `decoupled_stableadamw` (optimi's `decouple_lr=True`)
    decays by `weight_decay * eta / peak_learning_rate` per step:
    `kbert.training.create_optimizer(..., decoupled_weight_decay=True)`
    builds that by dividing `weight_decay` by the peak rate.

    Args:
        **kwargs: the arguments of `keras.optimizers.AdamW` (`learning_rate`,
            `weight_decay`, `beta_1`, `beta_2`, `epsilon`, `global_clipnorm`
            ...), except `amsgrad`.

    Example:

    >>> optimizer = kbert.training.StableAdamW(
    ...     learning_rate=8e-4, weight_decay=1e-5 / 8e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-6)
    >>> optimizer.exclude_from_weight_decay(var_names=["layer_norm", "bias"])

    Reference:
        - [Wortsman et al., 2023](https://arxiv.org/abs/2304.13013), Algorithm 1
        - [Warner et al., 2024](https://arxiv.org/abs/2412.13663) (ModernBERT)
        - optimi's `StableAdamW` (github.com/warner-benjamin/optimi)
    """

    def __init__(self, **kwargs):
        if kwargs.get("amsgrad"):
            raise ValueError("StableAdamW has no AMSGrad variant; drop amsgrad=True.")
        super().__init__(**kwargs)

    def update_step(self, gradient, variable, learning_rate):
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        if isinstance(variable, keras.Variable):
            variable = variable.value
        dtype = variable.dtype
        gradient = tf.cast(gradient, dtype)
        index = self._get_variable_index(variable)
        velocity = self._velocities[index].value
        local_step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        epsilon = tf.cast(self.epsilon, dtype)
        beta2_power = tf.pow(beta_2, local_step)
        second_correction = 1.0 - beta2_power
        rate = tf.cast(learning_rate, dtype) / tf.maximum(
            1.0, update_rms(gradient, velocity, beta_2, second_correction, epsilon))
        if self.weight_decay is not None and self._use_weight_decay(variable):
            self._decay(variable, rate)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=self._momentums[index].value.handle,
            v=velocity.handle,
            beta1_power=tf.pow(beta_1, local_step),
            beta2_power=beta2_power,
            lr=rate,
            beta1=beta_1,
            beta2=beta_2,
            # sqrt(v_hat) + eps = (sqrt(v) + eps * sqrt(1 - beta_2^t)) / sqrt(1 - beta_2^t).
            epsilon=epsilon * tf.sqrt(second_correction),
            grad=gradient,
            use_locking=False,
        )


def update_rms(gradient: tf.Tensor, velocity: tf.Tensor, beta_2: tf.Tensor,
               second_correction: tf.Tensor, epsilon: tf.Tensor) -> tf.Tensor:
    """StableAdamW's `sqrt(mean(g**2 / max(v_hat, epsilon**2)))` of one tensor.

    Args:
        gradient: this step's gradient.
        velocity: the second moment before this step's update.
        beta_2: its decay rate.
        second_correction: `1 - beta_2**t`, the bias correction of step t.
        epsilon: Adam's epsilon.

    Returns:
        The scalar RMS.
    """
    squared = tf.square(gradient)
    v_hat = (velocity * beta_2 + squared * (1.0 - beta_2)) / second_correction
    return tf.sqrt(tf.reduce_mean(squared / tf.maximum(v_hat, tf.square(epsilon))))
