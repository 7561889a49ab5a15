"""tools/extract_features.py: google-research/bert's JSON lines, equal to the encoder's layers."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tests import forked_python
from tests.conftest import REPO
from tests.conftest import load_tool
from tests.finetune_testing import make_tiny_pretrained
from kbert.checkpoints import load_encoder
from kbert.data import TextPreprocessor
from kbert.data import read_vocab

TOOL = os.path.join(REPO, "tools", "extract_features.py")
LINES = ["Who was Jim Henson ? ||| Jim Henson was a puppeteer", "a gorgeous film",
         "", "x" * 80]


def _tool():
    return load_tool("extract_features")


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return make_tiny_pretrained(tmp_path_factory.mktemp("tiny_pretrained"), max_sequence_length=32)


def test_json_lines_equal_the_encoder_layers_for_the_same_ids(pretrained, tmp_path):
    input_file, output_file = tmp_path / "input.txt", tmp_path / "features.jsonl"
    input_file.write_text("\n".join(LINES) + "\n")
    result = forked_python.run(
        [TOOL, f"--input_file={input_file}", f"--output_file={output_file}",
         f"--init_checkpoint={pretrained}", "--layers=-1,-2", "--max_seq_length=24",
         "--batch_size=3"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Wrote 4 lines" in result.stderr
    records = [json.loads(line) for line in output_file.read_text().splitlines()]
    assert [r["linex_index"] for r in records] == [0, 1, 2, 3]
    encoder = load_encoder(pretrained, output_all_layers=True)
    vocab = read_vocab(os.path.join(pretrained, "vocab.txt"))
    preprocessor = TextPreprocessor.from_vocabulary(vocab, True, 24)
    for line, record in zip(LINES, records):
        parts = line.split(" ||| ")
        inputs = preprocessor.pack([preprocessor.tokenize(tf.constant([p])) for p in parts])
        layers = encoder(inputs, training=False)["encoder_outputs"]
        tokens = [vocab[i] for i in inputs["token_ids"].numpy()[0]]
        assert [f["token"] for f in record["features"]] == tokens
        for position, feature in enumerate(record["features"]):
            assert [layer["index"] for layer in feature["layers"]] == [-1, -2]
            for layer, values in zip((layers[1], layers[0]), feature["layers"]):
                # Values are rounded to 6 decimals, as in google-research/bert's output.
                np.testing.assert_allclose(values["values"], np.asarray(layer)[0, position],
                                           atol=5e-6)
    # A pair is [CLS] a [SEP] b [SEP]; a long line is cut to --max_seq_length.
    assert [f["token"] for f in records[0]["features"]].count("[SEP]") == 2
    assert len(records[3]["features"]) == 24 and len(records[2]["features"]) == 2


def test_layers_out_of_range_and_bad_values_are_named(pretrained, tmp_path):
    tool = _tool()
    input_file = tmp_path / "input.txt"
    input_file.write_text("a film\n")
    output_file = tmp_path / "out.jsonl"
    with pytest.raises(ValueError, match=r"--layers=-1,-3: layer\(s\) \[-3\] out of range; "
                                         r"the encoder has 2 layers"):
        tool.extract(str(input_file), str(output_file), pretrained, layers="-1,-3")
    with pytest.raises(ValueError, match=r"--layers='last': expected comma-separated integers"):
        tool.extract(str(input_file), str(output_file), pretrained, layers="last")
    with pytest.raises(ValueError, match="max_seq_length=64 is larger than the encoder's 32"):
        tool.extract(str(input_file), str(output_file), pretrained, layers="-1", max_seq_length=64)
    with pytest.raises(ValueError, match="--input_file=.*missing.txt does not exist"):
        tool.extract(str(tmp_path / "missing.txt"), str(output_file), pretrained)
    assert os.listdir(tmp_path) == ["input.txt"]

