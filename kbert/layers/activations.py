"""Activations by the names BERT configs use.

Original BERT's `hidden_act: gelu` is the tanh approximation, while Hugging Face's
`gelu` is the exact erf form (its tanh form is `gelu_new`). Configs name the
activation as a string so a converted model reproduces its source's numbers, and
so `get_config()` stays JSON.
"""

from __future__ import annotations

from typing import Callable

import keras

from kbert.layers.gelu import gelu_approximate

# Names as they appear in bert_config.json / HF config.json, mapped to Keras
# callables. kbert's `gelu_approximate` computes the same values as the tanh
# GELU keras-hub's BertBackbone uses (the same ops), with a fused gradient.
_ACTIVATIONS: dict[str, Callable] = {
    "gelu_approximate": gelu_approximate,
    "gelu_new": gelu_approximate,
    "gelu_pytorch_tanh": gelu_approximate,
    "gelu_exact": keras.activations.gelu,
    "relu": keras.activations.relu,
    "tanh": keras.activations.tanh,
}


def get_activation(name: str) -> Callable:
    """Returns the activation function for a config name.

    Args:
        name: str. One of `gelu_approximate` (original BERT, tanh form),
            `gelu_exact` (erf form), `gelu_new`/`gelu_pytorch_tanh` (HF names of
            the tanh form), `relu`, `tanh`.

    Returns:
        A Keras-serializable callable.

    Example:

    >>> kbert.layers.get_activation("gelu_approximate")(keras.ops.ones((2,)))
    """
    if name not in _ACTIVATIONS:
        raise ValueError(
            f"Unknown activation {name!r}; expected one of {sorted(_ACTIVATIONS)}."
        )
    return _ACTIVATIONS[name]


ACTIVATION_NAMES = tuple(sorted(_ACTIVATIONS))
