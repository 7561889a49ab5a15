"""SQuAD serving: strided question/context windows as run_squad.py cuts them, and answers
at the default settings for contexts of any length."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from tests import serving_testlib as lib
from tests.serving_testlib import VOCAB
from tests.serving_testlib import hf_tokenizer
from kbert.checkpoints import load_finetuned
from kbert.data import TextPreprocessor
from kbert.tasks import SquadConfig
from kbert.tasks.squad.serving import question_context_windows
from kbert.tasks.squad.span_search import NO_ANSWER_SCORE
from kbert.tasks.squad.span_search import window_best_spans


@pytest.mark.parametrize("doc_stride", [2, 3, 100])
def test_question_context_windows_follow_run_squad(doc_stride):
    context = "one two three four five six seven eight nine ten"
    preprocessor = TextPreprocessor.from_vocab_file(VOCAB, True, 12)
    windows = question_context_windows(
        preprocessor, tf.constant(["what city?", "who"]), tf.constant([context, ""]),
        max_query_length=3, doc_stride=doc_stride)
    num_pieces = len(hf_tokenizer().encode(context, add_special_tokens=False).ids)  # 12: "nine" is 3
    spans = lib.run_squad_spans(num_pieces, 12 - 3 - 3, doc_stride)
    assert windows["example"].numpy().tolist() == [0] * len(spans) + [1]
    assert windows["window_start"].numpy().tolist() == [s for s, _ in spans] + [0]
    assert windows["window_length"].numpy().tolist() == [n for _, n in spans] + [0]
    max_context = windows["max_context"].to_list()
    for index, (start, length) in enumerate(spans):
        assert max_context[index] == [lib.max_context_window(spans, start + i) == index
                                      for i in range(length)]
    assert max_context[-1] == []
    token_ids = windows["token_ids"].to_list()
    assert token_ids[1][:5] == [101, 2054, 2103, 1029, 102]  # [CLS] what city ? [SEP]
    assert token_ids[-1] == [101, 2040, 102, 102]  # [CLS] who [SEP] [SEP]


def test_window_best_spans_take_windows_shorter_than_max_answer_length():
    # Window 0: question of 1 piece ([CLS] q [SEP] = offset 3), 2 context pieces, length 6 < 30.
    start = tf.constant([[0., 0., 0., 1., 5., 0.], [0., 0., 0., 0., 0., 0.]])
    end = tf.constant([[0., 0., 0., 4., 2., 9.], [0., 0., 0., 0., 0., 0.]])
    score, first, last = window_best_spans(
        start, end, context_offset=tf.constant([3, 3]), window_length=tf.constant([2, 0]),
        max_context=tf.constant([[True, True], [False, False]]), max_answer_length=30)
    # Start 4 (5.) + end 4 (2.) = 7 beats start 3 + end 3 = 5; end 5 is [SEP], not context.
    assert score.numpy().tolist() == [7.0, float("-inf")]
    assert (first.numpy()[0], last.numpy()[0]) == (1, 1)
    # A start outside its max-context window is not taken.
    score, first, _ = window_best_spans(
        start[:1], end[:1], tf.constant([3]), tf.constant([2]), tf.constant([[True, False]]), 30)
    assert score.numpy().tolist() == [1.0 + 4.0] and first.numpy().tolist() == [0]


@pytest.fixture(scope="module")
def default_export():
    exported = lib.exported_squad_defaults()
    model, config, _ = load_finetuned(exported["model_dir"])
    signature = tf.saved_model.load(exported["version_dir"]).signatures["serving_default"]
    return model, config, signature


def test_default_settings_are_squad_config_defaults(default_export):
    _, config, _ = default_export
    defaults = SquadConfig()
    assert (config.max_seq_length, config.options["doc_stride"], config.options["max_query_length"],
            config.options["max_answer_length"]) == (384, 128, 64, 30) == (
        384, defaults.doc_stride, defaults.max_query_length, defaults.max_answer_length)
    assert config.options == dataclasses.asdict(defaults)


def _answers(signature, questions, contexts):
    outputs = signature(question=tf.constant(questions), context=tf.constant(contexts))
    return [(outputs["answer"].numpy()[i].decode(), int(outputs["start_char"].numpy()[i]),
             int(outputs["end_char"].numpy()[i]), float(outputs["score"].numpy()[i]))
            for i in range(len(questions))]


def test_default_settings_answer_empty_whitespace_and_one_word_contexts(default_export):
    model, config, signature = default_export
    questions = ["Who?", "Who?", "Who lives here?", "warm up"]
    contexts = ["", " \t\n\u00a0 ", "Emma", "warm up"]
    answers = _answers(signature, questions, contexts)
    assert answers[0] == answers[1] == ("", 0, 0, NO_ANSWER_SCORE)
    assert answers[2][:3] == ("Emma", 0, 4)
    for (question, context), (answer, start, end, score) in zip(zip(questions, contexts), answers):
        expected = lib.reference_squad(model, question, context, config)
        assert (answer, start, end) == expected[:3]
        np.testing.assert_allclose(score, expected[3], rtol=1e-6, atol=1e-5)


def test_default_settings_answer_a_5000_word_context_like_run_squad(default_export):
    model, config, signature = default_export
    with open(f"{lib.REPO}/tests/testdata/austen-persuasion-head.txt", encoding="utf-8") as f:
        context = " ".join(f.read().split()[:5000])
    question = "Who was Sir Walter Elliot of Kellynch Hall?"
    (answer, start, end, score), = _answers(signature, [question], [context])
    expected = lib.reference_squad(model, question, context, config)
    assert len(hf_tokenizer().encode(context).ids) > 10 * 384  # dozens of windows
    assert (answer, start, end) == expected[:3]
    np.testing.assert_allclose(score, expected[3], rtol=1e-6, atol=1e-5)
    assert answer and context[start:end] == answer
