"""Entity-level metrics as `conlleval` computes them (and seqeval's default mode), and a baseline.

An entity counts only when its type and exact span match; IOB1, IOB2, IOBES
and BILOU all work. Word accuracy and the baseline of a model that learned
nothing beyond each word's most frequent tag sit beside them.
"""

from __future__ import annotations

import collections
from typing import Sequence

from kbert.layers.crf import split_tag
from kbert.tasks.metrics import f1_from_counts


def entity_spans(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """The entities of one tag sequence, as conlleval finds them.

    Tags are `O`, `B-TYPE`, `I-TYPE` (`E-` and `S-` of IOBES are handled as
    seqeval's conlleval-compatible default mode does; BILOU's `L-` and `U-` as
    `E-` and `S-`). IOB1 (an entity starts with `I-` unless it follows one of
    the same type) and IOB2 (every entity starts with `B-`) both work; an
    `I-X` after `O` or after another type starts an entity. A tag without a
    prefix counts as `I-` of its own type (part-of-speech tags: a run of one
    tag is one entity).

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
    labels: Sequence[Sequence[str]], predictions: Sequence[Sequence[str]], per_type: bool = False
) -> dict:
    """Entity-level precision, recall and F1 with exact span match (CoNLL NER).

    Args:
        labels: gold tag sequences, one per sentence.
        predictions: predicted tag sequences, same lengths.
        per_type: bool. Also give `per_type`: entity type -> `precision`,
            `recall`, `f1`, `support` (gold entities), as seqeval's
            `classification_report`. Defaults to False.

    Returns:
        dict with `precision`, `recall`, `f1` (micro-averaged over entities;
        each 0.0 when its denominator is 0, e.g. no predicted entities), and
        `per_type` when asked for.

    Example:

    >>> entity_f1([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])["f1"]
    0.0
    """
    if len(labels) != len(predictions):
        raise ValueError(f"{len(labels)} gold sentences but {len(predictions)} predicted.")
    counts = collections.defaultdict(lambda: [0, 0, 0])  # type -> correct, predicted, gold
    for index, (gold_tags, predicted_tags) in enumerate(zip(labels, predictions)):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(
                f"sentence {index}: {len(gold_tags)} gold tags but {len(predicted_tags)} predicted."
            )
        gold_spans = entity_spans(gold_tags)
        predicted_spans = entity_spans(predicted_tags)
        for kind, *_ in gold_spans & predicted_spans:
            counts[kind][0] += 1
        for kind, *_ in predicted_spans:
            counts[kind][1] += 1
        for kind, *_ in gold_spans:
            counts[kind][2] += 1
    results = _scores(*(sum(c[i] for c in counts.values()) for i in range(3)))
    if per_type:
        results["per_type"] = {kind: {**_scores(*counts[kind]), "support": counts[kind][2]}
                               for kind in sorted(counts)}
    return results


def word_accuracy(labels: Sequence[Sequence[str]], predictions: Sequence[Sequence[str]]) -> float:
    """The share of words whose predicted tag is the gold one (seqeval's `accuracy_score`).

    Args:
        labels: gold tag sequences.
        predictions: predicted tag sequences, same lengths.

    Returns:
        float; 0.0 with no words.
    """
    pairs = [(g, p) for gold, predicted in zip(labels, predictions) for g, p in zip(gold, predicted)]
    return sum(g == p for g, p in pairs) / len(pairs) if pairs else 0.0


class MajorityTagger:
    """The baseline: each word's most frequent tag in the training data.

    The CoNLL-2003 shared task's baseline (entities seen in training, tagged
    as they mostly were there): what a model that memorised the training
    words' tags and learned nothing else reaches. A word not seen in training
    gets the most frequent tag of all (`O`, usually).

    Args:
        words: word lists of the training sentences.
        tags: their tag lists.

    Example:

    >>> tagger = MajorityTagger([["EU", "rejects"]], [["B-ORG", "O"]])
    >>> tagger.tag([["EU", "calls"]]), tagger.describe()
    ([['B-ORG', 'O']], "each word's most frequent training tag ('O' for a word not in training)")
    """

    def __init__(self, words: Sequence[Sequence[str]], tags: Sequence[Sequence[str]]):
        per_word = collections.defaultdict(collections.Counter)
        overall = collections.Counter()
        for sentence_words, sentence_tags in zip(words, tags):
            for word, tag in zip(sentence_words, sentence_tags):
                per_word[word][tag] += 1
                overall[tag] += 1
        # Counter.most_common keeps first-seen order among ties: the choice is deterministic.
        self.default = overall.most_common(1)[0][0] if overall else "O"
        self.word_tags = {word: counts.most_common(1)[0][0] for word, counts in per_word.items()}

    def tag(self, words: Sequence[Sequence[str]]) -> list[list[str]]:
        """The baseline's tags of each sentence's words."""
        return [[self.word_tags.get(word, self.default) for word in sentence] for sentence in words]

    def describe(self) -> str:
        """What the baseline predicts, for the summary."""
        return (f"each word's most frequent training tag ({self.default!r} for a word not in "
                "training)")


def _scores(correct: int, predicted: int, gold: int) -> dict[str, float]:
    return {"precision": correct / predicted if predicted else 0.0,
            "recall": correct / gold if gold else 0.0,
            "f1": f1_from_counts(correct, predicted, gold)}


def _split_tag(label: str) -> tuple[str, str]:
    # conlleval: "B-PER" -> ("B", "PER"); "O" -> ("O", ""); a bare type
    # without a prefix counts as "I". BILOU's L and U are IOBES's E and S.
    if label in ("O", ""):
        return "O", ""
    prefix, kind = split_tag(label)
    return {"": "I", "L": "E", "U": "S"}.get(prefix, prefix), kind


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
