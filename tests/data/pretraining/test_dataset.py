import ast
import glob
import os

import numpy as np
import pytest

from tests.conftest import REPO
import tensorflow as tf

from kbert.data import ExampleEncoder
from kbert.data import TrainingInstance
from kbert.data import create_pretraining_data
from kbert.data import pretraining_dataset
from kbert.data import pretraining_feature_spec
from kbert.data import read_pretraining_metadata
from tests.data.conftest import PERSUASION

L, P = 16, 3  # max_seq_length, max_predictions_per_seq


def _original_format_file(path, n, next_sentence=True):
    """Writes Examples the way google-research/bert's tool does (tf.train.Example)."""
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(n):
            ids = [101, 1000 + i, 102, 2000 + i, 102] + [0] * (L - 5)
            f = {
                "input_ids": ids,
                "input_mask": [1] * 5 + [0] * (L - 5),
                "segment_ids": [0, 0, 0, 1, 1] + [0] * (L - 5),
                "masked_lm_positions": [1, 3, 0],
                "masked_lm_ids": [1000 + i, 2000 + i, 0],
            }
            feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=v)) for k, v in f.items()}
            feature["masked_lm_weights"] = tf.train.Feature(float_list=tf.train.FloatList(value=[1.0, 1.0, 0.0]))
            if next_sentence:
                feature["next_sentence_labels"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 2]))
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def test_feature_spec_is_exact():
    spec = pretraining_feature_spec(L, P)
    assert {k: (v.shape, v.dtype) for k, v in spec.items()} == {
        "input_ids": ([L], tf.int64),
        "input_mask": ([L], tf.int64),
        "segment_ids": ([L], tf.int64),
        "masked_lm_positions": ([P], tf.int64),
        "masked_lm_ids": ([P], tf.int64),
        "masked_lm_weights": ([P], tf.float32),
        "next_sentence_labels": ([1], tf.int64),
    }
    assert "next_sentence_labels" not in pretraining_feature_spec(L, P, next_sentence=False)


def test_reads_original_format_files(tmp_path):
    path = str(tmp_path / "orig.tfrecord")
    _original_format_file(path, 7)
    assert read_pretraining_metadata(path) is None
    ds = pretraining_dataset(path, batch_size=3, max_seq_length=L, max_predictions_per_seq=P, is_training=False)
    batches = list(ds)
    assert [b[0]["token_ids"].shape[0] for b in batches] == [3, 3, 1]
    features, labels, weights = batches[0]
    assert sorted(features) == ["mask_positions", "padding_mask", "segment_ids", "token_ids"]
    assert features["token_ids"].dtype == tf.int32 and features["token_ids"].shape == (3, L)
    assert features["mask_positions"].shape == (3, P)
    np.testing.assert_array_equal(features["token_ids"][0, :5], [101, 1000, 102, 2000, 102])
    np.testing.assert_array_equal(features["padding_mask"][0, :6], [1, 1, 1, 1, 1, 0])
    np.testing.assert_array_equal(labels["mlm"][1], [1001, 2001, 0])
    np.testing.assert_array_equal(labels["nsp"][:, 0], [0, 1, 0])
    np.testing.assert_array_equal(weights["mlm"][0], [1.0, 1.0, 0.0])


def test_encoder_matches_tf_train_example(tmp_path):
    instance = TrainingInstance([101, 5, 103, 102, 7, 102], [0, 0, 0, 0, 1, 1], [2], [6], True)
    record = ExampleEncoder(L, P, vocab_size=30522).encode(instance)
    got = tf.train.Example.FromString(record)
    f = got.features.feature
    assert list(f["input_ids"].int64_list.value) == [101, 5, 103, 102, 7, 102] + [0] * (L - 6)
    assert list(f["input_mask"].int64_list.value) == [1] * 6 + [0] * (L - 6)
    assert list(f["masked_lm_positions"].int64_list.value) == [2, 0, 0]
    assert list(f["masked_lm_ids"].int64_list.value) == [6, 0, 0]
    assert list(f["masked_lm_weights"].float_list.value) == [1.0, 0.0, 0.0]
    assert list(f["next_sentence_labels"].int64_list.value) == [1]
    # Large ids and lengths encode as multi-byte varints.
    big = TrainingInstance([101] + [30000] * 200 + [102], [0] * 202, [5], [30000], False)
    f = tf.train.Example.FromString(ExampleEncoder(256, P, 30522).encode(big)).features.feature
    assert list(f["input_ids"].int64_list.value)[:202] == [101] + [30000] * 200 + [102]
    with pytest.raises(ValueError, match="exceeds"):
        ExampleEncoder(4, P, 100).encode(instance)


