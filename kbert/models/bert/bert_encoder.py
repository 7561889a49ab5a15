"""The BERT encoder: embeddings, bidirectional Transformer blocks, pooler."""

from __future__ import annotations

import inspect

import keras
import keras_hub
from keras_hub.layers import PositionEmbedding
from keras_hub.layers import ReversibleEmbedding
from keras_hub.layers import TransformerEncoder

from kbert.layers import Dropout
from kbert.layers import LayerNormalization
from kbert.layers import get_activation
from kbert.layers import use_fast_layers
from kbert.models.bert.bert_config import bert_config_to_arguments
from kbert.models.initializers import truncated_normal
from kbert.models.packed_rows import CLS_POSITIONS
from kbert.models.packed_rows import PackedRows
from kbert.models.packed_rows import check_packed_inputs
from kbert.models.packed_rows import gather_positions
from kbert.models.packed_rows import is_packed
from kbert.models.packed_rows import packed_attention_mask


class _AttentionScoringBlock(TransformerEncoder):
    """keras-hub's `TransformerEncoder` whose symbolic call can also give its attention scores.

    keras-hub's `compute_output_shape` describes the block's output only, so a
    functional graph cannot take `(output, scores)` from
    `return_attention_scores=True`; this output spec can. Layers, weights
    and `call` are keras-hub's.
    """

    def compute_output_spec(self, inputs, *args, return_attention_scores=False, **kwargs):
        output = keras.KerasTensor(inputs.shape, dtype=self.compute_dtype)
        if not return_attention_scores:
            return output
        batch, length = inputs.shape[0], inputs.shape[1]
        return output, keras.KerasTensor((batch, self.num_heads, length, length),
                                         dtype=self.compute_dtype)


