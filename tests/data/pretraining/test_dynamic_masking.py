"""Dynamic masking: the static tool's rules in tf.data, deterministic by seed, checked sidecars."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from kbert.data import DynamicMasker
from kbert.data import MaskingConfig
from kbert.data import VocabInfo
from kbert.data import create_pretraining_data
from kbert.data import pretraining_dataset
from kbert.data import read_pretraining_metadata
from kbert.data import read_vocab
from tests.data.conftest import PERSUASION

L, P = 64, 10  # max_seq_length; max_predictions_per_seq = round(64 * 0.15): never caps 15%


@pytest.fixture(scope="module")
def dynamic_file(tmp_path_factory, vocab_file):
    path = str(tmp_path_factory.mktemp("dynamic") / "train.tfrecord")
    create_pretraining_data(PERSUASION, path, vocab_file, max_seq_length=L,
                            max_predictions_per_seq=P, dupe_factor=2, num_workers=1,
                            masking="dynamic")
    return path


@pytest.fixture(scope="module")
def instances(dynamic_file):
    """All unmasked instances of the file: `(token_ids [N, L], lengths [N])`."""
    spec = {"input_ids": tf.io.FixedLenFeature([L], tf.int64),
            "input_mask": tf.io.FixedLenFeature([L], tf.int64)}
    parsed = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(dynamic_file)]
    ids = np.stack([p["input_ids"].numpy() for p in parsed]).astype(np.int32)
    return ids, np.stack([p["input_mask"].numpy() for p in parsed]).sum(axis=1)


def _vocab(vocab_file):
    return VocabInfo.from_vocab(read_vocab(vocab_file))


def _mask(vocab_file, instances, config, seed=(1, 2)):
    ids, lengths = instances
    masker = DynamicMasker(_vocab(vocab_file), P, config)
    return [t.numpy() for t in masker(ids, lengths, tf.constant(seed))]


def test_the_tool_writes_unmasked_instances_and_records_dynamic(dynamic_file, vocab_file, instances):
    record = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(dynamic_file))).numpy())
    assert sorted(record.features.feature) == ["input_ids", "input_mask", "next_sentence_labels",
                                               "segment_ids"]
    metadata = read_pretraining_metadata(dynamic_file)
    assert metadata["masking"] == "dynamic" and metadata["counts"]["masked_tokens"] == 0
    assert json.load(open(dynamic_file + ".meta.json"))["flags"]["masking"] == "dynamic"
    ids, lengths = instances
    mask_id = read_vocab(vocab_file).index("[MASK]")
    assert not (ids == mask_id).any() and lengths.sum() >= 10_000


def test_statistics_over_ten_thousand_tokens(vocab_file, instances):
    ids, lengths = instances
    vocab = _vocab(vocab_file)
    masked, positions, labels, weights = _mask(vocab_file, instances, MaskingConfig())
    valid = weights > 0
    chosen = valid.sum()
    # min(P, max(1, round(len * 0.15))) per instance, Python's rounding, exactly.
    assert weights.sum(axis=1).tolist() == [min(P, max(1, round(n * 0.15))) for n in lengths]
    assert abs(chosen / lengths.sum() - 0.15) < 0.01
    rows = np.nonzero(valid)[0]
    at = masked[rows, positions[valid]]
    original = ids[rows, positions[valid]]
    np.testing.assert_array_equal(labels[valid], original)
    as_mask = (at == vocab.mask_id).mean()
    kept = (at == original).mean()
    replaced = 1 - as_mask - kept
    assert abs(as_mask - 0.8) < 0.02 and abs(kept - 0.1) < 0.02 and abs(replaced - 0.1) < 0.02
    # Only chosen positions change; [CLS], [SEP] and padding are never chosen.
    changed = masked != ids
    assert all(set(np.nonzero(changed[i])[0]) <= set(positions[i][valid[i]])
               for i in range(len(ids)))
    assert not np.isin(original, [vocab.cls_id, vocab.sep_id]).any()
    assert (positions[valid] < lengths[rows]).all()
    # Positions are sorted and distinct per instance.
    for i in range(len(ids)):
        p = positions[i][valid[i]]
        assert (np.diff(p) > 0).all()


def test_the_split_is_configurable_electra_style(vocab_file, instances):
    ids, _ = instances
    config = MaskingConfig(masked_lm_prob=0.3, mask_token_rate=0.85, random_token_rate=0.0)
    masked, positions, _, weights = _mask(vocab_file, instances, config)
    valid = weights > 0
    rows = np.nonzero(valid)[0]
    at, original = masked[rows, positions[valid]], ids[rows, positions[valid]]
    mask_id = _vocab(vocab_file).mask_id
    assert abs((at == mask_id).mean() - 0.85) < 0.02
    assert ((at == mask_id) | (at == original)).all()  # No random tokens.


def _words(ids_row, length, vocab):
    """Word spans `[begin, end)` of an instance: a piece and the ## pieces after it."""
    words, begin = [], None
    for i in range(length + 1):
        token = ids_row[i] if i < length else None
        special = token is None or token in (vocab.cls_id, vocab.sep_id)
        continuation = token in vocab.continuation_ids
        if begin is not None and (special or not continuation):
            words.append((begin, i))
            begin = None
        if not special and begin is None:
            begin = i
    return words


