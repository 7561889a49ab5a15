"""kbert-convert as a user runs it: a TF1 checkpoint in, a kbert directory out; clean errors."""

import os

import keras
import numpy as np

from tests import forked_python
from tests.conftest import REPO, tiny_inputs
from kbert import checkpoints


def _convert(*flags):
    env = {**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return forked_python.run(["-m", "kbert.bin.convert", *flags], cwd=REPO, env=env, timeout=300)


def test_convert_tf1_checkpoint_then_refuse_to_overwrite(tiny_encoder, tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + [f"w{i}" for i in range(tiny_encoder.vocabulary_size - 4)]
    checkpoints.save_bert_tf1(checkpoints.ConvertedModel(tiny_encoder, vocabulary=vocab), str(tmp_path / "tf1"))
    flags = ["--source=bert_tf1", f"--checkpoint={tmp_path / 'tf1' / 'bert_model.ckpt'}",
             "--nodo_lower_case", f"--output_dir={tmp_path / 'out'}"]
    result = _convert(*flags)
    assert result.returncode == 0, result.stderr
    assert "encoder: L=2 H=32 A=4 I=37 V=99" in result.stdout
    assert f"wrote kbert model to {tmp_path / 'out'}" in result.stdout
    encoder = checkpoints.load_encoder(str(tmp_path / "out"))
    inputs = tiny_inputs()
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(encoder(inputs)["sequence_output"]),
                                  keras.ops.convert_to_numpy(tiny_encoder(inputs)["sequence_output"]))
    assert open(tmp_path / "out" / "tokenizer_config.json").read().strip() == '{"do_lower_case": false}'

    result = _convert(*flags)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"convert.py: error: output_dir {tmp_path / 'out'} already exists; choose a new "
        "directory or pass --overwrite (overwrite=True) to replace it.")
