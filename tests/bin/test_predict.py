"""kbert-predict: a fine-tuned classifier's answers for a file, in input order, columns carried;
a bad row, an export or a pre-trained directory refused with nothing written."""

import csv
import json
import os
import re

import numpy as np
import pytest

from tests import forked_python
from tests.conftest import REPO
from tests.conftest import tiny_encoder_kwargs
from tests.finetune_testing import character_vocabulary
from tests.finetune_testing import make_tiny_pretrained
from tests.tasks.classification.files import write_rows

LABELS = ["billing", "bug", "other"]
# Texts of many lengths, so that length bucketing reorders them inside the model calls.
TEXTS = ["refund", "the app crashes on start-up, every single time I open it", "hello",
         "invoice 42 was charged twice", "thanks", "error", "a question about my plan"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A single-label classifier saved as kbert-finetune saves it (untrained: the answers are
    compared with the model's own, not with the truth)."""
    import keras

    from kbert.checkpoints import TaskConfig
    from kbert.checkpoints import save_finetuned
    from kbert.models import BertClassifier
    from kbert.models import BertEncoder

    root = tmp_path_factory.mktemp("predict")
    keras.utils.set_random_seed(1)
    vocabulary = character_vocabulary()
    vocab_file = root / "vocab.txt"
    vocab_file.write_text("\n".join(vocabulary) + "\n")
    encoder = BertEncoder(**tiny_encoder_kwargs(vocabulary_size=len(vocabulary),
                                                max_sequence_length=64))
    config = TaskConfig(task="classification", task_name="tickets", model_type="classifier",
                        label_names=LABELS, max_seq_length=64,
                        options={"problem_type": "single_label", "text_column_names": ["body"],
                                 "label_column_name": "queue"})
    directory = str(root / "finetuned")
    save_finetuned(directory, BertClassifier(encoder, 3), config, str(vocab_file))
    return directory


def predict(*flags):
    env = {**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return forked_python.run(["-m", "kbert.bin.predict", *flags], cwd=REPO, env=env, timeout=300)


def _expected(model_dir, texts):
    """The model's own answers, one text at a time (no batching, no reordering)."""
    from kbert.checkpoints import open_model_dir

    directory = open_model_dir(model_dir)
    model, preprocessor = directory.model(), directory.preprocessor(64)
    import tensorflow as tf

    probabilities = [tf.nn.softmax(model(preprocessor(tf.constant([text])))[0]).numpy()
                     for text in texts]
    return [LABELS[int(np.argmax(p))] for p in probabilities], probabilities


def test_answers_come_in_input_order_with_the_rows_columns(model_dir, tmp_path):
    rows = [{"ticket": 100 + i, "body": text, "label": "bug", "meta": {"n": i}}
            for i, text in enumerate(TEXTS)]
    source = write_rows(tmp_path / "new.jsonl", rows)
    out = tmp_path / "answers.jsonl"
    result = predict(f"--model_dir={model_dir}", f"--input_file={source}",
                     f"--output_file={out}", "--batch_size=3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"kbert-predict: {len(TEXTS)} rows in " in result.stdout and "rows/s" in result.stdout
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    labels, probabilities = _expected(model_dir, TEXTS)
    assert [list(line) for line in lines] == [["ticket", "body", "input_label", "meta", "label",
                                               "score", "probabilities"]] * len(TEXTS)
    assert [(line["ticket"], line["body"], line["meta"]) for line in lines] == [
        (row["ticket"], row["body"], row["meta"]) for row in rows]
    # The gold column named as an answer rides along as input_label.
    assert [line["input_label"] for line in lines] == ["bug"] * len(TEXTS)
    assert [line["label"] for line in lines] == labels
    np.testing.assert_allclose([[line["probabilities"][name] for name in LABELS]
                                for line in lines], probabilities, atol=2e-6)
    assert [line["score"] for line in lines] == [max(line["probabilities"].values())
                                                 for line in lines]


def test_csv_in_and_out_over_more_rows_than_one_model_chunk(model_dir, tmp_path):
    texts = [TEXTS[i % len(TEXTS)] + " " * (i % 3) + str(i) for i in range(2100)]
    source = write_rows(tmp_path / "many.csv", [{"id": f"r{i}", "text": t}
                                                for i, t in enumerate(texts)])
    out = tmp_path / "answers.csv"
    result = predict(f"--model_dir={model_dir}", f"--input_file={source}",
                     f"--output_file={out}", "--text_column_name=text")
    assert result.returncode == 0, result.stderr[-3000:]
    with open(out, newline="", encoding="utf-8") as f:
        written = list(csv.DictReader(f))
    assert [row["id"] for row in written] == [f"r{i}" for i in range(2100)]
    assert set(written[0]) == {"id", "text", "label", "score", "probabilities"}
    sample = [0, 2047, 2048, 2099]  # both sides of the 2,048-row chunk
    labels, _ = _expected(model_dir, [texts[i] for i in sample])
    assert [written[i]["label"] for i in sample] == labels
    assert set(json.loads(written[5]["probabilities"])) == set(LABELS)


def test_bad_inputs_are_refused_and_nothing_is_written(model_dir, tmp_path):
    pretrained = make_tiny_pretrained(tmp_path / "pretrained")
    export = tmp_path / "export" / "1"
    export.mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(b"")
    bad_row = write_rows(tmp_path / "bad.jsonl", [{"body": "a"}, {"body": "b"}, {"body": None}])
    no_column = write_rows(tmp_path / "x.csv", [{"id": 1, "text": "a"}])
    out = tmp_path / "out.jsonl"
    cases = [
        (model_dir, bad_row, [], r"bad.jsonl:3: the text column 'body' is missing"),
        (model_dir, no_column, [], r"x.csv: no text column 'body'; the columns found are id, "
                                   r"text"),
        (model_dir, no_column, ["--text_column_names=id,text"],
         r"--text_column_names=id,text: the model reads one text per input"),
        (str(tmp_path / "export"), no_column, [], r"is a SavedModel export; kbert-predict reads "
                                                  r"the fine-tuned directory"),
        (pretrained, no_column, [], r"is a pre-trained directory \(no task_config.json\)"),
    ]
    for directory, source, extra, message in cases:
        result = predict(f"--model_dir={directory}", f"--input_file={source}",
                         f"--output_file={out}", *extra)
        assert result.returncode == 2, result.stderr[-2000:]
        error = result.stderr.strip().splitlines()[-1]
        assert ": error: " in error and re.search(message, error), error
        assert not [name for name in os.listdir(tmp_path) if name.startswith("out")]
