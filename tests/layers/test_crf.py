"""LinearChainCrf: Viterbi against brute force, log-likelihood against a numpy forward pass."""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

from kbert.layers import LinearChainCrf
from kbert.layers import bio_transitions
from kbert.layers import tag_scheme
from kbert.layers import tag_transitions
from kbert.layers.crf import FORBIDDEN
from kbert.layers.crf import compact
from kbert.layers.crf import crf_log_likelihood
from kbert.layers.crf import viterbi_decode

TAGS, TIME, ROWS = 3, 5, 6
LENGTHS = [5, 4, 1, 0, 3, 2]


def _random_scores(seed):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(ROWS, TIME, TAGS)).astype("float32"),
            rng.normal(size=TAGS).astype("float32"),
            rng.normal(size=(TAGS, TAGS)).astype("float32"),
            rng.normal(size=TAGS).astype("float32"))


def _path_score(emissions, path, starts, transitions, ends):
    score = starts[path[0]] + ends[path[-1]] + sum(emissions[t, tag] for t, tag in enumerate(path))
    return score + sum(transitions[a, b] for a, b in zip(path, path[1:]))


def _numpy_log_partition(emissions, starts, transitions, ends):
    # The forward algorithm, step by step in float64.
    alpha = starts.astype("float64") + emissions[0]
    for scores in emissions[1:]:
        alpha = np.logaddexp.reduce(alpha[:, None] + transitions, axis=0) + scores
    return np.logaddexp.reduce(alpha + ends)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_viterbi_matches_brute_force(seed):
    emissions, starts, transitions, ends = _random_scores(seed)
    tags = viterbi_decode(emissions, LENGTHS, starts, transitions, ends).numpy()
    for row, length in enumerate(LENGTHS):
        assert (tags[row, length:] == 0).all()
        if not length:
            continue
        paths = list(itertools.product(range(TAGS), repeat=length))
        scores = [_path_score(emissions[row], p, starts, transitions, ends) for p in paths]
        assert tuple(tags[row, :length]) == paths[int(np.argmax(scores))]


@pytest.mark.parametrize("seed", [0, 1])
def test_log_likelihood_matches_numpy_forward_algorithm(seed):
    emissions, starts, transitions, ends = _random_scores(seed)
    gold = np.random.default_rng(seed + 10).integers(0, TAGS, size=(ROWS, TIME)).astype("int32")
    got = crf_log_likelihood(emissions, gold, LENGTHS, starts, transitions, ends).numpy()
    for row, length in enumerate(LENGTHS):
        if not length:
            assert got[row] == 0.0
            continue
        e = emissions[row, :length].astype("float64")
        want = (_path_score(e, gold[row, :length], starts, transitions, ends)
                - _numpy_log_partition(e, starts, transitions, ends))
        np.testing.assert_allclose(got[row], want, rtol=1e-5)


def test_log_likelihoods_of_all_paths_sum_to_one():
    emissions, starts, transitions, ends = _random_scores(3)
    paths = np.array(list(itertools.product(range(TAGS), repeat=3)), "int32")
    rows = np.repeat(emissions[:1, :3], len(paths), axis=0)
    likelihood = crf_log_likelihood(rows, paths, [3] * len(paths), starts, transitions, ends)
    np.testing.assert_allclose(np.exp(likelihood.numpy()).sum(), 1.0, rtol=1e-5)


def test_bio_transitions():
    starts, allowed = bio_transitions(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])
    assert starts == [True, True, False, True, False]
    # I-PER may follow only B-PER and I-PER.
    assert [row[2] for row in allowed] == [False, True, True, False, False]
    assert [row[4] for row in allowed] == [False, False, False, True, True]
    assert all(row[0] and row[1] and row[3] for row in allowed)


def test_tag_schemes_are_told_by_their_prefixes():
    assert tag_scheme(["O", "B-PER", "I-PER"]) == "IOB2"
    assert tag_scheme(["O", "B-PER", "I-PER", "E-PER", "S-PER"]) == "IOBES"
    assert tag_scheme(["O", "B-PER", "I-PER", "L-PER", "U-PER"]) == "BILOU"
    assert tag_scheme(["NN", "VB", "-LRB-", "."]) == "plain"
    with pytest.raises(ValueError, match=r"prefixes \['E', 'L'\] mix tag schemes"):
        tag_scheme(["O", "E-PER", "L-PER"])


@pytest.mark.parametrize("labels", [["O", "B-X", "I-X", "E-X", "S-X", "B-Y", "I-Y", "E-Y", "S-Y"],
                                    ["O", "B-X", "I-X", "L-X", "U-X", "B-Y", "I-Y", "L-Y", "U-Y"]])
