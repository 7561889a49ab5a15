"""`Sentence`: one token classification example, its words, tags and the text they came from."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Sentence:
    """One example: words, one tag per word, and where the words are in their text.

    A sentence read from words (a CoNLL file, `tokens`/`ner_tags` rows, word
    lists) has no text of its own: its text is its words joined by single
    spaces, and predictions' character offsets point into that. A sentence
    read from text (a spans file, a str input) keeps the text and each word's
    characters in it.

    Args:
        words: list of str.
        tags: list of str, one per word; None for an input to predict.
        text: str or None. The text the words were found in; None: the words
            joined by single spaces.
        offsets: list of `(start, end)` or None. Each word's characters in
            `text` (`text[start:end]` is the word); None with `text` None.
        source: str. Where it was read (`train.conll:12`, `dev.jsonl:3`),
            named in errors. Not compared.

    Example:

    >>> Sentence(["EU", "rejects"], ["B-ORG", "O"]).text_and_offsets()
    ('EU rejects', [(0, 2), (3, 10)])
    """

    words: list[str]
    tags: list[str] | None
    text: str | None = None
    offsets: list[tuple[int, int]] | None = None
    source: str = dataclasses.field(default="", compare=False)

    def text_and_offsets(self) -> tuple[str, list[tuple[int, int]]]:
        """The text and each word's `(start, end)` in it (the words joined by spaces when
        the sentence has no text)."""
        if self.text is not None:
            return self.text, list(self.offsets)
        offsets, start = [], 0
        for word in self.words:
            offsets.append((start, start + len(word)))
            start += len(word) + 1
        return " ".join(self.words), offsets

    def window(self, start: int, end: int) -> "Sentence":
        """Words `start:end` (and their tags) as a sentence of their own, for long sentences."""
        return Sentence(self.words[start:end], None if self.tags is None else self.tags[start:end],
                        source=self.source)
