"""TokenClassifier: tags learned from raw text and word lists, words back as the task splits them."""

import keras
import numpy as np
import pytest

import kbert
from kbert.checkpoints import open_model_dir
from kbert.checkpoints import save_finetuned
from tests.serving_testlib import VOCAB
from tests.serving_testlib import build_task_model

TEXTS = ["EU rejects German call.", "Peter Blackburn flew to Paris.", "BRUSSELS 1996"]
TAGS = [["B-ORG", "O", "B-MISC", "O", "O"], ["B-PER", "I-PER", "O", "O", "B-LOC", "O"],
        ["B-LOC", "O"]]


def test_fit_on_raw_text_learns_the_tags_and_gives_words_back(pretrained_dirs, tmp_path):
    keras.utils.set_random_seed(0)
    tagger = kbert.TokenClassifier.from_preset(pretrained_dirs["bert"], max_seq_length=32)
    assert tagger.task_model is None  # sized by the tags fit learns
    with pytest.raises(ValueError, match="the model has no head yet; fit it first"):
        tagger.predict(TEXTS)
    tagger.compile(learning_rate=1e-2)
    history = tagger.fit(TEXTS * 8, TAGS * 8, batch_size=4, epochs=3, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < losses[0] / 2, losses
    assert tagger.task.label_names == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER"]
    predicted = tagger.predict(TEXTS)
    # Words as the task splits them: the full stop is a word of its own.
    assert [[word for word, _ in row] for row in predicted] == [
        ["EU", "rejects", "German", "call", "."], ["Peter", "Blackburn", "flew", "to", "Paris", "."],
        ["BRUSSELS", "1996"]]
    assert [[tag for _, tag in row] for row in predicted] == TAGS
    # Word lists in, the same words back; entities with character offsets.
    assert tagger.predict([["Peter", "Blackburn", "flew"]])[0][:2] == [("Peter", "B-PER"),
                                                                       ("Blackburn", "I-PER")]
    records = tagger.predict_records(["Peter Blackburn flew to Paris."])
    assert [(e["start"], e["end"], e["label"], e["text"]) for e in records[0]["entities"]] == [
        (0, 15, "PER", "Peter Blackburn"), (24, 29, "LOC", "Paris")]

    saved = str(tmp_path / "tagger")
    tagger.save_to_preset(saved)
    assert open_model_dir(saved).task_config.label_names == tagger.task.label_names
    again = kbert.TokenClassifier.from_preset(saved)
    assert again.predict(TEXTS) == predicted
    with pytest.raises(ValueError, match=r"was fine-tuned with the tags \['O', 'B-LOC'"):
        kbert.TokenClassifier.from_preset(saved, label_names=["O", "B-LOC"])


def test_tags_given_spans_and_a_crf(pretrained_dirs):
    keras.utils.set_random_seed(1)
    tagger = kbert.TokenClassifier.from_preset(
        pretrained_dirs["modernbert"], max_seq_length=32, use_crf=True,
        label_names=["O", "B-LOC", "I-LOC", "B-PER", "I-PER"])
    assert tagger.task_model.crf_layer is not None
    spans = [[[0, 15, "PER"], [24, 29, "LOC"]]]  # labels as entities of the text
    text = ["Peter Blackburn flew to Paris."]
    tagger.compile(learning_rate=1e-2)
    history = tagger.fit(text * 8, spans * 8, batch_size=4, epochs=4, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert [tag for _, tag in tagger.predict(text)[0]] == ["B-PER", "I-PER", "O", "O", "B-LOC",
                                                           "O"]
    with pytest.raises(ValueError, match=r"item 1: tag 'B-ORG' is not in the"):
        tagger.fit(["EU rejects"], [["B-ORG", "O"]])


def test_a_fine_tuned_ner_directory_reloads_with_its_head(tmp_path):
    model, record = build_task_model("ner")
    directory = str(tmp_path / "ner")
    save_finetuned(directory, model, record, VOCAB)
    tagger = kbert.TokenClassifier.from_preset(directory)
    assert tagger.max_seq_length == 12 and tagger.task.label_names == record.label_names
    for a, b in zip(tagger.task_model.weights, model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    # --task=ner splits at whitespace only, as its CoNLL words are.
    assert [word for word, _ in tagger.predict(["Paris, France."])[0]] == ["Paris,", "France."]
    with pytest.raises(TypeError, match=r"got \['use_crf'\] for .*ner, which is fine-tuned"):
        kbert.TokenClassifier.from_preset(directory, use_crf=True)


def test_word_lists_on_an_electra_discriminator(pretrained_dirs):
    """ELECTRA's discriminator through the encoder seam: named tags, word lists in and out."""
    keras.utils.set_random_seed(2)
    names = ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER"]
    tagger = kbert.TokenClassifier.from_preset(pretrained_dirs["electra"], max_seq_length=32,
                                               label_names=names)
    assert tagger.task.label_names == names and tagger.task_model is not None
    # The discriminator itself (its factorized embeddings: 16 wide under 32 hidden units).
    discriminator = open_model_dir(pretrained_dirs["electra"]).encoder()
    assert tagger.task_model.encoder.get_config()["embedding_dim"] == 16
    for a, b in zip(tagger.task_model.encoder.weights, discriminator.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    words = [["EU", "rejects", "German", "call", "."],
             ["Peter", "Blackburn", "flew", "to", "Paris", "."], ["BRUSSELS", "1996"]]
    tagger.compile(learning_rate=1e-2)
    history = tagger.fit(words * 8, TAGS * 8, batch_size=4, epochs=3, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < losses[0] / 2, losses
    predicted = tagger.predict(words)
    assert [[word for word, _ in row] for row in predicted] == words
    assert [[tag for _, tag in row] for row in predicted] == TAGS
