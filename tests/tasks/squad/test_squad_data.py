"""SQuAD reader, windowed features and post-processing on real XQuAD paragraphs."""

import json
import os

import numpy as np
import pytest

from tests.finetune_testing import TESTDATA
from tests.finetune_testing import character_vocabulary
from kbert.data import TextPreprocessor
from kbert.tasks.squad.features import squad_features
from kbert.tasks.squad.postprocessing import postprocess_squad
from kbert.tasks.squad.reader import read_squad

SAMPLE = os.path.join(TESTDATA, "squad", "xquad_en_sample.json")


@pytest.fixture(scope="module")
def preprocessor():
    return TextPreprocessor.from_vocabulary(character_vocabulary(), True, 96)


def test_read_training_examples_with_offsets():
    examples, skipped = read_squad(SAMPLE, is_training=True)
    assert (len(examples), skipped) == (6, 0)
    saxon = examples[3]
    assert saxon.question == "What is the Saxon Garden in Polish?"
    assert saxon.context[saxon.answer_start:saxon.answer_end] == "Ogród Saski"
    assert saxon.answers == ["Ogród Saski"]


def test_mismatched_answer_is_skipped_and_counted(tmp_path):
    data = json.load(open(SAMPLE, encoding="utf-8"))
    data["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] += 3
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    examples, skipped = read_squad(str(path), is_training=True)
    assert (len(examples), skipped) == (5, 1)
    # Evaluation keeps the question: only the answer texts are needed there.
    assert len(read_squad(str(path), is_training=False)[0]) == 6


def test_impossible_question_needs_version_2(tmp_path):
    data = json.load(open(SAMPLE, encoding="utf-8"))
    qa = data["data"][0]["paragraphs"][0]["qas"][0]
    qa["is_impossible"], qa["answers"] = True, []
    path = tmp_path / "v2.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match="is_impossible; pass --version_2_with_negative"):
        read_squad(str(path), is_training=True)
    examples, _ = read_squad(str(path), is_training=True, version_2_with_negative=True)
    assert examples[0].is_impossible and examples[0].answers == []


def test_not_squad_json(tmp_path):
    path = tmp_path / "x.json"
    path.write_text("[1, 2]")
    with pytest.raises(ValueError, match="is not SQuAD JSON"):
        read_squad(str(path), is_training=False)


def test_windows_cover_the_context_and_labels_hit_the_answer_characters(preprocessor):
    examples, _ = read_squad(SAMPLE, is_training=True)
    features = squad_features(preprocessor, examples, doc_stride=32,
                              max_query_length=24, is_training=True)
    for index, example in enumerate(examples):
        windows = [f for f in features if f.example_index == index]
        covered = set()
        for f in windows:
            assert len(f.token_ids) <= 96 and len(f.token_ids) == len(f.segment_ids)
            covered.update(f.token_to_char.values())
        assert len(covered) == len(preprocessor.tokenize([example.context])[0])
        labelled = [f for f in windows if f.start_position > 0]
        assert labelled, example.qas_id
        for f in labelled:
            start = f.token_to_char[f.start_position][0]
            end = f.token_to_char[f.end_position][1]
            assert example.context[start:end] == example.answers[0]
        # Each context token is "max context" in exactly one window.
        owners = [c for f in windows for p, c in f.token_to_char.items()
                  if f.token_is_max_context[p]]
        assert sorted(owners) == sorted(covered)


def _logits_for_span(feature, start, end):
    starts = np.full(len(feature.token_ids), -10.0)
    ends = np.full(len(feature.token_ids), -10.0)
    starts[start], ends[end] = 5.0, 5.0
    return starts, ends


def test_postprocessing_returns_exact_context_characters(preprocessor):
    examples, _ = read_squad(SAMPLE, is_training=True)
    features = squad_features(preprocessor, examples, doc_stride=32,
                              max_query_length=24, is_training=True)
    starts, ends = [], []
    for f in features:
        s, e = _logits_for_span(f, f.start_position, f.end_position)
        if f.start_position == 0:  # windows without the answer: point at [CLS]
            s[0], e[0] = 9.0, 9.0
        starts.append(s)
        ends.append(e)
    predictions, nbest, null_odds = postprocess_squad(examples, features, starts, ends)
    # Original case and the non-ASCII "ó" come back (the model saw "ogrod saski").
    assert predictions[examples[3].qas_id] == "Ogród Saski"
    assert predictions == {e.qas_id: e.answers[0] for e in examples}
    assert null_odds == {}
    assert nbest[examples[0].qas_id][0]["text"] == "308"
    assert sum(entry["probability"] for entry in nbest[examples[0].qas_id]) == pytest.approx(1.0)


def test_postprocessing_max_answer_length_and_null_threshold(preprocessor):
    examples, _ = read_squad(SAMPLE, is_training=True)
    example = examples[5]  # "1870 to 1939": 10 non-space characters
    features = squad_features(preprocessor, [example], doc_stride=32,
                              max_query_length=24, is_training=True)
    feature = next(f for f in features if f.start_position > 0)
    starts, ends = zip(*[_logits_for_span(f, feature.start_position, feature.end_position)
                         if f is feature else _logits_for_span(f, 0, 0) for f in features])
    short, _, _ = postprocess_squad([example], features, starts, ends, max_answer_length=5)
    assert short[example.qas_id] != "1870 to 1939"
    # The null score is the lowest [CLS] score over windows (-20, in the answer window);
    # the best span scores 10.
    v2, _, odds = postprocess_squad([example], features, starts, ends,
                                    version_2_with_negative=True, null_score_diff_threshold=0.0)
    assert v2[example.qas_id] == "1870 to 1939"
    assert odds[example.qas_id] == pytest.approx(-20.0 - 10.0)
    v2, _, _ = postprocess_squad([example], features, starts, ends,
                                 version_2_with_negative=True, null_score_diff_threshold=-40.0)
    assert v2[example.qas_id] == ""


def test_max_query_length_must_leave_room(preprocessor):
    examples, _ = read_squad(SAMPLE, is_training=False)
    with pytest.raises(ValueError, match="max_seq_length=64 leaves no room"):
        squad_features(TextPreprocessor.from_vocabulary(character_vocabulary(), True, 64), examples,
                       max_query_length=64)
