"""Fine-tuning metrics with the official semantics, in plain numpy and Python.

Each function takes gold values first, then predictions, like scikit-learn.
They are hand-written (rather than pulling scikit-learn, scipy and seqeval into
the install) because each is a few lines and the semantics must match the
reference scripts exactly:

- `accuracy`, `f1_score` (binary, positive class 1), `matthews_corrcoef`:
  as scikit-learn computes them (GLUE's scorer uses scikit-learn).
- `pearson_corrcoef`, `spearman_corrcoef`: as scipy computes them (average
  ranks for ties).
- `entity_f1`: as `conlleval` (and seqeval's default mode) computes it: an
  entity counts only when type and exact span match; IOB1 and IOB2 both work.
- `squad_exact_match`, `squad_f1`: the official SQuAD v1.1/v2.0 evaluation,
  with its answer normalization (lowercase, strip punctuation and the articles
  a/an/the, collapse whitespace).
"""

from __future__ import annotations

import collections
import re
import string
from typing import Iterable, Mapping, Sequence

import numpy as np


def accuracy(labels: Sequence, predictions: Sequence) -> float:
    """Fraction of predictions equal to the labels.

    Args:
        labels: sequence of gold labels.
        predictions: sequence of predicted labels, same length.

    Returns:
        float in [0, 1]; 0.0 for empty input.

    Example:

    >>> accuracy([1, 0, 1], [1, 1, 1])
    0.666...
    """
    labels, predictions = _same_length(labels, predictions)
    if labels.size == 0:
        return 0.0
    return float(np.mean(labels == predictions))


def f1_score(labels: Sequence[int], predictions: Sequence[int], positive: int = 1) -> float:
    """Binary F1 of the positive class (MRPC, QQP).

    Args:
        labels: sequence of gold labels.
        predictions: sequence of predicted labels.
        positive: the positive class. Defaults to 1.

    Returns:
        float in [0, 1]; 0.0 when there are no true positives (as scikit-learn
        with `zero_division=0`).

    Example:

    >>> f1_score([1, 1, 0, 0], [1, 0, 1, 0])
    0.5
    """
    labels, predictions = _same_length(labels, predictions)
    true_positives = np.sum((predictions == positive) & (labels == positive))
    predicted = np.sum(predictions == positive)
    actual = np.sum(labels == positive)
    return _f1(true_positives, predicted, actual)


def matthews_corrcoef(labels: Sequence[int], predictions: Sequence[int]) -> float:
    """Matthews correlation coefficient for binary labels (CoLA).

    Args:
        labels: sequence of gold labels in {0, 1}.
        predictions: sequence of predicted labels in {0, 1}.

    Returns:
        float in [-1, 1]; 0.0 when any marginal is empty (e.g. only one class
        predicted), as scikit-learn returns.

    Example:

    >>> matthews_corrcoef([1, 1, 0, 0], [1, 0, 0, 0])
    0.577...
    """
    labels, predictions = _same_length(labels, predictions)
    tp = float(np.sum((predictions == 1) & (labels == 1)))
    tn = float(np.sum((predictions != 1) & (labels != 1)))
    fp = float(np.sum((predictions == 1) & (labels != 1)))
    fn = float(np.sum((predictions != 1) & (labels == 1)))
    denominator = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    if denominator == 0:
        return 0.0
    return float((tp * tn - fp * fn) / np.sqrt(denominator))


def pearson_corrcoef(labels: Sequence[float], predictions: Sequence[float]) -> float:
    """Pearson correlation (STS-B).

    Args:
        labels: sequence of gold scores.
        predictions: sequence of predicted scores.

    Returns:
        float in [-1, 1]; 0.0 when either side is constant (undefined).

    Example:

    >>> pearson_corrcoef([1.0, 2.0, 3.0], [2.0, 4.0, 7.0])
    0.993...
    """
    labels, predictions = _same_length(labels, predictions)
    x = labels.astype(np.float64) - np.mean(labels)
    y = predictions.astype(np.float64) - np.mean(predictions)
    denominator = np.sqrt(np.sum(x * x) * np.sum(y * y))
    if denominator == 0:
        return 0.0
    return float(np.sum(x * y) / denominator)


def spearman_corrcoef(labels: Sequence[float], predictions: Sequence[float]) -> float:
    """Spearman rank correlation (STS-B), ties given their average rank.

    Args:
        labels: sequence of gold scores.
        predictions: sequence of predicted scores.

    Returns:
        float in [-1, 1]; 0.0 when either side is constant.

    Example:

    >>> spearman_corrcoef([1.0, 2.0, 3.0], [2.0, 4.0, 7.0])
    1.0
    """
    labels, predictions = _same_length(labels, predictions)
    return pearson_corrcoef(_average_ranks(labels), _average_ranks(predictions))


