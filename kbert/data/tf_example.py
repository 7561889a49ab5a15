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

import numpy as np

from kbert.data.pretraining_examples import TrainingInstance

# google-research/bert's feature names, in its order (the order written here).
PRETRAINING_FEATURE_NAMES = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
)


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


def _varint_array(values: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Protobuf varints of non-negative ints below 2**28, vectorized.

    Returns:
        `(bytes, mask)`: uint8 `[..., width]` with width the longest varint
        here, and which of those bytes are used (None when all are).
    """
    v = np.asarray(values)
    top = int(v.max()) if v.size else 0
    if v.size and (int(v.min()) < 0 or top >= 1 << 28):
        raise ValueError(f"Value out of the supported range [0, 2**28): {v.min()}..{top}.")
    if top < 1 << 7:  # The common case (masks, segment ids, positions): one byte each.
        return v.astype(np.uint8)[..., None], None
    v = v.astype(np.int32)
    width = 2 if top < 1 << 14 else 3 if top < 1 << 21 else 4
    out = np.empty(v.shape + (width,), np.uint8)
    length = np.ones(v.shape, np.int8)
    for k in range(width):
        more = v >= 1 << (7 * (k + 1)) if k < width - 1 else np.zeros(v.shape, bool)
        out[..., k] = ((v >> (7 * k)) & 0x7F) | (more.astype(np.uint8) << 7)
        length += more
    mask = np.arange(width, dtype=np.int8) < length[..., None]
    return out, mask


def _varint_length(values: np.ndarray) -> np.ndarray:
    v = np.asarray(values, dtype=np.int64)
    return 1 + (v >= 1 << 7) + (v >= 1 << 14) + (v >= 1 << 21)


class _Blocks:
    """Rows of bytes built from fixed-width blocks with per-row used-byte masks."""

    def __init__(self, n: int):
        self.n = n
        self.data: list[np.ndarray] = []
        self.masks: list[np.ndarray | None] = []  # None: all bytes used.

    def const(self, data: bytes) -> None:
        self.data.append(np.broadcast_to(np.frombuffer(data, np.uint8), (self.n, len(data))))
        self.masks.append(None)

    def varints(self, values: np.ndarray) -> None:
        data, mask = _varint_array(values)
        self.data.append(data.reshape(self.n, -1))
        self.masks.append(None if mask is None else mask.reshape(self.n, -1))

    def raw(self, data: np.ndarray) -> None:
        self.data.append(data)
        self.masks.append(None)

    def join(self) -> tuple[bytes, np.ndarray]:
        data = np.concatenate(self.data, axis=1)
        mask = np.concatenate(
            [np.ones(d.shape, bool) if m is None else m for d, m in zip(self.data, self.masks)],
            axis=1,
        )
        offsets = np.zeros(self.n + 1, np.int64)
        np.cumsum(mask.sum(axis=1), out=offsets[1:])
        return data[mask].tobytes(), offsets


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
            for name in PRETRAINING_FEATURE_NAMES
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

    def _int_entry_blocks(self, blocks: _Blocks, name: str, values: np.ndarray) -> np.ndarray:
        """Adds one int64 feature entry to each row; returns its byte counts."""
        packed_len = _varint_length(values).sum(axis=1)
        list_len = 1 + _varint_length(packed_len) + packed_len
        feature_len = 1 + _varint_length(list_len) + list_len
        key = self._keys[name]
        entry_len = len(key) + 1 + _varint_length(feature_len) + feature_len
        blocks.const(b"\x0a")
        blocks.varints(entry_len[:, None])
        blocks.const(key + b"\x12")
        blocks.varints(feature_len[:, None])
        blocks.const(b"\x1a")
        blocks.varints(list_len[:, None])
        blocks.const(b"\x0a")
        blocks.varints(packed_len[:, None])
        blocks.varints(values)
        return 1 + _varint_length(entry_len) + entry_len

    def encode_batch(
        self,
        token_ids: np.ndarray,
        lengths: np.ndarray,
        segment_ids: np.ndarray,
        masked_lm_positions: np.ndarray,
        masked_lm_ids: np.ndarray,
        num_masked: np.ndarray,
        next_sentence_labels: np.ndarray | None,
    ) -> tuple[bytes, np.ndarray]:
        """Serializes many instances at once; the bytes equal `encode`'s.

        Numpy builds all records of a batch together (a Python loop per
        record costs more than everything else the tool does).

        Args:
            token_ids: int `[N, max_seq_length]`, zero padded.
            lengths: int `[N]`. Tokens per instance.
            segment_ids: int `[N, max_seq_length]`, zero padded.
            masked_lm_positions: int `[N, max_predictions_per_seq]`, zero padded.
            masked_lm_ids: int `[N, max_predictions_per_seq]`, zero padded.
            num_masked: int `[N]`.
            next_sentence_labels: int `[N]` (1 = random/swapped) or None
                without a sentence task.

        Returns:
            `(blob, offsets)`: record `i` is `blob[offsets[i]:offsets[i + 1]]`.
        """
        n, s = token_ids.shape
        p = masked_lm_positions.shape[1]
        if s != self.max_seq_length or p != self.max_predictions_per_seq:
            raise ValueError(
                f"Batch of shape [{n}, {s}] / [{n}, {p}] does not match max_seq_length="
                f"{self.max_seq_length}, max_predictions_per_seq={self.max_predictions_per_seq}."
            )
        if self.next_sentence and next_sentence_labels is None:
            raise ValueError("next_sentence_labels are needed: the encoder writes next_sentence_labels.")
        blocks = _Blocks(n)
        blocks.const(b"\x0a")
        features_len_index = len(blocks.data)
        blocks.const(b"")  # Placeholder for varint(features length), filled below.
        total = self._int_entry_blocks(blocks, "input_ids", token_ids)
        input_mask = (np.arange(s)[None, :] < lengths[:, None]).astype(np.int64)
        total = total + self._int_entry_blocks(blocks, "input_mask", input_mask)
        total = total + self._int_entry_blocks(blocks, "segment_ids", segment_ids)
        total = total + self._int_entry_blocks(blocks, "masked_lm_positions", masked_lm_positions)
        total = total + self._int_entry_blocks(blocks, "masked_lm_ids", masked_lm_ids)
        # masked_lm_weights: a fixed-size float entry.
        weights = (np.arange(p)[None, :] < num_masked[:, None]).astype("<f4")
        float_list = _length_delimited(b"\x0a", b"\x00" * (4 * p))
        feature = _length_delimited(b"\x12", float_list)
        entry_body = self._keys["masked_lm_weights"] + _length_delimited(b"\x12", feature)
        entry = _length_delimited(b"\x0a", entry_body)
        blocks.const(entry[: len(entry) - 4 * p])  # The floats come last.
        blocks.raw(weights.view(np.uint8).reshape(n, 4 * p))
        total = total + len(entry)
        if self.next_sentence:
            labels = np.asarray(next_sentence_labels, np.int64)[:, None]
            total = total + self._int_entry_blocks(blocks, "next_sentence_labels", labels)
        data, mask = _varint_array(total[:, None])
        blocks.data[features_len_index] = data.reshape(n, -1)
        blocks.masks[features_len_index] = None if mask is None else mask.reshape(n, -1)
        return blocks.join()

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
