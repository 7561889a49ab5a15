import random

import numpy as np
import pytest

from kbert.data import BertTokenizer
from kbert.data import InstanceOptions
from kbert.data import VocabInfo
from kbert.data import create_instances_from_document
from kbert.data import create_masked_lm_predictions
from kbert.data import TrainingInstance
from kbert.data.pretraining.instances import _flatten
from kbert.data.pretraining.instances import _trim_counts
from kbert.data.pretraining.instances import create_layouts
from kbert.data.pretraining.instances import layouts_to_arrays
from kbert.data.pretraining.instances import mask_tokens_batch
from kbert.data.pretraining.instances import truncate_seq_pair
from tests.data.conftest import PERSUASION


@pytest.fixture(scope="module")
def tokenized(vocab_file):
    tokenizer = BertTokenizer(vocab_file)
    with open(PERSUASION, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    segments = [s for s in tokenizer.tokenize_to_ids(lines) if s]
    documents = [segments[i : i + 30] for i in range(0, len(segments), 30)]
    return tokenizer, VocabInfo.from_vocab(tokenizer.vocab), documents


def _all_instances(documents, options, vocab, seed, passes):
    rng = random.Random(seed)
    out = []
    for _ in range(passes):
        for i in range(len(documents)):
            out.extend(create_instances_from_document(documents, i, options, vocab, rng))
    return out


def _check_properties(instance, options, vocab):
    ids = instance.token_ids
    assert len(ids) <= options.max_seq_length
    assert len(instance.segment_ids) == len(ids)
    positions = instance.masked_lm_positions
    assert positions == sorted(set(positions))
    assert 1 <= len(positions) <= options.max_predictions_per_seq
    original = instance.original_token_ids()
    assert original[0] == vocab.cls_id and original[-1] == vocab.sep_id
    for p in positions:
        assert original[p] not in (vocab.cls_id, vocab.sep_id)
    num_to_predict = min(options.max_predictions_per_seq, max(1, round(len(ids) * options.masked_lm_prob)))
    if not options.do_whole_word_mask and options.max_ngram_size == 1:
        assert len(positions) == num_to_predict
    else:
        assert len(positions) <= num_to_predict
    # Unmasked positions are untouched.
    masked = set(positions)
    assert all(a == b for i, (a, b) in enumerate(zip(ids, original)) if i not in masked)


def test_nsp_properties_and_statistics(tokenized):
    _, vocab, documents = tokenized
    options = InstanceOptions(max_seq_length=64, max_predictions_per_seq=10)
    instances = _all_instances(documents, options, vocab, seed=1, passes=6)
    tokens = masked = replaced_mask = kept = random_next = 0
    for x in instances:
        _check_properties(x, options, vocab)
        original = x.original_token_ids()
        assert original.count(vocab.sep_id) == 2
        n_a = x.segment_ids.index(1)
        assert x.segment_ids == [0] * n_a + [1] * (len(original) - n_a)
        assert original[n_a - 1] == vocab.sep_id
        tokens += len(x.token_ids)
        masked += len(x.masked_lm_positions)
        for p in x.masked_lm_positions:
            replaced_mask += x.token_ids[p] == vocab.mask_id
            kept += x.token_ids[p] == original[p]
    assert tokens >= 10_000 and masked >= 1_500
    assert abs(masked / tokens - 0.15) <= 0.01
    assert abs(replaced_mask / masked - 0.80) <= 0.02
    # Kept = the 10% "unchanged" plus random draws that hit the same token.
    assert abs(kept / masked - 0.10) <= 0.02
    assert abs((masked - replaced_mask - kept) / masked - 0.10) <= 0.02


def test_random_next_is_half(tokenized):
    # The original takes a random next segment for every chunk of one segment
    # and tosses a fair coin for the others. Segments of at most 20 tokens
    # fill a 61-token target only with 4 or more, so only a document's last
    # chunk can hold one; and a last instance that is random next is exactly
    # that case (after a coin's "random" the chunk's unused segments make
    # another). Leaving those out leaves the coin alone: 1/2 over all the
    # coin's instances, whichever stopped a walk (2% is 4.2 sigma at 11k).
    _, vocab, documents = tokenized
    segments = [s for doc in documents for s in doc if len(s) <= 20]
    long_documents = [segments[i : i + 150] for i in range(0, len(segments), 150)]
    options = InstanceOptions(max_seq_length=64, max_predictions_per_seq=10, short_seq_prob=0.0)
    rng = random.Random(2)
    labels = []
    for _ in range(100):
        for i in range(len(long_documents)):
            instances = create_instances_from_document(long_documents, i, options, vocab, rng)
            if instances[-1].is_random_next:
                instances = instances[:-1]
            labels.extend(bool(x.is_random_next) for x in instances)
    assert len(labels) >= 10_000
    assert abs(sum(labels) / len(labels) - 0.5) <= 0.02


def test_same_seed_same_instances(tokenized):
    _, vocab, documents = tokenized
    options = InstanceOptions(max_seq_length=48, max_predictions_per_seq=7)
    a = _all_instances(documents[:5], options, vocab, seed=3, passes=1)
    b = _all_instances(documents[:5], options, vocab, seed=3, passes=1)
    c = _all_instances(documents[:5], options, vocab, seed=4, passes=1)
    assert a == b and a != c


def test_whole_word_masking_masks_whole_words(tokenized):
    tokenizer, vocab, documents = tokenized
    options = InstanceOptions(max_seq_length=64, max_predictions_per_seq=10, do_whole_word_mask=True)
    instances = _all_instances(documents, options, vocab, seed=5, passes=2)
    multi_piece_words = 0
    for x in instances:
        _check_properties(x, options, vocab)
        original = x.original_token_ids()
        masked = set(x.masked_lm_positions)
        for p in masked:
            # A continuation piece is masked only with the piece before it,
            # and a masked word's continuation pieces are masked too.
            if original[p] in vocab.continuation_ids and original[p - 1] not in (vocab.cls_id, vocab.sep_id):
                assert p - 1 in masked
                multi_piece_words += 1
            if p + 1 < len(original) and original[p + 1] in vocab.continuation_ids:
                assert p + 1 in masked
    assert multi_piece_words > 50


def test_ngram_masking_masks_contiguous_spans(tokenized):
    _, vocab, documents = tokenized
    options = InstanceOptions(
        max_seq_length=64, max_predictions_per_seq=10, do_whole_word_mask=True, max_ngram_size=3
    )
    instances = _all_instances(documents, options, vocab, seed=6, passes=2)
    span_lengths = []
    for x in instances:
        _check_properties(x, options, vocab)
        positions = x.masked_lm_positions
        run = 1
        for a, b in zip(positions, positions[1:]):
            if b == a + 1:
                run += 1
            else:
                span_lengths.append(run)
                run = 1
        span_lengths.append(run)
    # Multi-word spans occur (longer than whole-word masking alone would give).
    assert sum(1 for n in span_lengths if n >= 3) > 0.1 * len(span_lengths)


def test_ngram_spans_share_one_replacement_choice():
    vocab = VocabInfo(vocab_size=1000, cls_id=1, sep_id=2, mask_id=3)
    options = InstanceOptions(max_seq_length=200, max_predictions_per_seq=60, max_ngram_size=4)
    tokens = [1] + list(range(100, 300)) + [2]
    rng = random.Random(0)
    for _ in range(50):
        out, positions, labels = create_masked_lm_predictions(tokens, options, vocab, rng)
        assert labels == [tokens[p] for p in positions]
        assert len(positions) <= 30


def test_sop(tokenized):
    _, vocab, documents = tokenized
    options = InstanceOptions(max_seq_length=64, max_predictions_per_seq=10, next_sentence="sop")
    instances = _all_instances(documents, options, vocab, seed=7, passes=4)
    text = [t for doc in documents for seg in doc for t in seg]
    joined = " " + " ".join(map(str, text)) + " "
    for x in instances:
        _check_properties(x, options, vocab)
        original = x.original_token_ids()
        n_a = x.segment_ids.index(1)
        a, b = original[1 : n_a - 1], original[n_a:-1]
        first, second = (b, a) if x.is_random_next else (a, b)
        # Both are corpus text, `first` before `second` (truncation may cut
        # tokens at the boundary, so adjacency is checked loosely).
        i = joined.find(" " + " ".join(map(str, first)) + " ")
        j = joined.find(" " + " ".join(map(str, second)) + " ", i)
        assert 0 <= i < j
    # Every chunk is swapped on a fair coin: within 2% is 4.2 sigma at 11k.
    labels = [x.is_random_next for x in _all_instances(documents, options, vocab, seed=9, passes=80)]
    assert len(labels) >= 10_000
    assert abs(sum(labels) / len(labels) - 0.5) <= 0.02


def test_none_mode_single_segment(tokenized):
    _, vocab, documents = tokenized
    options = InstanceOptions(max_seq_length=64, max_predictions_per_seq=10, next_sentence="none")
    instances = _all_instances(documents, options, vocab, seed=8, passes=1)
    for x in instances:
        _check_properties(x, options, vocab)
        assert x.is_random_next is None
        assert set(x.segment_ids) == {0}
        assert x.original_token_ids().count(vocab.sep_id) == 1
    # Sentences are packed: most instances are (nearly) full.
    assert sum(len(x.token_ids) >= 50 for x in instances) > 0.7 * len(instances)


def test_truncate_seq_pair_trims_the_longer():
    rng = random.Random(0)
    a, b = truncate_seq_pair(list(range(100)), list(range(100, 105)), 20, rng)
    assert len(a) + len(b) == 20 and b == list(range(100, 105))
    assert a == list(range(a[0], a[0] + 15))
    a, b = truncate_seq_pair(list(range(10)), list(range(10, 40)), 12, rng)
    assert len(a) == 6 and len(b) == 6


def _original_truncation_counts(len_a, len_b, max_num_tokens):
    """Tokens the original's `truncate_seq_pair` walk takes from A and from B."""
    trim_a = trim_b = 0
    while (len_a - trim_a) + (len_b - trim_b) > max_num_tokens:
        # google-research/bert: `tokens_a if len(tokens_a) > len(tokens_b) else tokens_b`.
        if len_a - trim_a > len_b - trim_b:
            trim_a += 1
        else:
            trim_b += 1
    return trim_a, trim_b


def test_truncation_takes_from_each_segment_what_the_original_takes():
    # Ties go to B, as in the original: (3, 3) cut to 5 keeps A whole.
    assert truncate_seq_pair([1, 2, 3], [4, 5, 6], 5, random.Random(0))[0] == [1, 2, 3]
    rng, cases = random.Random(0), []
    for len_a in range(1, 14):
        for len_b in range(1, 14):
            for max_num_tokens in range(2, len_a + len_b + 1):
                a, b = truncate_seq_pair(list(range(len_a)), list(range(len_b)), max_num_tokens, rng)
                expected = _original_truncation_counts(len_a, len_b, max_num_tokens)
                assert (len_a - len(a), len_b - len(b)) == expected, (len_a, len_b, max_num_tokens)
                cases.append((len_a, len_b, max_num_tokens, *expected))
    # cut_layouts' vectorized counts.
    len_a, len_b, max_num_tokens, trim_a, trim_b = np.array(cases).T
    for m in np.unique(max_num_tokens):
        rows = max_num_tokens == m
        counts = _trim_counts(len_a[rows], len_b[rows], int(m))
        np.testing.assert_array_equal(np.stack(counts), np.stack([trim_a[rows], trim_b[rows]]))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_predictions_per_seq": 126}, "--max_predictions_per_seq=126 is larger than possible"),
        ({"max_seq_length": 4}, "--max_seq_length=4"),
        ({"next_sentence": "xyz"}, "--next_sentence='xyz'"),
        ({"masked_lm_prob": 0.0}, "--masked_lm_prob"),
        ({"max_ngram_size": 0}, "--max_ngram_size"),
    ],
)
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        InstanceOptions(**kwargs).validate()


