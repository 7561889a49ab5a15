"""Keras AdamW whose per-variable update is TF's fused Adam kernel."""

from __future__ import annotations

import keras
import tensorflow as tf


@keras.saving.register_keras_serializable(package="kbert")
class FusedAdamW(keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` with the same numbers, updated by TF's fused Adam kernel.

    Keras's AdamW updates each variable with about fifteen separate element-wise
    ops (each a full pass over the variable and a temporary), and its global
    norm clipping squares every gradient into a temporary before summing. In a
    small BERT the 30522-row token embedding holds most of the parameters, so on
    CPU those passes cost as much as the Transformer blocks. This subclass keeps
    AdamW's variables, configuration and update rule and only changes how they
    are computed: `tf.raw_ops.ResourceApplyAdam` (one pass updating the
    variable and both moments, the same formula with bias correction folded
    into the step size), decoupled weight decay as one scaled subtraction, and
    `tf.clip_by_global_norm` (TF's `l2_loss`, no squared temporaries). Keras
    has no switch for a fused update, hence the subclass. Variables it cannot
    handle (sparse gradients, AMSGrad) take Keras's own path.

    The one numeric difference: `beta_2=0.999` is not a float32 number, and
    Keras scales the second-moment update by `1 - beta_2` taken in double
    precision while the kernel takes `1 - float32(beta_2)`, 1.3e-5 smaller, so
    a float32 update differs from Keras's by about 6e-6 of itself.

    Args:
        **kwargs: the arguments of `keras.optimizers.AdamW`, such as
            `learning_rate`, `weight_decay`, `epsilon` and `global_clipnorm`.

    Example:

    >>> optimizer = kbert.training.FusedAdamW(
    ...     learning_rate=1e-4, weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0)
    >>> optimizer.exclude_from_weight_decay(var_names=["layer_norm", "bias"])

    Reference:
        - [Loshchilov and Hutter, 2019](https://arxiv.org/abs/1711.05101)
    """

    def _clip_gradients(self, grads):
        if self.global_clipnorm and self.global_clipnorm > 0 and not (
            self.clipnorm or self.clipvalue
        ):
            return _clip_by_global_norm(grads, self.global_clipnorm)
        return super()._clip_gradients(grads)

    def _apply_weight_decay(self, variables):
        # Applied in `update_step` instead, before the Adam update as Keras does,
        # so that each variable is read once per step on the fast path.
        pass

    def update_step(self, gradient, variable, learning_rate):
        decays = self.weight_decay is not None and self._use_weight_decay(variable)
        if self.amsgrad or isinstance(gradient, tf.IndexedSlices):
            if decays:
                self._decay(variable, learning_rate)
            return super().update_step(gradient, variable, learning_rate)
        if isinstance(variable, keras.Variable):
            variable = variable.value
        dtype = variable.dtype
        lr = tf.cast(learning_rate, dtype)
        if decays:
            self._decay(variable, lr)
        index = self._get_variable_index(variable)
        local_step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=self._momentums[index].value.handle,
            v=self._velocities[index].value.handle,
            beta1_power=tf.pow(beta_1, local_step),
            beta2_power=tf.pow(beta_2, local_step),
            lr=lr,
            beta1=beta_1,
            beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype),
            grad=tf.cast(gradient, dtype),
            use_locking=False,
        )

    def _decay(self, variable, learning_rate):
        if isinstance(variable, keras.Variable):
            variable = variable.value
        rate = tf.cast(self.weight_decay, variable.dtype) * tf.cast(learning_rate, variable.dtype)
        variable.assign_sub(variable * rate)


def _clip_by_global_norm(grads, clip_norm):
    """Keras's `clip_by_global_norm`, with `l2_loss` (no squared temporaries) on dense gradients.

    Sparse gradients go through Keras's own expressions, so they come out
    exactly as Keras makes them.
    """
    squares = [
        2.0 * tf.nn.l2_loss(g) if isinstance(g, tf.Tensor) else keras.ops.sum(keras.ops.square(g))
        for g in grads
        if g is not None
    ]
    norm = tf.sqrt(tf.add_n(squares))
    # Same expression as Keras: NaN when the norm is not finite.
    scale = clip_norm * tf.minimum(1.0 / norm, 1.0 / clip_norm) + (norm - norm)
    return [None if g is None else g * scale for g in grads]