def entity_spans(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """The entities of one tag sequence, as conlleval finds them.

    Tags are `O`, `B-TYPE`, `I-TYPE` (`E-` and `S-` of IOBES are handled as
    seqeval's conlleval-compatible default mode does). IOB1 (an entity starts with `I-`
    unless it follows one of the same type) and IOB2 (every entity starts with
    `B-`) both work; an `I-X` after `O` or after another type starts an entity.

    Args:
        tags: sequence of str.

    Returns:
        set of `(type, first_index, last_index)`, inclusive.

    Example:

    >>> sorted(entity_spans(["B-PER", "I-PER", "O", "I-LOC"]))
    [('LOC', 3, 3), ('PER', 0, 1)]
    """
    spans = set()
    start = None
    previous_tag, previous_type = "O", ""
    for index, label in enumerate(list(tags) + ["O"]):
        tag, kind = _split_tag(label)
        if start is not None and _end_of_chunk(previous_tag, tag, previous_type, kind):
            spans.add((previous_type, start, index - 1))
            start = None
        if _start_of_chunk(previous_tag, tag, previous_type, kind):
            start = index
        previous_tag, previous_type = tag, kind
    return spans


def entity_f1(
    labels: Sequence[Sequence[str]], predictions: Sequence[Sequence[str]]
) -> dict[str, float]:
    """Entity-level precision, recall and F1 with exact span match (CoNLL NER).

    Args:
        labels: gold tag sequences, one per sentence.
        predictions: predicted tag sequences, same lengths.

    Returns:
        dict with `precision`, `recall`, `f1` (micro-averaged over entities;
        each 0.0 when its denominator is 0, e.g. no predicted entities).

    Example:

    >>> entity_f1([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])["f1"]
    0.0
    """
    if len(labels) != len(predictions):
        raise ValueError(f"{len(labels)} gold sentences but {len(predictions)} predicted.")
    correct = gold = predicted = 0
    for index, (gold_tags, predicted_tags) in enumerate(zip(labels, predictions)):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(
                f"sentence {index}: {len(gold_tags)} gold tags but {len(predicted_tags)} predicted."
            )
        gold_spans = entity_spans(gold_tags)
        predicted_spans = entity_spans(predicted_tags)
        correct += len(gold_spans & predicted_spans)
        gold += len(gold_spans)
        predicted += len(predicted_spans)
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    return {"precision": precision, "recall": recall, "f1": _f1(correct, predicted, gold)}


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


_PUNCTUATION = set(string.punctuation)


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


def _f1(correct, predicted, actual) -> float:
    if correct == 0:
        return 0.0
    precision = correct / predicted
    recall = correct / actual
    return float(2 * precision * recall / (precision + recall))


def _same_length(labels, predictions):
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.shape != predictions.shape:
        raise ValueError(
            f"labels have shape {labels.shape} but predictions {predictions.shape}; "
            "pass one prediction per label."
        )
    return labels, predictions


def _average_ranks(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=np.float64)
    sorted_values = values[order]
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2.0 + 1.0
        start = end + 1
    return ranks


def _split_tag(label: str) -> tuple[str, str]:
    # conlleval: "B-PER" -> ("B", "PER"); "O" -> ("O", ""); a bare type
    # without a prefix counts as "I".
    if label in ("O", ""):
        return "O", ""
    if len(label) > 2 and label[1] == "-":
        return label[0], label[2:]
    return "I", label


def _end_of_chunk(previous_tag, tag, previous_type, kind) -> bool:
    # conlleval's endOfChunk, as seqeval ports it.
    if previous_tag in ("E", "S"):
        return True
    if previous_tag == "B" and tag in ("B", "S", "O"):
        return True
    if previous_tag == "I" and tag in ("B", "S", "O"):
        return True
    if previous_tag not in ("O", ".") and previous_type != kind:
        return True
    return False


def _start_of_chunk(previous_tag, tag, previous_type, kind) -> bool:
    # conlleval's startOfChunk, as seqeval ports it.
    if tag in ("B", "S"):
        return True
    if previous_tag in ("E", "S") and tag in ("E", "I"):
        return True
    if previous_tag == "O" and tag in ("E", "I"):
        return True
    if tag not in ("O", ".") and previous_type != kind:
        return True
    return False
