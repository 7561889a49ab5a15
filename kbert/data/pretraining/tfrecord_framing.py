"""TFRecord framing of many serialized records at once.

`tf.io.TFRecordWriter.write` costs about 3 microseconds of Python per record,
which was the largest single cost of `create_pretraining_data`'s parent
process (it writes every record of every worker). Framing records in the
workers with `google-crc32c` (Google's C implementation of the checksum
TFRecord uses) lets the parent write each task's records with one
`GFile.write` per output file. The format, from TensorFlow's
`core/lib/io/record_writer.cc`:

    uint64 length (little endian)
    uint32 masked_crc32c(length bytes)
    byte   data[length]
    uint32 masked_crc32c(data)
"""

from __future__ import annotations

import struct

import google_crc32c
import numpy as np

_MASK_DELTA = 0xA282EAD8


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C of `data`.

    Args:
        data: bytes.

    Returns:
        The masked checksum, an unsigned 32-bit int.
    """
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame_records(blob: bytes, offsets: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Frames serialized records as TFRecords.

    Args:
        blob: bytes. Record i is `blob[offsets[i]:offsets[i + 1]]`.
        offsets: int array `[N + 1]`.

    Returns:
        `(framed, framed_offsets)`: the TFRecord bytes of all records in
        order (what `tf.io.TFRecordWriter` writes for them), and where each
        framed record starts and ends.

    Example:

    >>> framed, offsets = frame_records(b"ab" + b"cde", np.array([0, 2, 5]))
    >>> [r.numpy() for r in tf.data.TFRecordDataset(path_holding(framed))]
    [b'ab', b'cde']
    """
    bounds = np.asarray(offsets).tolist()
    records = [blob[begin:end] for begin, end in zip(bounds[:-1], bounds[1:])]
    # The CRC must be computed record by record (no batch API); masking and
    # packing are done for all records at once.
    crcs = np.fromiter(map(google_crc32c.value, records), np.uint32, len(records))
    crcs = ((crcs >> 15) | (crcs << 17)) + np.uint32(_MASK_DELTA)  # uint32 arithmetic wraps.
    crc_bytes = crcs.astype("<u4").tobytes()
    headers: dict[int, bytes] = {}  # Records of a batch share few lengths.
    for length in set(map(len, records)):
        size = struct.pack("<Q", length)
        headers[length] = size + struct.pack("<I", masked_crc32c(size))
    parts: list[bytes] = [b""] * (3 * len(records))
    parts[0::3] = [headers[len(record)] for record in records]
    parts[1::3] = records
    parts[2::3] = [crc_bytes[i : i + 4] for i in range(0, len(crc_bytes), 4)]
    framed_offsets = np.zeros(len(bounds), np.int64)
    np.cumsum(np.diff(np.asarray(offsets, np.int64)) + 16, out=framed_offsets[1:])
    return b"".join(parts), framed_offsets


def find_framing_error(path: str) -> tuple[int, str] | None:
    """Walks a TFRecord file's framing and returns where it first goes wrong.

    TensorFlow's reader reports a truncated or corrupt record as "truncated
    record at 12345" without naming the file; this finds which file of many it
    was, checking every length, length checksum and data checksum.

    Args:
        path: str. A TFRecord file (`gs://` works).

    Returns:
        None when every record is whole and its checksums match, else
        `(offset, reason)`: the byte offset of the first bad record and why.

    Example:

    >>> find_framing_error("data/train-0.tfrecord")
    (1048576, 'the file ends 230 bytes into a record of 311 bytes')
    """
    import tensorflow as tf

    size = tf.io.gfile.stat(path).length
    offset = 0
    with tf.io.gfile.GFile(path, "rb") as f:
        while offset < size:
            header = f.read(12)
            if len(header) < 12:
                return offset, f"the file ends {len(header)} bytes into a record header"
            length_bytes, length_crc = header[:8], struct.unpack("<I", header[8:])[0]
            if masked_crc32c(length_bytes) != length_crc:
                return offset, "the record's length checksum does not match (not TFRecord data?)"
            length = struct.unpack("<Q", length_bytes)[0]
            if offset + 16 + length > size:
                return offset, (f"the file ends {size - offset - 12} bytes into a record of "
                                f"{length} bytes")
            data = f.read(length)
            data_crc = struct.unpack("<I", f.read(4))[0]
            if masked_crc32c(data) != data_crc:
                return offset, "the record's data checksum does not match"
            offset += 16 + length
    return None


def count_records(path: str) -> tuple[int, str | None]:
    """Counts a TFRecord file's records from their length headers alone.

    Reads 12 bytes per record and seeks past the data, so a file of a million
    records is counted in about a second; checksums are not verified (that is
    `find_framing_error`'s slower work, done once a read fails).

    Args:
        path: str. A TFRecord file (`gs://` works).

    Returns:
        `(count, problem)`: the whole records, and None or why the file ends
        inside a record ("the file ends 230 bytes into a record of 311 bytes").

    Example:

    >>> count_records("data/train-0.tfrecord")
    (20480, None)
    """
    import tensorflow as tf

    size = tf.io.gfile.stat(path).length
    offset = count = 0
    with tf.io.gfile.GFile(path, "rb") as f:
        while offset < size:
            header = f.read(12)
            if len(header) < 12:
                return count, f"the file ends {len(header)} bytes into a record header"
            length = struct.unpack("<Q", header[:8])[0]
            if offset + 16 + length > size:
                return count, (f"the file ends {size - offset - 12} bytes into a record of "
                               f"{length} bytes")
            offset += 16 + length
            f.seek(offset)
            count += 1
    return count, None
