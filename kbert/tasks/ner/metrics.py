"""Entity-level NER metrics as `conlleval` computes them (and seqeval's default mode).

An entity counts only when its type and exact span match; IOB1 and IOB2 both work.
"""

from __future__ import annotations

from typing import Sequence

from kbert.tasks.metrics import f1_from_counts


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
    return {"precision": precision, "recall": recall, "f1": f1_from_counts(correct, predicted, gold)}


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
