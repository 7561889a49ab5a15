"""Users' classification files: every format gives the same examples, labels are inferred as
Hugging Face infers them (or forced), and every bad file is refused naming its file and line."""

import gzip
import json

import numpy as np
import pytest

from kbert.tasks import ClassificationConfig
from kbert.tasks import ClassificationTask
from kbert.tasks import TaskData
from tests.tasks.classification.files import ticket_rows
from tests.tasks.classification.files import write_rows

ROWS = ticket_rows(9)
FORMATS = ("csv", "tsv", "jsonl", "parquet", "csv.gz")


def _adapted(path, label_column="label", config=None, text_columns=None):
    task = ClassificationTask(config)
    data = TaskData(train_file=str(path), label_column_name=label_column,
                    text_column_names=text_columns)
    examples = task.read(data, "train")
    task.adapt(examples)
    return task, examples


def _written(tmp_path, form, rows=ROWS, name="train"):
    if form == "csv.gz":
        plain = write_rows(tmp_path / f"{name}.csv", rows)
        path = tmp_path / f"{name}.csv.gz"
        path.write_bytes(gzip.compress(open(plain, "rb").read()))
        return str(path)
    return write_rows(tmp_path / f"{name}.{form}", rows)


@pytest.mark.parametrize("label_column, problem_type, label_names", [
    ("label", "single_label", ["billing", "bug", "other"]),
    ("tags", "multi_label", ["billing", "bug", "other"]),
    ("score", "regression", [])])
def test_the_same_rows_in_every_format_give_the_same_examples(tmp_path, label_column,
                                                              problem_type, label_names):
    seen = {}
    for form in FORMATS:
        task, examples = _adapted(_written(tmp_path, form), label_column)
        assert (task.problem_type, task.label_names) == (problem_type, label_names), form
        assert task.text_column_names == ("text",) and not task.text_pair
        seen[form] = ([(e.text, e.text_pair) for e in examples],
                      task._targets(examples).tolist())
        assert examples[0].row["id"] == "t-0-0"  # the whole row rides along
    assert all(value == seen["csv"] for value in seen.values())
    texts, targets = seen["csv"]
    assert texts[1] == (ROWS[1]["text"], None)
    if problem_type == "single_label":
        assert targets[:3] == [0, 1, 2]  # billing, bug, other in turn
    elif problem_type == "multi_label":
        expected = [[float(name in row["tags"]) for name in label_names] for row in ROWS]
        assert targets == expected
    else:
        assert targets == pytest.approx([row["score"] for row in ROWS])


def test_pairs_are_read_from_sentence1_and_sentence2_when_there_is_no_text(tmp_path):
    rows = [{key: row[key] for key in ("sentence1", "sentence2", "label")} for row in ROWS]
    for form in ("csv", "jsonl", "parquet"):
        task, examples = _adapted(_written(tmp_path, form, rows))
        assert task.text_column_names == ("sentence1", "sentence2") and task.text_pair
        assert (examples[2].text, examples[2].text_pair) == (rows[2]["sentence1"],
                                                            rows[2]["sentence2"])
    # Named columns win over the defaults, and one named column reads single texts.
    task, examples = _adapted(_written(tmp_path, "csv"), text_columns=("sentence2",))
    assert task.text_column_names == ("sentence2",) and examples[0].text == ROWS[0]["sentence2"]


