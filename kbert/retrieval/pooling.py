"""Which pooling a bi-encoder task uses: its config, else what the pre-trained model records."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from kbert.layers.sentence_pooling import POOLING_MODES

DEFAULT_POOLING = "mean"  # sentence-transformers' default
DEFAULT_NORMALIZE = True


def resolve_pooling(config: Any, settings: Mapping[str, Any]) -> Any:
    """The config with `pooling`/`normalize` filled in where it left them None.

    A sentence-transformers model converted by kbert-convert records how it
    was trained to pool (`sentence_config.json`); starting from it, the task
    pools the same way unless gin sets otherwise.

    Args:
        config: a dataclass with `pooling` and `normalize` fields.
        settings: `kbert.checkpoints.pretrained.pretrained_settings` of the
            starting directory.

    Returns:
        A copy of `config` with both fields set.
    """
    recorded = settings.get("sentence_config") or {}
    pooling = config.pooling or recorded.get("pooling") or DEFAULT_POOLING
    normalize = config.normalize
    if normalize is None:
        normalize = recorded.get("normalize", DEFAULT_NORMALIZE)
    return dataclasses.replace(config, pooling=pooling, normalize=bool(normalize))


def check_pooling(config: Any, class_name: str) -> None:
    """Refuses an unknown pooling mode, naming the gin binding."""
    if config.pooling is not None and config.pooling not in POOLING_MODES:
        raise ValueError(f"{class_name}.pooling={config.pooling!r}; expected one of {POOLING_MODES}.")
