"""BERT's masked-LM head: keras-hub's layers, kbert's fast `call`."""

from __future__ import annotations

import keras

from kbert.layers.fast_masked_lm_head import FastMaskedLMHead


@keras.saving.register_keras_serializable(package="kbert")
class BertMaskedLMHead(FastMaskedLMHead):
    """`keras_hub.layers.MaskedLMHead` with the same weights and numbers, faster to train.

    The head is keras-hub's (gather at `mask_positions`, dense, LayerNorm,
    projection onto the tied token embedding, output bias), built by
    keras-hub's `build`, dense layer and LayerNorm with biases, as in
    google-research/bert; `call` is `kbert.layers.FastMaskedLMHead`'s (see
    there why). `BertPretrainer` builds it with the encoder's activation
    (tanh GELU) and LayerNorm epsilon 1e-12, not keras-hub's defaults;
    `ElectraPretrainer`'s generator uses it too.

    Args:
        **kwargs: the arguments of `keras_hub.layers.MaskedLMHead`, such as
            `token_embedding`, `intermediate_activation`, `layer_norm_epsilon`,
            `kernel_initializer`, `dtype` and `name`.

    Example:

    >>> encoder = kbert.models.BertEncoder(...)
    >>> head = kbert.layers.BertMaskedLMHead(
    ...     token_embedding=encoder.token_embedding,
    ...     intermediate_activation=kbert.layers.get_activation("gelu_approximate"),
    ...     layer_norm_epsilon=1e-12)
    >>> logits = head(encoded["sequence_output"], mask_positions=mask_positions)
    """
