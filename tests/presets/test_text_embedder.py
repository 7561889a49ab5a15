"""TextEmbedder: sentence-transformers' vectors from all-MiniLM-L6-v2, any architecture, saved back."""

import json
import os

import numpy as np
import pytest
from safetensors.numpy import load_file

import kbert
from kbert.checkpoints import open_model_dir
from kbert.export import serving_module
from kbert.retrieval import embed_texts
from tests.checkpoints.bert_reference import gelu_erf
from tests.checkpoints.bert_reference import reference_bert
from tests.minilm_testlib import converted_minilm
from tests.minilm_testlib import requires_minilm
from tests.presets.conftest import ARCHITECTURES
from tests.serving_testlib import TEXTS
from tests.serving_testlib import reference_embedding

# Eight sentences and one of ~300 pieces, which sentence-transformers cuts at MiniLM's 256.
SENTENCES = ["A man is playing a guitar.", "A cat sits on the mat.",
             "How do I reset my password?", "Share prices dropped steeply today.",
             "Naïve café crème in Zürich", "bad", "", "one two three " * 100]


def sentence_transformers_reference(hf_dir: str, texts: list[str]) -> np.ndarray:
    """all-MiniLM-L6-v2 as sentence-transformers runs it, without kbert's code.

    Its `tokenizer.json` through Hugging Face `tokenizers`, cut at the 256
    pieces `sentence_bert_config.json` records; a float64 numpy BERT over the
    raw safetensors; the mean over real tokens (`1_Pooling`); L2 normalisation
    (`2_Normalize`).
    """
    from tokenizers import Tokenizer

    with open(os.path.join(hf_dir, "sentence_bert_config.json"), encoding="utf-8") as f:
        max_length = json.load(f)["max_seq_length"]
    tokenizer = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    tokenizer.enable_truncation(max_length)
    tokenizer.no_padding()
    weights = load_file(os.path.join(hf_dir, "model.safetensors"))
    vectors = []
    for text in texts:
        ids = np.asarray([tokenizer.encode(text).ids], "int32")
        inputs = {"token_ids": ids, "segment_ids": np.zeros_like(ids),
                  "padding_mask": np.ones_like(ids)}
        sequence = reference_bert(weights, inputs, layout="hf", num_heads=12, gelu=gelu_erf,
                                  eps=1e-12)["sequence_output"]
        mean = sequence[0].mean(axis=0)
        vectors.append(mean / np.linalg.norm(mean))
    return np.stack(vectors)


@requires_minilm
def test_all_minilm_l6_v2_gives_sentence_transformers_embeddings():
    converted = converted_minilm()
    embedder = kbert.TextEmbedder.from_preset(converted["output_dir"])
    assert embedder.max_seq_length == 256  # sentence_config.json, as sentence-transformers cuts
    vectors = embedder.predict(SENTENCES, batch_size=4)
    assert vectors.shape == (len(SENTENCES), 384) and vectors.dtype == np.float32
    # (The last text has 302 pieces: it matches only when cut where sentence-transformers cuts.)
    expected = sentence_transformers_reference(converted["hf_dir"], SENTENCES)
    np.testing.assert_allclose(vectors, expected, atol=1e-5)


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_every_architecture_embeds_as_its_export_serves(architecture, pretrained_dirs):
    directory = pretrained_dirs[architecture]
    embedder = kbert.TextEmbedder.from_preset(directory, max_seq_length=32)
    vectors = embedder.predict(TEXTS)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    if architecture == "bert":  # against Hugging Face tokenizers and a numpy pooling
        np.testing.assert_allclose(vectors, reference_embedding(embedder.backbone, TEXTS, 32),
                                   atol=1e-5)
    else:  # what kbert-export serves of the directory
        module = serving_module(open_model_dir(directory), max_seq_length=32)
        np.testing.assert_array_equal(vectors, embed_texts(module.embed_queries, TEXTS))


def test_pooling_is_chosen_and_saved_with_the_length(pretrained_dirs, tmp_path):
    directory = pretrained_dirs["bert"]
    embedder = kbert.TextEmbedder.from_preset(directory, pooling="cls", normalize=False,
                                              max_seq_length=24)
    vectors = embedder.predict(TEXTS)
    assert not np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    saved = str(tmp_path / "cls")
    embedder.save_to_preset(saved)
    assert kbert.checkpoints.read_sentence_config(saved) == {
        "pooling": "cls", "normalize": False, "max_seq_length": 24}
    again = kbert.TextEmbedder.from_preset(saved)
    assert again.max_seq_length == 24
    np.testing.assert_array_equal(again.predict(TEXTS), vectors)


def test_an_embedder_does_not_train(pretrained_dirs):
    embedder = kbert.TextEmbedder.from_preset(pretrained_dirs["bert"])
    with pytest.raises(NotImplementedError, match="--task=similarity"):
        embedder.fit(["a film"], [1])
    with pytest.raises(TypeError, match="embeds single texts"):
        embedder.predict((["a film"], ["a play"]))