def _walk_like_the_original(documents, max_seq_length, short_seq_prob, rng):
    """`(len A, len B, label)` per instance: google-research/bert's per-document walk, on lengths."""
    max_num_tokens = max_seq_length - 3
    out = []
    for index, document in enumerate(documents):
        target = max_num_tokens
        if rng.random() < short_seq_prob:
            target = rng.randint(2, max_num_tokens)
        chunk, length, i = [], 0, 0
        while i < len(document):
            chunk.append(len(document[i]))
            length += chunk[-1]
            if i == len(document) - 1 or length >= target:
                a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
                len_a = sum(chunk[:a_end])
                if len(chunk) == 1 or rng.random() < 0.5:
                    label, len_b = 1, 0
                    for _ in range(10):
                        other = rng.randint(0, len(documents) - 1)
                        if other != index:
                            break
                    start = rng.randint(0, len(documents[other]) - 1)
                    for segment in documents[other][start:]:
                        len_b += len(segment)
                        if len_b >= target - len_a:
                            break
                    i -= len(chunk) - a_end
                else:
                    label, len_b = 0, sum(chunk[a_end:])
                trim_a, trim_b = _original_truncation_counts(len_a, len_b, max_num_tokens)
                out.append((len_a - trim_a, len_b - trim_b, label))
                chunk, length = [], 0
            i += 1
    return out