@keras.saving.register_keras_serializable(package="kbert")
class BertEncoder(PackedRows, keras_hub.models.Backbone):
    """A BERT encoder with the original paper's numerics, built from keras-hub layers.

    Token, segment and position embeddings are summed and layer-normalised, then
    run through `num_layers` post-LayerNorm Transformer blocks with bidirectional
    self-attention and a GELU feed-forward; a tanh dense layer on the `[CLS]`
    position gives the pooled output. LayerNorm epsilon is 1e-12 and weights start
    from `TruncatedNormal(0.02)`, as in google-research/bert.

    The argument names, input and output names and layer names are those of
    `keras_hub.models.BertBackbone`, so a `BertEncoder` stands in for one:
    copying weights layer by layer gives the same outputs.

    Packed rows (several instances in one row, `kbert.data.packing`): pass
    `instance_ids` (each token's instance, 1, 2, ...; 0 for padding) and
    `position_ids` (positions restarting at 0 in each instance) with the three
    usual inputs. Attention then stays inside each instance (a
    block-diagonal mask) and every instance's `sequence_output` is what it
    would be alone; `pooled_output` is that of the row's first token, or, given
    `cls_positions` `[batch, instances]`, that of each instance's `[CLS]`
    (`[batch, instances, hidden]`). The weights and the functional graph are
    the same, so `.keras` files and SavedModels with the three inputs are
    unchanged; one method, `_forward`, builds the graph and runs packed rows
    (see `kbert.models.packed_rows`).

    Args:
        vocabulary_size: int. Number of WordPiece tokens.
        num_layers: int. Number of Transformer blocks (L).
        num_heads: int. Attention heads per block (A). Must divide `hidden_dim`.
        hidden_dim: int. Width of the model (H).
        intermediate_dim: int. Width of the feed-forward layer (usually 4H).
        dropout: float. Dropout rate for embeddings, attention and feed-forward
            outputs. Defaults to 0.1.
        max_sequence_length: int. Number of learned positions. Defaults to 512.
        num_segments: int. Number of segment (token type) ids. Defaults to 2.
        activation: str. Feed-forward activation; `gelu_approximate` is original
            BERT's tanh GELU, `gelu_exact` the erf form Hugging Face's `gelu`
            means. See `kbert.layers.get_activation`. Defaults to
            `"gelu_approximate"`.
        layer_norm_epsilon: float. Defaults to 1e-12.
        initializer_range: float. Stddev of the truncated-normal initializer.
            Defaults to 0.02.
        embedding_dim: int or None. Width of the token, position and segment
            embeddings. When it differs from `hidden_dim`, a dense
            `embeddings_projection` maps the normalised embeddings to
            `hidden_dim`, as in ELECTRA-Small (embeddings 128, hidden 256) and
            keras-hub's `ElectraBackbone`. Defaults to None: `hidden_dim`, no
            projection (BERT).
        shared_embeddings: `BertEncoder` or None. Another encoder whose token,
            position and segment embeddings and embedding LayerNorm this one
            uses (the same variables), as ELECTRA's generator shares the
            discriminator's; `vocabulary_size`, `max_sequence_length`,
            `num_segments` and the embedding width must match it. Not part of
            `get_config()`: the model that shares them (such as
            `ElectraPretrainer`) passes it again when it is rebuilt. Defaults
            to None.
        output_all_layers: bool. Also output `encoder_outputs`: the list of
            every Transformer block's output, first to last (Model Garden's
            name), for feature extraction and layer mixes. The default
            outputs and the weights are the same either way. Defaults to False.
        output_attention_scores: bool. Also output `attention_scores`: each
            block's attention probabilities, `[batch, num_heads, length,
            length]`, first to last (for attention distillation, TinyBERT).
            The default outputs and the weights are the same either way; the
            blocks then run keras-hub's unfused attention path. Defaults to False.
        dtype: str or `keras.DTypePolicy`. Compute and variable dtype, such as
            `"mixed_bfloat16"`. Defaults to the global policy.
        **kwargs: other keyword arguments passed to `keras.Model`, such as `name`.

    Example:

    >>> encoder = kbert.models.BertEncoder(
    ...     vocabulary_size=30522, num_layers=2, num_heads=2, hidden_dim=128,
    ...     intermediate_dim=512, max_sequence_length=128)
    >>> outputs = encoder({
    ...     "token_ids": np.ones((1, 12), "int32"),
    ...     "segment_ids": np.zeros((1, 12), "int32"),
    ...     "padding_mask": np.ones((1, 12), "int32")})
    >>> outputs["sequence_output"].shape, outputs["pooled_output"].shape
    ((1, 12, 128), (1, 128))

    Reference:
        - [Devlin et al., 2019](https://arxiv.org/abs/1810.04805)
    """

    # The encoder's sizes: what two encoders must share for the weights of one
    # to fit the other (`--init_checkpoint`, conversions, ELECTRA's shared
    # embeddings). `kbert.models.encoder_sizes(encoder)` reads them.
    size_keys = ("vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
                 "max_sequence_length", "num_segments", "embedding_width")

    def __init__(
        self,
        vocabulary_size: int,
        num_layers: int,
        num_heads: int,
        hidden_dim: int,
        intermediate_dim: int,
        dropout: float = 0.1,
        max_sequence_length: int = 512,
        num_segments: int = 2,
        activation: str = "gelu_approximate",
        layer_norm_epsilon: float = 1e-12,
        initializer_range: float = 0.02,
        embedding_dim: int | None = None,
        shared_embeddings: "BertEncoder | None" = None,
        output_all_layers: bool = False,
        output_attention_scores: bool = False,
        dtype=None,
        **kwargs,
    ):
        if hidden_dim % num_heads:
            raise ValueError(
                f"`hidden_dim={hidden_dim}` is not divisible by `num_heads={num_heads}`; "
                "each attention head gets hidden_dim / num_heads dimensions, so choose "
                "sizes such as hidden_dim=768, num_heads=12."
            )
        activation_fn = get_activation(activation)
        embedding_width = hidden_dim if embedding_dim is None else embedding_dim

        # === Layers ===
        if shared_embeddings is not None:
            _check_shareable(shared_embeddings, vocabulary_size, max_sequence_length,
                             num_segments, embedding_width)
            source = shared_embeddings
        else:
            source = _EmbeddingLayers(vocabulary_size, max_sequence_length, num_segments,
                                      embedding_width, layer_norm_epsilon, initializer_range, dtype)
        self.token_embedding = source.token_embedding
        self.position_embedding = source.position_embedding
        self.segment_embedding = source.segment_embedding
        self.embeddings_layer_norm = source.embeddings_layer_norm
        self.embeddings_add = keras.layers.Add(dtype=dtype, name="embeddings_add")
        self.embeddings_dropout = Dropout(
            dropout, dtype=dtype, name="embeddings_dropout"
        )
        # As google-research/electra: a projection only where the widths differ,
        # so BERT encoders keep exactly their layers and weights files.
        self.embeddings_projection = None
        if embedding_width != hidden_dim:
            self.embeddings_projection = keras.layers.Dense(
                hidden_dim,
                kernel_initializer=truncated_normal(initializer_range),
                dtype=dtype,
                name="embeddings_projection",
            )
        # Only an encoder asked for its attention scores gets the scoring block.
        block_class = _AttentionScoringBlock if output_attention_scores else TransformerEncoder
        self.transformer_layers = [
            self._transformer_block(
                i,
                block_class,
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
                activation=activation_fn,
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=truncated_normal(initializer_range),
                dtype=dtype,
            )
            for i in range(num_layers)
        ]
        self.final_layer_norm = self._final_layer_norm(layer_norm_epsilon, dtype)
        self.pooled_dense = keras.layers.Dense(
            hidden_dim,
            activation="tanh",
            kernel_initializer=truncated_normal(initializer_range),
            dtype=dtype,
            name="pooled_dense",
        )

        # === Functional model ===
        # `_forward` reads these two; set before the graph is built.
        self.output_all_layers = output_all_layers
        self.output_attention_scores = output_attention_scores
        inputs = {
            "token_ids": keras.Input(shape=(None,), dtype="int32", name="token_ids"),
            "segment_ids": keras.Input(shape=(None,), dtype="int32", name="segment_ids"),
            "padding_mask": keras.Input(shape=(None,), dtype="int32", name="padding_mask"),
        }
        outputs = self._forward(inputs)
        # keras-hub builds each block's Dropout and LayerNormalization layers
        # on its first call (just now); kbert's faster ones from here on.
        for transformer_layer in self.transformer_layers:
            use_fast_layers(transformer_layer)
        super().__init__(inputs=inputs, outputs=outputs, dtype=dtype, **kwargs)

        # === Config ===
        self.vocabulary_size = vocabulary_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.hidden_dim = hidden_dim
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range
        self.embedding_dim = embedding_dim
        # `shared_embeddings` is not kept: an encoder held as an attribute
        # would become a sublayer, its weights listed (and saved) twice.
        self.cls_token_index = 0

    def _forward(self, inputs: dict, training=None) -> dict:
        """The encoder's layers, once: the functional graph, and packed rows through `call`.

        Args:
            inputs: dict. `token_ids`, `segment_ids`, `padding_mask`
                (`keras.Input`s when `__init__` builds the graph); for packed
                rows also `instance_ids` and `position_ids` (attention stays
                within each instance, positions restart), and optionally
                `cls_positions` (`pooled_output` per instance).
            training: bool or None. Whether dropout is on.

        Returns:
            dict: `sequence_output`, `pooled_output` (and `encoder_outputs`,
            `attention_scores` when the encoder outputs them).
        """
        packed = is_packed(inputs)
        if packed:
            check_packed_inputs(inputs)
        tokens = self.token_embedding(inputs["token_ids"])
        if packed:
            positions = self.position_embedding(tokens, positions=inputs["position_ids"])
        else:
            positions = self.position_embedding(tokens)
        segments = self.segment_embedding(inputs["segment_ids"])
        x = self.embeddings_add((tokens, positions, segments))
        x = self.embeddings_layer_norm(x)
        x = self.embeddings_dropout(x, training=training)
        if self.embeddings_projection is not None:
            x = self.embeddings_projection(x)
        masks = {"padding_mask": inputs["padding_mask"]}
        if packed:
            masks["attention_mask"] = packed_attention_mask(inputs["instance_ids"])
        layer_outputs, attention_scores = [], []
        for transformer_layer in self.transformer_layers:
            if self.output_attention_scores:
                x, scores = transformer_layer(x, training=training, return_attention_scores=True,
                                              **masks)
                attention_scores.append(scores)
            else:
                x = transformer_layer(x, training=training, **masks)
            layer_outputs.append(x)
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
        # Each packed instance's own [CLS] when given, else the row's first token.
        cls = (gather_positions(x, inputs[CLS_POSITIONS]) if CLS_POSITIONS in inputs
               else x[:, 0, :])
        outputs = {"sequence_output": x, "pooled_output": self.pooled_dense(cls)}
        if self.output_all_layers:
            outputs["encoder_outputs"] = layer_outputs
        if self.output_attention_scores:
            outputs["attention_scores"] = attention_scores
        return outputs

    def _transformer_block(self, index: int, block_class: type,
                           **arguments) -> keras.layers.Layer:
        """Builds block `index`: BERT's post-LayerNorm keras-hub `TransformerEncoder`.

        A variant of the BERT block (a pre-LayerNorm encoder, say) overrides
        this and `_final_layer_norm`; the graph, packed rows, saving and every
        user of the encoder stay as they are.

        Args:
            index: int. The block's number, 0 first; its name is
                `transformer_layer_{index}`.
            block_class: the `TransformerEncoder` class to build (a subclass
                that can also output attention scores when asked).
            **arguments: the block's sizes, numerics and dtype.

        Returns:
            The block.
        """
        return block_class(normalize_first=False, name=f"transformer_layer_{index}",
                           **arguments)

    def _final_layer_norm(self, layer_norm_epsilon: float, dtype) -> keras.layers.Layer | None:
        """A LayerNorm after the last block; BERT's post-LayerNorm blocks need none (None)."""
        return None

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocabulary_size": self.vocabulary_size,
                "num_layers": self.num_layers,
                "num_heads": self.num_heads,
                "hidden_dim": self.hidden_dim,
                "intermediate_dim": self.intermediate_dim,
                "dropout": self.dropout,
                "max_sequence_length": self.max_sequence_length,
                "num_segments": self.num_segments,
                "activation": self.activation,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "initializer_range": self.initializer_range,
            }
        )
        # Only when set, so a BERT encoder's config (and saved files) stay as
        # they were before the argument existed.
        if self.embedding_dim is not None:
            config["embedding_dim"] = self.embedding_dim
        if self.output_all_layers:
            # Only when set, so default configs (and files holding them) stay as they were.
            config["output_all_layers"] = True
        if self.output_attention_scores:
            config["output_attention_scores"] = True
        return config

    @property
    def embedding_width(self) -> int:
        """Width of the embeddings: `embedding_dim`, or `hidden_dim` when that is None."""
        return self.hidden_dim if self.embedding_dim is None else self.embedding_dim

    def with_all_layers(self) -> "BertEncoder":
        """This encoder with `output_all_layers=True`: a copy with the same weights.

        Returns:
            `self` if it already outputs `encoder_outputs`, else a new
            `BertEncoder` of the same config and weights that does.

        Example:

        >>> layers = encoder.with_all_layers()(inputs)["encoder_outputs"]
        """
        if self.output_all_layers:
            return self
        copy = type(self).from_config({**self.get_config(), "output_all_layers": True})
        copy.set_weights(self.get_weights())
        return copy

    @classmethod
    def sizes_from_arguments(cls, arguments: dict) -> dict:
        """The `size_keys` values of an encoder built from `arguments`, without building it.

        Args:
            arguments: dict. Constructor arguments (e.g. read from
                `bert_config.json`), with at least the sizes that have no default.

        Returns:
            dict of each of `size_keys` to its value (`embedding_width` is
            `embedding_dim`, or `hidden_dim` when that is None).

        Example:

        >>> BertEncoder.sizes_from_arguments(read_bert_config(path))["embedding_width"]
        768
        """
        defaults = {name: parameter.default
                    for name, parameter in inspect.signature(cls.__init__).parameters.items()
                    if parameter.default is not inspect.Parameter.empty}
        arguments = {**defaults, **arguments}
        sizes = {key: arguments[key] for key in cls.size_keys if key != "embedding_width"}
        sizes["embedding_width"] = arguments.get("embedding_dim") or arguments["hidden_dim"]
        return sizes

    @classmethod
    def from_bert_config(cls, config: dict, **kwargs) -> "BertEncoder":
        """Builds an encoder from a google-research/bert `bert_config.json` dict.

        Reading the file is `kbert.checkpoints.read_bert_config(path)`, which
        returns these arguments already mapped; this takes the parsed JSON.

        Args:
            config: dict. The parsed `bert_config.json` (original key names).
            **kwargs: overrides of constructor arguments, such as `dtype`.

        Returns:
            A freshly initialised `BertEncoder` with the config's sizes.

        Example:

        >>> config = json.load(open("uncased_L-12_H-768_A-12/bert_config.json"))
        >>> encoder = kbert.models.BertEncoder.from_bert_config(config)
        """
        return cls(**{**bert_config_to_arguments(config), **kwargs})


