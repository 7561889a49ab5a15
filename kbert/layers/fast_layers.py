"""Switch the Dropout and LayerNormalization layers keras-hub builds to kbert's."""

from __future__ import annotations

import keras

from kbert.layers.dropout import Dropout
from kbert.layers.layer_normalization import LayerNormalization

# Each kbert class subclasses the Keras one with the same state and config and
# only a faster `call`, so switching the class of a built layer is safe.
_FAST = {keras.layers.Dropout: Dropout, keras.layers.LayerNormalization: LayerNormalization}


def use_fast_layers(layer: keras.layers.Layer) -> None:
    """Makes the Keras `Dropout`/`LayerNormalization` layers inside `layer` kbert's.

    keras-hub's `TransformerEncoder` and `MaskedLMHead` (and the Keras
    `MultiHeadAttention` in the encoder) create these layers inside `build()`
    with no way to pass another class, so the built layers are switched in
    place: same objects, weights, seed generators, checkpoint paths and
    configs; only `call` changes (see `kbert.layers.Dropout` and
    `kbert.layers.LayerNormalization`).

    Args:
        layer: a built Keras layer or model.

    Example:

    >>> block = keras_hub.layers.TransformerEncoder(512, 2)
    >>> block.build((None, 128, 128))
    >>> kbert.layers.use_fast_layers(block)
    """
    for sublayer in layer._flatten_layers(include_self=True):
        fast = _FAST.get(type(sublayer))
        if fast is not None:
            sublayer.__class__ = fast
