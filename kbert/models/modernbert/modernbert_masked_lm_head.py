"""ModernBERT's masked-LM head: dense, activation, LayerNorm, tied decoder plus bias."""

from __future__ import annotations

import keras

from kbert.layers import FastMaskedLMHead
from kbert.layers import LayerNormalization


@keras.saving.register_keras_serializable(package="kbert")
class ModernBertMaskedLMHead(FastMaskedLMHead):
    """Hugging Face's `ModernBertPredictionHead` plus decoder, on the masked positions only.

    `norm(act(dense(x)))` projected onto the tied token embedding, plus an
    output bias (HF's `decoder.bias`), gathered first at `mask_positions` as
    every kbert MLM head. It is keras-hub's `MaskedLMHead` with kbert's
    faster `call` (`kbert.layers.FastMaskedLMHead`, as BERT's head), whose
    `build` makes the dense layer and LayerNorm with biases; ModernBERT's
    have none in the released models, so this builds them with the two
    switches.
    Layer names map to HF's: `intermediate_dense` is `head.dense`,
    `intermediate_layer_norm` `head.norm`, `output_bias` `decoder.bias`.

    Args:
        dense_bias: bool. Bias of the dense layer (HF's `classifier_bias`).
            Defaults to False.
        norm_bias: bool. Bias of the LayerNorm (HF's `norm_bias`). Defaults to False.
        **kwargs: the arguments of `keras_hub.layers.MaskedLMHead`
            (`token_embedding`, `intermediate_activation`,
            `layer_norm_epsilon`, `kernel_initializer`, `dtype`, `name`).

    Example:

    >>> head = ModernBertMaskedLMHead(token_embedding=encoder.token_embedding,
    ...                               intermediate_activation="gelu", layer_norm_epsilon=1e-5)
    >>> logits = head(encoded["sequence_output"], mask_positions=mask_positions)
    """

    def __init__(self, dense_bias: bool = False, norm_bias: bool = False, **kwargs):
        super().__init__(**kwargs)
        if self.token_embedding is None:
            raise ValueError("ModernBertMaskedLMHead: pass `token_embedding`; its decoder is "
                             "always tied to the token embedding.")
        self.dense_bias = dense_bias
        self.norm_bias = norm_bias

    def build(self, inputs_shape, mask_positions_shape=None):
        # keras-hub's `build` with the two bias switches (it always adds both).
        feature_size = self.token_embedding.output_dim
        self._intermediate_dense = keras.layers.Dense(
            feature_size, activation=self.intermediate_activation, use_bias=self.dense_bias,
            kernel_initializer=self.kernel_initializer, dtype=self.dtype_policy,
            name="intermediate_dense")
        self._intermediate_layer_norm = LayerNormalization(
            epsilon=self.layer_norm_epsilon, center=self.norm_bias, dtype=self.dtype_policy,
            name="intermediate_layer_norm")
        self._intermediate_dense.build((inputs_shape[0], None, inputs_shape[-1]))
        self._intermediate_layer_norm.build((inputs_shape[0], None, feature_size))
        self._bias = self.add_weight(name="output_bias", shape=[self.vocabulary_size],
                                     initializer=self.bias_initializer, dtype=self.dtype)
        self.built = True

    def get_config(self):
        config = super().get_config()
        config.update({"dense_bias": self.dense_bias, "norm_bias": self.norm_bias})
        return config
