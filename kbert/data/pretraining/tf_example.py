"""Serializes pre-training instances to `tf.train.Example` bytes.

Hand-written protobuf wire encoding: building `tf.train.Example` messages from
Python costs more than making the instances, and the wire format of this fixed
schema is simple. The bytes parse with `tf.train.Example.FromString` and
`tf.io.parse_example` (tested), and are deterministic: features are always
written in google-research/bert's order.
"""

from __future__ import annotations

import struct
from typing import Callable, Sequence

import numpy as np

from kbert.data.pretraining.instances import TrainingInstance

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


class _VarintTable:
    """Varints of 0..size-1 as zero-padded byte words, and which bytes each uses.

    A gather from a word table is the fastest way numpy has to turn ids into
    their variable-length bytes; a gather from the matching `used*` table
    gives the mask `_Rows.join` drops the padding with.
    """

    def __init__(self, size: int):
        if size > 1 << 28:
            raise ValueError(f"Values up to {size - 1} need more than 4 varint bytes.")
        v = np.arange(size, dtype=np.int64)
        lengths = _varint_length(v)
        table = np.zeros((size, 4), np.uint8)
        for k in range(4):
            more = lengths > k + 1
            table[:, k] = np.where(lengths > k, ((v >> (7 * k)) & 0x7F) | (more << 7), 0)
        used = (np.arange(4)[None, :] < lengths[:, None]).astype(np.uint8)
        self.lengths = lengths.astype(np.uint8)
        # uint16 words for values under 2**14, uint32 words for the rest.
        self.words2 = np.ascontiguousarray(table[:, :2]).view("<u2")[:, 0]
        self.used2 = np.ascontiguousarray(used[:, :2]).view("<u2")[:, 0]
        self.words4 = table.view("<u4")[:, 0]
        self.used4 = used.view("<u4")[:, 0]


def _varint_length(values: np.ndarray) -> np.ndarray:
    v = np.asarray(values, dtype=np.int64)
    return 1 + (v >= 1 << 7) + (v >= 1 << 14) + (v >= 1 << 21)


