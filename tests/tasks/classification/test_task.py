"""--task=classification end to end on a tiny encoder: every shape trains, is scored with its
metrics beside a baseline, predicts, and refuses bad files before anything is written."""

import json
import os

import keras
import numpy as np
import pytest

from kbert.checkpoints import open_model_dir
from kbert.data import TextPreprocessor
from kbert.models import BertClassifier
from kbert.models import BertEncoder
from kbert.tasks import ClassificationConfig
from kbert.tasks import ClassificationTask
from kbert.training.finetuning import run_finetuning
from tests.conftest import tiny_encoder_kwargs
from tests.finetune_testing import character_vocabulary
from tests.finetune_testing import make_tiny_pretrained
from tests.tasks.classification.files import ticket_rows
from tests.tasks.classification.files import write_rows

FAST = dict(train_batch_size=8, learning_rate=3e-3, warmup_proportion=0.0, max_seq_length=24,
            num_train_epochs=3, verbose=0)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return make_tiny_pretrained(tmp_path_factory.mktemp("tiny_pretrained"))


def _files(tmp_path, form, train=48, dev=12):
    return (write_rows(tmp_path / f"train.{form}", ticket_rows(train, seed=1)),
            write_rows(tmp_path / f"dev.{form}", ticket_rows(dev, seed=2)))


@pytest.fixture(scope="module")
def single_label_run(pretrained, tmp_path_factory):
    """Single-label tickets from CSV, balanced class weights, dev scored, test predicted."""
    root = tmp_path_factory.mktemp("single_label")
    train, dev = _files(root, "csv")
    model_dir = str(root / "run")
    results = run_finetuning("classification", pretrained, model_dir, train_file=train,
                             validation_file=dev, test_file=dev, do_predict=True,
                             task_options=ClassificationConfig(class_weights="balanced"), **FAST)
    return model_dir, results