def test_cut_layouts_has_the_original_walks_statistics(tokenized):
    # cut_layouts draws in another order than the per-document walk, so the
    # two agree in distribution, not instance by instance: compare per-pass
    # statistics over independent seed groups with a t-test.
    _, _, documents = tokenized
    # Short documents too, so that chunks of one segment and random starts near
    # a document's end are common.
    documents = documents + [d[:3] for d in documents] + [d[:1] for d in documents]
    options = InstanceOptions(max_seq_length=64, short_seq_prob=0.3)
    _, bounds = _flatten(documents)

    def statistics(rows):  # (len A, len B, label) rows of one pass.
        return [len(rows), *rows.mean(axis=0), np.mean(rows[:, 0] + rows[:, 1] == 61)]

    reference, ours = [], []
    for seed in range(120):
        reference.append(statistics(np.array(_walk_like_the_original(documents, 64, 0.3, random.Random(seed)))))
        layouts = create_layouts(bounds, options, np.random.default_rng(seed))
        rows = np.stack([layouts[:, 1] - layouts[:, 0], layouts[:, 3] - layouts[:, 2], layouts[:, 4]], 1)
        assert (rows[:, :2] >= 1).all() and (rows[:, 0] + rows[:, 1] <= 61).all()
        ours.append(statistics(rows))
    # 8 groups of 15 passes each: group means are close to normal.
    reference = np.array(reference).reshape(8, 15, -1).mean(axis=1)
    ours = np.array(ours).reshape(8, 15, -1).mean(axis=1)
    standard_error = np.sqrt(reference.var(axis=0, ddof=1) / 8 + ours.var(axis=0, ddof=1) / 8)
    t = (ours.mean(axis=0) - reference.mean(axis=0)) / standard_error
    # instances per pass, mean len A, mean len B, random-next rate, full-length rate
    assert np.all(np.abs(t) < 4), t


