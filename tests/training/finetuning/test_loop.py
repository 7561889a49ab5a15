"""run_finetuning: a tiny encoder learns (falling loss), saves a fine-tuned directory, rejects bad input."""

import json
import os
import shutil

import pytest

from tests.finetune_testing import TESTDATA
from tests.finetune_testing import character_vocabulary
from tests.finetune_testing import count_train_step_traces
from tests.finetune_testing import make_tiny_pretrained
from kbert.checkpoints import read_task_config
from kbert.training.finetuning import run_finetuning

STSB = os.path.join(TESTDATA, "glue", "STS-B")
FAST = dict(train_batch_size=4, eval_batch_size=8, learning_rate=3e-3, warmup_proportion=0.0,
            max_seq_length=64, verbose=0)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return make_tiny_pretrained(tmp_path_factory.mktemp("tiny_pretrained"))


def test_regression_learns_saves_and_reloads_for_evaluation(pretrained, tmp_path, monkeypatch):
    model_dir = str(tmp_path / "stsb")
    traces = count_train_step_traces(monkeypatch)
    results = run_finetuning("glue", pretrained, model_dir, task_name="sts-b", data_dir=STSB,
                             num_train_epochs=8, **{**FAST, "learning_rate": 2e-2})
    # The optimizer is built before fit: the step is traced once, not once more to
    # create its slot variables.
    assert traces == ["BertClassifier"]
    losses = results["train_loss"]
    assert losses[-1] < 0.5 * losses[0], losses  # scores 0..5 from a head starting near 0
    assert results["train_steps"] == 8 * 2 and results["num_examples"] == 4
    assert set(results) >= {"pearson", "spearman"}
    config = read_task_config(model_dir)
    assert (config.model_type, config.task_name, config.text_pair) == ("regressor", "sts-b", True)
    assert json.load(open(os.path.join(model_dir, "eval_results.json")))["pearson"] == \
        pytest.approx(results["pearson"])
    # Evaluating the fine-tuned directory again gives the same metrics.
    again = run_finetuning("glue", model_dir, str(tmp_path / "again"), task_name="sts-b",
                           data_dir=STSB, do_train=False, do_predict=True, **FAST)
    assert again["pearson"] == pytest.approx(results["pearson"], abs=1e-5)
    lines = open(os.path.join(tmp_path, "again", "predictions.tsv")).read().splitlines()
    assert lines[0] == "index\tprediction" and [l.split("\t")[0] for l in lines[1:]] == ["0", "1"]


def test_finetune_gin_binds_hyperparameters_not_paths():
    import gin

    from kbert import configurables

    configurables.parse_gin(["finetune.gin"])
    assert gin.query_parameter("run_finetuning.learning_rate") == "auto"
    assert gin.query_parameter("run_finetuning.train_batch_size") == "auto"
    assert gin.query_parameter("run_finetuning.num_train_epochs") == "auto"
    assert gin.query_parameter("run_finetuning.warmup_proportion") == "auto"
    assert gin.query_parameter("run_finetuning.max_seq_length") == 128
    assert gin.query_parameter("run_finetuning.eval_every_steps") == 0
    assert gin.query_parameter("run_finetuning.keep_best_checkpoint") is True
    assert gin.query_parameter("run_finetuning.early_stopping_patience") == 0
    # Every hyperparameter of run_finetuning has its default in finetune.gin.
    from kbert.training.finetuning.loop import HYPERPARAMETERS
    for name in HYPERPARAMETERS:
        gin.query_parameter(f"run_finetuning.{name}")
    with pytest.raises(ValueError, match="num_restarts"):  # a flag, not a binding
        configurables.parse_gin(["finetune.gin"], ["run_finetuning.num_restarts = 3"])
    with pytest.raises(ValueError, match="model_dir"):
        configurables.parse_gin(["finetune.gin"], ["run_finetuning.model_dir = 'x'"])


def _expect_error(pretrained, tmp_path, error, match, **kwargs):
    model_dir = tmp_path / "out"
    arguments = dict(task="glue", init_checkpoint=pretrained, model_dir=str(model_dir),
                     task_name="sst-2", data_dir=os.path.join(TESTDATA, "glue", "SST-2"), **FAST)
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        run_finetuning(**arguments)
    assert not model_dir.exists()  # nothing half-written


def test_max_seq_length_larger_than_positions(pretrained, tmp_path):
    _expect_error(pretrained, tmp_path, ValueError,
                  r"max_seq_length=128 is larger than the encoder's 96 positions",
                  max_seq_length=128)


def test_vocab_file_differing_from_init_checkpoint(pretrained, tmp_path):
    other = tmp_path / "other_vocab.txt"
    lines = open(os.path.join(pretrained, "vocab.txt")).read().splitlines()
    other.write_text("\n".join(lines[:5] + lines[6:] + [lines[5]]) + "\n")  # same size, reordered
    _expect_error(pretrained, tmp_path, ValueError,
                  r"--vocab_file=.*other_vocab.txt differs from the vocabulary", vocab_file=str(other))


