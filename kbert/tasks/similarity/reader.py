"""Sentence pairs for the similarity task: GLUE STS-B TSV or a pairs JSONL.

A pairs JSONL has one pair a line, in sentence-transformers' two layouts:

    {"sentence1": "...", "sentence2": "...", "score": 0.8}      graded pair, score in [0, 1]
    {"anchor": "...", "positive": "...", "negative": "..."}      contrastive pair (negative optional)

STS-B's 0-5 scores are divided by 5 into [0, 1], the range the cosine loss
compares against.
"""

from __future__ import annotations

import dataclasses

from kbert.files import iter_jsonl
from kbert.tasks.glue.reader import read_glue

STSB_MAX_SCORE = 5.0


@dataclasses.dataclass(frozen=True)
class PairExample:
    """One sentence pair.

    Args:
        guid: str. Where it came from (`file:line` or the STS-B row).
        text_a: str. First sentence (anchor).
        text_b: str. Second sentence (positive).
        score: float or None. Graded similarity in [0, 1].
        negative: str or None. A hard negative for `text_a`.
    """

    guid: str
    text_a: str
    text_b: str
    score: float | None = None
    negative: str | None = None


def read_stsb(data_dir: str, split: str) -> list[PairExample]:
    """GLUE STS-B (`train.tsv`, `dev.tsv`, `test.tsv`), scores scaled to [0, 1].

    Args:
        data_dir: str. The STS-B folder.
        split: str. `train`, `dev` or `test` (test has no scores).

    Returns:
        list of `PairExample`.
    """
    return [PairExample(e.guid, e.text_a, e.text_b,
                        None if e.label is None else float(e.label) / STSB_MAX_SCORE)
            for e in read_glue(data_dir, "sts-b", split)]


def _text(value: dict, key: str, path: str, number: int) -> str:
    item = value.get(key)
    if not isinstance(item, str):
        raise ValueError(f"{path}:{number}: {key!r} must be a string, got "
                         f"{type(item).__name__}.")
    return item


def read_pairs_jsonl(path: str) -> list[PairExample]:
    """A pairs JSONL (graded `sentence1`/`sentence2`/`score` or `anchor`/`positive`[/`negative`]).

    Args:
        path: str.

    Returns:
        list of `PairExample`.

    Raises:
        ValueError: a line that is not JSON, has neither layout, or a score
            outside [0, 1]; the message names the file and line.

    Example:

    >>> read_pairs_jsonl("nli_pairs.jsonl")[0].negative
    'A man is sleeping.'
    """
    examples = [_pair(value, path, number) for number, value in iter_jsonl(path)]
    if not examples:
        raise ValueError(f"{path} holds no pairs.")
    return examples


def _pair(value: dict, path: str, number: int) -> PairExample:
    guid = f"{path}:{number}"
    if "anchor" in value:
        negative = _text(value, "negative", path, number) if "negative" in value else None
        return PairExample(guid, _text(value, "anchor", path, number),
                           _text(value, "positive", path, number), None, negative)
    if "sentence1" in value:
        score = value.get("score")
        if score is not None:
            if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 1:
                raise ValueError(f"{path}:{number}: score {score!r} is not a number in [0, 1]; "
                                 "scale graded scores to [0, 1] (STS-B: score / 5).")
            score = float(score)
        return PairExample(guid, _text(value, "sentence1", path, number),
                           _text(value, "sentence2", path, number), score)
    raise ValueError(f"{path}:{number}: expected 'sentence1', 'sentence2'[, 'score'] or 'anchor', "
                     f"'positive'[, 'negative']; got keys {sorted(value)}.")
