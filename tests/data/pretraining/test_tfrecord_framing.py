import numpy as np
import tensorflow as tf

from kbert.data.pretraining.tfrecord_framing import frame_records


def test_framing_equals_tfrecord_writer(tmp_path):
    records = [b"", b"a", b"hello world", bytes(range(256)) * 40]
    reference = str(tmp_path / "reference.tfrecord")
    with tf.io.TFRecordWriter(reference) as writer:
        for record in records:
            writer.write(record)
    offsets = np.cumsum([0] + [len(r) for r in records])
    framed, framed_offsets = frame_records(b"".join(records), offsets)
    assert framed == open(reference, "rb").read()
    assert framed_offsets.tolist() == np.cumsum([0] + [len(r) + 16 for r in records]).tolist()
    path = tmp_path / "framed.tfrecord"
    path.write_bytes(framed[framed_offsets[1] : framed_offsets[3]])  # Any run of whole records.
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(path))] == records[1:3]


def test_find_framing_error_names_the_first_bad_record(tmp_path):
    from kbert.data.pretraining.tfrecord_framing import find_framing_error

    path = str(tmp_path / "r.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for record in (b"first", b"second record", b"third"):
            writer.write(record)
    assert find_framing_error(path) is None
    data = open(path, "rb").read()
    second = 16 + len(b"first")
    corrupt = tmp_path / "corrupt.tfrecord"
    corrupt.write_bytes(data[:second + 12] + b"X" + data[second + 13:])  # a byte of its data
    assert find_framing_error(str(corrupt)) == (second, "the record's data checksum does not match")
    cut = tmp_path / "cut.tfrecord"
    cut.write_bytes(data[:second + 5])
    assert find_framing_error(str(cut)) == (second, "the file ends 5 bytes into a record header")
    text = tmp_path / "text.tfrecord"
    text.write_bytes(b"this is plain text, not TFRecord framing\n")
    assert find_framing_error(str(text)) == (
        0, "the record's length checksum does not match (not TFRecord data?)")
