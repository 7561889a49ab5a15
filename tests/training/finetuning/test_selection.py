"""run_finetuning keeps the best dev step, restart and configuration, and stops early.

A GLUE task whose dev "metric" is scripted (a fixed sequence, one value per
evaluation) trains the tiny encoder for real; each evaluation snapshots the
weights, so the saved model can be compared with the model of every step.
"""

import json
import os

import gin
import numpy as np
import pytest

from tests.finetune_testing import TESTDATA
from tests.finetune_testing import make_tiny_pretrained
from kbert import tasks
from kbert.checkpoints import load_finetuned
from kbert.tasks import Evaluation
from kbert.tasks import GlueConfig
from kbert.tasks import GlueTask
from kbert.training.finetuning import run_finetuning
from kbert.training.finetuning.hparam_search import HparamGrid

SST2 = os.path.join(TESTDATA, "glue", "SST-2")  # 12 training sentences: 3 steps of 4 per epoch
STEPS_PER_EPOCH = 3
FAST = dict(task="scripted", task_name="sst-2", data_dir=SST2, train_batch_size=4,
            max_seq_length=32, verbose=0)


class ScriptedTask(GlueTask):
    """SST-2 whose dev score is the next value of `script`; records the weights it scored."""

    name = "scripted"
    main_metric = "score"
    script: list[float] = []
    snapshots: list[list[np.ndarray]] = []
    sizes: list[int] = []  # examples scored by each evaluation

    def evaluate(self, model, examples, preprocessor, batch_size):
        ScriptedTask.snapshots.append([w.copy() for w in model.get_weights()])
        ScriptedTask.sizes.append(len(examples))
        return Evaluation({"score": ScriptedTask.script[len(ScriptedTask.snapshots) - 1],
                           "num_examples": len(examples)})


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return make_tiny_pretrained(tmp_path_factory.mktemp("tiny_pretrained"))


@pytest.fixture()
def scripted(monkeypatch):
    monkeypatch.setitem(tasks.TASKS, "scripted", ScriptedTask)

    def play(*scores):
        ScriptedTask.script, ScriptedTask.snapshots, ScriptedTask.sizes = list(scores), [], []
        return ScriptedTask.snapshots

    return play


def _same(weights, snapshot):
    return all(np.array_equal(a, b) for a, b in zip(weights, snapshot))


def _saved_weights(model_dir):
    return load_finetuned(model_dir)[0].get_weights()


def test_the_saved_model_is_the_best_dev_step_and_the_rate_is_auto(pretrained, tmp_path,
                                                                   scripted):
    snapshots = scripted(0.5, 0.9, 0.7, 0.6)
    model_dir = str(tmp_path / "run")
    results = run_finetuning(init_checkpoint=pretrained, model_dir=model_dir,
                             num_train_epochs=4, **FAST)
    assert results["learning_rate"] == 3e-4  # no rate given: the table's, for hidden size 32
    assert results["warmup_steps"] == 4  # 12 steps: "auto" warm-up is a third of them
    assert (results["main_metric"], results["best_step"], results["score"]) == ("score", 6, 0.9)
    assert [(p["step"], p["epoch"], p["score"]) for p in results["eval_curve"]] == [
        (3, 1.0, 0.5), (6, 2.0, 0.9), (9, 3.0, 0.7), (12, 4.0, 0.6)]
    saved = _saved_weights(model_dir)
    assert _same(saved, snapshots[1]) and not _same(saved, snapshots[3])
    written = json.load(open(os.path.join(model_dir, "eval_results.json")))
    assert (written["best_step"], written["score"], written["train_steps"]) == (6, 0.9, 12)
    assert "early_stopped_at_step" not in written


def test_auto_batch_and_epochs_fit_a_tiny_training_set(pretrained, tmp_path, scripted):
    scripted(*[0.1 * i for i in range(10)])
    settings = {**FAST, "train_batch_size": "auto"}
    results = run_finetuning(init_checkpoint=pretrained, model_dir=str(tmp_path / "run"),
                             **settings)
    # 12 rows < 2,000: batch 8 (two steps an epoch); epochs up to the cap of 10.
    assert (results["train_batch_size"], results["num_train_epochs"]) == (8, 10.0)
    assert (results["train_steps"], results["best_step"]) == (20, 20)


def test_auto_rate_of_a_frozen_encoder_is_the_head_rate(pretrained, tmp_path, scripted):
    scripted(0.5)
    results = run_finetuning(init_checkpoint=pretrained, model_dir=str(tmp_path / "run"),
                             num_train_epochs=1, task_options=GlueConfig(freeze_encoder=True),
                             **FAST)
    assert results["learning_rate"] == 3e-3  # not the table's 3e-4 for hidden size 32


