"""How a WordPiece vocabulary covers a corpus: each word's count and pieces (`count_words`).

What `kbert-vocab extend` chooses its words from (`frequent_split_words`: the
frequent words the vocabulary splits into several pieces; `choose_split_words`
also says how many passed the frequency floor) and how it measures tokens per
word before and after. Words are BERT's, found by the tokenizer
pre-training and serving use, so a word here is a word there.

Example:

>>> counts = count_words("domain/*.txt", load_tokenizer("minilm/"))
>>> frequent_split_words(counts, max_new_tokens=2)
['myocardial', 'troponin']
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Sequence

import numpy as np
import tensorflow as tf

from kbert.data.text_files import expand_file_patterns
from kbert.data.text_files import iter_lines
from kbert.data.tokenizers.bert_wordpiece_tokenizer import normalize_text
from kbert.data.tokenizers.tokenizer import Tokenizer
from kbert.data.tokenizers.wordpiece_tokenizer import WordpieceTokenizer

# tensorflow-text's WordPiece gives [UNK] for a longer word (`max_bytes_per_word`).
MAX_WORD_BYTES = 100
_LINES_PER_BATCH = 4096


@dataclasses.dataclass
class WordCounts:
    """How often each word of a corpus occurs and what a vocabulary makes of it.

    Words are BERT's: the text normalized as the model's tokenizer does it
    (lower cased and accents stripped for an uncased model), split at
    whitespace, punctuation and CJK characters.

    Args:
        counts: `collections.Counter`. Word -> occurrences.
        pieces: dict. Word -> the ids the vocabulary splits it into
            (one `[UNK]` for a word it cannot spell).
        num_words: int. Words in the corpus.
        num_pieces: int. WordPiece tokens in the corpus.
    """

    counts: collections.Counter
    pieces: dict[str, tuple[int, ...]]
    num_words: int = 0
    num_pieces: int = 0

    @property
    def tokens_per_word(self) -> float:
        """WordPiece tokens per word over the corpus."""
        return self.num_pieces / self.num_words if self.num_words else 0.0


def count_words(files: str | Sequence[str], tokenizer: Tokenizer) -> WordCounts:
    """Counts a corpus's words and splits each with a WordPiece tokenizer.

    Args:
        files: str or list of str. Text files (comma-separated names or globs in a str).
        tokenizer: `WordpieceTokenizer`. The vocabulary and its lower casing
            (e.g. a model directory's `tokenizer`).

    Returns:
        The `WordCounts`.

    Raises:
        ValueError: the tokenizer is not WordPiece.

    Example:

    >>> counts = count_words("domain/*.txt", load_tokenizer("minilm/"))
    >>> counts.counts.most_common(1), counts.tokens_per_word
    ([('the', 10531)], 1.31)
    """
    counter = WordCounter(tokenizer)
    for path in expand_file_patterns(files, "corpus"):
        batch = []
        for _, text, _, _ in iter_lines(path):
            if text:
                batch.append(text)
            if len(batch) == _LINES_PER_BATCH:
                counter.add(batch)
                batch = []
        counter.add(batch)
    return counter.result


def frequent_split_words(counts: WordCounts, max_new_tokens: int, min_count: int = 2) -> list[str]:
    """The most frequent words the vocabulary splits into several pieces.

    Words it cannot spell (`[UNK]`) have no pieces to start a row from and are
    left out, as are words too long for WordPiece (over 100 bytes).

    Args:
        counts: `WordCounts` of the domain corpus under the current vocabulary.
        max_new_tokens: int. How many words at most.
        min_count: int. Occurrences a word needs. Defaults to 2.

    Returns:
        The words, most frequent first (ties in alphabetical order).
    """
    return _split_words(counts, min_count)[:max_new_tokens]


@dataclasses.dataclass(frozen=True)
class SplitWordChoice:
    """The words `kbert-vocab extend --corpus` adds, and how many could have been.

    Args:
        words: list of str. `frequent_split_words`' choice, most frequent first.
        candidates: int. Split words seen at least `min_count` times: what
            `max_new_tokens` chose from.
        max_new_tokens: int. How many were asked for.
        min_count: int. The frequency floor.
        least_count: int. How often the least frequent word added occurs (0: none added).
    """

    words: list[str]
    candidates: int
    max_new_tokens: int
    min_count: int
    least_count: int

    def report(self) -> list[str]:
        """Lines for the user: the candidates, and a warning when fewer than asked.

        Example:

        >>> for line in choose_split_words(counts, max_new_tokens=100000).report():
        ...     print(line)
        4756 words of the corpus split into several pieces occur at least --min_count=2 ...
        warning: --max_new_tokens=100000 asked for more words than the 4756 that passed ...
        """
        lines = [f"{self.candidates} words of the corpus split into several pieces occur at "
                 f"least --min_count={self.min_count} times; adding the {len(self.words)} most "
                 f"frequent" + (f" (the least frequent seen {self.least_count} times)"
                                if self.words else "")]
        if self.candidates < self.max_new_tokens:
            last = ", ".join(repr(word) for word in self.words[-3:])
            lines.append(
                f"warning: --max_new_tokens={self.max_new_tokens} asked for more words than the "
                f"{self.candidates} that passed the frequency floor, so all of them are added"
                + (f", down to words seen {self.least_count} times ({last})" if self.words else "")
                + "; a new row learns little from a word seen a few times: raise --min_count to "
                "add only words the corpus shows often, or lower --max_new_tokens.")
        return lines


def choose_split_words(counts: WordCounts, max_new_tokens: int,
                       min_count: int = 2) -> SplitWordChoice:
    """`frequent_split_words` with how many words passed `min_count` (what the choice was from).

    Args:
        counts: `WordCounts` of the domain corpus under the current vocabulary.
        max_new_tokens: int. How many words at most.
        min_count: int. Occurrences a word needs. Defaults to 2.

    Returns:
        The `SplitWordChoice`; its `report()` says when fewer words than
        `max_new_tokens` passed the floor.

    Example:

    >>> choice = choose_split_words(counts, max_new_tokens=100000)
    >>> len(choice.words), choice.candidates
    (4756, 4756)
    """
    candidates = _split_words(counts, min_count)
    words = candidates[:max_new_tokens]
    return SplitWordChoice(words, len(candidates), max_new_tokens, min_count,
                           counts.counts[words[-1]] if words else 0)


def _split_words(counts: WordCounts, min_count: int) -> list[str]:
    """Every split word seen at least `min_count` times, most frequent first (ties alphabetical)."""
    candidates = [word for word, pieces in counts.pieces.items()
                  if len(pieces) > 1 and counts.counts[word] >= min_count
                  and len(word.encode("utf-8")) <= MAX_WORD_BYTES]
    candidates.sort(key=lambda word: (-counts.counts[word], word))
    return candidates


class WordCounter:
    """Counts words and their pieces batch by batch (what `count_words` runs).

    Args:
        tokenizer: `WordpieceTokenizer`.
    """

    def __init__(self, tokenizer: Tokenizer):
        if not isinstance(tokenizer, WordpieceTokenizer):
            raise ValueError(f"counting words needs a WordPiece vocabulary; {tokenizer.file} is "
                             f"a {type(tokenizer).__name__}.")
        self.tokenizer = tokenizer
        self.result = WordCounts(collections.Counter(), {})

    def words(self, lines: Sequence[str]) -> tuple[list[str], list[tuple[int, ...]], list[int]]:
        """Each line's words, in order: `(words, pieces, line index of each word)`.

        A word is its normalized text (lower cased for an uncased model).
        """
        if not lines:
            return [], [], []
        normalized = normalize_text(tf.constant(list(lines)), self.tokenizer.do_lower_case)
        ids, starts, ends = self.tokenizer.wordpiece.tokenize_normalized_with_offsets(normalized)
        flat_ids = ids.flat_values.numpy()
        if not flat_ids.size:
            return [], [], []
        rows = ids.value_rowids().numpy()
        first = np.flatnonzero(self.tokenizer.starts_word[flat_ids])
        last = np.append(first[1:], flat_ids.size) - 1
        starts, ends = starts.flat_values.numpy(), ends.flat_values.numpy()
        texts = tf.strings.substr(tf.gather(normalized, rows[first]), starts[first],
                                  ends[last] - starts[first]).numpy()
        words = [text.decode("utf-8") for text in texts]
        pieces = [tuple(flat_ids[a:b + 1].tolist()) for a, b in zip(first, last)]
        return words, pieces, rows[first].tolist()

    def add(self, lines: Sequence[str]) -> None:
        """Counts the words of `lines` into `result`."""
        words, pieces, _ = self.words(lines)
        result = self.result
        result.counts.update(words)
        for word, word_pieces in zip(words, pieces):
            result.pieces.setdefault(word, word_pieces)
        result.num_words += len(words)
        result.num_pieces += sum(len(p) for p in pieces)
