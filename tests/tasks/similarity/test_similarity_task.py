"""--task=similarity: readers, zero-shot and trained evaluation, pooling from the pre-trained directory."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from kbert.checkpoints import save_pretrained
from kbert.checkpoints import load_encoder
from kbert.export.saved_model import export_saved_model
from kbert.tasks import SimilarityConfig
from kbert.tasks import SimilarityTask
from kbert.tasks.similarity.reader import read_pairs_jsonl
from kbert.tasks.similarity.reader import read_stsb
from kbert.training.finetuning import run_finetuning
from tests.retrieval_testlib import make_pretrained
from tests.retrieval_testlib import sentences
from tests.serving_testlib import VOCAB

STSB = os.path.join(os.path.dirname(__file__), "stsb")


def _write_stsb(directory):
    os.makedirs(directory, exist_ok=True)
    texts = sentences(24)
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
    for split, rows in (("train", range(0, 16)), ("dev", range(16, 24))):
        with open(os.path.join(directory, f"{split}.tsv"), "w") as f:
            f.write(header + "".join(
                f"{i}\tmain\tx\t2012\t{i}\tnone\tnone\t{texts[i]}\t{texts[(i + i % 3) % 24]}\t{(i % 6) * 1.0:.3f}\n"
                for i in rows))
    return directory


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("similarity")
    return _write_stsb(str(root / "STS-B")), make_pretrained(str(root / "pretrained")), root


def test_stsb_scores_are_scaled_to_unit_interval(setup):
    stsb, _, _ = setup
    examples = read_stsb(stsb, "dev")
    assert [e.score for e in examples[:3]] == [pytest.approx(4 / 5), pytest.approx(5 / 5), 0.0]


def test_pairs_jsonl_layouts_and_errors(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"sentence1": "a", "sentence2": "b", "score": 0.5}\n'
                    '{"anchor": "a", "positive": "b", "negative": "c"}\n')
    first, second = read_pairs_jsonl(str(path))
    assert (first.score, second.negative) == (0.5, "c")
    path.write_text('{"sentence1": "a", "sentence2": "b", "score": 4.2}\n')
    with pytest.raises(ValueError, match=r"pairs\.jsonl:1: score 4\.2 is not a number in \[0, 1\]"):
        read_pairs_jsonl(str(path))
    path.write_text('\n{"query": "a"}\n')
    with pytest.raises(ValueError, match=r"pairs\.jsonl:2: expected 'sentence1'"):
        read_pairs_jsonl(str(path))


def test_zero_shot_eval_writes_spearman_and_pearson(setup, tmp_path):
    stsb, pretrained, _ = setup
    results = run_finetuning("similarity", pretrained, str(tmp_path / "zero"), task_name="STS-B",
                             data_dir=stsb, do_train=False, max_seq_length=32, verbose=0)
    saved = json.load(open(tmp_path / "zero" / "eval_results.json"))
    assert set(saved) == {"spearman", "pearson", "num_examples"} and saved["num_examples"] == 8
    assert -1 <= results["spearman"] <= 1 and -1 <= results["pearson"] <= 1


def test_cosine_training_then_export_embeds_as_evaluated(setup, tmp_path):
    stsb, pretrained, _ = setup
    model_dir = str(tmp_path / "tuned")
    results = run_finetuning("similarity", pretrained, model_dir, task_name="sts-b", data_dir=stsb,
                             train_batch_size=4, num_train_epochs=2, learning_rate=1e-3,
                             max_seq_length=32, verbose=0)
    assert results["train_loss"][1] < results["train_loss"][0]
    config = json.load(open(os.path.join(model_dir, "task_config.json")))
    assert (config["task"], config["pooling"], config["normalize"]) == ("similarity", "mean", True)
    loaded = tf.saved_model.load(export_saved_model(model_dir, str(tmp_path / "export"), check=False))
    assert set(loaded.signatures) == {"serving_default", "serve_ids", "embeddings"}
    vectors = loaded.signatures["serving_default"](text=tf.constant(sentences(2)))["embedding"].numpy()
    with_usage = loaded.signatures["embeddings"](text=tf.constant(sentences(2)))
    np.testing.assert_array_equal(with_usage["embedding"].numpy(), vectors)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), [1.0, 1.0], rtol=1e-5)


def test_ranking_loss_on_anchor_positive_negative_pairs(setup, tmp_path):
    _, pretrained, _ = setup
    texts = sentences(12)
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"anchor": " ".join(t.split()[:5]), "positive": t,
                                        "negative": texts[(i + 1) % 12]}) + "\n" for i, t in enumerate(texts)))
    results = run_finetuning("similarity", pretrained, str(tmp_path / "ranking"), train_file=str(path),
                             predict_file=str(path), train_batch_size=4, num_train_epochs=2,
                             learning_rate=1e-3, max_seq_length=32, verbose=0,
                             task_options=SimilarityConfig(loss="ranking", learn_scale=True))
    assert results["train_loss"][1] < results["train_loss"][0]
    assert {"recall@1", "mrr@10"} <= set(results)


def test_cosine_loss_refuses_unscored_pairs(setup, tmp_path):
    _, pretrained, _ = setup
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"anchor": "a", "positive": "b"}\n')
    with pytest.raises(ValueError, match=r"pairs\.jsonl:1: no score, but SimilarityConfig.loss='cosine'"):
        run_finetuning("similarity", pretrained, str(tmp_path / "x"), train_file=str(path),
                       predict_file=str(path), max_seq_length=32, verbose=0)
    assert not os.path.exists(tmp_path / "x")


def test_recorded_pooling_is_adopted_unless_gin_sets_one(setup, tmp_path):
    _, pretrained, _ = setup
    directory = str(tmp_path / "st")
    save_pretrained(directory, load_encoder(pretrained), vocab_file=VOCAB, do_lower_case=True,
                    sentence_config={"pooling": "cls", "normalize": False, "max_seq_length": 32})
    from kbert.checkpoints.pretrained import pretrained_settings

    task = SimilarityTask(task_name="sts-b")
    task.use_pretrained_settings(pretrained_settings(directory))
    assert (task.config.pooling, task.config.normalize) == ("cls", False)
    task = SimilarityTask(SimilarityConfig(pooling="max"), task_name="sts-b")
    task.use_pretrained_settings(pretrained_settings(directory))
    assert (task.config.pooling, task.config.normalize) == ("max", False)
