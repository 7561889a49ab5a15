"""SQuAD serving: strided question/context windows as run_squad.py cuts them."""

import pytest
import tensorflow as tf

from tests.serving_testlib import VOCAB
from tests.serving_testlib import hf_tokenizer
from kbert.data import TextPreprocessor
from kbert.data import read_vocab
from kbert.tasks.squad.serving import question_context_windows


def _run_squad_spans(num_pieces, max_tokens, doc_stride):
    spans, start = [], 0
    while start < num_pieces:  # run_squad.py's loop
        length = min(num_pieces - start, max_tokens)
        spans.append((start, length))
        if start + length == num_pieces:
            break
        start += min(length, doc_stride)
    return spans or [(0, 0)]


@pytest.mark.parametrize("doc_stride", [2, 3, 100])
def test_question_context_windows_follow_run_squad(doc_stride):
    context = "one two three four five six seven eight nine ten"
    preprocessor = TextPreprocessor(read_vocab(VOCAB), do_lower_case=True, max_seq_length=12)
    windows = question_context_windows(
        preprocessor, tf.constant(["what city?", "who"]), tf.constant([context, ""]),
        max_query_length=3, doc_stride=doc_stride)
    num_pieces = len(hf_tokenizer().encode(context, add_special_tokens=False).ids)  # 12: "nine" is 3
    spans = _run_squad_spans(num_pieces, 12 - 3 - 3, doc_stride)
    assert windows["example"].numpy().tolist() == [0] * len(spans) + [1]
    assert windows["window_start"].numpy().tolist() == [s for s, _ in spans] + [0]
    assert windows["window_length"].numpy().tolist() == [n for _, n in spans] + [0]
    token_ids = windows["inputs"]["token_ids"].numpy()
    assert token_ids[1, :5].tolist() == [101, 2054, 2103, 1029, 102]  # [CLS] what city ? [SEP]
    assert token_ids[-1, :4].tolist() == [101, 2040, 102, 102]  # [CLS] who [SEP] [SEP]
