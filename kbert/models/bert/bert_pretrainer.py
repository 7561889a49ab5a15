"""BERT pre-training model: encoder + masked-LM head + next-sentence head."""

from __future__ import annotations

import keras

from kbert.layers import BertMaskedLMHead
from kbert.layers import NextSentenceHead
from kbert.layers import get_activation
from kbert.models.encoder import Encoder
from kbert.models.initializers import truncated_normal
from kbert.models.masked_lm_pretrainer import MaskedLMPretrainer


@keras.saving.register_keras_serializable(package="kbert")
class BertPretrainer(MaskedLMPretrainer):
    """Masked-LM and next-sentence pre-training on top of an encoder (`BertEncoder` or another).

    The masked-LM head gathers the encoder's sequence output at `mask_positions`
    before the dense transform and the vocabulary projection (which is tied to
    the token embedding, plus an output bias of its own), so the expensive
    vocabulary-sized matmul runs only on the predicted positions. As in the
    original BERT, its transform uses the encoder's activation (tanh GELU) and
    LayerNorm epsilon 1e-12, not keras-hub's `MaskedLMHead` defaults (exact GELU,
    1e-5). The NSP head maps the pooled output to two logits, label 1 meaning
    "segment B is random". Both outputs are float32 under mixed precision.

    The objective, `compile()`, packed rows and what `kbert-pretrain`'s loop
    (`kbert.training.run_pretraining`) trains through (`loss_normalizers`,
    `pretraining_losses`, `pretraining_metrics`: the `kbert.models.Pretrainer`
    contract) are `kbert.models.MaskedLMPretrainer`'s; this class builds
    BERT's heads. `compile()` with no arguments sets the MLM and NSP
    cross-entropies and `masked_lm_accuracy` / `next_sentence_accuracy`.

    Args:
        encoder: a `kbert.models.Encoder` such as `kbert.models.BertEncoder`
            (or `keras_hub.models.BertBackbone`, which takes no packed rows).
        next_sentence: bool. Whether to add the NSP head and output. Set False
            for RoBERTa-style MLM-only training. Defaults to True.
        **kwargs: other keyword arguments passed to `keras.Model`, such as `name`.

    Example:

    >>> encoder = kbert.models.BertEncoder(
    ...     vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=128,
    ...     intermediate_dim=512, max_sequence_length=128)
    >>> pretrainer = kbert.models.BertPretrainer(encoder)
    >>> pretrainer.compile(optimizer=keras.optimizers.AdamW(1e-4))
    >>> pretrainer.fit(kbert.data.pretraining_dataset("data/*.tfrecord", 32),
    ...                steps_per_epoch=100)

    Reference:
        - [Devlin et al., 2019](https://arxiv.org/abs/1810.04805)
    """

    _config_keys = ("next_sentence",)
    # Metrics of `pretraining_metrics` on the progress line, with their labels.
    progress_labels = {"masked_lm_accuracy": "mlm_acc", "next_sentence_accuracy": "nsp_acc"}

    def __init__(self, encoder: Encoder, next_sentence: bool = True, **kwargs):
        # === Layers ===
        activation = getattr(encoder, "activation", "gelu_approximate")
        masked_lm_head = BertMaskedLMHead(
            token_embedding=encoder.token_embedding,
            intermediate_activation=get_activation(activation),
            layer_norm_epsilon=getattr(encoder, "layer_norm_epsilon", 1e-12),
            kernel_initializer=truncated_normal(getattr(encoder, "initializer_range", 0.02)),
            dtype=encoder.dtype_policy,
            name="masked_lm_head",
        )
        next_sentence_head = (
            NextSentenceHead(dtype=encoder.dtype_policy, name="next_sentence_head")
            if next_sentence
            else None
        )

        # === Functional model and config (`next_sentence`) ===
        super().__init__(encoder, masked_lm_head, next_sentence_head, **kwargs)