@pytest.mark.parametrize("ngrams", [1, 3])
def test_whole_words_are_kept_whole(vocab_file, instances, ngrams):
    ids, lengths = instances
    vocab = _vocab(vocab_file)
    config = MaskingConfig(do_whole_word_mask=True, max_ngram_size=ngrams)
    masked, positions, _, weights = _mask(vocab_file, instances, config)
    multi_piece = 0
    for i in range(len(ids)):
        chosen = set(positions[i][weights[i] > 0].tolist())
        assert len(chosen) <= min(P, max(1, round(lengths[i] * 0.15)))
        for begin, end in _words(ids[i], lengths[i], vocab):
            inside = [j in chosen for j in range(begin, end)]
            assert all(inside) or not any(inside), (i, begin, end)
            multi_piece += all(inside) and end - begin > 1
    assert multi_piece > 20  # The data has ## pieces, and whole words were chosen.
    assert abs(weights.sum() / lengths.sum() - 0.15) < 0.015


def test_ngram_spans_take_one_replacement_choice(vocab_file, instances):
    ids, _ = instances
    config = MaskingConfig(max_ngram_size=3, mask_token_rate=0.5, random_token_rate=0.0)
    masked, positions, _, weights = _mask(vocab_file, instances, config)
    mask_id = _vocab(vocab_file).mask_id
    runs = mixed = 0
    for i in range(len(ids)):
        p = positions[i][weights[i] > 0]
        # Adjacent chosen positions of one span: all [MASK] or all kept.
        for a, b in zip(p[:-1], p[1:]):
            if b == a + 1:
                runs += 1
                mixed += (masked[i, a] == mask_id) != (masked[i, b] == mask_id)
    assert runs > 100
    # Two adjacent spans may differ; within a span never. Spans of 2-3 are most runs.
    assert mixed < 0.3 * runs


def test_the_same_seed_gives_the_same_masks(vocab_file, instances):
    config = MaskingConfig(do_whole_word_mask=True, max_ngram_size=2)
    first = _mask(vocab_file, instances, config, seed=(5, 6))
    again = _mask(vocab_file, instances, config, seed=(5, 6))
    other = _mask(vocab_file, instances, config, seed=(5, 7))
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[1], other[1])


def test_the_reader_masks_every_batch_anew_and_repeats_with_the_seed(dynamic_file):
    def batches(seed):
        dataset = pretraining_dataset(dynamic_file, 8, L, P, masking="dynamic", seed=seed,
                                      is_training=False)
        return [(f["mask_positions"].numpy(), f["token_ids"].numpy()) for f, _, _ in dataset]

    first, again = batches(3), batches(3)
    for (a, b), (c, d) in zip(first, again):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    other = batches(4)
    assert not all(np.array_equal(a[0], b[0]) for a, b in zip(first, other))
    features, labels, weights = next(iter(pretraining_dataset(dynamic_file, 8, L, P,
                                                              masking="dynamic", seed=3)))
    assert features["mask_positions"].shape == (8, P) and labels["mlm"].shape == (8, P)
    assert labels["nsp"].shape == (8, 1) and weights["mlm"].dtype == tf.float32


def _expected_predictions(lengths, rate, width):
    """The original's `min(max_predictions, max(1, round(len * rate)))` per instance."""
    return [min(width, max(1, round(int(n) * rate))) for n in lengths]


def _rate_from_batch(boundary):
    """30% for the batches before `boundary`, then 5% (the reader's batch numbers are int64)."""
    return lambda n: tf.where(n < boundary, tf.constant(0.3, tf.float64), 0.05)


def test_the_reader_masks_each_batch_at_the_rate_it_is_given(dynamic_file):
    width = 20  # round(64 * 0.3) = 19 predictions fit
    scheduled = pretraining_dataset(dynamic_file, 8, L, width, masking="dynamic", seed=3,
                                    is_training=False, masking_rate=_rate_from_batch(2))
    for n, (features, _, weights) in enumerate(scheduled):
        lengths = features["padding_mask"].numpy().sum(axis=1)
        assert weights["mlm"].numpy().sum(axis=1).tolist() == _expected_predictions(
            lengths, 0.3 if n < 2 else 0.05, width), n
    # A rate equal to MaskingConfig's draws the masks the reader draws without one.
    def inputs(**rate):
        return [f["token_ids"].numpy() for f, _, _ in pretraining_dataset(
            dynamic_file, 8, L, width, masking="dynamic", seed=3, is_training=False, **rate)]

    for a, b in zip(inputs(), inputs(masking_rate=lambda n: tf.constant(0.15, tf.float64))):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="a masking-rate schedule needs masking='dynamic'"):
        pretraining_dataset(dynamic_file, 8, L, width, masking_rate=_rate_from_batch(2))