def test_vocabulary_size_differing_from_embeddings(pretrained, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(pretrained, checkpoint)
    with open(checkpoint / "vocab.txt", "a") as f:
        f.write("extra\n")
    _expect_error(str(checkpoint), tmp_path, ValueError,
                  rf"has {len(character_vocabulary()) + 1} tokens but the encoder .* "
                  rf"has {len(character_vocabulary())} embedding rows")


def test_empty_data_dir(pretrained, tmp_path):
    (tmp_path / "empty").mkdir()
    _expect_error(pretrained, tmp_path, FileNotFoundError,
                  r"no train data for sst-2 in --data_dir=.*empty: expected train.tsv",
                  data_dir=str(tmp_path / "empty"))


def test_bad_row_fails_before_anything_is_written(pretrained, tmp_path):
    data = tmp_path / "sst"
    shutil.copytree(os.path.join(TESTDATA, "glue", "SST-2"), data)
    with open(data / "dev.tsv", "a") as f:
        f.write("a fine film\t1\textra\n")
    _expect_error(pretrained, tmp_path, ValueError, r"dev.tsv:8: 3 tab-separated columns",
                  data_dir=str(data))


def test_not_a_pretrained_directory_and_missing_flags(pretrained, tmp_path):
    _expect_error(str(tmp_path), tmp_path, FileNotFoundError, "bert_config.json is missing")
    _expect_error(pretrained, tmp_path, ValueError, "--task=glue needs --task_name",
                  task_name=None)
    _expect_error(pretrained, tmp_path, ValueError, "--task=squad --do_train needs --train_file",
                  task="squad")
    _expect_error(pretrained, tmp_path, ValueError, "--task='pos'", task="pos")
    _expect_error(pretrained, tmp_path, ValueError,
                  "--strategy='tpu'; fine-tuning supports default, one_device, mirrored",
                  strategy="tpu")


def test_evaluation_intervals_are_keras_epochs():
    from kbert.training.finetuning.training_schedule import training_schedule

    # 12 rows, batch 4: 3 steps per pass. After each pass by default.
    each_epoch = training_schedule(12, 4, 4.0, "auto", eval_every_steps=0)
    assert (each_epoch.num_intervals, each_epoch.interval, each_epoch.total_steps) == (4, 3, 12)
    # Every 5 steps: the 12 steps round up to 3 intervals of 5.
    every_5 = training_schedule(12, 4, 4.0, 0.1, eval_every_steps=5)
    assert (every_5.num_intervals, every_5.interval, every_5.total_steps) == (3, 5, 15)
    assert (every_5.steps_per_data_epoch, every_5.warmup_steps) == (3, 1)
    # An interval longer than the run is the run; fractional epochs spread over whole ones.
    assert training_schedule(12, 4, 1.0, 0.0, eval_every_steps=100).total_steps == 3
    half = training_schedule(12, 4, 2.5, 0.0, eval_every_steps=0)
    assert (half.num_intervals, half.interval) == (3, 3)


def test_packed_rows_train_glue_in_fewer_steps(pretrained, tmp_path):
    from kbert.data import PackingConfig

    sst2 = os.path.join(TESTDATA, "glue", "SST-2")
    settings = {**FAST, "num_train_epochs": 6, "learning_rate": 1e-2, "max_seq_length": 96,
                "train_batch_size": 2}
    from kbert.training.finetuning.training_schedule import training_schedule

    packed = run_finetuning("glue", pretrained, str(tmp_path / "p"), task_name="sst-2",
                            data_dir=sst2, packing=PackingConfig(max_instances_per_row=4),
                            **settings)
    # Unpacked, the 12 sentences take 6 batches of 2 an epoch, 36 steps (the schedule a
    # run without packing follows; training one only to read its step count would trace
    # a second model). Short sentences: several per row of 96, so fewer packed batches.
    unpacked = training_schedule(12, 2, 6.0, 0.0, eval_every_steps=0).total_steps
    assert unpacked == 36 and packed["train_steps"] < unpacked
    assert packed["train_loss"][-1] < packed["train_loss"][0]
    assert set(packed) >= {"accuracy", "num_examples"}
    # The saved model is an ordinary classifier: evaluating it again gives the same accuracy.
    again = run_finetuning("glue", str(tmp_path / "p"), str(tmp_path / "again"),
                           task_name="sst-2", data_dir=sst2, do_train=False,
                           **{**FAST, "max_seq_length": 96})
    assert again["accuracy"] == pytest.approx(packed["accuracy"])


def test_packing_a_task_that_cannot_pack_is_refused(pretrained, tmp_path):
    from kbert.data import PackingConfig

    with pytest.raises(ValueError, match=r"run_finetuning.packing is set but --task=ner cannot "
                                         r"pack its rows"):
        run_finetuning("ner", pretrained, str(tmp_path / "n"), data_dir=str(tmp_path),
                       packing=PackingConfig(), **FAST)
