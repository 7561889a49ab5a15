"""How many tokens a request will cost the model, estimated before it is queued.

`--max_batch_tokens` (text-embeddings-inference's `--max-batch-tokens`) caps
the padded tokens of a merged batch. The server only sees raw text: the
SavedModel tokenizes inside its graph, and `kbert.serving` imports nothing of
kbert, so it cannot run the model's tokenizer itself (and a tokenizer call per
request would cost a TensorFlow call per request, about what a small model
spends per example). It estimates instead, from the bytes, in C-speed string
operations (a few microseconds a text):

    tokens(text) = words + ASCII punctuation marks + other ASCII bytes / 8 + non-ASCII bytes / 3

which follows BERT's own pre-tokenization (each word and each punctuation mark
is at least one piece; long words split into more; a CJK character is a piece
of its own). An example costs `ceil(sum over its texts) + [CLS] + one [SEP]
per text`, at most the length the model cuts texts to when it truncates
(what the export records, `kbert.serving.export_info`: its module's
`max_seq_length` unless a signature reads long texts in windows); integer
inputs (`serve_ids`) count their length axis, which is exact.

Measured against bert-base-uncased WordPiece on 4,000 SST-2 sentences and
WikiText-2 passages of 30-100 words plus MRPC dev pairs (`benchmarks/
serving_batching.py`'s mix): real pieces / estimate is 0.69 on average, 0.88 at
the 99th percentile and at most 1.07, under 1 for 99.8% of texts; correlation
0.99. So the estimate is an upper estimate for English, close enough to group
texts by length, and cheap; it is not a bound for every text and tokenizer, so
what the budget guarantees is that the estimated padded tokens of a batch
(rows x its longest estimate) never pass it. Plain `len(bytes)` would be a
true bound (every WordPiece or byte-level BPE piece covers a byte) but 4x too
high for English, and capped at `max_seq_length` it would make a 100-byte
sentence look almost as long as a passage, defeating length grouping.

NER and QA models read long texts in overlapping windows, so for them the
estimate counts the text, not the windows' tokens.
"""

from __future__ import annotations

import string

import numpy as np

from kbert.serving.export_info import read_export_info
from kbert.serving.export_info import recorded_serving

# For exports made before the `serving` record: the model types (kbert_export.json's
# `model_type`) whose text signatures cut every text to `max_seq_length`; others
# (NER, QA) read long texts in windows.
TRUNCATING_MODEL_TYPES = ("classifier", "regressor", "embedding", "sentence_encoder", "dual_encoder",
                          "cross_encoder")


def truncation_length(info: dict) -> int | None:
    """The most tokens a version's text signatures run per example, or None if unknown.

    Args:
        info: dict. The version's `kbert_export.json` (`read_export_info`).

    Returns:
        The recorded `truncation_length`; for an export without the record,
        `max_seq_length` of a truncating model type; else None (windowed
        models, other SavedModels, or an unreadable file: no cap).

    Example:

    >>> truncation_length({"serving": {"encoder_apis": [], "truncation_length": 128}})
    128
    """
    record = recorded_serving(info)
    if record is not None:
        length = record.get("truncation_length")
    elif info.get("model_type") in TRUNCATING_MODEL_TYPES:
        length = info.get("max_seq_length", (info.get("task_config") or {}).get("max_seq_length"))
    else:
        length = None
    return length if isinstance(length, int) and not isinstance(length, bool) and length > 0 else None


def read_truncation_length(version_dir: str) -> int | None:
    """`truncation_length` of a version directory's `assets.extra/kbert_export.json`.

    Example:

    >>> read_truncation_length("export/sst2/1")
    128
    """
    return truncation_length(read_export_info(version_dir))


def example_tokens(inputs: dict[str, np.ndarray], truncation: int | None = None) -> np.ndarray:
    """Estimated tokens of each example of a request (see the module docstring).

    Args:
        inputs: dict of input name to array with the batch on axis 0 (already
            validated against the signature).
        truncation: int or None. The model's `max_seq_length` when it
            truncates text (`read_truncation_length`).

    Returns:
        int64 array `[batch]`, each >= 1.

    Example:

    >>> example_tokens({"text": np.array([b"a gorgeous film", b"dull!"], object)}).tolist()
    [7, 5]
    """
    batch = next(iter(inputs.values())).shape[0]
    text = np.zeros(batch, np.float64)
    exact = np.zeros(batch, np.int64)
    segments = 0
    for value in inputs.values():
        if value.dtype.kind in "OSU":
            rows = value.reshape(batch, -1)
            text += np.fromiter((sum(map(text_tokens, row)) for row in rows), np.float64, count=batch)
            segments += 1
        elif value.ndim >= 2:  # token ids and the like: the length axis is the padded length itself
            exact = np.maximum(exact, value.shape[1])
    counts = np.ceil(text).astype(np.int64)
    if segments:
        counts += segments + 1  # [CLS] and one [SEP] per text
        if truncation:
            counts = np.minimum(counts, truncation)
    return np.maximum(np.maximum(counts, exact), 1)


_PUNCTUATION = string.punctuation.encode("ascii")
_WHITESPACE = string.whitespace.encode("ascii")
_NON_ASCII = bytes(range(128, 256))
_NOT_LETTERS = _PUNCTUATION + _WHITESPACE + _NON_ASCII


def text_tokens(text) -> float:
    """The estimate for one string: words + punctuation + ASCII letters / 8 + non-ASCII bytes / 3.

    Args:
        text: bytes or str (anything else counts 0).

    Returns:
        float; `example_tokens` rounds the sum of an example's texts up.

    Example:

    >>> text_tokens(b"a gorgeous film")  # 3 words, 13 letters / 8
    4.625
    """
    if isinstance(text, str):
        text = text.encode("utf-8")
    elif not isinstance(text, bytes):
        return 0.0
    size = len(text)
    punctuation = size - len(text.translate(None, _PUNCTUATION))
    non_ascii = size - len(text.translate(None, _NON_ASCII))
    letters = len(text.translate(None, _NOT_LETTERS))
    return len(text.split()) + punctuation + letters / 8 + non_ascii / 3
