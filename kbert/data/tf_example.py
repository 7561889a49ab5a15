"""Serializes pre-training instances to `tf.train.Example` bytes.

Hand-written protobuf wire encoding: building `tf.train.Example` messages from
Python costs more than making the instances, and the wire format of this fixed
schema is simple. The bytes parse with `tf.train.Example.FromString` and
`tf.io.parse_example` (tested), and are deterministic: features are always
written in google-research/bert's order.
"""

from __future__ import annotations

import struct
from typing import Sequence

from kbert.data.pretraining_examples import TrainingInstance


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


_SMALL_VARINTS = [_varint(i) for i in range(1 << 14)]


def _length_delimited(field_tag: bytes, payload: bytes) -> bytes:
    n = len(payload)
    return field_tag + (_SMALL_VARINTS[n] if n < 16384 else _varint(n)) + payload


class ExampleEncoder:
    """Encodes `TrainingInstance`s as padded google-research/bert Examples.

    Features: `input_ids`, `input_mask`, `segment_ids` (int64
    [max_seq_length]), `masked_lm_positions`, `masked_lm_ids` (int64
    [max_predictions_per_seq]), `masked_lm_weights` (float
    [max_predictions_per_seq]) and, with `next_sentence`,
    `next_sentence_labels` (int64 [1]). Padding is zeros.

    Args:
        max_seq_length: int. Padded length of the sequence features.
        max_predictions_per_seq: int. Padded length of the `masked_lm_*`
            features.
        vocab_size: int. Ids are below this.
        next_sentence: bool. Write `next_sentence_labels`. Defaults to True.

    Example:

    >>> encoder = ExampleEncoder(128, 20, vocab_size=30522)
    >>> record = encoder.encode(instance)
    >>> tf.train.Example.FromString(record)
    """

    def __init__(
        self,
        max_seq_length: int,
        max_predictions_per_seq: int,
        vocab_size: int,
        next_sentence: bool = True,
    ):
        self.max_seq_length = max_seq_length
        self.max_predictions_per_seq = max_predictions_per_seq
        self.next_sentence = next_sentence
        self._varints = [_varint(i) for i in range(max(vocab_size, max_seq_length) + 1)]
        self._keys = {
            name: _length_delimited(b"\x0a", name.encode())
            for name in (
                "input_ids",
                "input_mask",
                "segment_ids",
                "masked_lm_positions",
                "masked_lm_ids",
                "masked_lm_weights",
                "next_sentence_labels",
            )
        }

    def _int_entry(self, name: str, values: Sequence[int], length: int) -> bytes:
        varints = self._varints
        packed = b"".join([varints[v] for v in values])
        if length > len(values):
            packed += b"\x00" * (length - len(values))  # varint(0) is one zero byte.
        int64_list = _length_delimited(b"\x0a", packed)
        feature = _length_delimited(b"\x1a", int64_list)  # Feature.int64_list = 3
        return _length_delimited(b"\x0a", self._keys[name] + _length_delimited(b"\x12", feature))

    def _float_entry(self, name: str, values: Sequence[float], length: int) -> bytes:
        padded = list(values) + [0.0] * (length - len(values))
        float_list = _length_delimited(b"\x0a", struct.pack(f"<{length}f", *padded))
        feature = _length_delimited(b"\x12", float_list)  # Feature.float_list = 2
        return _length_delimited(b"\x0a", self._keys[name] + _length_delimited(b"\x12", feature))

    def encode(self, instance: TrainingInstance) -> bytes:
        """Returns the serialized `tf.train.Example` of one instance."""
        n, p = self.max_seq_length, self.max_predictions_per_seq
        num_tokens = len(instance.token_ids)
        num_masked = len(instance.masked_lm_positions)
        if num_tokens > n or num_masked > p:
            raise ValueError(
                f"Instance of {num_tokens} tokens and {num_masked} predictions exceeds "
                f"max_seq_length={n} or max_predictions_per_seq={p}."
            )
        entries = [
            self._int_entry("input_ids", instance.token_ids, n),
            self._int_entry("input_mask", [1] * num_tokens, n),
            self._int_entry("segment_ids", instance.segment_ids, n),
            self._int_entry("masked_lm_positions", instance.masked_lm_positions, p),
            self._int_entry("masked_lm_ids", instance.masked_lm_ids, p),
            self._float_entry("masked_lm_weights", [1.0] * num_masked, p),
        ]
        if self.next_sentence:
            label = 1 if instance.is_random_next else 0
            entries.append(self._int_entry("next_sentence_labels", [label], 1))
        features = b"".join(entries)
        return _length_delimited(b"\x0a", features)  # Example.features = 1
