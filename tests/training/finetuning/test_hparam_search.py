"""The grid search loop: order, time budget, first maximum kept, table and gin text."""

import gin
import pytest

from kbert.training.finetuning.hparam_search import HparamGrid
from kbert.training.finetuning.hparam_search import Outcome
from kbert.training.finetuning.hparam_search import Point
from kbert.training.finetuning.hparam_search import format_table
from kbert.training.finetuning.hparam_search import gin_file_text
from kbert.training.finetuning.hparam_search import search


def test_default_grid_follows_the_encoder_width_and_varies_the_rate_first():
    small = HparamGrid().points(hidden_dim=384)
    assert len(small) == 4 * 2 * 3
    assert small[:5] == [Point(3e-4, 16, 2.0), Point(1e-4, 16, 2.0), Point(5e-5, 16, 2.0),
                         Point(3e-5, 16, 2.0), Point(3e-4, 32, 2.0)]
    assert {p.learning_rate for p in HparamGrid().points(hidden_dim=768)} == {5e-5, 4e-5, 3e-5,
                                                                             2e-5}
    assert HparamGrid((1e-4,), (8,), (4,)).points(128) == [Point(1e-4, 8, 4.0)]


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_budget_skips_trials_that_would_overrun_and_the_first_maximum_wins():
    clock = FakeClock()
    values = {1e-4: 0.8, 5e-5: 0.9, 3e-5: 0.9, 2e-5: 0.7}

    def train(point):
        clock.now += 60 * point.num_train_epochs  # one minute per epoch
        return Outcome(values[point.learning_rate], 10, payload=point)

    points = HparamGrid((1e-4, 5e-5, 3e-5, 2e-5), (32,), (2,)).points(384)
    points += [Point(1e-4, 32, 1.0)]
    # 2 min per trial: three fit in 7 minutes, the fourth would end at 8; the 1-epoch one fits.
    best, trials = search(points, train, time_budget_minutes=7, clock=clock)
    assert best.payload == Point(5e-5, 32, 2.0) and best.value == 0.9
    assert [t.value for t in trials] == [0.8, 0.9, 0.9, None, 0.8]
    assert [t.minutes for t in trials] == [2.0, 2.0, 2.0, None, 1.0]
    rows = [t.as_dict("f1") for t in trials]
    assert rows[3] == {"learning_rate": 2e-5, "train_batch_size": 32, "num_train_epochs": 2.0,
                       "f1": None, "best_step": None, "minutes": None,
                       "status": "skipped (time budget)"}
    lines = format_table(rows, "f1").splitlines()
    assert lines[0].split() == ["learning_rate", "batch", "epochs", "f1", "best_step", "minutes"]
    assert lines[2].split() == ["*", "5e-05", "32", "2", "0.9000", "10", "2.0"]
    assert lines[4].split() == ["2e-05", "32", "2", "skipped", "-", "-"]


@pytest.mark.parametrize("grid, flag", [
    (HparamGrid(learning_rates=()), "--search_learning_rates="),
    (HparamGrid(train_batch_sizes=(16, 0)), "--search_batch_sizes=16,0"),
    (HparamGrid(num_train_epochs=(-1.0,)), "--search_epochs=-1.0"),
])
def test_bad_grids_name_the_flag(grid, flag):
    with pytest.raises(ValueError, match=flag):
        grid.check()


def test_gin_file_text_parses_back_to_the_same_values(tmp_path):
    from kbert import configurables

    bindings = {"run_finetuning.learning_rate": 3e-05, "run_finetuning.warmup_proportion": "auto",
                "run_finetuning.keep_best_checkpoint": True, "run_finetuning.num_train_epochs": 2.0,
                "SquadConfig.doc_stride": 64}
    text = gin_file_text(bindings, "best of the grid\n\n  a table line")
    assert text.splitlines()[:3] == ["# best of the grid", "#", "#   a table line"]
    (tmp_path / "best.gin").write_text(text)
    configurables.parse_gin([str(tmp_path / "best.gin")])
    assert {name: gin.query_parameter(name) for name in bindings} == bindings


def test_a_packing_reference_parses_back_to_the_packing_config(tmp_path):
    from kbert import configurables
    from kbert.data import PackingConfig
    from kbert.training.finetuning.hparam_search import GinReference

    text = gin_file_text({"run_finetuning.packing": GinReference("@PackingConfig()"),
                          "PackingConfig.max_instances_per_row": 3}, "packed")
    assert "run_finetuning.packing = @PackingConfig()" in text.splitlines()
    (tmp_path / "best.gin").write_text(text)
    configurables.parse_gin([str(tmp_path / "best.gin")])
    packing = gin.query_parameter("run_finetuning.packing").scoped_configurable_fn()
    assert packing == PackingConfig(max_instances_per_row=3)
