"""serving_module: the one way from a model directory (or a model in memory) to its serving module."""

import os

import numpy as np
import pytest
import tensorflow as tf

from tests.finetune_testing import make_tiny_pretrained
from kbert.checkpoints import TaskConfig
from kbert.checkpoints import load_encoder
from kbert.checkpoints import open_model_dir
from kbert.checkpoints import save_finetuned
from kbert.export.serving_modules import encoder_serving_module
from kbert.export.serving_modules import serving_module
from kbert.export.serving_modules import serving_task
from kbert.export.serving_modules import task_model_serving_module
from kbert.models import BertClassifier

POSITIONS = 48
TEXTS = tf.constant(["a gorgeous film", "dull"])


@pytest.fixture(scope="module")
def directories(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving_modules")
    pretrained = make_tiny_pretrained(root / "pretrained", max_sequence_length=POSITIONS)
    finetuned = str(root / "finetuned")
    save_finetuned(finetuned, BertClassifier(load_encoder(pretrained), num_classes=2),
                   TaskConfig("glue", "sst-2", "classifier", ["neg", "pos"], max_seq_length=24),
                   os.path.join(pretrained, "vocab.txt"))
    return {"pretrained": pretrained, "finetuned": finetuned}


def test_a_pretrained_directory_serves_embeddings_as_its_encoder_in_memory(directories):
    directory = open_model_dir(directories["pretrained"])
    module = serving_module(directory)
    # No length asked for: 128, capped at the encoder's positions.
    assert module.preprocessor.max_seq_length == POSITIONS
    assert {"serving_default", "features"} <= set(module.signatures())
    assert serving_task(directory).config.pooling == module.model.pooling == "mean"
    in_memory = encoder_serving_module(load_encoder(directories["pretrained"], dropout=0.0),
                                       directory.vocab_file, True, POSITIONS)
    served, expected = (m.signatures()["serving_default"](text=TEXTS)["embedding"].numpy()
                        for m in (module, in_memory))
    np.testing.assert_allclose(served, expected, atol=1e-6)
    assert serving_module(directory, max_seq_length=16).preprocessor.max_seq_length == 16
    with pytest.raises(ValueError, match=rf"max_seq_length={POSITIONS + 1} is larger than the "
                                         rf"encoder's {POSITIONS} positions"):
        serving_module(directory, max_seq_length=POSITIONS + 1)


def test_a_finetuned_directory_serves_its_task_as_recorded(directories):
    directory = open_model_dir(directories["finetuned"])
    module = serving_module(directory)
    assert module.preprocessor.max_seq_length == 24
    in_memory = task_model_serving_module(directory.model(), directory.task_config,
                                          directory.vocab_file)
    served, expected = (m.signatures()["serving_default"](text=TEXTS) for m in (module, in_memory))
    assert sorted(served) == sorted(expected)
    for name in served:
        if served[name].dtype == tf.string:
            np.testing.assert_array_equal(served[name].numpy(), expected[name].numpy())
        else:
            np.testing.assert_allclose(served[name].numpy(), expected[name].numpy(), atol=1e-6)
    for flag, value in (("max_seq_length", 16), ("feature_layers", "-1")):
        with pytest.raises(ValueError, match=rf"--{flag} applies to embedding exports only"):
            serving_module(directory, **{flag: value})
