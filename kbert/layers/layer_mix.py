"""Features from chosen encoder layers: the BERT paper's feature-based combinations and ELMo's mix."""

from __future__ import annotations

from typing import Sequence

import keras
from keras import ops

# How `EncoderLayerMix` combines the Transformer blocks' outputs (BERT paper, table 7).
MODES = ("last", "sum_last_4", "concat_last_4", "weighted")


def layer_indexes(layers: str | Sequence[int], num_layers: int, flag: str = "--layers") -> list[int]:
    """Checks layer indexes (negative counts from the last block) and makes them positive.

    Args:
        layers: comma-separated string (`"-1,-2,-3,-4"`) or ints.
        num_layers: int. The encoder's Transformer blocks.
        flag: str. How the caller names the setting, for the error.

    Returns:
        List of indexes into the blocks' outputs, `0 .. num_layers - 1`, in the given order.

    Raises:
        ValueError: an index is not an integer or is outside `-num_layers .. num_layers - 1`.

    Example:

    >>> layer_indexes("-1,-2", 6)
    [5, 4]
    """
    if isinstance(layers, str):
        try:
            layers = [int(part) for part in layers.split(",") if part.strip()]
        except ValueError:
            raise ValueError(f"{flag}={layers!r}: expected comma-separated integers "
                             "such as -1,-2,-3,-4.") from None
    layers = list(layers)
    if not layers:
        raise ValueError(f"{flag} is empty; give at least one layer, such as -1.")
    wrong = [index for index in layers if not -num_layers <= index < num_layers]
    if wrong:
        raise ValueError(f"{flag}={','.join(map(str, layers))}: layer(s) {wrong} out of range; "
                         f"the encoder has {num_layers} layers (-{num_layers} .. {num_layers - 1}).")
    return [index % num_layers for index in layers]


@keras.saving.register_keras_serializable(package="kbert")
class EncoderLayerMix(keras.layers.Layer):
    """Combines the outputs of an encoder's Transformer blocks into one feature per token.

    `last` is the last block's output; `sum_last_4` and `concat_last_4` the sum
    and concatenation of the last four (the BERT paper's best feature-based
    NER inputs); `weighted` is ELMo's scalar mix, `gamma * sum_j softmax(w)_j
    h_j` over all blocks with learned `w` (zeros: an average at first) and
    `gamma` (1).

    Args:
        mode: str. One of `MODES`.
        **kwargs: passed to `keras.layers.Layer`.

    Example:

    >>> mix = kbert.layers.EncoderLayerMix("concat_last_4")
    >>> features = mix(encoder(inputs)["encoder_outputs"])  # [batch, time, 4 * hidden]

    Reference:
        - [Devlin et al., 2019](https://arxiv.org/abs/1810.04805), section 5.3
        - [Peters et al., 2018](https://arxiv.org/abs/1802.05365), equation 1
    """

    def __init__(self, mode: str = "last", **kwargs):
        super().__init__(**kwargs)
        if mode not in MODES:
            raise ValueError(f"features mode {mode!r} is unknown; choose one of {list(MODES)}.")
        self.mode = mode

    def build(self, input_shape):
        num_layers = len(input_shape)
        if self.mode in ("sum_last_4", "concat_last_4") and num_layers < 4:
            raise ValueError(f"features mode {self.mode!r} needs 4 layers; the encoder has "
                             f"{num_layers}.")
        if self.mode == "weighted":
            self.layer_weights = self.add_weight(shape=(num_layers,), initializer="zeros",
                                                 dtype="float32", name="layer_weights")
            self.gamma = self.add_weight(shape=(), initializer="ones", dtype="float32",
                                         name="gamma")
        self.built = True

    def call(self, layer_outputs):
        layer_outputs = list(layer_outputs)
        if self.mode == "last":
            return layer_outputs[-1]
        if self.mode == "sum_last_4":
            return ops.sum(ops.stack(layer_outputs[-4:], axis=0), axis=0)
        if self.mode == "concat_last_4":
            # Last first, as google-research/bert's --layers=-1,-2,-3,-4.
            return ops.concatenate(layer_outputs[::-1][:4], axis=-1)
        weights = ops.cast(ops.softmax(self.layer_weights), self.compute_dtype)
        mixed = ops.einsum("l,lbth->bth", weights, ops.stack(layer_outputs, axis=0))
        return ops.cast(self.gamma, self.compute_dtype) * mixed

    def compute_output_shape(self, input_shape):
        shape = tuple(input_shape[-1])
        if self.mode == "concat_last_4":
            return shape[:-1] + (4 * shape[-1],)
        return shape

    def get_config(self):
        config = super().get_config()
        config["mode"] = self.mode
        return config
