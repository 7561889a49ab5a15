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
