"""MaskedLM: masks made on the fly from raw text, a loss that falls, heads saved and read back."""

import os

import numpy as np
import pytest
import tensorflow as tf

import kbert
from kbert.checkpoints import load_pretrainer
from kbert.checkpoints import save_finetuned
from kbert.data import MaskingConfig
from kbert.training.pretraining.state import pretrainer_with_heads
from tests.conftest import REPO
from tests.presets.conftest import ARCHITECTURES
from tests.serving_testlib import TEXTS
from tests.serving_testlib import VOCAB
from tests.serving_testlib import build_task_model


def _lines(name: str) -> list[str]:
    with open(os.path.join(REPO, "tests", "testdata", name), encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


# 601 lines, 16,721 pieces with the test vocabulary ([CLS] and [SEP] included).
CORPUS = _lines("austen-persuasion-head.txt") + _lines("emma_chapter1.txt")


def _masked_batches(mlm, texts):
    """The batches `evaluate` runs on (masked with its fixed seed), as numpy."""
    return [(features, labels["mlm"].numpy(), weights["mlm"].numpy())
            for features, labels, weights in mlm._evaluation_dataset(texts, 32)]


@pytest.fixture(scope="module")
def mlm(pretrained_dirs):
    return kbert.MaskedLM.from_preset(pretrained_dirs["bert"], max_seq_length=64)


def test_masks_follow_google_research_bert_rules_on_raw_text(mlm):
    vocab = mlm.preprocessor.tokenizer
    tokens = chosen = masked = kept = 0
    for features, labels, weights in _masked_batches(mlm, CORPUS):
        ids, positions = features["token_ids"].numpy(), features["mask_positions"].numpy()
        lengths = features["padding_mask"].numpy().sum(axis=1)
        for row, length in enumerate(lengths):
            count = int(weights[row].sum())
            # round(len * 0.15) of the instance, [CLS] and [SEP] counted, at least 1.
            assert count == min(mlm.masker.max_predictions_per_seq, max(1, round(length * 0.15)))
            where = positions[row, :count]
            assert np.all((where > 0) & (where < length - 1))  # never [CLS], [SEP], padding
            assert len(set(where.tolist())) == count
            originals, now = labels[row, :count], ids[row, where]
            masked += int(np.sum(now == vocab.mask_id))
            kept += int(np.sum(now == originals))
            tokens += int(length)
            chosen += count
    assert tokens == 16_721
    assert abs(chosen / tokens - 0.15) < 0.005
    assert abs(masked / chosen - 0.8) < 0.03
    assert abs(kept / chosen - 0.1) < 0.02  # (a random draw may also hit the original: 1/3003)
    assert abs((chosen - masked - kept) / chosen - 0.1) < 0.02


def test_the_configured_rate_and_split(pretrained_dirs):
    mlm = kbert.MaskedLM.from_preset(pretrained_dirs["bert"], max_seq_length=64,
                                     masking=MaskingConfig(masked_lm_prob=0.3,
                                                           mask_token_rate=1.0,
                                                           random_token_rate=0.0))
    assert mlm.masker.max_predictions_per_seq == 20  # ceil(64 * 0.3)
    tokens = chosen = 0
    for features, labels, weights in _masked_batches(mlm, CORPUS):
        ids, positions = features["token_ids"].numpy(), features["mask_positions"].numpy()
        tokens += int(features["padding_mask"].numpy().sum())
        chosen += int(weights.sum())
        picked = np.take_along_axis(ids, positions, axis=1)[weights > 0]
        assert np.all(picked == mlm.preprocessor.tokenizer.mask_id)
    assert abs(chosen / tokens - 0.3) < 0.01


def test_fit_lowers_the_loss_and_the_heads_are_saved(mlm, tmp_path):
    import keras

    keras.utils.set_random_seed(1)
    texts = CORPUS[:64]
    before = mlm.evaluate(texts, verbose=0, return_dict=True)
    mlm.compile(learning_rate=3e-3)
    history = mlm.fit(texts, batch_size=8, epochs=3, verbose=0)
    after = mlm.evaluate(texts, verbose=0, return_dict=True)
    assert after["mlm_loss"] < before["mlm_loss"] - 0.5, (before, after, history.history)
    saved = str(tmp_path / "continued")
    mlm.save_to_preset(saved)
    assert sorted(os.listdir(saved)) == ["bert_config.json", "encoder.weights.h5",
                                         "pretrainer.weights.h5", "tokenizer_config.json",
                                         "vocab.txt"]
    # The directory door of kbert-pretrain's held-out evaluation reads the head back.
    reread = pretrainer_with_heads(saved, next_sentence=True, strategy=tf.distribute.get_strategy())
    for a, b in zip(mlm.task_model.weights, reread.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
    logits = mlm.predict(texts[:3])
    assert logits.shape == (3, mlm.masker.max_predictions_per_seq, 3003)


@pytest.mark.parametrize("architecture", [a for a in ARCHITECTURES if a != "bert"])
def test_every_architecture_trains_its_masked_lm(architecture, pretrained_dirs, tmp_path):
    mlm = kbert.MaskedLM.from_preset(pretrained_dirs[architecture], max_seq_length=32)
    assert not mlm.task_model.next_sentence
    history = mlm.fit(TEXTS * 2, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    saved = str(tmp_path / architecture)
    mlm.save_to_preset(saved)
    head = load_pretrainer(saved, next_sentence=False)
    assert type(head) is type(mlm.task_model)
    np.testing.assert_array_equal(head.get_weights()[-1], mlm.task_model.get_weights()[-1])


def test_whole_words_need_wordpiece_and_fine_tuned_directories_are_refused(pretrained_dirs,
                                                                           tmp_path):
    with pytest.raises(ValueError, match="do_whole_word_mask finds words by WordPiece's ## "
                                         "pieces, and its byte-level BPE tokenizer has none"):
        kbert.MaskedLM.from_preset(pretrained_dirs["modernbert"],
                                   masking=MaskingConfig(do_whole_word_mask=True))
    model, record = build_task_model("sst2")
    finetuned = str(tmp_path / "sst2")
    save_finetuned(finetuned, model, record, VOCAB)
    with pytest.raises(ValueError, match=r"sst2 is fine-tuned for task 'glue'; MaskedLM continues "
                                         "pre-training a pre-trained directory"):
        kbert.MaskedLM.from_preset(finetuned)
