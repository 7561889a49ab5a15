"""NER with a CRF head: training, Viterbi in fine-tuning and in the served graph, valid BIO."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import serving_testlib as lib
from tests.conftest import tiny_encoder_kwargs
from tests.conftest import tiny_inputs
from tests.finetune_testing import TESTDATA
from tests.finetune_testing import make_tiny_pretrained
from kbert.checkpoints import load_finetuned
from kbert.data import TextPreprocessor
from kbert.export.saved_model import export_saved_model
from kbert.layers import bio_transitions
from kbert.models import BertEncoder
from kbert.models import BertTokenClassifier
from kbert.tasks import NerConfig
from kbert.tasks import NerTask
from kbert.tasks.token_classification.serving import TokenClassifierServingModule
from kbert.training.finetuning import run_finetuning

LABELS = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
CONLL = os.path.join(TESTDATA, "conll2003")


def _invalid_bio(tags):
    """Count of `I-X` tags that follow neither `B-X` nor `I-X`."""
    previous, count = "O", 0
    for tag in tags:
        if tag.startswith("I-") and previous not in ("B-" + tag[2:], tag):
            count += 1
        previous = tag
    return count


def _crf_tagger(seed=0, constrained=True, vocabulary_size=None):
    keras.utils.set_random_seed(seed)
    encoder = BertEncoder(**tiny_encoder_kwargs(
        **({"vocabulary_size": vocabulary_size, "max_sequence_length": 32} if vocabulary_size else {})))
    starts, transitions = bio_transitions(LABELS) if constrained else (None, None)
    model = BertTokenClassifier(encoder, len(LABELS), crf=True, crf_allowed_starts=starts,
                                crf_allowed_transitions=transitions)
    # Strong random transitions, so Viterbi and the per-word argmax disagree.
    rng = np.random.default_rng(seed)
    model.crf_layer.transition_variable.assign(3 * rng.normal(size=(5, 5)).astype("float32"))
    return model


def test_crf_loss_is_the_negative_log_likelihood_of_the_words_and_training_lowers_it():
    model = _crf_tagger(constrained=False)
    inputs = tiny_inputs()
    labels = np.array([[0, 1, 2, 0, 3, 0, 0], [0, 3, 4, 4, 0, 1, 0], [0, 0, 1, 0, 0, 0, 0]], "int32")
    weights = np.array([[0, 1, 1, 0, 1, 0, 0], [0, 1, 0, 1, 1, 1, 0], [0, 1, 1, 1, 0, 0, 0]], "int32")
    # Eager: eight steps of three rows take less time than tracing Keras' train function
    # (fine-tuning's traced step with the CRF: test_finetuned_crf_ner_exports_...).
    model.compile(optimizer=keras.optimizers.Adam(2e-2), run_eagerly=True)
    logits = model(inputs, training=False)
    loss = model.compute_loss(inputs, labels, logits, weights)
    # By hand: each row's word positions, in order, through the CRF.
    starts, transitions, ends = (t.numpy() for t in model.crf_layer.scores())
    expected = []
    for row in range(3):
        keep = np.nonzero(weights[row])[0]
        expected.append(model.crf_layer.log_likelihood(
            logits[row:row + 1].numpy()[:, keep], labels[row:row + 1, keep], [len(keep)]).numpy()[0])
    np.testing.assert_allclose(loss.numpy(), -np.mean(expected), rtol=1e-6)
    before = model.crf_layer.transition_variable.numpy().copy()
    history = model.fit(inputs, labels, sample_weight=weights, epochs=8, verbose=0, batch_size=3)
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0], history.history["loss"]
    assert not np.allclose(model.crf_layer.transition_variable.numpy(), before)


def test_decode_scatters_viterbi_tags_back_to_word_positions():
    model = _crf_tagger()
    logits = tf.random.stateless_normal([2, 6, 5], seed=[1, 2])
    keep = tf.constant([[0, 1, 0, 1, 1, 0], [0, 0, 1, 1, 0, 0]])
    tags = model.decode(logits, keep).numpy()
    for row in range(2):
        positions = np.nonzero(keep.numpy()[row])[0]
        best = lib.numpy_viterbi(logits.numpy()[row, positions].astype("float64"),
                                 *[s.numpy() for s in model.crf_layer.scores()])
        assert tags[row, positions].tolist() == best
        assert _invalid_bio([LABELS[t] for t in best]) == 0


def test_served_and_in_process_crf_tags_window_like_the_python_reference():
    model = _crf_tagger(vocabulary_size=lib.vocab_size())
    preprocessor = TextPreprocessor.from_vocab_file(lib.VOCAB, True, 12)
    module = TokenClassifierServingModule(model, preprocessor, LABELS)
    texts = [lib.TEXTS[3] + " , said O'Neil of the U.S. on 1996-08-22 .", "", "John lives in Zürich"]
    outputs = module.signatures()["serving_default"](tf.constant(texts))
    got = [[t.decode() for t in row[:n]] for row, n in zip(outputs["tags"].numpy(),
                                                           outputs["num_words"].numpy())]
    expected = lib.reference_ner(model, texts, 12, LABELS)
    assert got == [tags for _, tags in expected]
    assert sum(_invalid_bio(tags) for tags in got) == 0
    # In process (evaluation, predictions, kbert-predict) too: the same windows, then Viterbi.
    task = NerTask(label_names=LABELS)
    in_process, _ = task.tag_words(model, task.examples_from_values(texts), preprocessor, 4)
    assert in_process == got
    # The CRF changes some tags: the test compares more than the argmax.
    model.crf_layer = None
    assert [tags for _, tags in lib.reference_ner(model, texts, 12, LABELS)] != got


def test_finetuned_crf_ner_exports_with_op_check_and_serves_the_keras_tags(tmp_path):
    pretrained = make_tiny_pretrained(tmp_path / "pretrained")
    model_dir = str(tmp_path / "ner")
    results = run_finetuning(
        "ner", pretrained, model_dir, data_dir=CONLL, do_eval=False, do_predict=False,
        train_batch_size=4, eval_batch_size=8, learning_rate=3e-3, warmup_proportion=0.0,
        max_seq_length=64, num_train_epochs=2, verbose=0,
        task_options=NerConfig(use_crf=True, crf_learning_rate_multiplier=10.0))
    assert results["train_loss"][-1] < results["train_loss"][0], results["train_loss"]
    model, config, _ = load_finetuned(model_dir)
    assert model.crf and model.crf_learning_rate_multiplier == 10.0
    assert (config.options["use_crf"], config.options["crf_bio_constraints"]) == (True, True)
    # The exported graph (op check on) tags like fine-tuning's Keras prediction.
    version_dir = export_saved_model(model_dir, str(tmp_path / "export"), check=True)
    task = NerTask.from_description(config.to_dict())
    sentences = [s for split in ("dev", "test") for s in task.read(task_data(), split)
                 if sum(map(len, s.words)) <= 62]  # one window: a character is a piece
    assert len(sentences) >= 3
    preprocessor = TextPreprocessor.from_vocab_file(os.path.join(model_dir, "vocab.txt"), True, 64)
    keras_tags = task._tag(model, sentences, preprocessor, batch_size=8)
    assert sum(_invalid_bio(tags) for tags in keras_tags) == 0
    served = tf.saved_model.load(version_dir).signatures["serving_default"](
        text=tf.constant([" ".join(s.words) for s in sentences]))
    served_tags = [[t.decode() for t in row[:n]] for row, n in zip(served["tags"].numpy(),
                                                                   served["num_words"].numpy())]
    assert served_tags == keras_tags


def task_data():
    from kbert.tasks import TaskData

    return TaskData(data_dir=CONLL)


def test_crf_settings_round_trip_through_task_config():
    task = NerTask(NerConfig(use_crf=True, crf_bio_constraints=False, crf_learning_rate_multiplier=5.0))
    restored = NerTask.from_description(task.describe())
    assert restored.config == task.config
    model = restored.build_model(BertEncoder(**tiny_encoder_kwargs()))
    assert model.crf and model.crf_allowed_transitions is None
    assert model.crf_layer.learning_rate_multiplier == 5.0
    config = model.get_config()
    assert BertTokenClassifier.from_config(config).get_config() == config
