"""TextClassifier: fit on strings, every problem type, fine-tuned heads, saved bit for bit, clear errors."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert import checkpoints
from kbert.checkpoints import save_finetuned
from tests.checkpoints.test_modernbert_import import TOKENIZER
from tests.checkpoints.test_modernbert_import import _hf_tensors
from tests.checkpoints.test_modernbert_import import _hub_config
from tests.checkpoints.test_modernbert_import import _write_hf_dir
from tests.presets.conftest import ARCHITECTURES
from tests.serving_testlib import VOCAB
from tests.serving_testlib import build_task_model

TEXTS = ["a gorgeous , witty film", "a dull , lifeless film", "witty and gorgeous",
         "lifeless and dull"]
LABELS = [1, 0, 1, 0]


@pytest.fixture(scope="module")
def trained(pretrained_dirs, tmp_path_factory):
    """A classifier fine-tuned on strings (a fresh head of 2 classes), and where it was saved."""
    keras.utils.set_random_seed(0)
    classifier = kbert.TextClassifier.from_preset(pretrained_dirs["bert"], num_classes=2,
                                                  max_seq_length=16)
    before = classifier.evaluate(TEXTS * 4, LABELS * 4, verbose=0, return_dict=True)
    classifier.compile(learning_rate=2e-2)
    history = classifier.fit(TEXTS * 4, LABELS * 4, batch_size=4, epochs=8, verbose=0)
    saved = str(tmp_path_factory.mktemp("classifier") / "sst")
    classifier.save_to_preset(saved)
    return classifier, before, history.history, saved


def test_fit_on_strings_lowers_the_loss_and_predicts_in_input_order(trained):
    classifier, before, history, _ = trained
    assert history["loss"][-1] < before["loss"] / 10, (before, history)
    assert history["accuracy"][-1] == 1.0
    logits = classifier.predict(TEXTS)
    assert logits.shape == (4, 2) and logits.dtype == np.float32
    assert logits.argmax(axis=-1).tolist() == LABELS
    # Batches are bucketed by length inside; rows come back in the order given (other
    # batches pad to other lengths: float32 rounding, not order, differs).
    np.testing.assert_allclose(classifier.predict(TEXTS[::-1], batch_size=3), logits[::-1],
                               atol=1e-5)
    records = classifier.predict_records(TEXTS[:2])
    assert [r["label"] for r in records] == ["1", "0"]
    probabilities = tf.nn.softmax(logits[:2]).numpy()
    assert records[0]["probabilities"]["1"] == pytest.approx(probabilities[0, 1], abs=1e-6)
    # A tf.data.Dataset of (text, label), batched or not, reads as the lists do.
    dataset = tf.data.Dataset.from_tensor_slices((TEXTS, LABELS))
    expected = classifier.evaluate(TEXTS, LABELS, verbose=0, return_dict=True)
    for given in (dataset, dataset.batch(3)):
        assert classifier.evaluate(given, verbose=0, return_dict=True) == pytest.approx(expected)


def test_save_to_preset_round_trips_bit_for_bit(trained, tmp_path):
    classifier, _, _, saved = trained
    assert sorted(os.listdir(saved)) == ["bert_config.json", "encoder.weights.h5",
                                         "task_config.json", "task_model.keras",
                                         "tokenizer_config.json", "vocab.txt"]
    record = json.load(open(os.path.join(saved, "task_config.json")))
    assert (record["task"], record["model_type"], record["label_names"],
            record["max_seq_length"]) == ("classification", "classifier", ["0", "1"], 16)
    again = kbert.TextClassifier.from_preset(saved)
    assert again.max_seq_length == 16
    for a, b in zip(classifier.task_model.weights, again.task_model.weights):
        assert a.path == b.path
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    np.testing.assert_array_equal(again.predict(TEXTS), classifier.predict(TEXTS))
    twice = str(tmp_path / "twice")
    again.save_to_preset(twice)
    for name in ("task_config.json", "bert_config.json", "tokenizer_config.json", "vocab.txt"):
        assert open(os.path.join(twice, name), "rb").read() == open(
            os.path.join(saved, name), "rb").read(), name


def test_labels_pairs_multi_label_and_regression(pretrained_dirs):
    directory = pretrained_dirs["bert"]
    # Class names learned from y (sorted), text pairs as a tuple of two lists.
    pairs = kbert.TextClassifier.from_preset(directory, max_seq_length=24)
    pairs.fit((TEXTS, TEXTS[::-1]), ["same", "other", "other", "same"], batch_size=2, verbose=0)
    assert pairs.task.label_names == ["other", "same"] and pairs.task.text_pair
    assert pairs.predict((TEXTS, TEXTS)).shape == (4, 2)
    with pytest.raises(ValueError, match="the model reads text pairs"):
        pairs.predict(TEXTS)
    # Lists of names: multi-label, one sigmoid per class.
    tagged = kbert.TextClassifier.from_preset(directory, max_seq_length=16)
    tagged.fit(TEXTS, [["film", "witty"], ["film"], ["witty"], []], batch_size=2, verbose=0)
    assert tagged.task.problem_type == "multi_label"
    assert set(tagged.predict_records(TEXTS[:1])[0]) == {"labels", "probabilities"}
    # num_classes=1: a regression head, sized before any data.
    scorer = kbert.TextClassifier.from_preset(directory, num_classes=1, max_seq_length=16)
    assert scorer.predict(TEXTS).shape == (4, 1)
    assert set(scorer.predict_records(TEXTS[:1])[0]) == {"prediction"}


@pytest.mark.parametrize("architecture", [a for a in ARCHITECTURES if a != "bert"])
def test_every_architecture_fine_tunes(architecture, pretrained_dirs):
    classifier = kbert.TextClassifier.from_preset(pretrained_dirs[architecture],
                                                  label_names=["bad", "good"], max_seq_length=16)
    before = classifier.predict(TEXTS)
    history = classifier.fit(TEXTS, ["good", "bad", "good", "bad"], batch_size=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert not np.allclose(classifier.predict(TEXTS), before)  # the steps changed the model
    assert type(classifier.backbone).__name__ == ("ModernBertEncoder" if architecture ==
                                                  "modernbert" else "BertEncoder")


def test_a_converted_hugging_face_modernbert_opens_with_its_weights_and_tokenizer(tmp_path):
    # kbert-convert's output of a Hugging Face ModernBERT (random weights under HF's names).
    config = _hub_config()
    hf_dir = _write_hf_dir(tmp_path / "hf", config, _hf_tensors(config))
    converted = str(tmp_path / "converted")
    checkpoints.load_huggingface(hf_dir).save_pretrained(converted)
    classifier = kbert.TextClassifier.from_preset(converted, num_classes=2)
    assert classifier.max_seq_length == 64  # 128 by default, capped at its 64 positions
    for a, b in zip(classifier.backbone.weights, checkpoints.load_encoder(converted).weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    # The directory's tokenizer.json: its byte-level BPE pieces, as Hugging Face's tokenizer cuts.
    from tokenizers import Tokenizer

    pieces = Tokenizer.from_file(TOKENIZER).encode(TEXTS[0]).ids  # [CLS] and [SEP] included
    inputs = classifier.preprocessor(tf.constant([TEXTS[0]]))
    assert inputs["token_ids"][0].numpy().tolist() == pieces
    np.testing.assert_allclose(classifier.predict(TEXTS[:1]),
                               classifier.task_model(inputs, training=False).numpy(), atol=1e-6)


def test_clear_errors(pretrained_dirs, trained, tmp_path):
    _, _, _, saved = trained
    directory = pretrained_dirs["bert"]
    with pytest.raises(ValueError, match=r"sst was fine-tuned with num_classes=2 .*; "
                                         r"num_classes=3 disagrees"):
        kbert.TextClassifier.from_preset(saved, num_classes=3)
    kbert.TextClassifier.from_preset(saved, num_classes=2)  # agreeing is fine
    model, record = build_task_model("ner")
    ner = str(tmp_path / "ner")
    save_finetuned(ner, model, record, VOCAB)
    with pytest.raises(ValueError, match=r"ner is fine-tuned for task 'ner' \(token_classifier\), "
                                         r"which TextClassifier does not run; open it with "
                                         r"kbert.TokenClassifier.from_preset"):
        kbert.TextClassifier.from_preset(ner)
    model, record = build_task_model("sst2")
    glue = str(tmp_path / "glue")
    save_finetuned(glue, model, record, VOCAB)
    with pytest.raises(ValueError, match=r"glue is fine-tuned for task 'glue', which reads its own "
                                         "files but no Python values"):
        kbert.TextClassifier.from_preset(glue)
    classifier = kbert.TextClassifier.from_preset(directory, num_classes=2)
    with pytest.raises(TypeError, match=r"fit: x\[1\] is int \(7\), not a string; this model "
                                        "takes raw text"):
        classifier.fit(["a film", 7], [0, 1])
    with pytest.raises(TypeError, match="x is a dict"):
        classifier.predict({"token_ids": np.zeros((1, 3), "int32")})
    with pytest.raises(TypeError, match="x is one string; pass a list of strings"):
        classifier.predict("a film")
    with pytest.raises(ValueError, match="y has 1 labels for 2 texts"):
        classifier.fit(["a film", "a play"], [0])
    with pytest.raises(ValueError, match="is an infinite tf.data.Dataset"):
        classifier.fit(tf.data.Dataset.from_tensor_slices((["a"], [0])).repeat())
    with pytest.raises(ValueError, match="batch_size=0; it must be an integer >= 1"):
        classifier.predict(["a film"], batch_size=0)
    with pytest.raises(TypeError, match=r"got \['num_layers'\]; it takes num_classes"):
        kbert.TextClassifier.from_preset(directory, num_layers=3)
    with pytest.raises(ValueError, match="num_classes=3 but label_names has 2 names"):
        kbert.TextClassifier.from_preset(directory, num_classes=3, label_names=["a", "b"])
    with pytest.raises(FileNotFoundError, match="bert_base_en is not a directory. kbert presets "
                                                "are directories on disk"):
        kbert.TextClassifier.from_preset("bert_base_en")
