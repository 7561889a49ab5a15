"""The never-pre-trained twin of `kbert-finetune --compare_with_random_init` (issue 51, item 5)."""

import json

import keras
import numpy as np
import pytest

from kbert.checkpoints import load_encoder
from kbert.checkpoints import save_pretrained
from kbert.models import BertEncoder
from kbert.training.finetuning.random_init import compare_scores
from kbert.training.finetuning.random_init import format_comparison
from kbert.training.finetuning.random_init import never_pretrained_directory
from tests.conftest import tiny_encoder_kwargs


def test_the_twin_has_the_shape_tokenizer_and_pooling_but_the_seeds_initial_weights(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    vocab += [f"word{i}" for i in range(tiny_encoder_kwargs()["vocabulary_size"] - len(vocab))]
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    trained = BertEncoder(**tiny_encoder_kwargs(activation="gelu_exact"))
    trained.set_weights([w + 0.5 for w in trained.get_weights()])  # "pre-trained"
    source = tmp_path / "source"
    save_pretrained(str(source), trained, vocab_file=str(tmp_path / "vocab.txt"),
                    do_lower_case=False,
                    sentence_config={"pooling": "cls", "normalize": False, "max_seq_length": 8})
    twin_dir = never_pretrained_directory(str(source), str(tmp_path / "twin"), seed=5)
    twin = load_encoder(twin_dir)
    assert (tmp_path / "twin" / "bert_config.json").read_text() == (
        source / "bert_config.json").read_text()
    keras.utils.set_random_seed(5)
    fresh = BertEncoder(**tiny_encoder_kwargs(activation="gelu_exact"))
    for got, want, pretrained in zip(twin.get_weights(), fresh.get_weights(),
                                     trained.get_weights()):
        np.testing.assert_array_equal(got, want)
        assert not np.array_equal(got, pretrained)
    for name in ("vocab.txt", "tokenizer_config.json", "sentence_config.json"):
        assert (tmp_path / "twin" / name).read_text() == (source / name).read_text(), name
    assert json.loads((tmp_path / "twin" / "tokenizer_config.json").read_text()) == {
        "do_lower_case": False}


def test_the_comparison_is_the_main_metric_of_both_and_their_difference():
    comparison = compare_scores({"main_metric": "accuracy", "accuracy": 0.75, "f1": 0.1},
                                {"main_metric": "accuracy", "accuracy": 0.5, "f1": 0.9})
    assert comparison == {"main_metric": "accuracy", "pretrained": 0.75, "random_init": 0.5,
                          "difference": 0.25}
    assert format_comparison(comparison) == (
        "dev accuracy: pre-trained 0.7500, never pre-trained 0.5000 (same shape, settings and "
        "seed): difference +0.2500")
    assert format_comparison(compare_scores(
        {"main_metric": "f1", "f1": 0.5}, {"main_metric": "f1", "f1": 0.625})).endswith(
        "difference -0.1250")
