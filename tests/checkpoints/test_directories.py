"""kbert's directory formats on disk: pre-trained and fine-tuned directories, round trips and errors."""

import os

import keras
import numpy as np
import pytest

from tests.conftest import BATCH, tiny_inputs
from kbert.checkpoints import load_encoder
from kbert.checkpoints import load_pretrainer
from kbert.checkpoints import read_bert_config
from kbert.checkpoints import read_tokenizer_config
from kbert.checkpoints import save_pretrained
from kbert.models import BertClassifier
from kbert.models import BertPretrainer


def _np(x):
    return keras.ops.convert_to_numpy(x)


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
    classifier = BertClassifier(load_encoder(directory), num_classes=2)
    np.testing.assert_array_equal(_np(classifier.encoder(inputs)["pooled_output"]),
                                  _np(tiny_encoder(inputs)["pooled_output"]))


def test_not_a_pretrained_directory_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="bert_config.json is missing"):
        load_encoder(str(tmp_path))


def test_finetuned_directory_round_trip(tiny_encoder, tmp_path):
    from kbert.checkpoints import TaskConfig, load_finetuned, read_task_config, save_finetuned

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n")
    model = BertClassifier(tiny_encoder, num_classes=2)
    config = TaskConfig("glue", "sst-2", "classifier", ["negative", "positive"], do_lower_case=True)
    directory = str(tmp_path / "run")
    save_finetuned(directory, model, config, str(vocab))
    restored, restored_config, vocab_file = load_finetuned(directory)
    assert restored_config == config and read_task_config(directory) == config
    assert open(vocab_file).read() == vocab.read_text()
    inputs = tiny_inputs(seed=5)
    np.testing.assert_array_equal(_np(restored(inputs)), _np(model(inputs)))
    assert load_encoder(directory).count_params() == tiny_encoder.count_params()
    assert sorted(n for n in os.listdir(directory) if "incomplete" in n or "tmp" in n) == []


def test_task_config_is_flat_json_with_the_task_options_beside_the_common_keys(tmp_path):
    from kbert.checkpoints import TaskConfig

    config = TaskConfig("squad", "squad", "span_labeler", text_pair=True, max_seq_length=384,
                        options={"doc_stride": 64, "n_best_size": 5})
    flat = config.to_dict()
    assert flat == {"task": "squad", "task_name": "squad", "model_type": "span_labeler",
                    "label_names": [], "text_pair": True, "max_seq_length": 384,
                    "do_lower_case": True, "doc_stride": 64, "n_best_size": 5}
    assert TaskConfig.from_dict(flat) == config
    with pytest.raises(ValueError, match=r"x.json: missing key\(s\) \['model_type'\]"):
        TaskConfig.from_dict({"task": "glue", "task_name": "sst-2"}, source="x.json")


def test_task_config_that_is_not_a_json_object_is_named(tmp_path):
    from kbert.checkpoints import read_task_config

    (tmp_path / "task_config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"task_config.json: expected a JSON object, got list"):
        read_task_config(str(tmp_path))
    (tmp_path / "task_config.json").write_text("{")
    with pytest.raises(ValueError, match=r"task_config.json: not valid JSON"):
        read_task_config(str(tmp_path))


def test_missing_bert_config_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        read_bert_config(str(tmp_path / "nope.json"))


def test_truncated_weights_file_is_one_line_naming_it(tiny_encoder, tmp_path):
    directory = str(tmp_path / "pretrained")
    save_pretrained(directory, tiny_encoder)
    weights = os.path.join(directory, "encoder.weights.h5")
    data = open(weights, "rb").read()
    with open(weights, "wb") as f:  # cut short, as an interrupted copy leaves it
        f.write(data[:len(data) // 2])
    with pytest.raises(ValueError, match=(
            rf"^{weights} is not a readable Keras weights file \(Unable to synchronously open file "
            rf"\(truncated file: eof = {len(data) // 2}, .*stored_eof = {len(data)}\)\); it may have "
            r"been cut short in a copy: copy the model directory again, or save it again\.$")):
        load_encoder(directory)