def test_batch_masking_properties_and_statistics(tokenized):
    _, vocab, documents = tokenized
    options = InstanceOptions(max_seq_length=64, max_predictions_per_seq=10)
    flat, bounds = _flatten(documents)
    layouts = []
    for seed in range(6):
        layouts += create_layouts(bounds, options, np.random.default_rng(seed)).tolist()
    token_ids, segment_ids, lengths = layouts_to_arrays(
        np.array(flat), np.array(layouts), options, vocab)
    masked_ids, positions, labels, num_masked = mask_tokens_batch(
        token_ids, lengths, options, vocab, np.random.default_rng(5))
    tokens = masked = replaced_mask = kept = 0
    for i, (a0, a1, b0, b1, label) in enumerate(layouts):
        n, k = int(lengths[i]), int(num_masked[i])
        original = [vocab.cls_id, *flat[a0:a1], vocab.sep_id, *flat[b0:b1], vocab.sep_id]
        assert token_ids[i, :n].tolist() == original and not token_ids[i, n:].any()
        assert segment_ids[i, :n].tolist() == [0] * (a1 - a0 + 2) + [1] * (b1 - b0 + 1)
        instance = TrainingInstance(masked_ids[i, :n].tolist(), segment_ids[i, :n].tolist(),
                                    positions[i, :k].tolist(), labels[i, :k].tolist(), bool(label))
        _check_properties(instance, options, vocab)
        assert instance.original_token_ids() == original
        assert not positions[i, k:].any() and not labels[i, k:].any()
        tokens += n
        masked += k
        replaced_mask += sum(masked_ids[i, p] == vocab.mask_id for p in positions[i, :k])
        kept += sum(masked_ids[i, p] == original[p] for p in positions[i, :k])
    assert tokens >= 10_000 and masked >= 1_500
    assert abs(masked / tokens - 0.15) <= 0.01
    assert abs(replaced_mask / masked - 0.80) <= 0.02
    assert abs(kept / masked - 0.10) <= 0.02
    assert abs((masked - replaced_mask - kept) / masked - 0.10) <= 0.02
