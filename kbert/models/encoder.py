"""The contracts of kbert's models: what an `Encoder` gives its users, what a `Pretrainer` gives training.

`BertEncoder` is one `Encoder`; a second architecture (a new backbone under
`kbert/models/<arch>/` plus a line in `kbert.models.registry.ARCHITECTURES`) is
another, and the task heads, the pre-trainers, distillation, export, the
index and the pre-trained directory take it unchanged as long as it keeps
this contract. `BertPretrainer` and `ElectraPretrainer` are `Pretrainer`s,
which is all `kbert.training.run_pretraining` asks of a model.

These are `typing.Protocol`s: documentation a type checker can read, not
base classes; an encoder is a keras-hub style `keras_hub.models.Backbone`.
"""

from __future__ import annotations

from typing import Any
from typing import ClassVar
from typing import Protocol

import keras
import numpy as np
import tensorflow as tf


class Encoder(Protocol):
    """What task heads, pre-trainers, distillation, export and checkpoints use of an encoder.

    A functional keras-hub `Backbone`, registered with
    `keras.saving.register_keras_serializable` (a task model's `.keras` file
    holds its encoder whole) and named in `kbert.models.registry.ARCHITECTURES`.

    Inputs: a dict of `token_ids`, `segment_ids`, `padding_mask` (int32
    `[batch, length]`; an architecture without segments ignores
    `segment_ids`). Packed rows (`kbert.models.packed_rows`) add
    `instance_ids` and `position_ids`, and optionally `cls_positions`
    `[batch, instances]`: attention stays within each instance and
    `pooled_output` is then per instance. The functional graph takes the
    three inputs only; packed rows go through the same layers
    (`kbert.models.packed_rows.PackedRows`).

    Outputs: a dict of `sequence_output` `[batch, length, hidden_dim]`,
    `pooled_output` `[batch, hidden_dim]` (the sentence vector classifiers
    read), and, when switched on, `encoder_outputs` (every block's output,
    first to last) and `attention_scores` (every block's attention
    probabilities `[batch, num_heads, length, length]`).

    Who uses what:
        - task heads (`BertClassifier`, `BertTokenClassifier`,
          `BertSpanLabeler`, `BertSentenceEncoder`, `BertDualEncoder`):
          the outputs, `hidden_dim`, `num_layers`, `dtype_policy`,
          `output_all_layers`, `with_all_layers()`, `initializer_range`;
        - pre-trainers: `token_embedding` (a keras-hub `ReversibleEmbedding`
          the masked-LM head is tied to), `activation`,
          `layer_norm_epsilon`, `initializer_range`, `vocabulary_size`;
          `ElectraPretrainer` also builds its generator as
          `type(encoder)(**sizes, embedding_dim=encoder.embedding_width,
          shared_embeddings=encoder)`, so an encoder it pre-trains takes
          those two arguments;
        - distillation: `num_layers`, `num_heads`, `hidden_dim`,
          `vocabulary_size`, `max_sequence_length`, `transformer_layers`,
          the config keys `output_all_layers` / `output_attention_scores`;
        - export, index and tools: `max_sequence_length`, `num_layers`,
          `with_all_layers()`, and the optional class attribute
          `long_windows` (True: served NER and QA read long texts in
          windows of `max_sequence_length` rather than the fine-tuning
          length; ModernBERT sets it);
        - checkpoints: `get_config()` / `from_config()` (the pre-trained
          directory records the architecture's name and config, see
          `kbert.checkpoints.save_pretrained`), the weights, `size_keys`;
        - continued pre-training: the optional class attribute
          `context_keys` (config keys that change no weight, which a
          continued run may set differently from its directory; ModernBERT
          names its length and RoPE thetas).

    Example:

    >>> def build(encoder: Encoder) -> keras.Model:
    ...     return kbert.models.BertClassifier(encoder, num_classes=2)
    """

    # The sizes two encoders must share for one's weights to fit the other.
    size_keys: ClassVar[tuple[str, ...]]

    vocabulary_size: int
    num_layers: int
    num_heads: int
    hidden_dim: int
    intermediate_dim: int
    max_sequence_length: int
    dropout: float
    activation: str
    layer_norm_epsilon: float
    initializer_range: float
    output_all_layers: bool
    output_attention_scores: bool
    token_embedding: keras.layers.Layer
    transformer_layers: list[keras.layers.Layer]

    @property
    def embedding_width(self) -> int:
        """Width of the token embeddings (what `token_embedding` outputs)."""

    @property
    def dtype_policy(self) -> keras.DTypePolicy:
        """The Keras dtype policy the heads are built with."""

    def __call__(self, inputs: dict[str, Any], training: bool | None = None) -> dict[str, Any]:
        """The outputs described above."""

    def with_all_layers(self) -> "Encoder":
        """This encoder (or a copy with the same class, config and weights) with `encoder_outputs`."""

    def get_config(self) -> dict[str, Any]:
        """Keras config; `type(encoder).from_config(config)` rebuilds it."""


class Pretrainer(Protocol):
    """What `kbert.training.run_pretraining` uses of a pre-training model.

    A `keras.Model` built in the strategy's scope by the `build_pretrainer`
    callable. The loop knows no objective: it sums `loss_normalizers` over
    every micro-batch and replica of an optimizer step, divides through them
    in `pretraining_losses`, sums the statistics over a reporting interval
    and turns them into metrics with `pretraining_metrics`; the progress
    line shows `progress_labels`. `encoder` is what the pre-trained directory
    holds; `next_sentence` says whether the data must carry NSP labels.
    Besides these it uses the Keras model's `trainable_variables`,
    `variables`, `losses` and `save_weights`.

    Example:

    >>> def build() -> Pretrainer:
    ...     return kbert.models.BertPretrainer(kbert.models.BertEncoder(...))
    >>> kbert.training.run_pretraining("data/*.tfrecord", "out/", build)
    """

    encoder: Encoder
    next_sentence: bool
    # Metrics of `pretraining_metrics` on the progress line -> their labels.
    progress_labels: ClassVar[dict[str, str]]

    def loss_normalizers(self, features: dict[str, tf.Tensor], labels: dict[str, tf.Tensor],
                         sample_weights: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """This micro-batch's part of what each loss is averaged over (float32 scalars)."""

    def pretraining_losses(self, features: dict[str, tf.Tensor], labels: dict[str, tf.Tensor],
                           sample_weights: dict[str, tf.Tensor], totals: dict[str, tf.Tensor],
                           training: bool = True) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
        """Runs the model: this micro-batch's share of the loss, and summable statistics."""

    def pretraining_metrics(self, sums: dict[str, np.ndarray]) -> dict[str, float | None]:
        """Statistics and normalizers summed over an interval -> the metrics reported."""


def encoder_sizes(encoder: Encoder) -> dict[str, int]:
    """An encoder's sizes: its architecture's `size_keys` and their values.

    Args:
        encoder: an `Encoder`.

    Returns:
        dict of size name to value, in `size_keys` order.

    Example:

    >>> kbert.models.encoder_sizes(encoder)["hidden_dim"]
    768
    """
    return {key: getattr(encoder, key) for key in type(encoder).size_keys}
