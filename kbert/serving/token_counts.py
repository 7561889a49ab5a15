"""How many tokens a request will cost the model, measured before it is queued.

`--max_batch_tokens` (text-embeddings-inference's `--max-batch-tokens`) caps
the padded tokens of a merged batch. The server only sees raw text: the
SavedModel tokenizes inside its graph, and `kbert.serving` imports nothing of
kbert, so it cannot run the model's tokenizer itself (and a tokenizer
signature called per request would cost a TensorFlow call per request, about
what a small model spends per example). The measure used instead is an upper
bound that costs one `len()` per string:

    tokens(example) = min(truncation, sum of the UTF-8 bytes of its strings + specials)

Every piece of a WordPiece tokenizer covers at least one byte of the text (a
character that lower-casing or NFD expands is stripped again with its accents;
an unknown word is one `[UNK]`), and so does every token of a byte-level BPE,
so the bytes bound the pieces; `specials` counts `[CLS]` and one `[SEP]` per
text. Models that truncate (classifiers, regressors, embedding, similarity,
retrieval and cross-encoder models) never run more than their
`max_seq_length`, read from the export's `assets.extra/kbert_export.json`, so
long texts are counted exactly that. Integer inputs (`serve_ids`) count their
length axis, which is exact. The bound is loose for short English (about 4
bytes a piece), which only makes batches of short texts smaller than the
budget allows; it never lets a batch of a truncating model run more padded
tokens than the budget. NER and QA models read long texts in overlapping
windows, so for them the measure (bytes) is what the budget caps, not the
windows' tokens.
"""

from __future__ import annotations

import json
import os

import numpy as np

# Model types (kbert_export.json's `model_type`) whose text signatures cut every
# text to `max_seq_length`; others (NER, QA) read long texts in windows.
TRUNCATING_MODEL_TYPES = ("classifier", "regressor", "embedding", "sentence_encoder", "dual_encoder",
                          "cross_encoder")


def read_truncation_length(version_dir: str) -> int | None:
    """The most tokens the version's text signatures run per example, or None if unknown.

    Args:
        version_dir: str. A SavedModel version directory; kbert exports keep
            `assets.extra/kbert_export.json` beside it.

    Returns:
        `max_seq_length` of a truncating kbert model, else None (windowed
        models, other SavedModels, or an unreadable file: no cap).

    Example:

    >>> read_truncation_length("export/sst2/1")
    128
    """
    path = os.path.join(version_dir, "assets.extra", "kbert_export.json")
    try:
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("model_type") not in TRUNCATING_MODEL_TYPES:
        return None
    length = info.get("max_seq_length", (info.get("task_config") or {}).get("max_seq_length"))
    return length if isinstance(length, int) and length > 0 else None


def example_tokens(inputs: dict[str, np.ndarray], truncation: int | None = None) -> np.ndarray:
    """Upper bound of the tokens each example of a request costs (see the module docstring).

    Args:
        inputs: dict of input name to array with the batch on axis 0 (already
            validated against the signature).
        truncation: int or None. The model's `max_seq_length` when it
            truncates text (`read_truncation_length`).

    Returns:
        int64 array `[batch]`, each >= 1.

    Example:

    >>> example_tokens({"text": np.array([b"a gorgeous film", b"dull"], object)}).tolist()
    [17, 6]
    """
    batch = next(iter(inputs.values())).shape[0]
    text = np.zeros(batch, np.int64)
    exact = np.zeros(batch, np.int64)
    segments = 0
    for value in inputs.values():
        if value.dtype.kind in "OSU":
            rows = value.reshape(batch, -1)
            text += np.fromiter((sum(map(_byte_length, row)) for row in rows), np.int64, count=batch)
            segments += 1
        elif value.ndim >= 2:  # token ids and the like: the length axis is the padded length itself
            exact = np.maximum(exact, value.shape[1])
    if segments:
        text += segments + 1  # [CLS] and one [SEP] per text
        if truncation:
            text = np.minimum(text, truncation)
    return np.maximum(np.maximum(text, exact), 1)


def _byte_length(item) -> int:
    if isinstance(item, bytes):
        return len(item)
    return len(item.encode("utf-8")) if isinstance(item, str) else 0
