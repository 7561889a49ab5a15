"""learning_rate, train_batch_size, num_train_epochs and warmup_proportion = "auto": the table, the rules, and
explicit values winning."""

import pytest

from kbert.training.finetuning import auto_settings
from kbert.training.finetuning.auto_settings import resolve_learning_rate
from kbert.training.finetuning.auto_settings import resolve_num_train_epochs
from kbert.training.finetuning.auto_settings import resolve_train_batch_size
from kbert.training.finetuning.auto_settings import resolve_warmup_steps


@pytest.mark.parametrize("hidden_dim, rate", [
    (32, 3e-4), (128, 3e-4),      # BERT-tiny and the other H128 miniatures
    (256, 1e-4), (384, 1e-4),     # BERT-mini, all-MiniLM-L6-v2
    (512, 1e-4), (768, 3e-5),     # BERT-small/medium, BERT-base
    (1024, 2e-5),                 # BERT-large
])
def test_auto_rate_follows_the_table(hidden_dim, rate):
    assert resolve_learning_rate("auto", {"hidden_dim": hidden_dim}) == rate


@pytest.mark.parametrize("hidden_dim", [128, 384, 1024])
def test_auto_rate_of_a_frozen_encoder_is_the_head_rate_whatever_the_size(hidden_dim):
    assert resolve_learning_rate("auto", {"hidden_dim": hidden_dim}, frozen_encoder=True) == 3e-3
    assert resolve_learning_rate(2e-5, {"hidden_dim": hidden_dim}, frozen_encoder=True) == 2e-5


def test_the_table_is_ordered_and_ends_open():
    rows = auto_settings.AUTO_LEARNING_RATES
    assert [r.max_hidden_dim for r in rows] == sorted(r.max_hidden_dim for r in rows)
    assert [r.learning_rate for r in rows] == sorted((r.learning_rate for r in rows), reverse=True)
    assert auto_settings.auto_learning_rate(10**6) == rows[-1].learning_rate


def test_an_explicit_rate_wins():
    assert resolve_learning_rate(5e-5, {"hidden_dim": 128}) == 5e-5
    assert resolve_learning_rate(1, {"hidden_dim": 768}) == 1.0


@pytest.mark.parametrize("value", ["fast", 0, -1e-5, True, float("nan")])
def test_a_bad_rate_is_named(value):
    with pytest.raises(ValueError, match=r"run_finetuning.learning_rate=.*it must be a number "
                                         r"> 0.0 or \"auto\""):
        resolve_learning_rate(value, {"hidden_dim": 128})


@pytest.mark.parametrize("total_steps, warmup", [
    (1, 0), (3, 1), (30, 10), (60, 20), (90, 20), (200, 20), (250, 25), (1000, 100)])
def test_auto_warmup_is_ten_percent_but_at_least_20_steps_and_at_most_a_third(total_steps,
                                                                              warmup):
    assert resolve_warmup_steps("auto", total_steps) == warmup


def test_an_explicit_warmup_proportion_wins():
    assert resolve_warmup_steps(0.0, 90) == 0
    assert resolve_warmup_steps(0.5, 90) == 45
    with pytest.raises(ValueError, match=r"run_finetuning.warmup_proportion=1.0; it must be in "
                                         r"\[0, 1\) or \"auto\""):
        resolve_warmup_steps(1.0, 90)


@pytest.mark.parametrize("steps_per_epoch, epochs", [
    (1, 10.0), (29, 10.0), (30, 10.0), (31, 10.0), (34, 9.0), (47, 7.0), (100, 3.0), (125, 3.0),
    (5000, 3.0)])
def test_auto_epochs_are_3_or_more_for_small_data_to_reach_300_steps_up_to_10(steps_per_epoch,
                                                                              epochs):
    assert resolve_num_train_epochs("auto", steps_per_epoch) == epochs


def test_explicit_epochs_win_and_bad_ones_are_named():
    assert resolve_num_train_epochs(1.5, 1) == 1.5
    with pytest.raises(ValueError, match=r"run_finetuning.num_train_epochs=0; it must be a "
                                         r"number > 0.0 or \"auto\""):
        resolve_num_train_epochs(0, 100)


@pytest.mark.parametrize("steps_per_epoch, num_rows, epochs", [
    (125, 4000, 3.0),   # SST-2 4,000 at batch 32: BERT's 3 epochs see 12,000 rows
    (115, 3668, 3.0),   # MRPC
    (144, 1147, 9.0),   # XQuAD's 1,147 windows at batch 8: 9 epochs to see 10,000
    (188, 1500, 7.0),   # CoNLL 1,500 at batch 8
    (1, 12, 10.0),      # never more than 10
])
def test_auto_epochs_also_see_10000_rows(steps_per_epoch, num_rows, epochs):
    assert resolve_num_train_epochs("auto", steps_per_epoch, num_rows) == epochs


@pytest.mark.parametrize("num_rows, replicas, batch", [
    (1, 1, 8), (1999, 1, 8), (2000, 1, 32), (100_000, 1, 32),
    (1147, 3, 9), (1147, 16, 16), (5000, 3, 33), (5000, 8, 32)])
def test_auto_batch_is_32_or_8_under_2000_rows_in_whole_replicas(num_rows, replicas, batch):
    assert resolve_train_batch_size("auto", num_rows, replicas) == batch


@pytest.mark.parametrize("value", [0, -4, 2.5, "big", True])
def test_an_explicit_batch_wins_and_a_bad_one_is_named(value):
    assert resolve_train_batch_size(8, 1147) == 8
    with pytest.raises(ValueError, match=r"run_finetuning.train_batch_size=.*; it must be an "
                                         r"integer >= 1 or \"auto\""):
        resolve_train_batch_size(value, 1147)
