"""The ModernBERT encoder: token embeddings, alternating local/global RoPE blocks, final norm."""

from __future__ import annotations

import math

import keras
import keras_hub
import numpy as np
from keras import ops
from keras_hub.layers import ReversibleEmbedding

from kbert.layers import Dropout
from kbert.layers import LayerNormalization
from kbert.models.initializers import truncated_normal
from kbert.models.modernbert.modernbert_encoder_layer import ModernBertEncoderLayer
from kbert.models.packed_rows import CLS_POSITIONS
from kbert.models.packed_rows import PackedRows
from kbert.models.packed_rows import check_packed_inputs
from kbert.models.packed_rows import gather_positions
from kbert.models.packed_rows import is_packed

# How `pooled_output` is made from `sequence_output` (HF's `classifier_pooling`).
POOLINGS = ("cls", "mean")


@keras.saving.register_keras_serializable(package="kbert")
class ModernBertEncoder(PackedRows, keras_hub.models.Backbone):
    """ModernBERT (Warner et al., 2024) with Hugging Face's `ModernBertModel` semantics.

    Token embeddings (no position embeddings) and a LayerNorm, then
    `num_layers` pre-norm blocks (`ModernBertEncoderLayer`): rotary position
    embeddings, attention that is global in every
    `global_attention_every_n_layers`-th block starting with the first (RoPE
    theta `global_rope_theta`) and local elsewhere (each token sees
    `local_attention_window // 2` positions on either side; theta
    `local_rope_theta`), and a GeGLU feed-forward; the first block's
    attention input is not normalised again; a final LayerNorm. Local
    blocks compute attention in blocks and global ones a chunk of queries at
    a time, so memory grows linearly with length for a fixed window and no
    `[length, length]` matrix exists beyond one chunk: inputs up to
    `max_sequence_length` (8,192 in the released models).

    The inputs and outputs are `BertEncoder`'s (`kbert.models.Encoder`):
    `token_ids`, `segment_ids` (optional and ignored: ModernBERT has no
    segments, and Hugging Face's takes `input_ids` and `attention_mask`
    only), `padding_mask`; `sequence_output` (undefined at padding, as in HF) and
    `pooled_output`, which has no weights: the first token's output
    (`classifier_pooling="cls"`) or the mean over the real tokens
    (`"mean"`). Packed rows (`instance_ids`, `position_ids`, optionally
    `cls_positions`) keep attention inside each instance and restart RoPE
    positions, as HF's unpadded (flash-attention) path does; with
    `cls_positions` the pooled output is per instance.

    Hugging Face names: `token_embedding` is `embeddings.tok_embeddings`,
    `embeddings_layer_norm` `embeddings.norm`, `transformer_layer_{i}` is
    `layers.{i}` (see `ModernBertEncoderLayer`), `final_layer_norm`
    `final_norm`.

    Args:
        vocabulary_size: int. Number of tokens. Defaults to 50368.
        num_layers: int. Number of blocks. Defaults to 22.
        num_heads: int. Attention heads. Defaults to 12.
        hidden_dim: int. Width of the model. Defaults to 768.
        intermediate_dim: int. Width of each GeGLU half (HF's
            `intermediate_size`). Defaults to 1152.
        dropout: float. Dropout on the embeddings, after each attention
            output projection and inside each feed-forward. Defaults to 0.0.
        max_sequence_length: int. Longest input (RoPE has no table; longer
            inputs are refused when their length is known). Defaults to 8192.
        local_attention_window: int. HF's `local_attention`: the whole
            window of a local block. Defaults to 128.
        global_attention_every_n_layers: int. Block `i` is global when
            `i % n == 0`. Defaults to 3.
        global_rope_theta: float. RoPE theta of global blocks. Defaults to 160000.0.
        local_rope_theta: float. RoPE theta of local blocks. Defaults to 10000.0.
        activation: str. GeGLU activation (`kbert.layers.get_activation`).
            Defaults to `"gelu_exact"` (HF's `gelu`).
        layer_norm_epsilon: float. HF's `norm_eps`. Defaults to 1e-5.
        norm_bias: bool. LayerNorm biases. Defaults to False.
        attention_bias: bool. Attention projection biases. Defaults to False.
        mlp_bias: bool. Feed-forward biases. Defaults to False.
        classifier_pooling: str. `"cls"` or `"mean"`. Defaults to `"cls"`.
        initializer_range: float. Stddev of the truncated-normal initializer;
            output projections use `initializer_range / sqrt(2 * num_layers)`
            as HF does. Defaults to 0.02.
        attention_chunk_size: int. Queries per chunk in global blocks (memory
            against speed; no effect on the values). Defaults to 512.
        output_all_layers: bool. Also output `encoder_outputs` (every
            block's output). Defaults to False.
        output_attention_scores: bool. Also output `attention_scores`, each
            block's `[batch, heads, length, length]` probabilities (computed
            with the full score matrix). Defaults to False.
        dtype: str or `keras.DTypePolicy`. Defaults to the global policy.
        **kwargs: passed to `keras.Model`, such as `name`.

    Example:

    >>> encoder = kbert.models.ModernBertEncoder(
    ...     vocabulary_size=1000, num_layers=3, num_heads=4, hidden_dim=64,
    ...     intermediate_dim=96, local_attention_window=16)
    >>> outputs = encoder({
    ...     "token_ids": np.ones((1, 40), "int32"),
    ...     "padding_mask": np.ones((1, 40), "int32")})
    >>> outputs["sequence_output"].shape, outputs["pooled_output"].shape
    ((1, 40, 64), (1, 64))

    Reference:
        - [Warner et al., 2024](https://arxiv.org/abs/2412.13663)
    """

    # What two encoders must share for the weights of one to fit the other.
    # Not `max_sequence_length` (RoPE has no table: a checkpoint continues at
    # a longer length) nor the window or the thetas.
    size_keys = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
                 "norm_bias", "attention_bias", "mlp_bias")
    # Served NER and QA read long texts in windows of `max_sequence_length`,
    # not of the fine-tuning length: RoPE has no table, and the model was
    # pre-trained on every length up to it (`kbert.tasks.serving.window_preprocessor`).
    long_windows = True
    # Settings that change no weight (RoPE has no table): a continued run may
    # raise them for a context-extension phase (`kbert.configurables.
    # encoder_from_directory`; docs/pretraining.md, "Context extension").
    context_keys = ("max_sequence_length", "global_rope_theta", "local_rope_theta",
                    "attention_chunk_size")

    def __init__(
        self,
        vocabulary_size: int = 50368,
        num_layers: int = 22,
        num_heads: int = 12,
        hidden_dim: int = 768,
        intermediate_dim: int = 1152,
        dropout: float = 0.0,
        max_sequence_length: int = 8192,
        local_attention_window: int = 128,
        global_attention_every_n_layers: int = 3,
        global_rope_theta: float = 160000.0,
        local_rope_theta: float = 10000.0,
        activation: str = "gelu_exact",
        layer_norm_epsilon: float = 1e-5,
        norm_bias: bool = False,
        attention_bias: bool = False,
        mlp_bias: bool = False,
        classifier_pooling: str = "cls",
        initializer_range: float = 0.02,
        attention_chunk_size: int = 512,
        output_all_layers: bool = False,
        output_attention_scores: bool = False,
        dtype=None,
        **kwargs,
    ):
        if hidden_dim % num_heads or (hidden_dim // num_heads) % 2:
            raise ValueError(
                f"ModernBertEncoder: hidden_dim={hidden_dim} / num_heads={num_heads} must be a "
                "whole, even head size (RoPE rotates pairs of dimensions), e.g. 768 / 12.")
        if classifier_pooling not in POOLINGS:
            raise ValueError(f"ModernBertEncoder: classifier_pooling={classifier_pooling!r} is "
                             f"not one of {POOLINGS}.")
        if global_attention_every_n_layers < 1 or local_attention_window < 0:
            raise ValueError(
                f"ModernBertEncoder: global_attention_every_n_layers="
                f"{global_attention_every_n_layers} must be >= 1 and local_attention_window="
                f"{local_attention_window} >= 0.")

        # === Layers ===
        self.token_embedding = ReversibleEmbedding(
            input_dim=vocabulary_size,
            output_dim=hidden_dim,
            embeddings_initializer=truncated_normal(initializer_range),
            dtype=dtype,
            name="token_embedding",
        )
        self.embeddings_layer_norm = LayerNormalization(
            epsilon=layer_norm_epsilon, center=norm_bias, dtype=dtype,
            name="embeddings_layer_norm")
        self.embeddings_dropout = Dropout(dropout, dtype=dtype, name="embeddings_dropout")
        # HF initialises output projections with std / sqrt(2 * layers).
        output_range = initializer_range / math.sqrt(2.0 * num_layers)
        self.transformer_layers = []
        for index in range(num_layers):
            is_global = index % global_attention_every_n_layers == 0
            self.transformer_layers.append(ModernBertEncoderLayer(
                hidden_dim=hidden_dim,
                num_heads=num_heads,
                intermediate_dim=intermediate_dim,
                local_attention_window=None if is_global else local_attention_window,
                rope_theta=global_rope_theta if is_global else local_rope_theta,
                activation=activation,
                layer_norm_epsilon=layer_norm_epsilon,
                attention_norm=index != 0,
                norm_bias=norm_bias,
                attention_bias=attention_bias,
                mlp_bias=mlp_bias,
                dropout=dropout,
                attention_chunk_size=attention_chunk_size,
                kernel_initializer=truncated_normal(initializer_range),
                output_initializer=truncated_normal(output_range),
                dtype=dtype,
                name=f"transformer_layer_{index}",
            ))
        self.final_layer_norm = LayerNormalization(
            epsilon=layer_norm_epsilon, center=norm_bias, dtype=dtype, name="final_layer_norm")

        # === Functional model ===
        self.output_all_layers = output_all_layers
        self.output_attention_scores = output_attention_scores
        self.classifier_pooling = classifier_pooling
        self.max_sequence_length = max_sequence_length
        inputs = {
            "token_ids": keras.Input(shape=(None,), dtype="int32", name="token_ids"),
            "segment_ids": keras.Input(shape=(None,), dtype="int32", name="segment_ids"),
            "padding_mask": keras.Input(shape=(None,), dtype="int32", name="padding_mask"),
        }
        outputs = self._forward(inputs)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.max_sequence_length = max_sequence_length
        self.local_attention_window = local_attention_window
        self.global_attention_every_n_layers = global_attention_every_n_layers
        self.global_rope_theta = global_rope_theta
        self.local_rope_theta = local_rope_theta
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.norm_bias = norm_bias
        self.attention_bias = attention_bias
        self.mlp_bias = mlp_bias
        self.classifier_pooling = classifier_pooling
        self.initializer_range = initializer_range
        self.attention_chunk_size = attention_chunk_size
        self.cls_token_index = 0

    def _forward(self, inputs: dict, training=None) -> dict:
        """The encoder's layers, once: the functional graph, and packed rows through `call`.

        Args:
            inputs: dict. `token_ids`, `segment_ids`, `padding_mask`; for
                packed rows also `instance_ids` and `position_ids`, and
                optionally `cls_positions`.
            training: bool or None. Whether dropout is on.

        Returns:
            dict: `sequence_output`, `pooled_output` (and `encoder_outputs`,
            `attention_scores` when the encoder outputs them).
        """
        packed = is_packed(inputs)
        if packed:
            check_packed_inputs(inputs)
            attention_ids, position_ids = inputs["instance_ids"], inputs["position_ids"]
        else:
            attention_ids, position_ids = inputs["padding_mask"], None
        x = self.token_embedding(inputs["token_ids"])
        x = self.embeddings_dropout(self.embeddings_layer_norm(x), training=training)
        layer_outputs, attention_scores = [], []
        for transformer_layer in self.transformer_layers:
            if self.output_attention_scores:
                x, scores = transformer_layer(x, attention_ids=attention_ids,
                                              position_ids=position_ids, training=training,
                                              return_attention_scores=True)
                attention_scores.append(scores)
            else:
                x = transformer_layer(x, attention_ids=attention_ids, position_ids=position_ids,
                                      training=training)
            layer_outputs.append(x)
        x = self.final_layer_norm(x)
        outputs = {"sequence_output": x, "pooled_output": self._pool(x, inputs)}
        if self.output_all_layers:
            outputs["encoder_outputs"] = layer_outputs
        if self.output_attention_scores:
            outputs["attention_scores"] = attention_scores
        return outputs

    def _pool(self, x, inputs: dict):
        """HF's `classifier_pooling`: the first token, or the mean over the real tokens.

        Packed rows with `cls_positions` pool each instance: its first token,
        or the mean over its tokens.
        """
        per_instance = CLS_POSITIONS in inputs
        if self.classifier_pooling == "cls":
            return gather_positions(x, inputs[CLS_POSITIONS]) if per_instance else x[:, 0, :]
        if per_instance:
            count = ops.shape(inputs[CLS_POSITIONS])[1]
            numbers = ops.arange(1, count + 1, dtype=inputs["instance_ids"].dtype)
            weights = ops.cast(ops.equal(ops.expand_dims(inputs["instance_ids"], 1),
                                         numbers[None, :, None]), x.dtype)
        else:
            weights = ops.expand_dims(ops.cast(inputs["padding_mask"], x.dtype), 1)
        # weights: [batch, instances (1 unpacked), length].
        total = ops.einsum("bnt,bth->bnh", weights, x)
        pooled = total / ops.maximum(ops.sum(weights, axis=-1, keepdims=True), 1.0)
        return pooled if per_instance else pooled[:, 0]

    def __call__(self, inputs, *args, **kwargs):
        # The functional graph takes the three inputs every kbert encoder
        # takes (the task heads pass them, saved files hold them), so a left
        # out `segment_ids` is filled with zeros here, before Keras checks
        # the inputs; given or filled, no layer reads it.
        if isinstance(inputs, dict) and "token_ids" in inputs and "segment_ids" not in inputs:
            token_ids = inputs["token_ids"]
            segment_ids = (np.zeros_like(token_ids) if isinstance(token_ids, np.ndarray)
                           else ops.zeros_like(token_ids))
            inputs = {**inputs, "segment_ids": segment_ids}
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs, training=None, mask=None):
        length = inputs["token_ids"].shape[1] if isinstance(inputs, dict) else None
        if length is not None and length > self.max_sequence_length:
            raise ValueError(
                f"ModernBertEncoder: inputs of {length} tokens exceed max_sequence_length="
                f"{self.max_sequence_length}; shorten them or build the encoder with a larger "
                "max_sequence_length.")
        return super().call(inputs, training=training, mask=mask)

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "hidden_dim": self.hidden_dim,
            "intermediate_dim": self.intermediate_dim,
            "dropout": self.dropout,
            "max_sequence_length": self.max_sequence_length,
            "local_attention_window": self.local_attention_window,
            "global_attention_every_n_layers": self.global_attention_every_n_layers,
            "global_rope_theta": self.global_rope_theta,
            "local_rope_theta": self.local_rope_theta,
            "activation": self.activation,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "norm_bias": self.norm_bias,
            "attention_bias": self.attention_bias,
            "mlp_bias": self.mlp_bias,
            "classifier_pooling": self.classifier_pooling,
            "initializer_range": self.initializer_range,
            "attention_chunk_size": self.attention_chunk_size,
        })
        if self.output_all_layers:
            config["output_all_layers"] = True
        if self.output_attention_scores:
            config["output_attention_scores"] = True
        return config

    @property
    def embedding_width(self) -> int:
        """Width of the token embeddings: `hidden_dim` (ModernBERT has no projection)."""
        return self.hidden_dim

    def with_all_layers(self) -> "ModernBertEncoder":
        """This encoder with `output_all_layers=True`: itself, or a copy with the same weights.

        Returns:
            `self` if it already outputs `encoder_outputs`, else a new
            `ModernBertEncoder` of the same config and weights that does.

        Example:

        >>> layers = encoder.with_all_layers()(inputs)["encoder_outputs"]
        """
        if self.output_all_layers:
            return self
        copy = type(self).from_config({**self.get_config(), "output_all_layers": True})
        copy.set_weights(self.get_weights())
        return copy