def test_labels_are_inferred_as_hugging_face_does_and_can_be_forced(tmp_path):
    def labels_of(values, config=None):
        path = write_rows(tmp_path / "labels.jsonl",
                          [{"text": f"t{i}", "label": v} for i, v in enumerate(values)])
        return _adapted(path, config=config)[0]

    # Integers are classes, named by value and sorted as numbers (2 before 10).
    task = labels_of([10, 2, 1, 2])
    assert (task.problem_type, task.label_names) == ("single_label", ["1", "2", "10"])
    # One float among integers makes the column numeric, as pandas reads it: regression.
    assert labels_of([1, 2, 0.5]).problem_type == "regression"
    # A list anywhere makes it multi-label; an empty list is "no label".
    task = labels_of([["b", "a"], [], ["c"]])
    assert (task.problem_type, task.label_names) == ("multi_label", ["a", "b", "c"])
    # Forced: integers as scores; a given order of names (kept, not sorted).
    task = labels_of([1, 5, 3], ClassificationConfig(problem_type="regression"))
    assert task.problem_type == "regression" and task.main_metric == "pearson"
    task = labels_of(["bug", "billing"], ClassificationConfig(label_names=["other", "bug",
                                                                           "billing"]))
    assert task.label_names == ["other", "bug", "billing"]
    examples = task.examples_from_values(["a", "b"], ["billing", "other"])
    assert task._targets(examples).tolist() == [2, 0]
    with pytest.raises(ValueError, match=r"labels.jsonl:2: label 'bug' is not among the labels "
                                         r"of ClassificationConfig.label_names \['other', 'x'\]"):
        labels_of(["other", "bug"], ClassificationConfig(label_names=["other", "x"]))
    with pytest.raises(ValueError, match="ClassificationConfig.problem_type='multilabel'; "
                                         "expected one of"):
        ClassificationTask(ClassificationConfig(problem_type="multilabel"))


def test_class_weights_balanced_and_given_are_worked_out_and_recorded(tmp_path):
    path = write_rows(tmp_path / "w.jsonl", [{"text": "x", "label": label} for label in
                                             ["a", "a", "a", "b"]] +
                      [{"text": "y", "label": "c"}, {"text": "z", "label": "c"}])
    # scikit-learn's balanced: n / (classes * count) = 6 / (3 * [3, 1, 2]).
    task, _ = _adapted(path, config=ClassificationConfig(class_weights="balanced"))
    assert task._weights == pytest.approx([2 / 3, 2.0, 1.0])
    recorded = task.describe()
    assert recorded["class_weights"] == "balanced"
    assert recorded["resolved_class_weights"] == pytest.approx({"a": 2 / 3, "b": 2.0, "c": 1.0})
    task, _ = _adapted(path, config=ClassificationConfig(class_weights={"b": 3.0}))
    assert task._weights == [1.0, 3.0, 1.0]
    with pytest.raises(ValueError, match=r"class_weights names \['d'\], which are not labels"):
        _adapted(path, config=ClassificationConfig(class_weights={"d": 2.0}))
    # Multi-label: each class's negatives over its positives (PyTorch's pos_weight).
    tags = write_rows(tmp_path / "t.jsonl", [{"text": "x", "label": t} for t in
                                             (["a"], ["a", "b"], [], ["a"])])
    task, _ = _adapted(tags, config=ClassificationConfig(class_weights="balanced"))
    assert task._weights == pytest.approx([1 / 3, 3.0])
    with pytest.raises(ValueError, match="a regression problem has none"):
        _adapted(write_rows(tmp_path / "r.jsonl", [{"text": "x", "label": 0.5}]),
                 config=ClassificationConfig(class_weights="balanced"))


def _refusal(tmp_path, train_rows, dev_rows=None, label_column="label", name="train.csv",
             text_columns=None):
    train = write_rows(tmp_path / name, train_rows)
    dev = write_rows(tmp_path / "dev.csv", dev_rows) if dev_rows else None
    task = ClassificationTask()
    data = TaskData(train_file=train, validation_file=dev, label_column_name=label_column,
                    text_column_names=text_columns)
    task.adapt(task.read(data, "train"))
    if dev:
        task.read(data, "dev")


