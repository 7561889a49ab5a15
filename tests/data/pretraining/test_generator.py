import json
import os

import numpy as np
import pytest

from tests import forked_python
from tests.conftest import REPO
import tensorflow as tf

from kbert.data import create_pretraining_data
from kbert.data import read_vocab
from kbert.data import pretraining_feature_spec
from kbert.data import read_pretraining_metadata
from kbert.data import vocab_sha256
from tests.data.conftest import CAESAR_LATIN1
from tests.data.conftest import MOBY_CRLF
from tests.data.conftest import PERSUASION

SMALL = dict(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=2, num_workers=1)


def _records(path):
    return [r.numpy() for r in tf.data.TFRecordDataset(path)]


def test_exact_features_and_sidecar(tmp_path, vocab_file):
    outputs = [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")]
    meta = create_pretraining_data(PERSUASION, ",".join(outputs), vocab_file, **SMALL)
    records = [_records(p) for p in outputs]
    assert abs(len(records[0]) - len(records[1])) <= 1  # Round-robin.
    assert len(records[0]) + len(records[1]) == meta["counts"]["instances"] > 100
    example = tf.train.Example.FromString(records[0][0])
    features = example.features.feature
    assert sorted(features) == sorted(
        ["input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
         "masked_lm_weights", "next_sentence_labels"]
    )
    for name in ("input_ids", "input_mask", "segment_ids"):
        assert len(features[name].int64_list.value) == 32
    for name in ("masked_lm_positions", "masked_lm_ids"):
        assert len(features[name].int64_list.value) == 5
    assert len(features["masked_lm_weights"].float_list.value) == 5
    assert len(features["next_sentence_labels"].int64_list.value) == 1
    parsed = tf.io.parse_example(records[0] + records[1], pretraining_feature_spec(32, 5))
    ids, mask = parsed["input_ids"].numpy(), parsed["input_mask"].numpy()
    n = mask.sum(1)
    assert np.all(ids[mask == 0] == 0) and np.all(parsed["segment_ids"].numpy()[mask == 0] == 0)
    weights = parsed["masked_lm_weights"].numpy()
    assert np.all(parsed["masked_lm_positions"].numpy()[weights == 0] == 0)
    assert np.all(parsed["masked_lm_positions"].numpy() < n[:, None])
    assert set(np.unique(parsed["next_sentence_labels"].numpy())) == {0, 1}

    vocab = read_vocab(vocab_file)
    on_disk = read_pretraining_metadata(str(tmp_path / "*"))
    assert on_disk["max_seq_length"] == 32 and on_disk["max_predictions_per_seq"] == 5
    assert on_disk["vocab_sha256"] == vocab_sha256(vocab_file)
    assert on_disk["vocab_size"] == len(vocab)
    assert on_disk["next_sentence"] == "nsp"
    assert on_disk["flags"]["dupe_factor"] == 2
    counts = on_disk["counts"]
    for key in ("documents", "instances", "tokens", "masked_fraction", "random_next_fraction", "input_bytes"):
        assert key in counts
    assert counts["tokens"] == int(n.sum())
    assert 0.12 < counts["masked_fraction"] < 0.18
    assert on_disk["num_instances_in_file"] == len(records[0])
    assert on_disk["bytes_in_file"] == os.path.getsize(on_disk["data_file"])
    assert meta["counts"] == counts
    assert sorted(os.listdir(tmp_path)) == ["a.tfrecord", "a.tfrecord.meta.json", "b.tfrecord", "b.tfrecord.meta.json"]


def test_sop_and_none_files(tmp_path, vocab_file, sentence_corpus):
    sop = str(tmp_path / "sop.tfrecord")
    create_pretraining_data(sentence_corpus, sop, vocab_file, next_sentence="sop", **SMALL)
    parsed = tf.io.parse_example(_records(sop), pretraining_feature_spec(32, 5))
    labels = parsed["next_sentence_labels"].numpy()
    assert 0.4 < labels.mean() < 0.6
    none = str(tmp_path / "none.tfrecord")
    meta = create_pretraining_data(sentence_corpus, none, vocab_file, next_sentence="none", **SMALL)
    example = tf.train.Example.FromString(_records(none)[0])
    assert "next_sentence_labels" not in example.features.feature
    parsed = tf.io.parse_example(_records(none), pretraining_feature_spec(32, 5, next_sentence=False))
    assert parsed["segment_ids"].numpy().max() == 0
    assert meta["counts"]["random_next_fraction"] is None
    assert read_pretraining_metadata(none)["next_sentence"] == "none"
    with pytest.raises(ValueError, match="next_sentence"):
        read_pretraining_metadata([sop, none])


def test_encodings_crlf_and_long_lines(tmp_path, vocab_file):
    out = str(tmp_path / "o.tfrecord")
    with pytest.raises(ValueError, match=r"shakespeare-caesar-head.latin1.txt:119: not valid utf-8.*--input_encoding"):
        create_pretraining_data(CAESAR_LATIN1, out, vocab_file, **SMALL)
    assert os.listdir(tmp_path) == []
    create_pretraining_data(CAESAR_LATIN1, out, vocab_file, input_encoding="latin-1", **SMALL)
    assert os.path.exists(out)
    meta = create_pretraining_data(MOBY_CRLF, out, vocab_file, **SMALL)
    vocab = read_vocab(vocab_file)
    for record in _records(out)[:50]:
        ids = tf.train.Example.FromString(record).features.feature["input_ids"].int64_list.value
        assert all("\r" not in vocab[i] for i in ids)
    assert meta["counts"]["lines"] > 50
    long_line = tmp_path / "long.txt"
    long_line.write_text("word " * 400_000 + "\n\nA short document.\nWith two lines.\n")
    meta = create_pretraining_data(str(long_line), out, vocab_file, **SMALL)
    assert meta["counts"]["truncated_lines"] == 1 and meta["counts"]["instances"] > 0


def test_bad_inputs_leave_no_output(tmp_path, vocab_file):
    out = str(tmp_path / "out" / "o.tfrecord")
    os.mkdir(tmp_path / "out")
    with pytest.raises(ValueError, match="--input_file: no file matches"):
        create_pretraining_data(str(tmp_path / "nothing*.txt"), out, vocab_file, **SMALL)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n\n")
    with pytest.raises(ValueError, match="empty.txt.*holds no text"):
        create_pretraining_data(str(empty), out, vocab_file, **SMALL)
    bad_vocab = tmp_path / "vocab.txt"
    bad_vocab.write_text("[PAD]\n[UNK]\nthe\n")
    with pytest.raises(ValueError, match=r"vocab.txt.*lacks \[CLS\], \[SEP\], \[MASK\]"):
        create_pretraining_data(PERSUASION, out, str(bad_vocab), **SMALL)
    with pytest.raises(ValueError, match="--max_predictions_per_seq=40 is larger than possible"):
        create_pretraining_data(PERSUASION, out, vocab_file, **{**SMALL, "max_predictions_per_seq": 40})
    with pytest.raises(ValueError, match="directory .*missing.* does not exist"):
        create_pretraining_data(PERSUASION, str(tmp_path / "missing" / "o.tfrecord"), vocab_file, **SMALL)
    with pytest.raises(ValueError, match=r"--output_file='.*out' is a directory; name a file in it"):
        create_pretraining_data(PERSUASION, str(tmp_path / "out"), vocab_file, **SMALL)
    assert os.listdir(tmp_path / "out") == []
    # A directory nobody may create files in: sysfs refuses even root (as CI runs).
    unwritable = "/sys" if os.geteuid() == 0 else str(tmp_path / "out")
    if unwritable != "/sys":
        os.chmod(unwritable, 0o500)
    with pytest.raises(ValueError, match=r"--output_file='.*o.tfrecord' cannot be written"):
        create_pretraining_data(PERSUASION, os.path.join(unwritable, "o.tfrecord"), vocab_file, **SMALL)
    assert not os.path.exists(os.path.join(unwritable, "o.tfrecord.incomplete"))


def test_tool_runs_and_prints_examples(tmp_path, vocab_file):
    root = REPO
    out = str(tmp_path / "t.tfrecord")
    # The tool forks its workers (this test process has run TensorFlow, so
    # in-process runs spawn them); the bytes must not depend on that.
    result = forked_python.run(
        [os.path.join(root, "tools", "create_pretraining_data.py"),
         f"--input_file={PERSUASION}", f"--output_file={out}", f"--vocab_file={vocab_file}",
         "--dupe_factor=1", "--max_seq_length=32", "--max_predictions_per_seq=5",
         "--num_workers=2", "--chunk_bytes=20000", "--verbose"],
        cwd=root, env={**os.environ, "PYTHONPATH": root}, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("*** Example ***") == 20
    assert "masked_lm_positions:" in result.stdout and "MB/s" in result.stdout
    assert json.load(open(out + ".meta.json"))["flags"]["verbose"] is True
    same = str(tmp_path / "same.tfrecord")
    create_pretraining_data(PERSUASION, same, vocab_file, dupe_factor=1, max_seq_length=32,
                            max_predictions_per_seq=5, num_workers=1, chunk_bytes=20000)
    assert open(out, "rb").read() == open(same, "rb").read()
    bad = forked_python.run(
        [os.path.join(root, "tools", "create_pretraining_data.py"),
         f"--input_file={tmp_path}/none*.txt", f"--output_file={out}", f"--vocab_file={vocab_file}"],
        cwd=root, env={**os.environ, "PYTHONPATH": root}, timeout=120)
    assert bad.returncode != 0 and "--input_file: no file matches" in bad.stderr