def test_reads_tool_output_and_skips_sidecars(tmp_path, vocab_file):
    outputs = ",".join(str(tmp_path / f"train-{i}.tfrecord") for i in range(4))
    meta = create_pretraining_data(PERSUASION, outputs, vocab_file, max_seq_length=L,
                                   max_predictions_per_seq=P, dupe_factor=1, num_workers=1)
    # The glob matches the .meta.json sidecars too; the reader skips them.
    pattern = str(tmp_path / "train-*")
    ds = pretraining_dataset(pattern, batch_size=8, max_seq_length=L, max_predictions_per_seq=P, is_training=False)
    total = 0
    for features, labels, weights in ds:
        ids, positions = features["token_ids"].numpy(), features["mask_positions"].numpy()
        restored = ids.copy()
        for row in range(len(ids)):
            for k in range(P):
                if weights["mlm"][row, k] > 0:
                    restored[row, positions[row, k]] = labels["mlm"][row, k]
        assert np.all((restored > 0) == (features["padding_mask"].numpy() > 0))
        total += len(ids)
    assert total == meta["counts"]["instances"]


def test_list_data_files_skips_sidecars_and_every_temporary(tmp_path):
    from kbert.data.pretraining import list_data_files
    from kbert.files import temporary_name

    data = str(tmp_path / "train-0.tfrecord")
    others = [
        data + ".meta.json",
        data + ".incomplete",  # create_pretraining_data's data file while written.
        temporary_name(data + ".meta.json"),  # write_metadata's, through kbert.files.write_text.
        temporary_name(str(tmp_path / "train-1.tfrecord")),
    ]
    for path in [data, *others]:
        open(path, "wb").close()
    assert list_data_files(str(tmp_path / "train-*")) == [data]


def test_input_context_shards_files_and_examples(tmp_path):
    for i in range(4):
        _original_format_file(str(tmp_path / f"f{i}.tfrecord"), 5)

    def first_tokens(pattern, pipelines, pipeline_id):
        ctx = tf.distribute.InputContext(num_input_pipelines=pipelines, input_pipeline_id=pipeline_id)
        ds = pretraining_dataset(pattern, batch_size=1, max_seq_length=L, max_predictions_per_seq=P,
                                 is_training=False, input_context=ctx)
        return sorted(int(f["token_ids"][0, 1]) for f, _, _ in ds)

    all_files = str(tmp_path / "f*.tfrecord")
    shards = [first_tokens(all_files, 2, i) for i in range(2)]
    assert len(shards[0]) == len(shards[1]) == 10
    assert sorted(shards[0] + shards[1]) == sorted([1000 + i for i in range(5)] * 4)
    # Fewer files than pipelines: examples are sharded instead.
    one = str(tmp_path / "f0.tfrecord")
    shards = [first_tokens(one, 2, i) for i in range(2)]
    assert shards == [[1000, 1002, 1004], [1001, 1003]]


def test_no_next_sentence(tmp_path):
    path = str(tmp_path / "none.tfrecord")
    _original_format_file(path, 4, next_sentence=False)
    ds = pretraining_dataset(path, batch_size=2, max_seq_length=L, max_predictions_per_seq=P,
                             next_sentence=False, is_training=True, seed=1)
    features, labels, weights = next(iter(ds))
    assert sorted(labels) == ["mlm"] and features["token_ids"].shape == (2, L)
    with pytest.raises(tf.errors.InvalidArgumentError):
        next(iter(pretraining_dataset(path, batch_size=2, max_seq_length=L, max_predictions_per_seq=P,
                                      next_sentence=True, is_training=False)))


def test_data_package_imports_no_models_gin_or_flags():
    paths = glob.glob(os.path.join(REPO, "kbert", "data", "**", "*.py"), recursive=True)
    assert len(paths) > 10
    for path in paths:
        tree = ast.parse(open(path).read())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            for name in names:
                assert not name.startswith(("kbert.models", "kbert.layers", "gin", "absl.flags")), (path, name)


def test_encode_batch_equals_encode():
    rng = np.random.default_rng(0)
    for s, p, vocab_size, next_sentence in [(128, 20, 30522, True), (300, 7, 2**21 + 5, False)]:
        encoder = ExampleEncoder(s, p, vocab_size, next_sentence=next_sentence)
        instances = []
        for _ in range(200):
            n = int(rng.integers(3, s + 1))
            k = int(rng.integers(1, min(p, n - 2) + 1))
            n_a = int(rng.integers(1, n))
            instances.append(TrainingInstance(
                rng.integers(0, vocab_size, n).tolist(), [0] * n_a + [1] * (n - n_a),
                sorted(rng.choice(np.arange(1, n), k, replace=False).tolist()),
                rng.integers(0, vocab_size, k).tolist(), bool(rng.integers(2)),
            ))

        def pad(rows, width):
            out = np.zeros((len(rows), width), np.int64)
            for i, row in enumerate(rows):
                out[i, : len(row)] = row
            return out

        records, offsets = encoder.encode_batch(
            pad([x.token_ids for x in instances], s),
            np.array([len(x.token_ids) for x in instances]),
            pad([x.segment_ids for x in instances], s),
            pad([x.masked_lm_positions for x in instances], p),
            pad([x.masked_lm_ids for x in instances], p),
            np.array([len(x.masked_lm_positions) for x in instances]),
            np.array([int(x.is_random_next) for x in instances]) if next_sentence else None,
        )
        batch = [records[offsets[i] : offsets[i + 1]] for i in range(len(instances))]
        assert batch == [encoder.encode(x) for x in instances]