BAD_FILES = {
    "a dev label the training file lacks": (
        dict(train_rows=ROWS, dev_rows=ROWS[:2] + [{**ROWS[2], "label": "refund-request"}]),
        r"dev.csv:4: label 'refund-request' is not among the labels of the training file "
        r"\['billing', 'bug', 'other'\]"),
    "an empty label cell": (
        dict(train_rows=ROWS[:3] + [{**ROWS[3], "label": ""}]),
        r"train.csv:5: the label cell \('label'\) is empty; every row needs a label"),
    "a missing label cell": (
        dict(train_rows=[{"text": "a", "label": "x"}, {"text": "b"}], name="train.jsonl"),
        r"train.jsonl:2: the label cell \('label'\) is missing"),
    "a text column that does not exist": (
        dict(train_rows=ROWS, text_columns=("body",)),
        r"train.csv: no text column 'body'; the columns found are id, text, label, tags, "
        r"score, sentence1, sentence2"),
    "no default text column": (
        dict(train_rows=[{"body": "a", "label": "x"}]),
        r"no text column 'text' \(nor 'sentence1' and 'sentence2'\); the columns found are "
        r"body, label"),
    "a missing label column": (
        dict(train_rows=ROWS, label_column="queue"),
        r"no label column 'queue'; the columns found are id, text"),
    "a non-numeric value in a regression column": (
        dict(train_rows=ROWS[:2] + [{**ROWS[2], "score": "n/a"}], label_column="score"),
        r"train.csv:4: 'n/a' is not a number, in a regression column"),
    "a multi-label cell that is not a list": (
        dict(train_rows=ROWS[:4] + [{**ROWS[4], "tags": "billing"}], label_column="tags"),
        r"train.csv:6: the multi-label cell 'billing' is not a list"),
    "an unknown extension": (
        dict(train_rows=ROWS, name="train.xlsx"),
        r"--train_file=.*train.xlsx: unknown file type '.xlsx'; kbert reads .csv, .json, "
        r".jsonl, .parquet, .tsv"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_every_bad_file_is_refused_naming_file_and_line(tmp_path, case):
    arguments, message = BAD_FILES[case]
    if arguments.get("name", "").endswith(".xlsx"):
        (tmp_path / "train.xlsx").write_text("text,label\na,b\n")
        with pytest.raises(ValueError, match=message):
            ClassificationTask().read(TaskData(train_file=str(tmp_path / "train.xlsx")), "train")
        return
    with pytest.raises(ValueError, match=message):
        _refusal(tmp_path, **arguments)


def test_values_give_the_examples_the_file_gives(tmp_path):
    task, from_file = _adapted(_written(tmp_path, "jsonl"))
    from_values = task.examples_from_values([row["text"] for row in ROWS],
                                            np.array([row["label"] for row in ROWS]),
                                            source="fit")
    assert [(e.text, e.text_pair, e.label) for e in from_values] == [
        (e.text, e.text_pair, e.label) for e in from_file]
    assert from_values[0].source == "fit item 1"
    with pytest.raises(ValueError, match=r"fit item 2: label 'refund' is not among the labels"):
        task.examples_from_values(["a", "b"], ["bug", "refund"], source="fit")
    with pytest.raises(ValueError, match=r"f.csv:3: the text column 'text' is a int \(42\)"):
        task.examples_from_values(["a", 42], source=["f.csv:2", "f.csv:3"])
    with pytest.raises(ValueError, match="the model reads one text per input"):
        task.examples_from_values((["a"], ["b"]))
    # A fresh task takes pairs as a tuple of two lists, and learns their labels by adapt.
    pairs = ClassificationTask()
    examples = pairs.examples_from_values((["a", "b"], ["c", "d"]), [["x"], ["x", "y"]])
    pairs.adapt(examples)
    assert pairs.text_column_names == ("sentence1", "sentence2") and pairs.text_pair
    assert (pairs.problem_type, pairs.label_names) == ("multi_label", ["x", "y"])


def test_a_fine_tuned_description_rebuilds_the_task(tmp_path):
    task, _ = _adapted(_written(tmp_path, "csv"), "tags",
                       config=ClassificationConfig(class_weights="balanced"))
    task.keep_chosen({"threshold": 0.35})
    recorded = json.loads(json.dumps(task.describe()))
    assert {key: recorded[key] for key in ("problem_type", "label_names", "text_column_names",
                                           "label_column_name", "threshold", "class_weights")} == {
        "problem_type": "multi_label", "label_names": ["billing", "bug", "other"],
        "text_column_names": ["text"], "label_column_name": "tags", "threshold": 0.35,
        "class_weights": "balanced"}
    again = ClassificationTask.from_description(recorded)
    assert (again.problem_type, again.label_names, again.text_column_names, again.threshold,
            again.label_column_name) == ("multi_label", ["billing", "bug", "other"], ("text",),
                                         0.35, "tags")
    assert again.input_columns() == ("text",) and again.input_columns(["body"]) == ("body",)
    with pytest.raises(ValueError, match="the model reads one text per input"):
        again.input_columns(["a", "b"])
