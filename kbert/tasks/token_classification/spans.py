"""Character spans <-> IOB2 tags on words: how spaCy's and doccano's exports become tags, and back.

An annotation tool exports a text and its entities as `[start, end, label]`
character spans (spaCy's `{"text", "entities"}`, doccano's `{"text",
"label"}`). Training needs a tag per word, so each span must begin where a
word begins and end where a word ends (words as `kbert.data.words.word_spans`
finds them); its first word is tagged `B-<label>` and the others `I-<label>`
(IOB2), every other word `O`. Predictions go the other way: the entities of a
tag sequence (`kbert.tasks.token_classification.metrics.entity_spans`, any
scheme) back to character spans of the text.

spaCy's `offsets_to_biluo_tags` marks a span off the word boundaries with `-` and
trains on the rest; here such a span is refused, naming the file, line and
word, since a silently dropped entity teaches the model it is not one.
"""

from __future__ import annotations

from typing import Any, Sequence

from kbert.tasks.token_classification.metrics import entity_spans


def tags_from_spans(text: str, offsets: Sequence[tuple[int, int]], spans: Sequence[Any],
                    source: str) -> list[str]:
    """IOB2 tags of the words of `text` from character spans.

    Whitespace at either end of a span is left out first (annotation tools
    often include a trailing space); what remains must start at a word's first
    character and end at a word's last.

    Args:
        text: str.
        offsets: `(start, end)` of each word in `text`, in order.
        spans: sequence of `[start, end, label]` lists (spaCy, doccano) or
            dicts with `start`/`start_offset`, `end`/`end_offset` and `label`
            (doccano's and Label Studio's objects). `end` is exclusive.
        source: str. The row (`train.jsonl:3`), named in errors.

    Returns:
        list of str: one IOB2 tag per word.

    Raises:
        ValueError: a span that is malformed, outside the text, not on word
            boundaries, or overlapping another; the message names `source`.

    Example:

    >>> tags_from_spans("I flew to Paris.", [(0, 1), (2, 6), (7, 9), (10, 15), (15, 16)],
    ...                 [[10, 15, "LOC"]], "train.jsonl:1")
    ['O', 'O', 'O', 'B-LOC', 'O']
    """
    word_at_start = {start: index for index, (start, _) in enumerate(offsets)}
    word_at_end = {end: index for index, (_, end) in enumerate(offsets)}
    tags = ["O"] * len(offsets)
    owner: list[tuple[int, int, str] | None] = [None] * len(offsets)
    for span in spans:
        start, end, label = _span(span, text, source)
        described = f"entity [{start}, {end}, {label!r}] {text[start:end]!r}"
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if start == end:
            raise ValueError(f"{source}: {described} covers no word (only whitespace).")
        for edge, words, where in ((start, word_at_start, "starts"), (end, word_at_end, "ends")):
            if edge not in words:
                raise ValueError(f"{source}: {described} does not fall on word boundaries: it "
                                 f"{where} inside {_word_around(edge, offsets, text)}. "
                                 "Fix the span to cover whole words.")
        first, last = word_at_start[start], word_at_end[end]
        for index in range(first, last + 1):
            if owner[index] is not None:
                other = owner[index]
                raise ValueError(f"{source}: {described} overlaps entity [{other[0]}, "
                                 f"{other[1]}, {other[2]!r}] {text[other[0]:other[1]]!r}; "
                                 "token classification gives each word one tag.")
            owner[index] = (start, end, label)
            tags[index] = ("B-" if index == first else "I-") + label
    return tags


def entities_from_tags(tags: Sequence[str], text: str, offsets: Sequence[tuple[int, int]],
                       scores: Sequence[float] | None = None) -> list[dict[str, Any]]:
    """The entities of a tag sequence as character spans of `text`, in text order.

    Entities are found as conlleval finds them (`entity_spans`: IOB2, IOB1,
    IOBES, BILOU); each is `{"start", "end", "label", "text", "score"}` with
    `text[start:end] == entity["text"]`.

    Args:
        tags: one tag per word.
        text: str. The text the words are in.
        offsets: `(start, end)` of each word in `text`.
        scores: one float per word (the probability of its tag), or None.
            An entity's score is the mean of its words' (Hugging Face's
            `aggregation_strategy="simple"`). None: 1.0.

    Returns:
        list of dict.

    Example:

    >>> entities_from_tags(["B-PER", "I-PER", "O"], "Ada Lovelace wrote", [(0, 3), (4, 12), (13, 18)])
    [{'start': 0, 'end': 12, 'label': 'PER', 'text': 'Ada Lovelace', 'score': 1.0}]
    """
    entities = []
    for label, first, last in sorted(entity_spans(tags), key=lambda span: span[1]):
        start, end = offsets[first][0], offsets[last][1]
        score = 1.0 if scores is None else float(sum(scores[first:last + 1]) / (last + 1 - first))
        entities.append({"start": start, "end": end, "label": label, "text": text[start:end],
                         "score": score})
    return entities


def _span(span: Any, text: str, source: str) -> tuple[int, int, str]:
    """`(start, end, label)` of one span as a user wrote it, checked against the text."""
    if isinstance(span, dict):
        start = span.get("start", span.get("start_offset"))
        end = span.get("end", span.get("end_offset"))
        label = span.get("label")
    elif isinstance(span, (list, tuple)) and len(span) == 3:
        start, end, label = span
    else:
        raise ValueError(f"{source}: entity {span!r} is not [start, end, label] (or an object "
                         "with start, end and label).")
    if not (isinstance(start, int) and isinstance(end, int)) or isinstance(start, bool):
        raise ValueError(f"{source}: entity {span!r}: start and end must be integer character "
                         "offsets.")
    if not isinstance(label, str) or not label.strip():
        raise ValueError(f"{source}: entity {span!r} has no label (a non-empty string).")
    if not 0 <= start < end <= len(text):
        raise ValueError(f"{source}: entity {span!r} is not inside the text's {len(text)} "
                         "characters (0 <= start < end <= length, end exclusive).")
    return start, end, label


def _word_around(position: int, offsets: Sequence[tuple[int, int]], text: str) -> str:
    """The word a span's edge cuts into, described for the error."""
    for start, end in offsets:
        if start < position < end:
            return f"the word {text[start:end]!r} (characters {start}-{end})"
    return "a word"
