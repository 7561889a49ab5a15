"""ModernBERT pre-training model: encoder + masked-LM head (no next-sentence prediction)."""

from __future__ import annotations

import math

import keras

from kbert.layers import get_activation
from kbert.models.initializers import truncated_normal
from kbert.models.masked_lm_pretrainer import MaskedLMPretrainer
from kbert.models.modernbert.modernbert_masked_lm_head import ModernBertMaskedLMHead


@keras.saving.register_keras_serializable(package="kbert")
class ModernBertPretrainer(MaskedLMPretrainer):
    """Masked-LM pre-training of a `ModernBertEncoder`, as Hugging Face's `ModernBertForMaskedLM`.

    The head is ModernBERT's (`ModernBertMaskedLMHead`: dense without bias,
    exact GELU, LayerNorm without bias, decoder tied to the token embedding
    with a bias of its own), run on the masked positions only; its logits
    equal `ModernBertForMaskedLM`'s there. ModernBERT has no NSP, so there is
    no NSP head or output and the data need no NSP labels.

    Everything training uses is `kbert.models.MaskedLMPretrainer`'s, as for
    `BertPretrainer` (`kbert.models.Pretrainer`: `loss_normalizers`,
    `pretraining_losses`, `pretraining_metrics`, `compile`, packed rows
    through `_forward`), without the NSP head, so
    `kbert.training.run_pretraining` and `kbert-pretrain` take it unchanged:
    `pretrainer.model = @ModernBertPretrainer` (gin/modernbert_base.gin).

    Args:
        encoder: a `kbert.models.ModernBertEncoder`.
        activation: str. The head's activation (HF's `classifier_activation`),
            a `kbert.layers.get_activation` name. Defaults to `"gelu_exact"`.
        dense_bias: bool. Bias of the head's dense layer (HF's
            `classifier_bias`). Defaults to False.
        **kwargs: passed to `keras.Model`, such as `name`.

    Example:

    >>> encoder = kbert.models.ModernBertEncoder(
    ...     vocabulary_size=1000, num_layers=3, num_heads=4, hidden_dim=64,
    ...     intermediate_dim=96, local_attention_window=16)
    >>> pretrainer = kbert.models.ModernBertPretrainer(encoder)
    >>> logits = pretrainer({**inputs, "mask_positions": positions})["mlm"]

    Reference:
        - [Warner et al., 2024](https://arxiv.org/abs/2412.13663)
    """

    _config_keys = ("activation", "dense_bias")

    def __init__(self, encoder, activation: str = "gelu_exact", dense_bias: bool = False,
                 **kwargs):
        # === Layers ===
        # HF initialises the head's dense layer as the blocks' output projections.
        stddev = encoder.initializer_range / math.sqrt(2.0 * encoder.num_layers)
        masked_lm_head = ModernBertMaskedLMHead(
            token_embedding=encoder.token_embedding,
            intermediate_activation=get_activation(activation),
            layer_norm_epsilon=encoder.layer_norm_epsilon,
            dense_bias=dense_bias,
            norm_bias=encoder.norm_bias,
            kernel_initializer=truncated_normal(stddev),
            dtype=encoder.dtype_policy,
            name="masked_lm_head",
        )

        # === Functional model (no NSP: the data need no labels for it) ===
        super().__init__(encoder, masked_lm_head, **kwargs)

        # === Config ===
        self.activation = activation
        self.dense_bias = dense_bias