def test_iobes_and_bilou_allow_exactly_the_finished_entities(labels):
    # Brute force: a sequence is allowed iff reading it left to right never leaves an entity
    # open where another begins, never continues one that is not open, and ends closed.
    starts, transitions, ends = tag_transitions(labels)
    close, inside = ("E", "S") if "E-X" in labels else ("L", "U")

    def valid(sequence):
        open_type = None
        for tag in sequence:
            prefix, kind = (tag[0], tag[2:]) if tag != "O" else ("O", None)
            if prefix in ("I", close) and open_type != kind:
                return False
            if prefix in ("O", "B", inside) and open_type is not None:
                return False
            open_type = kind if prefix in ("B", "I") else None
        return open_type is None

    for length in (1, 2, 3):
        for sequence in itertools.product(range(len(labels)), repeat=length):
            allowed = (starts[sequence[0]] and ends[sequence[-1]]
                       and all(transitions[a][b] for a, b in zip(sequence, sequence[1:])))
            assert allowed == valid([labels[i] for i in sequence]), [labels[i] for i in sequence]


def test_plain_tags_allow_everything_and_iob2_ends_anywhere():
    starts, transitions, ends = tag_transitions(["NN", "VB", "DT"])
    assert all(starts) and all(ends) and all(map(all, transitions))
    assert tag_transitions(["O", "B-PER", "I-PER"])[:2] == bio_transitions(["O", "B-PER", "I-PER"])
    assert all(tag_transitions(["O", "B-PER", "I-PER"])[2])


def test_an_iobes_crf_never_decodes_an_unfinished_entity():
    labels = ["O", "B-X", "I-X", "E-X", "S-X"]
    starts, transitions, ends = tag_transitions(labels)
    crf = LinearChainCrf(5, starts, transitions, allowed_ends=ends, dtype="float32")
    crf.build((None, None, 5))
    # Emissions that favour B-X then I-X: the best finished path closes the entity with E-X.
    emissions = tf.constant([[[0.0, 5.0, 0.0, 0.0, 0.0], [0.0, 0.0, 5.0, 0.0, 0.0]]])
    assert crf.decode(emissions, tf.constant([2])).numpy().tolist() == [[1, 3]]
    assert crf.scores()[2].numpy().tolist() == [0.0, FORBIDDEN, FORBIDDEN, 0.0, 0.0]
    config = crf.get_config()
    assert LinearChainCrf.from_config(config).get_config() == config
    with pytest.raises(ValueError, match="allowed_ends has 2 entries; the CRF has 5 tags"):
        LinearChainCrf(5, allowed_ends=[True, True])


def test_forbidden_transitions_are_never_decoded():
    labels = ["O", "B-PER", "I-PER"]
    crf = LinearChainCrf(3, *bio_transitions(labels), dtype="float32")
    crf.build((None, None, 3))
    # Emissions that favour I-PER everywhere: the best valid path is B-PER I-PER ...
    emissions = tf.constant([[[0.0, 0.0, 5.0]] * 4])
    assert crf.decode(emissions, tf.constant([4])).numpy().tolist() == [[1, 2, 2, 2]]
    starts, transitions, _ = crf.scores()
    assert starts.numpy()[2] == FORBIDDEN and transitions.numpy()[0, 2] == FORBIDDEN


def test_learning_rate_multiplier_scales_scores_and_config_round_trips():
    crf = LinearChainCrf(2, learning_rate_multiplier=4.0, name="crf")
    crf.build((None, None, 2))
    crf.transition_variable.assign([[1.0, 0.0], [0.0, 0.5]])
    assert crf.scores()[1].numpy().tolist() == [[4.0, 0.0], [0.0, 2.0]]
    config = crf.get_config()
    assert LinearChainCrf.from_config(config).get_config() == config
    with pytest.raises(ValueError, match="3x3"):
        LinearChainCrf(3, allowed_transitions=[[True] * 3] * 2)


def test_compact_moves_kept_positions_left():
    values, lengths = compact(tf.constant([[5, 6, 7, 8], [1, 2, 3, 4]]),
                              tf.constant([[0, 1, 0, 1], [1, 1, 1, 0]]))
    assert values.numpy()[:, :2].tolist() == [[6, 8], [1, 2]]
    assert lengths.numpy().tolist() == [2, 3]


def test_decode_compiles_with_xla():
    emissions, starts, transitions, ends = _random_scores(4)
    eager = viterbi_decode(emissions, LENGTHS, starts, transitions, ends)
    compiled = tf.function(viterbi_decode, jit_compile=True)(
        emissions, tf.constant(LENGTHS), starts, transitions, ends)
    assert compiled.numpy().tolist() == eager.numpy().tolist()
    keras.backend.clear_session()
