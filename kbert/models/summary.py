"""Parameter counts of a model, by section."""

from __future__ import annotations

import math

import keras


def _count(weights) -> int:
    # Static shapes: a model built in a graph (`kbert-pretrain --dry_run`) has no values.
    return sum(math.prod(w.shape) for w in weights)


def parameter_table(model: keras.Model) -> list[tuple[str, int]]:
    """Counts a BERT model's parameters by section, each weight counted once.

    Sections follow the model's layers: the encoder's embeddings, each
    Transformer layer, the pooler, then each head of a task model (the MLM
    head's tied embedding is counted with the embeddings, not again).

    Args:
        model: `BertEncoder`, or a task model with an `encoder` attribute.

    Returns:
        A list of `(section, parameters)` rows whose sum is
        `model.count_params()`.

    Example:

    >>> for section, count in parameter_table(pretrainer):
    ...     print(f"{section:30s} {count:>12,d}")
    """
    encoder = getattr(model, "encoder", model)
    seen: set[int] = set()
    rows: list[tuple[str, int]] = []

    def add(section: str, weights) -> None:
        fresh = [w for w in weights if id(w) not in seen]
        seen.update(id(w) for w in fresh)
        if fresh:
            rows.append((section, _count(fresh)))

    embedding_layers = [layer for layer in encoder.layers if "embedding" in layer.name]
    add("embeddings", [w for layer in embedding_layers for w in layer.weights])
    for layer in encoder.transformer_layers:
        add(layer.name, layer.weights)
    if getattr(encoder, "pooled_dense", None) is not None:  # ModernBERT pools without weights
        add("pooler", encoder.pooled_dense.weights)
    for layer in encoder.layers:  # what another architecture has besides (a final LayerNorm)
        add(layer.name, layer.weights)
    for layer in model.layers if model is not encoder else []:
        if layer is not encoder:
            add(layer.name, layer.weights)
    return rows