class _EmbeddingLayers:
    """A new encoder's token, position and segment embeddings and their LayerNorm (not a layer)."""

    def __init__(self, vocabulary_size: int, max_sequence_length: int, num_segments: int,
                 width: int, layer_norm_epsilon: float, initializer_range: float, dtype) -> None:
        self.token_embedding = ReversibleEmbedding(
            input_dim=vocabulary_size,
            output_dim=width,
            embeddings_initializer=truncated_normal(initializer_range),
            dtype=dtype,
            name="token_embedding",
        )
        self.position_embedding = PositionEmbedding(
            sequence_length=max_sequence_length,
            initializer=truncated_normal(initializer_range),
            dtype=dtype,
            name="position_embedding",
        )
        self.segment_embedding = keras.layers.Embedding(
            input_dim=num_segments,
            output_dim=width,
            embeddings_initializer=truncated_normal(initializer_range),
            dtype=dtype,
            name="segment_embedding",
        )
        self.embeddings_layer_norm = LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=dtype, name="embeddings_layer_norm"
        )


def _check_shareable(source: BertEncoder, vocabulary_size: int, max_sequence_length: int,
                     num_segments: int, embedding_width: int) -> None:
    """Raises unless `source`'s embedding layers have the sizes this encoder needs."""
    wanted = {"vocabulary_size": vocabulary_size, "max_sequence_length": max_sequence_length,
              "num_segments": num_segments, "embedding_width": embedding_width}
    problems = [f"{key}={value} but the shared encoder has {getattr(source, key)}"
                for key, value in wanted.items() if getattr(source, key) != value]
    if problems:
        raise ValueError("shared_embeddings cannot be used: " + "; ".join(problems) + ".")
