"""A model directory with a byte-level BPE `tokenizer.json` (ModernBERT's kind) instead of vocab.txt.

It is opened, packs text with the `tokenizers` library's ids, and exports a
SavedModel that tokenizes in its graph and passes the TF Serving ops check.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
from tokenizers import Tokenizer

from tests.conftest import tiny_encoder_kwargs
from kbert.checkpoints import open_model_dir
from kbert.checkpoints import save_pretrained
from kbert.data import ByteLevelBpeTokenizer
from kbert.export.saved_model import export_saved_model
from kbert.models import BertEncoder

TOKENIZER_JSON = os.path.join(os.path.dirname(__file__), "..", "testdata", "bpe_tokenizer.json")
TEXTS = ["A gorgeous film from Paris!", "a   [MASK] in Zürich 😀", ""]


def _pretrained(directory, vocabulary_size=1135):
    encoder = BertEncoder(**tiny_encoder_kwargs(vocabulary_size=vocabulary_size,
                                                max_sequence_length=32))
    save_pretrained(str(directory), encoder, vocab_file=TOKENIZER_JSON)
    return str(directory)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return _pretrained(tmp_path_factory.mktemp("bpe") / "pretrained")


def test_a_directory_with_tokenizer_json_is_opened_and_packs_as_tokenizers(pretrained):
    assert sorted(os.listdir(pretrained)) == ["bert_config.json", "encoder.weights.h5",
                                              "tokenizer.json"]
    directory = open_model_dir(pretrained)
    assert directory.vocab_file == os.path.join(pretrained, "tokenizer.json")
    assert isinstance(directory.tokenizer, ByteLevelBpeTokenizer) and not directory.do_lower_case
    assert len(directory.vocabulary) == 1135 and directory.vocabulary[1130] == "[MASK]"
    inputs = directory.preprocessor(16)(tf.constant(TEXTS))
    encodings = Tokenizer.from_file(TOKENIZER_JSON).encode_batch(TEXTS)
    for row, encoding in enumerate(encodings):
        n = len(encoding.ids)
        assert inputs["token_ids"][row, :n].numpy().tolist() == encoding.ids
        assert inputs["padding_mask"][row].numpy().sum() == n


def test_lower_casing_or_too_few_embedding_rows_are_refused(pretrained, tmp_path):
    with pytest.raises(ValueError, match="tokenizer.json, which has no lower casing"):
        open_model_dir(pretrained, do_lower_case=True)
    small = _pretrained(tmp_path / "small", vocabulary_size=1000)
    with pytest.raises(ValueError, match="tokenizer.json has 1135 tokens but the encoder of .* "
                                         "has 1000 embedding rows"):
        open_model_dir(small)


def test_the_export_tokenizes_in_its_graph_and_passes_the_ops_check(pretrained, tmp_path):
    # check=True runs the fresh-process ops check (TensorFlow + tensorflow-text only).
    version = export_saved_model(pretrained, str(tmp_path / "export"), max_seq_length=16)
    assert os.path.exists(os.path.join(version, "assets.extra", "tokenizer.json"))
    served = tf.saved_model.load(version).signatures["serving_default"](text=tf.constant(TEXTS))
    directory = open_model_dir(pretrained)
    inputs = directory.preprocessor(16)(tf.constant(TEXTS))
    sequence = directory.encoder(dropout=0.0)(inputs)["sequence_output"].numpy()
    mask = inputs["padding_mask"].numpy()[:, :, None]
    mean = (sequence * mask).sum(1) / np.maximum(mask.sum(1), 1)
    expected = mean / np.maximum(np.linalg.norm(mean, axis=-1, keepdims=True), 1e-12)
    np.testing.assert_allclose(served["embedding"].numpy()[:2], expected[:2], atol=1e-5)
    # A batch of only empty texts is "[CLS] [SEP]" in the graph too (it raised
    # InvalidArgumentError in the BPE merges); its embedding is that of "" above.
    empty = tf.saved_model.load(version).signatures["serving_default"](text=tf.constant([""]))
    np.testing.assert_allclose(empty["embedding"].numpy(), served["embedding"].numpy()[2:],
                               atol=1e-6)