class _Rows:
    """Records under construction: per row, fixed-width byte blocks and which bytes are used.

    `join` concatenates the blocks and drops unused bytes with one boolean
    mask. Narrow blocks are slow to concatenate, so runs of constant bytes
    are merged into one block and length prefixes come from `lookup`.
    """

    def __init__(self, n: int):
        self.n = n
        self.data: list[np.ndarray] = []
        self.masks: list[np.ndarray | None] = []  # None: every byte used.
        self.lengths = np.zeros(n, np.int64)  # Used bytes so far, per row.
        self._const = b""  # Constant bytes not yet added as a block.

    def _flush(self) -> None:
        if self._const:
            data = np.frombuffer(self._const, np.uint8)
            self.data.append(np.broadcast_to(data, (self.n, len(data))))
            self.masks.append(None)
            self._const = b""

    def const(self, data: bytes) -> None:
        self._const += data
        self.lengths += len(data)

    def block(self, data: np.ndarray, mask: np.ndarray | None, lengths: np.ndarray | int) -> None:
        """Adds `data` `[n, w]` uint8 of which `mask` (None: all) is used, `lengths` bytes per row."""
        self._flush()
        self.data.append(data)
        self.masks.append(mask)
        self.lengths += lengths

    def raw(self, data: np.ndarray) -> None:
        self.block(data, None, data.shape[1])

    def varints(self, values: np.ndarray, table: "_VarintTable") -> None:
        """Adds the varints of int `values` `[n, k]`, in order."""
        n = values.shape[0]
        if values.size and int(values.max()) < 1 << 7:  # Masks, segment ids: one byte each.
            self.raw(values.astype(np.uint8, copy=False))
            return
        lengths = np.take(table.lengths, values)
        width = int(lengths.max()) if values.size else 1
        words, used = (table.words2, table.used2) if width <= 2 else (table.words4, table.used4)
        per_value = words.itemsize
        data = np.take(words, values).view(np.uint8).reshape(n, -1)
        mask = None
        if int(lengths.min(initial=per_value)) < per_value:
            mask = np.take(used, values).view(np.bool_).reshape(n, -1)
        self.block(data, mask, lengths.sum(axis=1, dtype=np.int64))

    def lookup(self, keys: np.ndarray, make: Callable[[int], bytes]) -> None:
        """Adds `make(key)`'s bytes for each row's int key (few distinct keys)."""
        distinct, inverse = np.unique(keys, return_inverse=True)
        pieces = [make(int(key)) for key in distinct]
        if len(pieces) == 1:
            self.const(pieces[0])
            return
        sizes = np.array([len(piece) for piece in pieces], np.int64)
        width = int(sizes.max())
        table = np.zeros((len(pieces), width), np.uint8)
        for i, piece in enumerate(pieces):
            table[i, : len(piece)] = np.frombuffer(piece, np.uint8)
        used = np.arange(width)[None, :] < sizes[:, None]
        inverse = inverse.reshape(-1)
        self.block(table[inverse], used[inverse] if sizes.min() < width else None, sizes[inverse])

    def extend(self, other: "_Rows") -> None:
        """Appends `other`'s blocks (same rows)."""
        other._flush()
        self._flush()
        self.data += other.data
        self.masks += other.masks
        self.lengths += other.lengths

    def join(self) -> tuple[bytes, np.ndarray]:
        self._flush()
        data = np.concatenate(self.data, axis=1)
        offsets = np.zeros(self.n + 1, np.int64)
        np.cumsum(self.lengths, out=offsets[1:])
        if all(m is None for m in self.masks):
            return data.tobytes(), offsets
        mask = np.concatenate(
            [np.broadcast_to(np.True_, d.shape) if m is None else m for d, m in zip(self.data, self.masks)],
            axis=1,
        )
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
    `next_sentence_labels` (int64 [1]). Padding is zeros. Without
    `masked_lm` (dynamic masking) the three `masked_lm_*` features are left
    out.

    Args:
        max_seq_length: int. Padded length of the sequence features.
        max_predictions_per_seq: int. Padded length of the `masked_lm_*`
            features.
        vocab_size: int. Ids are below this.
        next_sentence: bool. Write `next_sentence_labels`. Defaults to True.
        masked_lm: bool. Write the `masked_lm_*` features. Defaults to True.

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
        masked_lm: bool = True,
    ):
        self.max_seq_length = max_seq_length
        self.max_predictions_per_seq = max_predictions_per_seq
        self.next_sentence = next_sentence
        self.masked_lm = masked_lm
        self._varints = [_varint(i) for i in range(max(vocab_size, max_seq_length) + 1)]
        # Also covers the length prefixes (a record is well under 2**14 bytes
        # per 1000 tokens).
        self._table = _VarintTable(max(vocab_size, max_seq_length, 1 << 16) + 1)
        self._keys = {
            name: _length_delimited(b"\x0a", name.encode())
            for name in PRETRAINING_FEATURE_NAMES
        }
        self._headers: dict[tuple[str, int], bytes] = {}

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

    def _entry_header(self, name: str, packed_len: int) -> bytes:
        """The bytes of an int64 feature map entry before its `packed_len` bytes of varints."""
        key = (name, packed_len)
        header = self._headers.get(key)
        if header is None:
            list_len = 1 + len(_varint(packed_len)) + packed_len
            feature_len = 1 + len(_varint(list_len)) + list_len
            entry_len = len(self._keys[name]) + 1 + len(_varint(feature_len)) + feature_len
            header = self._headers[key] = (
                b"\x0a" + _varint(entry_len) + self._keys[name] + b"\x12" + _varint(feature_len)
                + b"\x1a" + _varint(list_len) + b"\x0a" + _varint(packed_len)  # Feature.int64_list = 3
            )
        return header

    def _int_entry_rows(self, name: str, values: np.ndarray) -> _Rows:
        """One int64 feature map entry per row, as a `_Rows` of its own."""
        n = values.shape[0]
        body = _Rows(n)
        body.varints(values, self._table)
        rows = _Rows(n)
        rows.lookup(body.lengths, lambda packed_len: self._entry_header(name, packed_len))
        rows.extend(body)
        return rows

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
        p = masked_lm_positions.shape[1] if self.masked_lm else self.max_predictions_per_seq
        if s != self.max_seq_length or p != self.max_predictions_per_seq:
            raise ValueError(
                f"Batch of shape [{n}, {s}] / [{n}, {p}] does not match max_seq_length="
                f"{self.max_seq_length}, max_predictions_per_seq={self.max_predictions_per_seq}."
            )
        if self.next_sentence and next_sentence_labels is None:
            raise ValueError("next_sentence_labels are needed: the encoder writes next_sentence_labels.")
        lengths, num_masked = np.asarray(lengths), np.asarray(num_masked)
        fields = [
            ("input_ids", token_ids),
            ("input_mask", (np.arange(s)[None, :] < lengths[:, None]).astype(np.uint8)),
            ("segment_ids", segment_ids),
        ]
        if self.masked_lm:
            fields += [("masked_lm_positions", masked_lm_positions), ("masked_lm_ids", masked_lm_ids)]
        entries = [self._int_entry_rows(name, np.asarray(values)) for name, values in fields]
        if self.masked_lm:
            entries.append(self._weights_rows(np.asarray(num_masked), n, p))
        if self.next_sentence:
            labels = np.asarray(next_sentence_labels, np.int64)[:, None]
            entries.append(self._int_entry_rows("next_sentence_labels", labels))
        record = _Rows(n)
        # Example.features = 1
        record.lookup(sum(e.lengths for e in entries), lambda size: b"\x0a" + _varint(size))
        for e in entries:
            record.extend(e)
        return record.join()

    def _weights_rows(self, num_masked: np.ndarray, n: int, p: int) -> _Rows:
        """The `masked_lm_weights` entry of each row: a fixed-size float entry, the floats last."""
        weights = _Rows(n)
        float_list = _length_delimited(b"\x0a", b"\x00" * (4 * p))
        feature = _length_delimited(b"\x12", float_list)
        entry = _length_delimited(
            b"\x0a", self._keys["masked_lm_weights"] + _length_delimited(b"\x12", feature)
        )
        weights.const(entry[: len(entry) - 4 * p])
        mask = (np.arange(p)[None, :] < num_masked[:, None]).astype("<f4")
        weights.raw(mask.view(np.uint8).reshape(n, 4 * p))
        return weights

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
        ]
        if self.masked_lm:
            entries += [
                self._int_entry("masked_lm_positions", instance.masked_lm_positions, p),
                self._int_entry("masked_lm_ids", instance.masked_lm_ids, p),
                self._float_entry("masked_lm_weights", [1.0] * num_masked, p),
            ]
        if self.next_sentence:
            label = 1 if instance.is_random_next else 0
            entries.append(self._int_entry("next_sentence_labels", [label], 1))
        features = b"".join(entries)
        return _length_delimited(b"\x0a", features)  # Example.features = 1
