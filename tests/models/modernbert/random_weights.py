"""Random ModernBERT weights large enough that attention and the window matter."""

import numpy as np


def randomize(model, seed: int) -> None:
    """Assigns every weight of `model` a seeded random value.

    The initial weights (~0.02) leave attention near uniform, so a wrong window
    or rotation would hardly show; these are of order one after each matmul.

    Args:
        model: a Keras model (a ModernBERT encoder or pre-trainer).
        seed: int. The numpy generator's seed.
    """
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        shape = tuple(weight.shape)
        if "gamma" in weight.path:
            value = 1.0 + 0.2 * rng.normal(size=shape)
        elif len(shape) == 1:
            value = 0.2 * rng.normal(size=shape)
        else:
            value = rng.normal(0.0, 1.0 / np.sqrt(shape[0]) * 1.5, size=shape)
        weight.assign(value.astype("float32"))
