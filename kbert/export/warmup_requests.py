"""The export's warm-up requests: `assets.extra/tf_serving_warmup_requests`.

TF Serving (and kbert-serve, `--enable_model_warmup`, on by default in both)
replays the requests in this file on a version it has just loaded, before the
version takes traffic, so the first client does not pay for the one-time work
of a function's first calls (TensorFlow's graph optimization, oneDNN and ONNX
Runtime kernel set-up, memory for the shapes seen). The format is TF Serving's
(`saved_model_warmup.md`): a TFRecord file of `PredictionLog` protos. kbert
writes one `PredictRequest` per signature whose inputs are all texts (`[batch]`
strings): a batch of a short text and a long one (as long as the model reads at
once, so the full length's shapes are set up too).
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2
from tensorflow_serving.apis import prediction_log_pb2

WARMUP_FILE = "tf_serving_warmup_requests"
SHORT_TEXT = "A short text."
_SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank."


def long_text(words: int) -> str:
    """Plain English of at least `words` words (each one WordPiece or BPE piece or more)."""
    sentence = _SENTENCE.split()
    return " ".join(sentence[i % len(sentence)] for i in range(words))


def warmup_records(signatures: dict, length: int) -> list[prediction_log_pb2.PredictionLog]:
    """One Predict request per text signature: `[SHORT_TEXT, long_text(length)]` in every input.

    Args:
        signatures: dict of signature name -> `tf.function` (the module's
            `signatures()`).
        length: int. Words of the long text (the model's `max_seq_length`).

    Returns:
        list of `PredictionLog`, in signature-name order.

    Example:

    >>> [r.predict_log.request.model_spec.signature_name for r in warmup_records(module.signatures(), 128)]
    ['embeddings', 'serving_default']
    """
    texts = np.array([SHORT_TEXT.encode("utf-8"), long_text(length).encode("utf-8")], dtype=object)
    records = []
    for name in sorted(signatures):
        # The signature's inputs are named as its specs (kbert's are all named).
        specs = signatures[name].input_signature or ()
        if not specs or any(spec.dtype != tf.string or spec.shape.rank != 1 or not spec.name
                            for spec in specs):
            continue
        record = prediction_log_pb2.PredictionLog()
        request = record.predict_log.request
        request.model_spec.signature_name = name
        for spec in specs:
            request.inputs[spec.name].CopyFrom(tf.make_tensor_proto(texts))
        records.append(record)
    return records


def write_warmup_requests(extra_dir: str, signatures: dict, length: int) -> int:
    """Writes `<extra_dir>/tf_serving_warmup_requests`; returns how many requests it holds (none: no file).

    Args:
        extra_dir: str. The version's `assets.extra` directory.
        signatures: dict of signature name -> `tf.function`.
        length: int. Words of the long text.
    """
    records = warmup_records(signatures, length)
    if records:
        with tf.io.TFRecordWriter(os.path.join(extra_dir, WARMUP_FILE)) as writer:
            for record in records:
                writer.write(record.SerializeToString())
    return len(records)