def test_single_label_from_csv_scored_beside_the_majority_class(single_label_run):
    model_dir, results = single_label_run
    assert results["train_loss"][-1] < results["train_loss"][0]
    assert results["main_metric"] == "accuracy" and results["num_examples"] == 12
    assert set(results["per_class"]) == {"billing", "bug", "other"}
    assert sum(row["support"] for row in results["per_class"].values()) == 12
    matrix = results["confusion_matrix"]
    assert matrix["labels"] == ["billing", "bug", "other"]
    assert np.sum(matrix["matrix"], axis=1).tolist() == [4, 4, 4]
    assert results["accuracy"] == pytest.approx(np.trace(matrix["matrix"]) / 12)
    # Four of each class in dev: the majority class answers a third right; its macro F1 is
    # billing's F1 (precision 1/3, recall 1: 0.5) over the three classes.
    assert results["baseline"] == {"predicts": "the majority class 'billing'",
                                   "accuracy": pytest.approx(1 / 3),
                                   "macro_f1": pytest.approx(0.5 / 3)}
    recorded = json.load(open(os.path.join(model_dir, "task_config.json")))
    assert (recorded["problem_type"], recorded["label_names"], recorded["text_column_names"],
            recorded["label_column_name"]) == ("single_label", ["billing", "bug", "other"],
                                               ["text"], "label")
    assert (recorded["class_weights"], recorded["resolved_class_weights"]) == (
        "balanced", {"billing": 1.0, "bug": 1.0, "other": 1.0})  # 16 training rows of each
    lines = [json.loads(line) for line in open(os.path.join(model_dir, "predictions.jsonl"))]
    assert [line["id"] for line in lines] == [row["id"] for row in ticket_rows(12, seed=2)]
    assert lines[0]["input_label"] == "billing" and lines[0]["label"] in recorded["label_names"]
    assert sum(lines[0]["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
    assert lines[0]["score"] == max(lines[0]["probabilities"].values())


def test_multi_label_from_jsonl_without_validation_chooses_on_held_out_rows(pretrained,
                                                                             tmp_path):
    train, _ = _files(tmp_path, "jsonl")
    model_dir = str(tmp_path / "run")
    results = run_finetuning("classification", pretrained, model_dir, train_file=train,
                             label_column_name="tags", seed=3, **FAST)
    assert results["reported_split"] is None and "micro_f1" not in results
    selection = results["selection"]
    assert (selection["split"], selection["fraction"], selection["num_examples"]) == (
        "train_holdout", 0.1, 5)
    chosen = selection["metrics"]
    assert set(chosen) >= {"micro_f1", "macro_f1", "subset_accuracy", "per_class", "threshold",
                           "baseline"}
    # The threshold the kept step chose on the held-out rows is the one recorded and served.
    kept = next(p for p in results["eval_curve"] if p["step"] == results["best_step"])
    recorded = json.load(open(os.path.join(model_dir, "task_config.json")))
    assert recorded["threshold"] == kept["threshold"] == chosen["threshold"]
    assert recorded["problem_type"] == "multi_label"


def test_regression_of_pairs_from_parquet_beside_the_mean_and_cut_texts_counted(pretrained,
                                                                                tmp_path):
    columns = ("sentence1", "sentence2", "score")
    rows = [{key: row[key] for key in columns} for row in ticket_rows(32, seed=1)]
    rows[0]["sentence1"] = "refund " * 40  # 280 characters: more pieces than 24
    train = write_rows(tmp_path / "train.parquet", rows)
    dev_rows = [{key: row[key] for key in columns} for row in ticket_rows(12, seed=2)]
    dev = write_rows(tmp_path / "dev.parquet", dev_rows)
    results = run_finetuning("classification", pretrained, str(tmp_path / "run"),
                             train_file=train, validation_file=dev, label_column_name="score",
                             **FAST)
    assert results["main_metric"] == "pearson" and set(results) >= {"spearman", "mse"}
    scores = np.array([row["score"] for row in dev_rows])
    assert results["baseline"]["mse"] == pytest.approx(np.var(scores), rel=1e-5)
    assert results["train_loss"][-1] < results["train_loss"][0]
    assert results["truncated"] == {"max_seq_length": 24, "how": "were truncated",
                                    "train": {"truncated": 1, "examples": 32}}
    recorded = json.load(open(tmp_path / "run" / "task_config.json"))
    assert recorded["text_pair"] and recorded["text_column_names"] == ["sentence1", "sentence2"]
    assert (recorded["model_type"], recorded["problem_type"]) == ("regressor", "regression")


BAD = {
    "dev label": ({"validation_file": [{"text": "a", "label": "refund-request"}]},
                  r"dev.jsonl:1: label 'refund-request' is not among the labels"),
    "test label": ({"test_file": [{"text": "a", "label": "refund-request"}]},
                   r"test.jsonl:1: label 'refund-request' is not among the labels"),
    "dev text column": ({"validation_file": [{"body": "a", "label": "bug"}]},
                        r"dev.jsonl: no text column 'text'; the columns found are body, label"),
    "empty label": ({"validation_file": [{"text": "a", "label": " "}]},
                    r"dev.jsonl:1: the label cell \('label'\) is empty"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_file_stops_the_run_before_anything_is_written(pretrained, tmp_path, case):
    files, message = BAD[case]
    paths = {flag: write_rows(tmp_path / f"{flag.split('_')[0].replace('validation', 'dev')}"
                                         ".jsonl", rows) for flag, rows in files.items()}
    train = write_rows(tmp_path / "train.jsonl", ticket_rows(12))
    model_dir = tmp_path / "run"
    with pytest.raises(ValueError, match=message):
        run_finetuning("classification", pretrained, str(model_dir), train_file=train,
                       do_predict="test_file" in paths, **paths, **FAST)
    assert not model_dir.exists()


def _tiny_classifier(classes):
    keras.utils.set_random_seed(0)
    vocabulary = character_vocabulary()
    encoder = BertEncoder(**tiny_encoder_kwargs(vocabulary_size=len(vocabulary),
                                                max_sequence_length=32))
    return BertClassifier(encoder, classes), TextPreprocessor.from_vocabulary(vocabulary, True, 32)


def test_the_threshold_is_chosen_once_then_kept_for_the_reported_split():
    task = ClassificationTask(ClassificationConfig(problem_type="multi_label",
                                                   label_names=["a", "b"]))
    task.text_column_names = ("text",)
    model, preprocessor = _tiny_classifier(2)
    examples = task.examples_from_values(["x y", "zz", "w"], [["a"], ["a", "b"], []])
    first = task.evaluate(model, examples, preprocessor, 2)
    assert first.chosen == {"threshold": first.metrics["threshold"]}
    task.keep_chosen({"threshold": 0.95})
    kept = task.evaluate(model, examples, preprocessor, 2)
    assert kept.chosen == {} and kept.metrics["threshold"] == 0.95
    records = task.predict_records(model, examples, preprocessor, 2)
    assert [set(r) for r in records] == [{"labels", "probabilities"}] * 3
    for record in records:
        probabilities = record["probabilities"]
        assert record["labels"] == sorted([n for n, p in probabilities.items() if p >= 0.95],
                                          key=lambda n: -probabilities[n])
    # A fixed threshold is never chosen.
    fixed = ClassificationTask(ClassificationConfig(problem_type="multi_label",
                                                    label_names=["a", "b"], threshold=0.3))
    fixed.text_column_names = ("text",)
    evaluation = fixed.evaluate(model, examples, preprocessor, 2)
    assert evaluation.chosen == {} and evaluation.metrics["threshold"] == 0.3


def test_loaded_directory_predicts_as_trained(single_label_run):
    """What kbert-predict relies on: the recorded task rebuilt, answering per record, in order."""
    directory = open_model_dir(single_label_run[0])
    task = ClassificationTask.from_description(directory.task_config.to_dict())
    texts = [row["text"] for row in ticket_rows(6, seed=2)]
    records = task.predict_records(directory.model(), task.examples_from_values(texts),
                                   directory.preprocessor(24), 4)
    lines = [json.loads(line) for line in open(os.path.join(single_label_run[0],
                                                            "predictions.jsonl"))]
    assert [r["label"] for r in records] == [line["label"] for line in lines[:6]]
    names = ("billing", "bug", "other")
    np.testing.assert_allclose([[r["probabilities"][n] for n in names] for r in records],
                               [[line["probabilities"][n] for n in names] for line in lines[:6]],
                               atol=1e-5)
