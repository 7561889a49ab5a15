"""BERT pre-training model: encoder + masked-LM head + next-sentence head."""

from __future__ import annotations

import keras
from keras import ops

from kbert.layers import BertMaskedLMHead
from kbert.layers import NextSentenceHead
from kbert.layers import get_activation
from kbert.models.bert_encoder import PACKED_INPUTS
from kbert.models.bert_encoder import BertEncoder
from kbert.models.bert_encoder import bert_initializer
from kbert.models.bert_task import BertTask


@keras.saving.register_keras_serializable(package="kbert")
class BertPretrainer(BertTask):
    """Masked-LM and next-sentence pre-training on top of a `BertEncoder`.

    The masked-LM head gathers the encoder's sequence output at `mask_positions`
    before the dense transform and the vocabulary projection (which is tied to
    the token embedding, plus an output bias of its own), so the expensive
    vocabulary-sized matmul runs only on the predicted positions. As in the
    original BERT, its transform uses the encoder's activation (tanh GELU) and
    LayerNorm epsilon 1e-12, not keras-hub's `MaskedLMHead` defaults (exact GELU,
    1e-5). The NSP head maps the pooled output to two logits, label 1 meaning
    "segment B is random". Both outputs are float32 under mixed precision.

    `compile()` with no arguments sets the pre-training losses and metrics: MLM
    cross-entropy averaged over the masked positions' weights (the
    `masked_lm_weights` of the data, passed as `sample_weight["mlm"]`), NSP
    cross-entropy, and `masked_lm_accuracy` / `next_sentence_accuracy`. Train it
    on `kbert.data.pretraining_dataset(...)`, which yields
    `(features, labels, sample_weights)` in the layout the model expects.

    Packed rows (`pretraining_dataset(..., packing=...)`): the features also
    hold `instance_ids`, `position_ids` (see `BertEncoder`) and
    `cls_positions` `[batch, instances]`, each instance's `[CLS]`; the NSP
    head reads each instance's own `[CLS]` through the encoder's pooler, and
    `nsp` is `[batch, instances, 2]`. `mask_positions` index the packed row.

    Args:
        encoder: `kbert.models.BertEncoder` (or `keras_hub.models.BertBackbone`,
            which takes no packed rows).
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

    def __init__(self, encoder: BertEncoder, next_sentence: bool = True, **kwargs):
        # === Layers ===
        self.encoder = encoder
        activation = getattr(encoder, "activation", "gelu_approximate")
        self.masked_lm_head = BertMaskedLMHead(
            token_embedding=encoder.token_embedding,
            intermediate_activation=get_activation(activation),
            layer_norm_epsilon=getattr(encoder, "layer_norm_epsilon", 1e-12),
            kernel_initializer=bert_initializer(getattr(encoder, "initializer_range", 0.02)),
            dtype=encoder.dtype_policy,
            name="masked_lm_head",
        )
        self.masked_lm_logits = keras.layers.Activation(
            "linear", dtype="float32", name="masked_lm_logits"
        )
        self.next_sentence_head = (
            NextSentenceHead(dtype=encoder.dtype_policy, name="next_sentence_head")
            if next_sentence
            else None
        )

        # === Functional model ===
        inputs = self._encoder_inputs()
        encoded = encoder(dict(inputs))
        inputs["mask_positions"] = keras.Input(shape=(None,), dtype="int32", name="mask_positions")
        outputs = {
            "mlm": self.masked_lm_logits(
                self.masked_lm_head(
                    encoded["sequence_output"], mask_positions=inputs["mask_positions"]
                )
            )
        }
        if next_sentence:
            outputs["nsp"] = self.next_sentence_head(encoded["pooled_output"])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        # === Config ===
        self.next_sentence = next_sentence

    def call(self, inputs, training=None, mask=None):
        if isinstance(inputs, dict) and "cls_positions" in inputs:
            return self._call_packed(inputs, training)
        return super().call(inputs, training=training, mask=mask)

    def _call_packed(self, inputs, training):
        """The heads on a packed row: MLM at `mask_positions`, NSP at every `cls_positions`."""
        encoded = self.encoder(
            {key: inputs[key] for key in ("token_ids", "segment_ids", "padding_mask", *PACKED_INPUTS)},
            training=training)
        sequence = encoded["sequence_output"]
        outputs = {"mlm": self.masked_lm_logits(
            self.masked_lm_head(sequence, mask_positions=inputs["mask_positions"]))}
        if self.next_sentence:
            cls = ops.take_along_axis(
                sequence, ops.expand_dims(ops.cast(inputs["cls_positions"], "int32"), -1), axis=1)
            outputs["nsp"] = self.next_sentence_head(self.encoder.pooled_dense(cls))
        return outputs

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        *,
        metrics="auto",
        weighted_metrics="auto",
        **kwargs,
    ):
        """Configures training; "auto" arguments get the pre-training defaults.

        Args:
            optimizer: optimizer or "auto" (AdamW, learning rate 1e-4, weight
                decay 0.01 except LayerNorm and biases, epsilon 1e-6, global
                norm clipping 1.0).
            loss: loss dict or "auto" (weighted MLM and NSP cross-entropy).
            metrics: metrics or "auto" (`next_sentence_accuracy`).
            weighted_metrics: metrics or "auto" (`masked_lm_accuracy`, weighted
                by `masked_lm_weights`).
            **kwargs: passed to `keras.Model.compile`, such as
                `steps_per_execution` and `jit_compile`.
        """
        if optimizer == "auto":
            optimizer = keras.optimizers.AdamW(
                learning_rate=1e-4, weight_decay=0.01, epsilon=1e-6, global_clipnorm=1.0
            )
            optimizer.exclude_from_weight_decay(var_names=["layer_norm", "bias"])
        if loss == "auto":
            loss = {
                # Averaged over the sum of masked_lm_weights as in the original,
                # so padded prediction slots don't dilute the loss.
                "mlm": keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True, reduction="mean_with_sample_weight"
                )
            }
            if self.next_sentence:
                # Weighted mean: packed rows carry empty NSP slots of weight 0.
                loss["nsp"] = keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True, reduction="mean_with_sample_weight")
        if metrics == "auto":
            metrics = (
                {"nsp": [keras.metrics.SparseCategoricalAccuracy(name="next_sentence_accuracy")]}
                if self.next_sentence
                else None
            )
        if weighted_metrics == "auto":
            weighted_metrics = {
                "mlm": [keras.metrics.SparseCategoricalAccuracy(name="masked_lm_accuracy")]
            }
        super().compile(
            optimizer=optimizer,
            loss=loss,
            metrics=metrics,
            weighted_metrics=weighted_metrics,
            **kwargs,
        )
