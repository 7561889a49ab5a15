"""keras-hub's masked-LM head with a cheaper gather and tied vocabulary projection."""

from __future__ import annotations

import tensorflow as tf
from keras_hub.layers import MaskedLMHead


class FastMaskedLMHead(MaskedLMHead):
    """`keras_hub.layers.MaskedLMHead` with the same numbers, faster to train: the base of kbert's heads.

    Only `call` is rewritten, because keras-hub's ops cost extra full passes
    over the vocabulary-sized tensors when training:

    - keras-hub projects with `matmul(x, transpose(embeddings))`, whose gradient
      is computed as `[hidden, vocabulary]` and then transposed into the
      table's shape; `tf.matmul(..., transpose_b=True)` yields it in place.
    - `tf.nn.bias_add` instead of a broadcast add, whose gradient is a
      dedicated kernel rather than a generic reduction over the logits.
    - `tf.gather(..., batch_dims=1)` instead of `take_along_axis`, which
      builds a broadcast index tensor and scatters its gradient back.

    Under mixed precision the logits come out in the variable dtype (float32),
    with the bias added in it, where keras-hub's come out in the compute dtype;
    when training, that cast and bias add (and their gradient) run as XLA
    fusions.

    Configurations this fast path does not cover (an untied or quantized
    embedding, `reverse_dtype`, `logit_soft_cap`) run keras-hub's `call`.

    Each architecture's head is a registered subclass that says how its
    layers are built: `kbert.layers.BertMaskedLMHead` (keras-hub's layers,
    biases included) and `kbert.models.modernbert.ModernBertMaskedLMHead`
    (ModernBERT's, without biases); this base is never saved on its own.

    Args:
        **kwargs: the arguments of `keras_hub.layers.MaskedLMHead`, such as
            `token_embedding`, `intermediate_activation`, `layer_norm_epsilon`,
            `kernel_initializer`, `dtype` and `name`.

    Example:

    >>> class MyHead(FastMaskedLMHead):  # keras-hub's `build`, the fast `call`
    ...     pass
    >>> head = MyHead(token_embedding=encoder.token_embedding)
    >>> logits = head(encoded["sequence_output"], mask_positions=mask_positions)
    """

    def _has_fast_path(self) -> bool:
        embedding = self.token_embedding
        return (
            embedding is not None
            and getattr(embedding, "tie_weights", False)
            and getattr(embedding, "reverse_dtype", None) is None
            and getattr(embedding, "logit_soft_cap", None) is None
            and getattr(embedding.dtype_policy, "quantization_mode", None) is None
        )

    def call(self, inputs, mask_positions, training=None):
        if not self._has_fast_path():
            return super().call(inputs, mask_positions)
        x = tf.gather(inputs, tf.cast(mask_positions, "int32"), batch_dims=1)
        x = self._intermediate_dense(x)
        x = self._intermediate_layer_norm(x)
        shape = tf.shape(x)
        table = tf.cast(self.token_embedding.embeddings, self.compute_dtype)
        logits = tf.matmul(tf.reshape(x, [-1, shape[-1]]), table, transpose_b=True)
        # Under mixed precision the bias is added in the variable dtype: on
        # CPU oneDNN's fused bfloat16 matmul + bias kernel is several times
        # slower than the plain matmul, and the loss wants float32 logits.
        bias = tf.cast(self._bias, self.variable_dtype)
        if training and logits.dtype != bias.dtype:
            logits = _cast_and_add_bias(logits, bias)
        else:
            logits = tf.nn.bias_add(tf.cast(logits, bias.dtype), bias)
        outputs = tf.reshape(logits, tf.concat([shape[:-1], [-1]], axis=0))
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs


# Under mixed precision the cast of the [predictions, vocabulary] logits to
# float32, the bias add, and in the backward pass the cast back and the bias
# gradient are four full passes with TF's kernels; XLA fuses each direction
# into one (about 4 ms of a 90 ms tiny-BERT step on 2 CPU cores). Training
# only, so inference and saved graphs run no XLA.
@tf.custom_gradient
def _cast_and_add_bias(logits, bias):
    """`tf.cast(logits, bias.dtype) + bias`, each direction one XLA function."""

    def grad(upstream):
        return _cast_and_add_bias_gradient(upstream, logits.dtype)

    return _cast_and_add_bias_forward(logits, bias), grad


@tf.function(jit_compile=True)
def _cast_and_add_bias_forward(logits, bias):
    return tf.cast(logits, bias.dtype) + bias


@tf.function(jit_compile=True)
def _cast_and_add_bias_gradient(upstream, logits_dtype):
    return tf.cast(upstream, logits_dtype), tf.reduce_sum(upstream, axis=0)
