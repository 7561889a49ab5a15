"""What user code saves, `kbert-export` exports and `kbert-serve` serves as the in-process `predict`."""

import json
import os
import urllib.request

import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.export.saved_model import export_saved_model
from kbert.training.distillation import run_distillation
from tests import forked_python
from tests.conftest import REPO
from tests.serving_testlib import start_server

TEXTS = ["a gorgeous , witty film from Paris", "a dull , lifeless film", "Peter flew to Paris.",
         "Naïve café crème in Zürich"]
# Served with them: a text of several of the tagger's 32-piece windows (the classifier cuts it).
SERVED = TEXTS + [" ".join(["Peter flew to Paris from Zürich, then to Berlin."] * 6)]


def _post(url: str, body: dict, timeout: float = 60) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.load(reply)


@pytest.fixture(scope="module")
def served(pretrained_dirs, tmp_path_factory):
    """A classifier and a tagger fine-tuned from strings, saved, exported and served together."""
    root = tmp_path_factory.mktemp("served")
    keras.utils.set_random_seed(0)
    directory = pretrained_dirs["bert"]
    classifier = kbert.TextClassifier.from_preset(directory, max_seq_length=16)
    classifier.fit(TEXTS, ["positive", "negative", "positive", "negative"], batch_size=2,
                   verbose=0)
    tagger = kbert.TokenClassifier.from_preset(directory, max_seq_length=32)
    tagger.fit(TEXTS[2:3], [["B-PER", "O", "O", "B-LOC", "O"]], batch_size=2, verbose=0)
    models = {"classifier": classifier, "tagger": tagger}
    config = "model_config_list {\n"
    for name, model in models.items():
        model.save_to_preset(str(root / name))
        export_saved_model(str(root / name), str(root / "export" / name), check=False)
        config += (f'  config {{ name: "{name}" base_path: "{root / "export" / name}" '
                   'model_platform: "tensorflow" }\n')
    (root / "models.config").write_text(config + "}\n")
    with start_server([f"--model_config_file={root / 'models.config'}"]) as server:
        answers = {name: _post(f"{server.rest_url}/v1/models/{name}:predict",
                               {"instances": SERVED})["predictions"] for name in models}
    return models, answers, root


def test_the_exported_classifier_answers_as_predict_does(served):
    models, answers, _ = served
    classifier = models["classifier"]
    np.testing.assert_allclose([a["logits"] for a in answers["classifier"]],
                               classifier.predict(SERVED), atol=1e-5)
    records = classifier.predict_records(SERVED)
    assert [a["label"] for a in answers["classifier"]] == [r["label"] for r in records]
    for answer, record in zip(answers["classifier"], records):
        served_probabilities = dict(zip(classifier.task.label_names, answer["probabilities"]))
        assert served_probabilities == pytest.approx(record["probabilities"], abs=1e-5)


def test_the_exported_tagger_answers_as_predict_does(served):
    models, answers, _ = served
    tagger = models["tagger"]
    predicted = tagger.predict(SERVED)
    assert len(answers["tagger"]) == len(predicted) == len(SERVED)
    for answer, words_and_tags in zip(answers["tagger"], predicted):
        count = answer["num_words"]
        assert list(zip(answer["words"][:count], answer["tags"][:count])) == words_and_tags
    # The long text is read in the served windows in process too: every word tagged once.
    long_words = predicted[-1]
    pieces = tagger.preprocessor.tokenize(tf.constant(SERVED[-1:])).flat_values.shape[0]
    assert len(long_words) == 6 * 11 and pieces > 2 * 32


def test_kbert_predict_writes_what_predict_records_gives(served, tmp_path):
    models, _, root = served
    source = tmp_path / "new.jsonl"
    source.write_text("".join(json.dumps({"id": i, "text": text}) + "\n"
                              for i, text in enumerate(TEXTS)))
    written = tmp_path / "answers.jsonl"
    result = forked_python.run(
        ["-m", "kbert.bin.predict", f"--model_dir={root / 'classifier'}",
         f"--input_file={source}", f"--output_file={written}"], cwd=REPO, timeout=300,
        env={**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in written.read_text().splitlines()]
    records = models["classifier"].predict_records(TEXTS)
    assert [row["id"] for row in rows] == list(range(len(TEXTS)))
    assert [row["label"] for row in rows] == [record["label"] for record in records]
    for row, record in zip(rows, records):
        assert row["probabilities"] == pytest.approx(record["probabilities"], abs=1e-5)


def test_kbert_distill_takes_a_saved_classifier(served, tmp_path):
    models, _, root = served
    rows = [{"text": text, "label": label}
            for text, label in zip(TEXTS, ["positive", "negative", "positive", "negative"])]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    student_dir = str(tmp_path / "student")
    results = run_distillation(str(root / "classifier"), student_dir, student_layers=[0],
                               train_file=str(data), validation_file=str(data),
                               train_batch_size=2, num_train_epochs=1.0, verbose=0)
    assert results["train_steps"] == 2 and results["num_examples"] == 4
    teacher = models["classifier"]
    assert results["teacher"]["accuracy"] == np.mean(
        teacher.predict(TEXTS).argmax(-1) == [teacher.task.label_names.index(row["label"])
                                              for row in rows])
    student = kbert.TextClassifier.from_preset(student_dir)  # a classifier of one block
    assert student.task.label_names == teacher.task.label_names
    assert student.backbone.num_layers == 1 and student.predict(TEXTS).shape == (4, 2)
    with pytest.raises(ValueError, match="--do_eval scores student and teacher on the dev split: "
                                         "pass --validation_file"):
        run_distillation(str(root / "classifier"), str(tmp_path / "no_dev"), student_layers=[0],
                         train_file=str(data))
    # A saved multi-label classifier is a teacher too: tests/training/distillation/
    # test_distillation.py::test_a_multi_label_student_directory_is_a_multi_label_classifier.


def test_an_export_is_not_a_preset(served):
    _, _, root = served
    with pytest.raises(ValueError, match=r"export/classifier is a kbert-export SavedModel, which "
                                         "serves but does not train; TextClassifier.from_preset "
                                         "opens the model directory it was exported from"):
        kbert.TextClassifier.from_preset(str(root / "export" / "classifier"))
    assert os.path.isdir(root / "export" / "classifier" / "1")