def test_packed_windows_take_the_rate_of_the_batch_their_first_row_lands_in(dynamic_file):
    from kbert.data import PackingConfig

    width, rows_per_batch, window = 20, 4, 8
    packing = PackingConfig(max_instances_per_row=3, window_size=window)

    def rows(**rate):
        dataset = pretraining_dataset(dynamic_file, rows_per_batch, L, width, masking="dynamic",
                                      seed=3, is_training=False, packing=packing, **rate)
        return [(f["instance_ids"].numpy(), f["token_ids"].numpy(), w["mlm"].numpy())
                for f, _, w in dataset.take(8)]

    # The same rate as MaskingConfig's: the same rows as the reader packs without a schedule.
    for a, b in zip(rows(), rows(masking_rate=lambda n: tf.constant(0.15, tf.float64))):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    # 30% until batch 3, then 5%: each row's predictions are one rate's, and the rate falls
    # at the first window starting in batch 3 or later (at most a window's rows past it).
    rates = []
    for instance_ids, _, weights in rows(masking_rate=_rate_from_batch(3)):
        for ids, row_weights in zip(instance_ids, weights):
            lengths = [(ids == i).sum() for i in range(1, ids.max() + 1)]
            count = int(row_weights.sum())
            matches = [rate for rate in (0.3, 0.05)
                       if count == sum(_expected_predictions(lengths, rate, width))]
            assert matches, (count, lengths)
            rates.append(matches[0] if len(matches) == 1 else None)
    first_low = next(i for i, rate in enumerate(rates) if rate == 0.05)
    assert 3 * rows_per_batch <= first_low < 3 * rows_per_batch + window
    assert all(rate in (0.3, None) for rate in rates[:first_low])
    assert all(rate in (0.05, None) for rate in rates[first_low:])


def test_static_and_dynamic_data_are_not_read_as_each_other(tmp_path, vocab_file, dynamic_file):
    static = str(tmp_path / "static.tfrecord")
    create_pretraining_data(PERSUASION, static, vocab_file, max_seq_length=L,
                            max_predictions_per_seq=P, dupe_factor=1, num_workers=1)
    with pytest.raises(ValueError, match=r"masking='dynamic', but .*static.tfrecord.meta.json "
                                         r"records masking='static'.*run_pretraining.masking = "
                                         r"\"static\""):
        pretraining_dataset(static, 8, L, P, masking="dynamic")
    with pytest.raises(ValueError, match=r"masking='static', but .*train.tfrecord.meta.json "
                                         r"records masking='dynamic': the data holds unmasked"):
        pretraining_dataset(dynamic_file, 8, L, P)


def test_dynamic_masking_needs_a_vocabulary(tmp_path, dynamic_file):
    copy = str(tmp_path / "copy.tfrecord")
    tf.io.gfile.copy(dynamic_file, copy)
    metadata = json.load(open(dynamic_file + ".meta.json"))
    metadata["vocab_file"] = str(tmp_path / "gone.txt")
    with open(copy + ".meta.json", "w") as f:
        json.dump(metadata, f)
    with pytest.raises(ValueError, match=r"needs the tokenizer file .* '.*gone.txt' does not "
                                         r"exist; pass vocab_file="):
        pretraining_dataset(copy, 8, L, P, masking="dynamic")


def test_the_masker_takes_a_rate_per_batch(vocab_file, instances):
    ids, lengths = instances
    masker = DynamicMasker(_vocab(vocab_file), 20, MaskingConfig())
    _, _, _, weights = masker(ids, lengths, tf.constant([1, 2]), tf.constant(0.3, tf.float64))
    assert weights.numpy().sum(axis=1).tolist() == _expected_predictions(lengths, 0.3, 20)


@pytest.mark.parametrize("settings, message", [
    (dict(masked_lm_prob=0.0), r"masked_lm_prob=0.0 must be in \(0, 1\]"),
    (dict(mask_token_rate=0.9, random_token_rate=0.2), r"exceeds 1"),
    (dict(max_ngram_size=0), r"max_ngram_size=0 must be at least 1"),
])
def test_bad_masking_settings_are_named(settings, message):
    with pytest.raises(ValueError, match=message):
        MaskingConfig(**settings).validate()
