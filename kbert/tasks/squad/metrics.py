"""The official SQuAD v1.1/v2.0 evaluation: exact match and token F1.

Answers are normalized as the official script does (lowercase, strip punctuation
and the articles a/an/the, collapse whitespace).
"""

from __future__ import annotations

import collections
import re
import string
from typing import Iterable, Mapping, Sequence


_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """The official SQuAD answer normalization.

    Lowercases, removes punctuation, removes the articles `a`, `an`, `the`
    and collapses whitespace.

    Args:
        text: str.

    Returns:
        The normalized str.

    Example:

    >>> normalize_answer("The  Eiffel-Tower!")
    'eiffeltower'
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def squad_exact_match(gold_answers: Iterable[str], prediction: str) -> float:
    """1.0 if the normalized prediction equals any normalized gold answer.

    Args:
        gold_answers: the gold answer texts; empty (or only `""`) means the
            question has no answer (SQuAD 2.0).
        prediction: the predicted text (`""` = no answer).

    Returns:
        1.0 or 0.0.
    """
    return max(float(normalize_answer(g) == normalize_answer(prediction))
               for g in _gold_or_empty(gold_answers))


def squad_f1(gold_answers: Iterable[str], prediction: str) -> float:
    """Best token-overlap F1 of the prediction against the gold answers.

    As the official v2.0 script: when either side normalizes to no tokens the
    score is 1.0 if both do, else 0.0.

    Args:
        gold_answers: the gold answer texts (empty = no answer).
        prediction: the predicted text.

    Returns:
        float in [0, 1].
    """
    return max(_token_f1(g, prediction) for g in _gold_or_empty(gold_answers))


def squad_metrics(
    gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str]
) -> dict[str, float]:
    """Exact match and F1 over a dataset, in percent, as the official script.

    Args:
        gold: question id -> gold answer texts (empty list: no answer).
        predictions: question id -> predicted text. A question without a
            prediction scores 0 (the official script warns and does the same).

    Returns:
        dict with `exact_match`, `f1` (percent) and `total`.

    Example:

    >>> squad_metrics({"q1": ["the cat"]}, {"q1": "Cat"})
    {'exact_match': 100.0, 'f1': 100.0, 'total': 1}
    """
    exact = f1 = 0.0
    for qid, answers in gold.items():
        if qid in predictions:
            exact += squad_exact_match(answers, predictions[qid])
            f1 += squad_f1(answers, predictions[qid])
    total = len(gold)
    scale = 100.0 / total if total else 0.0
    return {"exact_match": exact * scale, "f1": f1 * scale, "total": total}


def _gold_or_empty(gold_answers: Iterable[str]) -> list[str]:
    answers = [a for a in gold_answers if normalize_answer(a)]
    return answers or [""]


def _token_f1(gold: str, prediction: str) -> float:
    gold_tokens = normalize_answer(gold).split()
    predicted_tokens = normalize_answer(prediction).split()
    if not gold_tokens or not predicted_tokens:
        return float(gold_tokens == predicted_tokens)
    common = collections.Counter(gold_tokens) & collections.Counter(predicted_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(predicted_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)