def test_restarts_use_distinct_seeds_and_keep_the_best(pretrained, tmp_path, scripted):
    snapshots = scripted(0.4, 0.8, 0.7)
    model_dir = str(tmp_path / "run")
    results = run_finetuning(init_checkpoint=pretrained, model_dir=model_dir, num_train_epochs=1,
                             num_restarts=3, seed=7, learning_rate=1e-3, **FAST)
    assert results["learning_rate"] == 1e-3  # an explicit rate wins over "auto"
    assert results["restarts"] == [{"seed": 7, "score": 0.4, "best_step": 3},
                                   {"seed": 8, "score": 0.8, "best_step": 3},
                                   {"seed": 9, "score": 0.7, "best_step": 3}]
    assert (results["seed"], results["score"]) == (8, 0.8)
    # Distinct seeds: three different models (head initialization, dropout, order).
    assert not any(_same(snapshots[i], snapshots[j]) for i, j in ((0, 1), (0, 2), (1, 2)))
    assert _same(_saved_weights(model_dir), snapshots[1])


def test_early_stopping_stops_after_the_patience(pretrained, tmp_path, scripted):
    snapshots = scripted(0.5, 0.6, 0.55, 0.5, 0.9, 0.9)
    results = run_finetuning(init_checkpoint=pretrained, model_dir=str(tmp_path / "run"),
                             num_train_epochs=6, early_stopping_patience=2, **FAST)
    assert len(snapshots) == 4 and len(results["train_loss"]) == 4
    assert [p["step"] for p in results["eval_curve"]] == [3, 6, 9, 12]
    assert (results["best_step"], results["score"], results["early_stopped_at_step"],
            results["train_steps"]) == (6, 0.6, 12, 18)


def test_restarts_and_search_need_dev_data(pretrained, tmp_path, scripted):
    for extra in (dict(num_restarts=2), dict(hparam_grid=HparamGrid())):
        with pytest.raises(ValueError, match=r"compare runs on the dev split: pass --do_train "
                                             r"and --do_eval"):
            run_finetuning(init_checkpoint=pretrained, model_dir=str(tmp_path / "x"),
                           do_eval=False, **FAST, **extra)
    assert not (tmp_path / "x").exists()


def test_the_search_writes_a_gin_file_that_reproduces_its_best_run(pretrained, tmp_path,
                                                                   scripted):
    from kbert import configurables

    scripted(0.6, 0.9)  # one evaluation per trial: (3e-3, batch 6), (1e-3, batch 6)
    model_dir = tmp_path / "search"
    grid = HparamGrid(learning_rates=(3e-3, 1e-3), train_batch_sizes=(6,), num_train_epochs=(1,))
    results = run_finetuning(init_checkpoint=pretrained, model_dir=str(model_dir),
                             hparam_grid=grid, eval_every_steps=5, **FAST)
    assert [(r["learning_rate"], r["train_batch_size"], r["score"])
            for r in results["hparam_search"]] == [(3e-3, 6, 0.6), (1e-3, 6, 0.9)]
    assert (results["learning_rate"], results["train_batch_size"]) == (1e-3, 6)
    text = (model_dir / "best_hparams.gin").read_text()
    assert "dev score 0.9000 at step 2" in text.splitlines()[0]

    # A user's run with only this gin file trains the best configuration again.
    configurables.parse_gin([str(model_dir / "best_hparams.gin")])
    assert gin.query_parameter("run_finetuning.learning_rate") == 1e-3
    scripted(0.9)
    again = configurables.run_finetuning(task="scripted", init_checkpoint=pretrained,
                                         model_dir=str(tmp_path / "again"), task_name="sst-2",
                                         data_dir=SST2, verbose=0)
    gin.clear_config()
    same = ("learning_rate", "train_batch_size", "num_train_epochs", "seed", "train_steps",
            "warmup_steps")
    assert {k: again[k] for k in same} == {k: results[k] for k in same}
    assert (again["train_steps"], again["eval_curve"][0]["step"]) == (2, 2)  # 12 rows / 6
    # Seed for seed: the re-run's saved model is the search's kept model, weight for weight.
    assert _same(_saved_weights(str(tmp_path / "again")), _saved_weights(str(model_dir)))


