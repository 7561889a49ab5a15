"""Character spans <-> IOB2 tags on words with punctuation and unicode, and predictions' offsets."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import serving_testlib as lib
from tests.conftest import tiny_encoder_kwargs
from kbert.data import TextPreprocessor
from kbert.data.words import split_words
from kbert.data.words import word_spans
from kbert.models import BertEncoder
from kbert.tasks import NerTask
from kbert.tasks import TokenClassificationConfig
from kbert.tasks import TokenClassificationTask
from kbert.tasks.token_classification.spans import entities_from_tags
from kbert.tasks.token_classification.spans import tags_from_spans

TEXT = "O'Neil met Dr. Müller (IBM) in São Paulo, then flew to the U.S. 🚀 on 1996-08-22."


def _span(text, entity, label, occurrence=0):
    start = -1
    for _ in range(occurrence + 1):
        start = text.index(entity, start + 1)
    return [start, start + len(entity), label]


ENTITIES = [_span(TEXT, "O'Neil", "PER"), _span(TEXT, "Müller", "PER"), _span(TEXT, "IBM", "ORG"),
            _span(TEXT, "São Paulo", "LOC"), _span(TEXT, "U.S.", "LOC"),
            _span(TEXT, "1996-08-22", "DATE")]


def test_spans_become_iob2_tags_on_punctuation_split_words_and_come_back():
    offsets = word_spans(TEXT, split_punctuation=True)
    words = [TEXT[a:b] for a, b in offsets]
    # The served graph finds the same words as Python.
    assert split_words(tf.constant([TEXT]), split_punctuation=True).to_list() == [
        [w.encode() for w in words]]
    assert words[:9] == ["O", "'", "Neil", "met", "Dr", ".", "Müller", "(", "IBM"]
    tags = tags_from_spans(TEXT, offsets, ENTITIES, "t.jsonl:1")
    assert list(zip(words, tags))[:10] == [
        ("O", "B-PER"), ("'", "I-PER"), ("Neil", "I-PER"), ("met", "O"), ("Dr", "O"), (".", "O"),
        ("Müller", "B-PER"), ("(", "O"), ("IBM", "B-ORG"), (")", "O")]
    assert [t for w, t in zip(words, tags) if w in ("U", "S", "🚀")] == ["B-LOC", "I-LOC", "O"]
    entities = entities_from_tags(tags, TEXT, offsets)
    assert [[e["start"], e["end"], e["label"]] for e in entities] == ENTITIES
    assert all(TEXT[e["start"]:e["end"]] == e["text"] for e in entities)


def test_round_trip_on_whitespace_words_and_spans_with_surrounding_whitespace():
    text = "Ada  Lovelace\u00a0, born in\tLondon ."
    offsets = word_spans(text)
    assert [text[a:b] for a, b in offsets] == text.split()
    # A span's leading and trailing whitespace is left out (annotation tools keep it).
    spans = [[0, 14, "PER"], [23, 31, "LOC"]]
    tags = tags_from_spans(text, offsets, spans, "t.jsonl:1")
    assert tags == ["B-PER", "I-PER", "O", "O", "O", "B-LOC", "O"]
    assert [(e["start"], e["end"], e["text"]) for e in entities_from_tags(tags, text, offsets)] \
        == [(0, 13, "Ada  Lovelace"), (24, 30, "London")]
    # IOBES and BILOU sequences give the same entities.
    for scheme in (["S-PER", "O", "B-LOC", "E-LOC"], ["U-PER", "O", "B-LOC", "L-LOC"]):
        found = entities_from_tags(scheme, "Ada in New York", word_spans("Ada in New York"))
        assert [(e["text"], e["label"]) for e in found] == [("Ada", "PER"), ("New York", "LOC")]


def test_dict_spans_and_whitespace_only_spans():
    text = "Paris is nice"
    offsets = word_spans(text)
    assert tags_from_spans(text, offsets, [{"start_offset": 0, "end_offset": 5, "label": "LOC"}],
                           "s") == ["B-LOC", "O", "O"]
    with pytest.raises(ValueError, match=r"s: entity \[5, 6, 'LOC'\] ' ' covers no word"):
        tags_from_spans(text, offsets, [[5, 6, "LOC"]], "s")
    with pytest.raises(ValueError, match=r"s: entity \[0, 5\] is not \[start, end, label\]"):
        tags_from_spans(text, offsets, [[0, 5]], "s")


def _everything_is_b_loc(max_sequence_length=64):
    """A tagger whose head says `B-LOC` for every piece (probability e^5 / (e^5 + 2))."""
    keras.utils.set_random_seed(0)
    task = TokenClassificationTask(TokenClassificationConfig(label_names=["O", "B-LOC", "I-LOC"]))
    model = task.build_model(BertEncoder(**tiny_encoder_kwargs(
        vocabulary_size=lib.vocab_size(), max_sequence_length=max_sequence_length)))
    kernel, bias = model.output_dense.get_weights()
    model.output_dense.set_weights([np.zeros_like(kernel), np.array([0.0, 5.0, 0.0], "float32")])
    return task, model


def test_predicted_entities_point_into_the_text_and_long_texts_are_read_whole():
    task, model = _everything_is_b_loc()
    preprocessor = TextPreprocessor.from_vocab_file(lib.VOCAB, True, 16)
    long_text = " ".join(["Zürich"] * 40) + "."
    texts = [TEXT, "", long_text]
    word_lists = [["New", "York", "(", "NY", ")"]]
    examples = task.examples_from_values(texts) + task.examples_from_values(word_lists)
    records = task.predict_records(model, examples, preprocessor, batch_size=4)
    probability = np.exp(5) / (np.exp(5) + 2)
    for record, text in zip(records, [*texts, "New York ( NY )"]):
        # Every word is its own B-LOC entity: each entity is one word of the text, in order.
        assert [(e["start"], e["end"]) for e in record["entities"]] == word_spans(text, True)
        for entity in record["entities"]:
            assert text[entity["start"]:entity["end"]] == entity["text"]
            assert entity["label"] == "LOC"
            assert entity["score"] == pytest.approx(probability, rel=1e-5)
    # 41 words of two pieces or more do not fit 14 pieces: read in windows, every word tagged.
    assert len(records[2]["entities"]) == 41
    # TEXT (30 words) and the long text are counted for the summary; none is cut.
    assert task.count_truncated(examples, preprocessor) == 2
    assert task.long_inputs.startswith("were read in parts, no word cut")


def test_ner_predicts_on_whitespace_words():
    task = NerTask()
    sentence, = task.examples_from_values(["U.S. troops left."])
    assert sentence.words == ["U.S.", "troops", "left."]
