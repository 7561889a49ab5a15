"""One ModernBERT block: pre-norm RoPE attention (local or global), pre-norm GeGLU feed-forward."""

from __future__ import annotations

import keras
import tensorflow as tf
from keras_hub.layers import RotaryEmbedding

from kbert.layers import Dropout
from kbert.layers import LayerNormalization
from kbert.layers import get_activation
from kbert.models.modernbert.modernbert_attention import chunked_global_attention
from kbert.models.modernbert.modernbert_attention import local_block_attention
from kbert.models.modernbert.modernbert_attention import plain_attention


@keras.saving.register_keras_serializable(package="kbert")
class ModernBertEncoderLayer(keras.layers.Layer):
    """A ModernBERT Transformer block, as Hugging Face's `ModernBertEncoderLayer` computes it.

    `x + Wo(attention(RoPE(Wqkv(attention_norm(x)))))`, then
    `x + Wo(act(a) * g)` where `[a, g] = Wi(mlp_norm(x))` split in halves
    (the first half is activated, the second is the gate). A local layer
    (`local_attention_window` set) lets each token see the keys within
    `local_attention_window // 2` positions on either side and computes it
    in blocks (`local_block_attention`); a global layer sees the whole
    instance, a chunk of queries at a time (`chunked_global_attention`).
    Inputs whose length is known to be at most twice the window (local) or
    `attention_chunk_size` (global) take the plain formula, which is faster
    there and no larger.
    RoPE is keras-hub's `RotaryEmbedding` (the rotate-half convention of
    HF's `apply_rotary_pos_emb`) with the layer's theta.

    Weights and their Hugging Face names (kernels are HF's weights transposed):
    `attention_layer_norm` (`attn_norm`; none in HF's layer 0), `qkv`
    (`attn.Wqkv`, output laid out `[3, heads, head_dim]`), `attention_output`
    (`attn.Wo`), `mlp_layer_norm` (`mlp_norm`), `mlp_input` (`mlp.Wi`),
    `mlp_output` (`mlp.Wo`). The norms' names contain `layer_norm` so that
    `kbert.training.create_optimizer` exempts them from weight decay.

    Args:
        hidden_dim: int. Width of the block.
        num_heads: int. Attention heads; `hidden_dim / num_heads` must be even.
        intermediate_dim: int. Width of each GeGLU half.
        local_attention_window: int or None. HF's `local_attention`: the whole
            window of a local layer; None for a global layer. Defaults to None.
        rope_theta: float. RoPE base wavelength. Defaults to 160000.0 (HF's
            global layers; local ones use 10000.0).
        activation: str. The GeGLU activation, a `kbert.layers.get_activation`
            name. Defaults to `"gelu_exact"` (HF's `gelu`).
        layer_norm_epsilon: float. Defaults to 1e-5.
        attention_norm: bool. Whether the attention input is normalised (HF's
            layer 0 has no `attn_norm`: its input is the normalised embeddings).
            Defaults to True.
        norm_bias: bool. LayerNorm biases. Defaults to False.
        attention_bias: bool. `qkv` and `attention_output` biases. Defaults to False.
        mlp_bias: bool. `mlp_input` and `mlp_output` biases. Defaults to False.
        dropout: float. Dropout after `attention_output` and before
            `mlp_output` (HF's `attention_dropout` / `mlp_dropout` places).
            Defaults to 0.0.
        attention_chunk_size: int. Queries per chunk of a global layer.
            Defaults to 512.
        kernel_initializer: initializer of `qkv` and `mlp_input`.
        output_initializer: initializer of `attention_output` and `mlp_output`.
        **kwargs: passed to `keras.layers.Layer` (`name`, `dtype`).

    Example:

    >>> layer = ModernBertEncoderLayer(64, 4, 96, local_attention_window=8, rope_theta=1e4)
    >>> outputs = layer(tf.zeros((2, 20, 64)), attention_ids=tf.ones((2, 20), "int32"))
    """

    def __init__(
        self,
        hidden_dim: int,
        num_heads: int,
        intermediate_dim: int,
        local_attention_window: int | None = None,
        rope_theta: float = 160000.0,
        activation: str = "gelu_exact",
        layer_norm_epsilon: float = 1e-5,
        attention_norm: bool = True,
        norm_bias: bool = False,
        attention_bias: bool = False,
        mlp_bias: bool = False,
        dropout: float = 0.0,
        attention_chunk_size: int = 512,
        kernel_initializer="glorot_uniform",
        output_initializer="glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if hidden_dim % num_heads or (hidden_dim // num_heads) % 2:
            raise ValueError(f"hidden_dim={hidden_dim} / num_heads={num_heads} must be a whole, "
                             "even head size (RoPE rotates pairs of dimensions).")
        self.hidden_dim = hidden_dim
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.local_attention_window = local_attention_window
        self.rope_theta = rope_theta
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.norm_bias = norm_bias
        self.attention_bias = attention_bias
        self.mlp_bias = mlp_bias
        self.dropout = dropout
        self.attention_chunk_size = attention_chunk_size
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.output_initializer = keras.initializers.get(output_initializer)
        self.head_dim = hidden_dim // num_heads
        self.activation_fn = get_activation(activation)

        def norm(name):
            return LayerNormalization(epsilon=layer_norm_epsilon, center=norm_bias,
                                      dtype=self.dtype_policy, name=name)

        def dense(units, bias, initializer, name):
            return keras.layers.Dense(units, use_bias=bias, kernel_initializer=initializer,
                                      dtype=self.dtype_policy, name=name)

        self.attention_layer_norm = norm("attention_layer_norm") if attention_norm else None
        self.qkv = dense(3 * hidden_dim, attention_bias, self.kernel_initializer, "qkv")
        # On heads-first `[batch, heads, length, head_dim]` queries and keys.
        self.rotary_embedding = RotaryEmbedding(max_wavelength=rope_theta, sequence_axis=2,
                                                dtype=self.dtype_policy, name="rotary_embedding")
        self.attention_output = dense(hidden_dim, attention_bias, self.output_initializer,
                                      "attention_output")
        self.attention_dropout = Dropout(dropout, dtype=self.dtype_policy,
                                         name="attention_dropout")
        self.mlp_layer_norm = norm("mlp_layer_norm")
        self.mlp_input = dense(2 * intermediate_dim, mlp_bias, self.kernel_initializer,
                               "mlp_input")
        self.mlp_dropout = Dropout(dropout, dtype=self.dtype_policy, name="mlp_dropout")
        self.mlp_output = dense(hidden_dim, mlp_bias, self.output_initializer, "mlp_output")

    @property
    def window_radius(self) -> int | None:
        """How far each side a token sees (HF's `local_attention // 2`); None when global."""
        if self.local_attention_window is None:
            return None
        return self.local_attention_window // 2

    def build(self, inputs_shape, *args, **kwargs):
        if self.attention_layer_norm is not None:
            self.attention_layer_norm.build(inputs_shape)
        self.qkv.build(inputs_shape)
        self.attention_output.build(inputs_shape[:-1] + (self.hidden_dim,))
        self.mlp_layer_norm.build(inputs_shape)
        self.mlp_input.build(inputs_shape)
        self.mlp_output.build(inputs_shape[:-1] + (self.intermediate_dim,))
        self.built = True

    def call(self, inputs, attention_ids, position_ids=None, training=None,
             return_attention_scores=False):
        """Runs the block.

        Args:
            inputs: `[batch, length, hidden_dim]`.
            attention_ids: int `[batch, length]`: each token's instance (the
                padding mask of a padded batch, `instance_ids` of packed
                rows); 0 is padding.
            position_ids: int `[batch, length]` or None: RoPE positions
                (restarting in each packed instance); None is 0, 1, ...
            training: bool or None. Whether dropout is on.
            return_attention_scores: bool. Also return the attention
                probabilities `[batch, heads, length, length]` (computed with
                the full score matrix).

        Returns:
            `[batch, length, hidden_dim]`, and the probabilities when asked.
        """
        x = inputs if self.attention_layer_norm is None else self.attention_layer_norm(inputs)
        qkv = self.qkv(x)
        shape = tf.shape(qkv)
        # HF's Wqkv output is laid out [3, heads, head_dim]; heads first for the products.
        qkv = tf.reshape(qkv, [shape[0], shape[1], 3, self.num_heads, self.head_dim])
        query, key, value = tf.unstack(tf.transpose(qkv, [2, 0, 3, 1, 4]), 3, axis=0)
        query = self.rotary_embedding(query, positions=position_ids)
        key = self.rotary_embedding(key, positions=position_ids)
        scores = None
        length = inputs.shape[1]
        # Up to twice the window, the band-masked square has at most 4/3 the
        # numbers of the blocks' scores and is faster (no padding, no gathers:
        # 3x on 128 tokens with window 128, on CPU); beyond it, blocks.
        short = (self.window_radius is not None and length is not None
                 and length <= 2 * self.local_attention_window)
        if return_attention_scores or short:
            attended, scores = plain_attention(query, key, value, attention_ids,
                                               self.window_radius)
        elif self.window_radius is not None:
            attended = local_block_attention(query, key, value, attention_ids,
                                             self.window_radius)
        else:
            attended = chunked_global_attention(query, key, value, attention_ids,
                                                self.attention_chunk_size)
        attended = tf.reshape(tf.transpose(attended, [0, 2, 1, 3]),
                              [shape[0], shape[1], self.hidden_dim])
        x = inputs + self.attention_dropout(self.attention_output(attended), training=training)
        gelu_input, gate = tf.split(self.mlp_input(self.mlp_layer_norm(x)), 2, axis=-1)
        hidden = self.mlp_dropout(self.activation_fn(gelu_input) * gate, training=training)
        outputs = x + self.mlp_output(hidden)
        if return_attention_scores:
            return outputs, scores
        return outputs

    def compute_output_spec(self, inputs, *args, return_attention_scores=False, **kwargs):
        outputs = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return outputs
        batch, length = inputs.shape[0], inputs.shape[1]
        return outputs, keras.KerasTensor((batch, self.num_heads, length, length),
                                          dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({
            "hidden_dim": self.hidden_dim,
            "num_heads": self.num_heads,
            "intermediate_dim": self.intermediate_dim,
            "local_attention_window": self.local_attention_window,
            "rope_theta": self.rope_theta,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "attention_norm": self.attention_layer_norm is not None,
            "norm_bias": self.norm_bias,
            "attention_bias": self.attention_bias,
            "mlp_bias": self.mlp_bias,
            "dropout": self.dropout,
            "attention_chunk_size": self.attention_chunk_size,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "output_initializer": keras.initializers.serialize(self.output_initializer),
        })
        return config