def test_a_selection_split_from_training_data_picks_the_step_and_dev_is_scored_once(
        pretrained, tmp_path, scripted):
    snapshots = scripted(0.5, 0.9, 0.3)
    model_dir = str(tmp_path / "run")
    results = run_finetuning(init_checkpoint=pretrained, model_dir=model_dir, num_train_epochs=2,
                             selection_fraction=0.25, seed=3, **FAST)
    # 3 of the 12 training sentences are held out: 9 train (3 steps of 4 per epoch).
    assert results["selection"] == {"split": "train_holdout", "fraction": 0.25, "seed": 3,
                                    "num_examples": 3, "score": 0.9}
    assert [(p["step"], p["score"]) for p in results["eval_curve"]] == [(3, 0.5), (6, 0.9)]
    # The kept model (step 6, best on the held-out sentences) is scored on dev once: 0.3.
    assert ScriptedTask.sizes == [3, 3, 6]
    assert (results["best_step"], results["score"], results["num_examples"]) == (6, 0.3, 6)
    assert _same(snapshots[2], snapshots[1]) and _same(_saved_weights(model_dir), snapshots[1])
    scripted(0.7)
    on_dev = run_finetuning(init_checkpoint=pretrained, model_dir=str(tmp_path / "dev"),
                            num_train_epochs=1, **FAST)
    assert on_dev["selection"] == {"split": "dev", "score": 0.7} and ScriptedTask.sizes == [6]


def test_the_carved_split_is_seeded_and_keeps_a_paragraphs_questions_together():
    import types

    from kbert.training.finetuning.selection_split import carve_selection_split

    task = tasks.get_task("squad")()  # groups its examples by paragraph
    examples = [types.SimpleNamespace(context=f"paragraph {i // 3}", n=i) for i in range(30)]
    train, held = carve_selection_split(task, examples, 0.2, seed=0)
    assert len(held) == 6 and len(train) == 24  # 2 of the 10 paragraphs, 3 questions each
    assert {e.context for e in held}.isdisjoint({e.context for e in train})
    assert [e.n for e in held] == sorted(e.n for e in held)  # in their original order
    assert [e.n for e in carve_selection_split(task, examples, 0.2, seed=0)[1]] == [e.n for e in held]
    assert [e.n for e in carve_selection_split(task, examples, 0.2, seed=1)[1]] != [e.n for e in held]
    with pytest.raises(ValueError, match=r"selection_fraction=0.99 leaves no training examples "
                                         r"out of 30"):
        carve_selection_split(task, examples, 0.99, seed=0)
    with pytest.raises(ValueError, match=r"--task=squad's training data is a query set"):
        carve_selection_split(task, tuple(examples), 0.2, seed=0)


class UsersFilesTask(ScriptedTask):
    """A task of users' files without --validation_file: no dev split; it adapts and chooses."""

    name = "users_files"
    events: list = []

    def has_split(self, data, split):
        return split != "dev"

    def adapt(self, train_examples):
        UsersFilesTask.events.append(("adapt", len(train_examples)))

    def evaluate(self, model, examples, preprocessor, batch_size):
        evaluation = super().evaluate(model, examples, preprocessor, batch_size)
        score = evaluation.metrics["score"]
        return Evaluation({**evaluation.metrics, "baseline": {"score": 0.1, "predicts": "x"}},
                          chosen={"threshold": score / 2})

    def keep_chosen(self, chosen):
        UsersFilesTask.events.append(("keep_chosen", dict(chosen)))


def test_without_a_dev_split_a_held_out_share_chooses_and_nothing_is_reported(
        pretrained, tmp_path, scripted, monkeypatch):
    from kbert.training.finetuning.summary import summary_lines

    monkeypatch.setitem(tasks.TASKS, "users_files", UsersFilesTask)
    UsersFilesTask.events = []
    scripted(0.4, 0.8, 0.6)
    model_dir = str(tmp_path / "run")
    results = run_finetuning(init_checkpoint=pretrained, model_dir=model_dir,
                             num_train_epochs=3, seed=5, **{**FAST, "task": "users_files"})
    # The whole training file is adapted to; then 10% of its 12 examples (one) is held out.
    assert UsersFilesTask.events == [("adapt", 12), ("keep_chosen", {"threshold": 0.4})]
    assert ScriptedTask.sizes == [1, 1, 1]  # only the selection split is ever scored
    assert results["reported_split"] is None and "score" not in results
    selection = results["selection"]
    assert {k: selection[k] for k in ("split", "fraction", "seed", "num_examples", "score")} == {
        "split": "train_holdout", "fraction": 0.1, "seed": 5, "num_examples": 1, "score": 0.8}
    assert selection["metrics"]["score"] == 0.8 and results["best_step"] == 6
    lines = summary_lines(results, model_dir)
    assert "  score = 0.8  (baseline 0.1: x)" in lines
    assert any(line.startswith("NOTE: no reported split exists") for line in lines)
    assert any(line.startswith("kept the model of step 6 of 9: held-out score 0.8000")
               for line in lines)
    written = json.load(open(os.path.join(model_dir, "eval_results.json")))
    assert written["reported_split"] is None and written["selection"]["fraction"] == 0.1
