"""Start/end logits of SQuAD windows -> answer texts, as `run_squad.py`'s `write_predictions`.

Answers are cut from the context by the characters each wordpiece came from,
so a predicted span is always an exact substring of the context (the original
needed a heuristic to undo lower casing and WordPiece).
"""

from __future__ import annotations

import collections
import math
from typing import Sequence

import numpy as np

from kbert.tasks.squad.reader import SquadExample
from kbert.tasks.squad.features import SquadFeature


def _best_indexes(logits: np.ndarray, n_best_size: int) -> list[int]:
    return [int(i) for i in np.argsort(-logits, kind="stable")[:n_best_size]]


def _softmax(scores: list[float]) -> list[float]:
    if not scores:
        return []
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = sum(exps)
    return [e / total for e in exps]


def postprocess_squad(
    examples: Sequence[SquadExample],
    features: Sequence[SquadFeature],
    start_logits: Sequence[np.ndarray],
    end_logits: Sequence[np.ndarray],
    n_best_size: int = 20,
    max_answer_length: int = 30,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
) -> tuple[dict[str, str], dict[str, list[dict]], dict[str, float]]:
    """Picks each question's answer from its windows' logits.

    A candidate span starts and ends inside the context, ends after it starts,
    is at most `max_answer_length` wordpieces long and starts where its window
    gives the most context; its score is `start_logit + end_logit`. With
    `version_2_with_negative`, the question gets no answer (`""`) when the
    best `[CLS]` score exceeds the best span's score by more than
    `null_score_diff_threshold`.

    Args:
        examples: the `SquadExample`s.
        features: their `SquadFeature`s.
        start_logits: per feature, a float array over its positions.
        end_logits: likewise.
        n_best_size: int. Candidates kept per window and per question.
            Defaults to 20.
        max_answer_length: int. Defaults to 30.
        version_2_with_negative: bool. Defaults to False.
        null_score_diff_threshold: float. Defaults to 0.0.

    Returns:
        `(predictions, nbest, null_odds)`: question id -> answer text (the
        official `predictions.json`), id -> list of `{"text", "probability",
        "start_logit", "end_logit"}`, and id -> null score minus best span
        score (SQuAD 2.0 only, else empty).

    Example:

    >>> predictions, nbest, _ = kbert.tasks.squad.postprocessing.postprocess_squad(
    ...     examples, features, start_logits, end_logits)
    """
    by_example = collections.defaultdict(list)
    for feature_index, feature in enumerate(features):
        by_example[feature.example_index].append(feature_index)

    predictions, nbest, null_odds = {}, {}, {}
    for example_index, example in enumerate(examples):
        candidates = []
        null_score = None
        null_logits = (0.0, 0.0)
        for feature_index in by_example.get(example_index, []):
            feature = features[feature_index]
            starts = np.asarray(start_logits[feature_index], dtype=np.float64)
            ends = np.asarray(end_logits[feature_index], dtype=np.float64)
            if version_2_with_negative:
                score = starts[0] + ends[0]
                if null_score is None or score < null_score:
                    null_score, null_logits = score, (starts[0], ends[0])
            for start in _best_indexes(starts, n_best_size):
                for end in _best_indexes(ends, n_best_size):
                    if start not in feature.token_to_char or end not in feature.token_to_char:
                        continue
                    if end < start or end - start + 1 > max_answer_length:
                        continue
                    if not feature.token_is_max_context.get(start, False):
                        continue
                    candidates.append((starts[start] + ends[end], starts[start], ends[end],
                                       feature.token_to_char[start][0],
                                       feature.token_to_char[end][1]))
        candidates.sort(key=lambda c: c[0], reverse=True)
        entries, seen = [], set()
        for score, start_logit, end_logit, char_start, char_end in candidates:
            text = example.context[char_start:char_end]
            if text in seen:
                continue
            seen.add(text)
            entries.append({"text": text, "score": score,
                            "start_logit": float(start_logit), "end_logit": float(end_logit)})
            if len(entries) >= n_best_size:
                break
        if version_2_with_negative and null_score is not None and \
                not any(entry["text"] == "" for entry in entries):
            entries.append({"text": "", "score": null_score,
                            "start_logit": float(null_logits[0]),
                            "end_logit": float(null_logits[1])})
            entries.sort(key=lambda e: e["score"], reverse=True)
            entries = entries[:n_best_size]
        if not entries:
            entries = [{"text": "", "score": 0.0, "start_logit": 0.0, "end_logit": 0.0}]
        for entry, probability in zip(entries, _softmax([e["score"] for e in entries])):
            entry["probability"] = probability
        best_span = next((e for e in entries if e["text"]), None)
        if not version_2_with_negative:
            predictions[example.qas_id] = best_span["text"] if best_span else ""
        else:
            best_span_score = best_span["score"] if best_span else -math.inf
            difference = (null_score if null_score is not None else math.inf) - best_span_score
            null_odds[example.qas_id] = float(difference)
            predictions[example.qas_id] = (
                "" if best_span is None or difference > null_score_diff_threshold
                else best_span["text"])
        nbest[example.qas_id] = [
            {key: (float(value) if key != "text" else value) for key, value in entry.items()
             if key != "score"}
            for entry in entries
        ]
    return predictions, nbest, null_odds
