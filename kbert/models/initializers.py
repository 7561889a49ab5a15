"""The weight initializer kbert's encoders and heads share."""

from __future__ import annotations

import keras


def truncated_normal(stddev: float = 0.02) -> keras.initializers.Initializer:
    """google-research/bert's weight initializer, `TruncatedNormal(stddev)`.

    BERT's encoder and heads use it with the config's `initializer_range`;
    ModernBERT with its own scales (Hugging Face initialises it the same way).

    Args:
        stddev: float. Standard deviation before truncation at two of them.
            Defaults to 0.02.

    Returns:
        A new `keras.initializers.TruncatedNormal`.

    Example:

    >>> keras.layers.Dense(2, kernel_initializer=truncated_normal(0.02))
    """
    return keras.initializers.TruncatedNormal(stddev=stddev)
