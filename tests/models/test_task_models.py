import os

import keras
import numpy as np
import pytest

from tests.conftest import BATCH, SEQ, tiny_encoder_kwargs, tiny_inputs
from kbert.models import BertClassifier
from kbert.models import BertEncoder
from kbert.models import BertPretrainer
from kbert.models import BertSpanLabeler
from kbert.models import BertTokenClassifier
from kbert.models import load_encoder
from kbert.models import load_pretrainer
from kbert.models import read_tokenizer_config
from kbert.models import save_pretrained


def _np(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize(
    "cls, kwargs, shape",
    [
        (BertClassifier, {"num_classes": 3}, (BATCH, 3)),
        (BertClassifier, {"num_classes": 1}, (BATCH, 1)),
        (BertTokenClassifier, {"num_classes": 5}, (BATCH, SEQ, 5)),
    ],
)
def test_task_output_shapes_and_config(tiny_encoder, cls, kwargs, shape):
    model = cls(tiny_encoder, **kwargs)
    assert tuple(model(tiny_inputs()).shape) == shape
    config = model.get_config()
    assert cls.from_config(config).get_config() == config


def test_span_labeler_masks_padding(tiny_encoder):
    model = BertSpanLabeler(tiny_encoder)
    outputs = model(tiny_inputs())
    start = _np(outputs["start_logits"])
    assert start.shape == (BATCH, SEQ)
    assert (start[0, -2:] < -1e8).all() and (start[1] > -1e8).all()


def test_classifier_fit_lowers_loss():
    keras.utils.set_random_seed(1)
    model = BertClassifier(BertEncoder(**tiny_encoder_kwargs(dropout=0.0)), num_classes=2, dropout=0.0)
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    inputs, labels = tiny_inputs(), np.array([0, 1, 1])
    before = model.evaluate(inputs, labels, verbose=0, return_dict=True)["loss"]
    model.fit(inputs, labels, epochs=15, verbose=0)
    after = model.evaluate(inputs, labels, verbose=0, return_dict=True)
    assert after["loss"] < 0.5 * before and after["accuracy"] == 1.0


def test_pretrained_directory_round_trip(tiny_encoder, tmp_path):
    directory = str(tmp_path / "pretrained")
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    pretrainer = BertPretrainer(tiny_encoder)
    save_pretrained(directory, tiny_encoder, vocab_file=str(vocab), do_lower_case=False,
                    pretrainer=pretrainer)
    assert sorted(os.listdir(directory)) == [
        "bert_config.json", "encoder.weights.h5", "pretrainer.weights.h5",
        "tokenizer_config.json", "vocab.txt"]
    inputs = tiny_inputs(seed=4)
    restored = load_encoder(directory)
    np.testing.assert_array_equal(_np(restored(inputs)["sequence_output"]),
                                  _np(tiny_encoder(inputs)["sequence_output"]))
    assert read_tokenizer_config(directory) == {
        "vocab_file": os.path.join(directory, "vocab.txt"), "do_lower_case": False}
    features = dict(inputs, mask_positions=np.ones((BATCH, 2), "int32"))
    np.testing.assert_array_equal(_np(load_pretrainer(directory)(features)["mlm"]),
                                  _np(pretrainer(features)["mlm"]))
    classifier = BertClassifier.from_pretrained(directory, num_classes=2)
    np.testing.assert_array_equal(_np(classifier.encoder(inputs)["pooled_output"]),
                                  _np(tiny_encoder(inputs)["pooled_output"]))


def test_not_a_pretrained_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="bert_config.json is missing"):
        load_encoder(str(tmp_path))


def test_finetuned_directory_round_trip(tiny_encoder, tmp_path):
    from kbert.models import TaskConfig, load_finetuned, read_task_config, save_finetuned

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    model = BertClassifier(tiny_encoder, num_classes=2)
    config = TaskConfig("classifier", "glue", "sst-2", ["negative", "positive"], do_lower_case=True)
    directory = str(tmp_path / "run")
    save_finetuned(directory, model, config, str(vocab))
    restored, restored_config, vocab_file = load_finetuned(directory)
    assert restored_config == config and read_task_config(directory) == config
    assert open(vocab_file).read() == vocab.read_text()
    inputs = tiny_inputs(seed=5)
    np.testing.assert_array_equal(_np(restored(inputs)), _np(model(inputs)))
    assert load_encoder(directory).count_params() == tiny_encoder.count_params()


def test_task_config_rejects_unknown_model_type_and_keys():
    from kbert.models import TaskConfig

    with pytest.raises(ValueError, match="'ranker'"):
        TaskConfig("ranker", "glue", "x")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['labels'\]"):
        TaskConfig.from_dict({"model_type": "classifier", "task": "glue", "task_name": "x", "labels": []})
