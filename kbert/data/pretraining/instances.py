"""Pre-training instances: google-research/bert's algorithm, on token ids.

`create_instances_from_document` and `create_masked_lm_predictions` follow
`create_pretraining_data.py` of google-research/bert: a random target length
(`short_seq_prob`), segments A and B split at a sentence boundary, 50% random
next sentence (label 1 = random), truncation of the longer segment from the
front or back at random, and `num_to_predict = min(max_predictions_per_seq,
max(1, round(len(tokens) * masked_lm_prob)))` predictions with `[CLS]`/`[SEP]`
counted but never masked, 80% `[MASK]` / 10% random token / 10% unchanged,
positions sorted. They work on ids instead of strings (the same thing, faster).

Additions:
- whole-word masking (`do_whole_word_mask`) as in the original;
- n-gram span masking (`max_ngram_size > 1`) as in ALBERT and Model Garden:
  span length n is drawn with weight 1/n, spans are whole words with
  `do_whole_word_mask` or tokens otherwise, and one 80/10/10 choice applies to
  a whole span;
- `next_sentence="sop"` (ALBERT sentence order): B always follows A in the
  document and half the instances swap them (label 1 = swapped). Where a chunk
  holds a single sentence it is cut at a random token instead of borrowing a
  random document as ALBERT does, so every label is about order;
- `next_sentence="none"` (RoBERTa DOC-SENTENCES): whole sentences packed into
  one segment `[CLS] ... [SEP]`, no label.

The random-next document comes from the `documents` passed in, which
`create_pretraining_data` fills with one chunk of the corpus, not all of it.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Sequence

import numpy as np

from kbert.data.tokenizers.byte_level_bpe import ByteLevelBpeTokenizer
from kbert.data.tokenizers.byte_level_bpe import special_ids
from kbert.data.tokenizers.byte_level_bpe import word_continuations
from kbert.data.tokenizers.loading import tokenizer_class
from kbert.data.tokenizers.tokenizer_json import read_tokenizer_json
from kbert.data.tokenization import PRETRAINING_PURPOSE
from kbert.data.vocabulary import PRETRAINING_TOKENS
from kbert.data.vocabulary import read_vocab

NEXT_SENTENCE_MODES = ("nsp", "sop", "none")
# "static": masked here, once per dupe (google-research/bert); "dynamic": written
# unmasked and masked anew for every batch by the reader (RoBERTa).
MASKING_MODES = ("static", "dynamic")


@dataclasses.dataclass(frozen=True)
class InstanceOptions:
    """How instances are cut and masked (the flags of `create_pretraining_data`).

    Args:
        max_seq_length: int. Tokens per instance including specials.
        max_predictions_per_seq: int. Most masked positions per instance.
        masked_lm_prob: float. Fraction of tokens to mask.
        short_seq_prob: float. Probability of a shorter random target length.
        next_sentence: str. `"nsp"`, `"sop"` or `"none"`.
        do_whole_word_mask: bool. Mask all pieces of a word together.
        max_ngram_size: int. Longest masked span in words (or tokens); 1 turns
            n-gram masking off.
        masking: str. `"static"` masks the instances here; `"dynamic"` leaves
            them unmasked for `pretraining_dataset(..., masking="dynamic")`.
    """

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    next_sentence: str = "nsp"
    do_whole_word_mask: bool = False
    max_ngram_size: int = 1
    masking: str = "static"

    @property
    def num_special_tokens(self) -> int:
        return 2 if self.next_sentence == "none" else 3

    def validate(self) -> None:
        """Raises ValueError naming the flag of an impossible setting."""
        if self.masking not in MASKING_MODES:
            raise ValueError(f"--masking={self.masking!r}; use one of {', '.join(MASKING_MODES)}.")
        if self.next_sentence not in NEXT_SENTENCE_MODES:
            raise ValueError(
                f"--next_sentence={self.next_sentence!r}; use one of {', '.join(NEXT_SENTENCE_MODES)}."
            )
        minimum = self.num_special_tokens + 2
        if self.max_seq_length < minimum:
            raise ValueError(
                f"--max_seq_length={self.max_seq_length} is too small; it needs at least "
                f"{minimum} with --next_sentence={self.next_sentence}."
            )
        max_maskable = self.max_seq_length - self.num_special_tokens
        if not 1 <= self.max_predictions_per_seq <= max_maskable:
            raise ValueError(
                f"--max_predictions_per_seq={self.max_predictions_per_seq} is larger than "
                f"possible: at most {max_maskable} tokens of --max_seq_length="
                f"{self.max_seq_length} can be masked (and at least 1 must)."
            )
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise ValueError(f"--masked_lm_prob={self.masked_lm_prob} must be in (0, 1].")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"--short_seq_prob={self.short_seq_prob} must be in [0, 1].")
        if self.max_ngram_size < 1:
            raise ValueError(f"--max_ngram_size={self.max_ngram_size} must be at least 1.")


@dataclasses.dataclass(frozen=True)
class VocabInfo:
    """What masking needs to know about the vocabulary.

    Args:
        vocab_size: int. Random replacements are drawn from `[0, vocab_size)`
            like the original (which draws from all vocabulary entries).
        cls_id: int. Id of `[CLS]`.
        sep_id: int. Id of `[SEP]`.
        mask_id: int. Id of `[MASK]`.
        continuation_ids: frozenset of int. Ids of the pieces that continue
            the word before them (whole-word masking): WordPiece's `##`
            pieces, a byte-level BPE's pieces without a leading space
            (`kbert.data.Tokenizer.continues_word`).
    """

    vocab_size: int
    cls_id: int
    sep_id: int
    mask_id: int
    continuation_ids: frozenset = frozenset()

    @classmethod
    def from_vocab(cls, vocab: Sequence[str]) -> "VocabInfo":
        index = {token: i for i, token in enumerate(vocab)}
        return cls(
            vocab_size=len(vocab),
            cls_id=index["[CLS]"],
            sep_id=index["[SEP]"],
            mask_id=index["[MASK]"],
            continuation_ids=frozenset(i for i, t in enumerate(vocab) if t.startswith("##")),
        )

    @classmethod
    def from_file(cls, path: str) -> "VocabInfo":
        """Reads a WordPiece `vocab.txt` or a byte-level BPE `tokenizer.json` (kind by extension).

        Args:
            path: str. The tokenizer file the data was made with.

        Returns:
            The `VocabInfo`; a byte-level BPE's `[CLS]` and `[SEP]` are its
            post-processor's, its continuations the pieces without a leading space.

        Raises:
            FileNotFoundError: no such file.
            ValueError: it lacks what masked-LM pre-training needs (named).

        Example:

        >>> VocabInfo.from_file("bpe/tokenizer.json").mask_id
        1019
        """
        if tokenizer_class(path) is not ByteLevelBpeTokenizer:
            return cls.from_vocab(read_vocab(path, PRETRAINING_TOKENS, PRETRAINING_PURPOSE))
        spec = read_tokenizer_json(path)
        _, cls_id, sep_id, mask_id = special_ids(spec)
        if mask_id is None:
            raise ValueError(f"tokenizer file {path!r} has no [MASK] (or <mask>) token; "
                             "masked-LM pre-training needs one (kbert-vocab build "
                             "--tokenizer=bpe writes one).")
        return cls(vocab_size=len(spec.vocabulary), cls_id=cls_id, sep_id=sep_id, mask_id=mask_id,
                   continuation_ids=frozenset(np.flatnonzero(word_continuations(spec)).tolist()))


@dataclasses.dataclass
class TrainingInstance:
    """One pre-training example before padding.

    Args:
        token_ids: list of int. `[CLS] A [SEP] B [SEP]` (or `[CLS] A [SEP]`)
            after masking.
        segment_ids: list of int. 0 for `[CLS] A [SEP]`, 1 for `B [SEP]`.
        masked_lm_positions: list of int. Sorted masked positions.
        masked_lm_ids: list of int. Original ids at those positions.
        is_random_next: bool or None. NSP: B is random; SOP: A and B are
            swapped; None without a sentence task.
    """

    token_ids: list[int]
    segment_ids: list[int]
    masked_lm_positions: list[int]
    masked_lm_ids: list[int]
    is_random_next: bool | None

    def original_token_ids(self) -> list[int]:
        """The token ids before masking."""
        ids = list(self.token_ids)
        for position, label in zip(self.masked_lm_positions, self.masked_lm_ids):
            ids[position] = label
        return ids


def _replacement(original: int, vocab: VocabInfo, rng: random.Random) -> int:
    # One uniform draw for the original's two (0.8, then 0.5): same 80/10/10.
    r = rng.random()
    if r < 0.8:
        return vocab.mask_id
    if r < 0.9:
        return original
    return rng.randrange(vocab.vocab_size)


def _word_groups(token_ids: Sequence[int], vocab: VocabInfo, whole_words: bool) -> list[list[int]]:
    groups: list[list[int]] = []
    for i, token in enumerate(token_ids):
        if token == vocab.cls_id or token == vocab.sep_id:
            continue
        if whole_words and groups and token in vocab.continuation_ids and groups[-1][-1] == i - 1:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _masking_ngrams(
    groups: list[list[int]], max_ngram_size: int, num_to_predict: int, rng: random.Random
) -> list[tuple[int, int]]:
    """Picks non-overlapping spans of 1..n contiguous groups (Model Garden's procedure)."""
    ngrams: dict[int, list[tuple[int, int]]] = {n: [] for n in range(1, max_ngram_size + 1)}
    for n in range(1, max_ngram_size + 1):
        for k in range(len(groups) - n + 1):
            window = groups[k : k + n]
            if all(window[j][-1] + 1 == window[j + 1][0] for j in range(n - 1)):
                ngrams[n].append((window[0][0], window[-1][-1] + 1))
    for spans in ngrams.values():
        rng.shuffle(spans)
    sizes = list(range(1, max_ngram_size + 1))
    cum_weights = list(itertools.accumulate(1.0 / n for n in sizes))
    covered: set[int] = set()
    chosen: list[tuple[int, int]] = []
    num_masked = 0
    while num_masked < num_to_predict and any(ngrams.values()):
        # Model Garden calls the global `random.choices` here; the rng passed
        # in keeps the output deterministic.
        size = rng.choices(sizes, cum_weights=cum_weights)[0]
        if num_masked + size > num_to_predict:
            ngrams[size].clear()  # An n-gram has at least n tokens.
            continue
        if not ngrams[size]:
            continue
        begin, end = ngrams[size].pop()
        if num_masked + end - begin > num_to_predict:
            continue
        if any(i in covered for i in range(begin, end)):
            continue
        covered.update(range(begin, end))
        chosen.append((begin, end))
        num_masked += end - begin
    return chosen


def create_masked_lm_predictions(
    token_ids: Sequence[int], options: InstanceOptions, vocab: VocabInfo, rng: random.Random
) -> tuple[list[int], list[int], list[int]]:
    """Masks tokens for the MLM objective.

    Args:
        token_ids: list of int. The instance including `[CLS]` and `[SEP]`.
        options: `InstanceOptions`. Uses `masked_lm_prob`,
            `max_predictions_per_seq`, `do_whole_word_mask`, `max_ngram_size`.
        vocab: `VocabInfo`.
        rng: `random.Random`. The only source of randomness.

    Returns:
        `(output_ids, positions, labels)`: the masked ids, sorted masked
        positions and the original ids there.

    Example:

    >>> ids, positions, labels = create_masked_lm_predictions(
    ...     [101, 7592, 2088, 102], InstanceOptions(), vocab, random.Random(1))
    """
    num_to_predict = min(
        options.max_predictions_per_seq,
        max(1, int(round(len(token_ids) * options.masked_lm_prob))),
    )
    output = list(token_ids)
    masked: list[int] = []
    if options.max_ngram_size > 1:
        groups = _word_groups(token_ids, vocab, options.do_whole_word_mask)
        for begin, end in _masking_ngrams(groups, options.max_ngram_size, num_to_predict, rng):
            r = rng.random()
            for i in range(begin, end):
                if r < 0.8:
                    output[i] = vocab.mask_id
                elif r >= 0.9:
                    output[i] = rng.randrange(vocab.vocab_size)
                masked.append(i)
    elif options.do_whole_word_mask:
        groups = _word_groups(token_ids, vocab, True)
        rng.shuffle(groups)
        for group in groups:
            if len(masked) >= num_to_predict:
                break
            # A word that would overshoot is skipped, like the original.
            if len(masked) + len(group) > num_to_predict:
                continue
            for i in group:
                output[i] = _replacement(token_ids[i], vocab, rng)
                masked.append(i)
    else:
        candidates = [
            i for i, t in enumerate(token_ids) if t != vocab.cls_id and t != vocab.sep_id
        ]
        # sample() == the original's shuffle-then-take-the-first-k, in distribution.
        masked = rng.sample(candidates, min(num_to_predict, len(candidates)))
        for i in masked:
            output[i] = _replacement(token_ids[i], vocab, rng)
    masked.sort()
    return output, masked, [token_ids[i] for i in masked]


def _trim_counts(len_a: np.ndarray, len_b: np.ndarray, max_num_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens `truncate_seq_pair` cuts from A and from B, for arrays of lengths (see `_truncation`)."""
    excess = len_a + len_b - max_num_tokens
    gap = np.abs(len_a - len_b)
    # The longer one is cut down to a tie, then they alternate, B first.
    first = np.clip(np.minimum(excess, gap), 0, None)
    rest = np.clip(excess - gap, 0, None)
    a_longer = len_a > len_b
    return rest // 2 + np.where(a_longer, first, 0), (rest + 1) // 2 + np.where(a_longer, 0, first)


def _truncation(len_a: int, len_b: int, max_num_tokens: int, rng: random.Random) -> tuple[int, int, int, int]:
    """How many tokens the original's truncation walk cuts: `(a_front, a_back, b_front, b_back)`.

    The original removes one token at a time from the longer segment (B on
    ties: `tokens_a if len(tokens_a) > len(tokens_b) else tokens_b`), from
    the front or back with probability 1/2 each. Which segment loses each
    token does not depend on the coin flips, so the counts per segment are
    computed directly and the front/back split of each is one
    Binomial(n, 1/2) draw (the popcount of n random bits): the same
    distribution in O(1) Python operations instead of one per token.
    """
    trim_a, trim_b = (int(x) for x in _trim_counts(np.int64(len_a), np.int64(len_b), max_num_tokens))
    a_front = bin(rng.getrandbits(trim_a)).count("1") if trim_a else 0
    b_front = bin(rng.getrandbits(trim_b)).count("1") if trim_b else 0
    return a_front, trim_a - a_front, b_front, trim_b - b_front


def truncate_seq_pair(
    tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng: random.Random
) -> tuple[list[int], list[int]]:
    """Trims the longer of A and B (B on ties), one token at a time from front or back.

    The same distribution as the original's `truncate_seq_pair` random walk,
    in O(1) draws (see `_truncation`).

    Returns:
        The truncated `(tokens_a, tokens_b)`.
    """
    a_front, a_back, b_front, b_back = _truncation(len(tokens_a), len(tokens_b), max_num_tokens, rng)
    return (
        tokens_a[a_front : len(tokens_a) - a_back],
        tokens_b[b_front : len(tokens_b) - b_back],
    )


# A layout is one instance before masking: token ranges `[a0, a1)` and
# `[b0, b1)` of a flat token array (`b0 == b1` with next_sentence="none") and
# the label (1 random next / swapped, 0 not, -1 none).
Layout = tuple[int, int, int, int, int]


def _floor_uniform(rng: np.random.Generator, span: np.ndarray) -> np.ndarray:
    """Uniform ints in `[0, span)`, one per element (`int(random() * span)`, as the original's draws)."""
    return (rng.random(span.shape) * span).astype(np.int64)


def cut_layouts(
    bounds: np.ndarray,
    starts: np.ndarray,
    options: InstanceOptions,
    rng: np.random.Generator,
    documents: np.ndarray | None = None,
) -> np.ndarray:
    """Cuts documents into instance layouts: the original's algorithm, for many documents at once.

    The original walks each document (`create_instances_from_document`),
    adding whole segments to a chunk until a target length, splitting the
    chunk into A and B at a random segment boundary and, half the time (NSP),
    taking B from a random segment of another document and putting the
    chunk's unused segments back. Here every document's walk advances
    together, one chunk per round, with numpy: the segments of a document are
    contiguous in the flat token array, so a chunk, A, B and a random-next B
    are each one token range, and a binary search over the sorted boundaries
    finds where the original's segment-by-segment sums stop. The draws have
    the original's distributions (`int(random() * span)` for its `randint`s,
    a Binomial(n, 1/2) front/back split for its truncation coin flips), from
    `rng` in a different order, so outputs differ from the per-document walk
    for the same seed.

    Args:
        bounds: int array. Every document's segment boundaries, documents in
            flat-array order: document d's are `bounds[starts[d]:starts[d + 1]]`,
            `[b_0, ..., b_n]` for its n >= 1 non-empty segments (segment i is
            `flat[b_i:b_(i+1)]`). Non-decreasing. Random-next segments come
            from all of them.
        starts: int array `[D + 1]`. Where each document's boundaries start.
        options: `InstanceOptions`.
        rng: `np.random.Generator`. The only source of randomness.
        documents: int array or None. The documents to cut (default: all).

    Returns:
        int64 `[N, 5]` rows `(a0, a1, b0, b1, label)`: A is `flat[a0:a1]`, B
        is `flat[b0:b1]` (empty with next_sentence="none"), already truncated;
        label 1 = random next (NSP) / swapped (SOP), 0 = not, -1 = none.
        Ordered by chunk round, then document.

    Example:

    >>> cut_layouts(np.array([0, 3, 5]), np.array([0, 3]), InstanceOptions(),
    ...             np.random.default_rng(1))
    """
    bounds = np.asarray(bounds, np.int64)
    starts = np.asarray(starts, np.int64)
    num_docs = len(starts) - 1
    if np.any(np.diff(bounds) < 0):
        raise ValueError("cut_layouts: document boundaries must be in flat-array order")
    segments = np.diff(starts) - 1  # Per document.
    mode = options.next_sentence
    max_num_tokens = options.max_seq_length - options.num_special_tokens
    active = np.arange(num_docs, dtype=np.int64) if documents is None else np.asarray(documents, np.int64)
    # Mostly fill the sequence; sometimes (short_seq_prob) aim shorter to
    # lessen the mismatch with short fine-tuning inputs.
    target = np.full(len(active), max_num_tokens, np.int64)
    short = rng.random(len(active)) < options.short_seq_prob
    target[short] = 2 + _floor_uniform(rng, np.full(int(short.sum()), max_num_tokens - 1))
    chunk_begin = np.zeros(len(active), np.int64)  # First segment of each one's next chunk.
    rounds = []
    while len(active):
        base, n, first = starts[active], segments[active], chunk_begin
        begin = bounds[base + first]
        # The chunk ends with the first segment that brings it to the target
        # length, or with the document.
        last = np.minimum(np.searchsorted(bounds, begin + target, "left") - base, n) - 1
        end = bounds[base + last + 1]
        num_segments = last - first + 1
        next_chunk = last + 1
        if mode == "none":
            a0, a1, b0, b1 = begin, end, end, end
            label = np.full(len(active), -1, np.int64)
        else:
            # How many segments of the chunk go into A.
            a_end = 1 + _floor_uniform(rng, np.maximum(num_segments - 1, 1))
            a0, a1 = begin, bounds[base + first + a_end]
            b0, b1 = a1.copy(), end.copy()
            if mode == "sop":
                a0, a1, b0, b1, label = _sentence_order(a0, a1, b0, b1, num_segments, rng)
            else:
                label = ((num_segments == 1) | (rng.random(len(active)) < 0.5)).astype(np.int64)
                r = np.nonzero(label)[0]
                b0[r], b1[r] = _random_next(
                    bounds, starts, segments, active[r], target[r] - (a1[r] - a0[r]), rng
                )
                # The chunk's unused segments are put back.
                next_chunk[r] = first[r] + a_end[r]
        rounds.append(_truncated(a0, a1, b0, b1, label, mode, max_num_tokens, rng))
        more = next_chunk < n
        active, target, chunk_begin = active[more], target[more], next_chunk[more]
    if not rounds:
        return np.zeros((0, 5), np.int64)
    return np.concatenate(rounds).astype(np.int64)


def _sentence_order(
    a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray, num_segments: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, ...]:
    """SOP pairs `(a0, a1, b0, b1, label)`: B follows A, and half of them swap (label 1).

    A chunk of a single segment is cut at a random token instead.
    """
    single = (num_segments == 1) & (a1 - a0 >= 2)
    cut = a0 + 1 + _floor_uniform(rng, np.maximum(a1 - a0 - 1, 1))
    a1, b0, b1 = np.where(single, cut, a1), np.where(single, cut, b0), np.where(single, a1, b1)
    label = (rng.random(len(a0)) < 0.5).astype(np.int64)
    swap = label == 1
    return (np.where(swap, b0, a0), np.where(swap, b1, a1),
            np.where(swap, a0, b0), np.where(swap, a1, b1), label)


def _random_next(
    bounds: np.ndarray, starts: np.ndarray, segments: np.ndarray, documents: np.ndarray,
    target_b: np.ndarray, rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Random-next B ranges `(b0, b1)` for instances of `documents` (`cut_layouts`'s arrays).

    B starts at a random segment of another document (10 tries, as the
    original; the last try is kept when all hit the instance's own document)
    and runs to `target_b` tokens or that document's end.
    """
    tries = _floor_uniform(rng, np.full((len(documents), 10), len(starts) - 1))
    other = tries != documents[:, None]
    pick = np.where(other.any(axis=1), other.argmax(axis=1), 9)
    random_doc = tries[np.arange(len(documents)), pick]
    random_start = _floor_uniform(rng, segments[random_doc])
    rbase, rn = starts[random_doc], segments[random_doc]
    b0 = bounds[rbase + random_start]
    b_end = np.searchsorted(bounds, b0 + target_b, "left") - rbase
    return b0, bounds[rbase + np.clip(b_end, random_start + 1, rn)]


def _truncated(
    a0: np.ndarray, a1: np.ndarray, b0: np.ndarray, b1: np.ndarray, label: np.ndarray, mode: str,
    max_num_tokens: int, rng: np.random.Generator,
) -> np.ndarray:
    """Layout rows of the non-empty pairs, each trimmed to `max_num_tokens` from random ends.

    Which end loses each trimmed token is a coin flip, as in the original's
    `truncate_seq_pair`: a Binomial(n, 1/2) count from the front.
    """
    len_a, len_b = a1 - a0, b1 - b0
    keep = (len_a > 0) & (len_b > 0) if mode != "none" else len_a > 0
    trim_a, trim_b = _trim_counts(len_a[keep], len_b[keep], max_num_tokens)
    a_front, b_front = rng.binomial(trim_a, 0.5), rng.binomial(trim_b, 0.5)
    a0, a1, b0, b1 = a0[keep], a1[keep], b0[keep], b1[keep]
    return np.stack([a0 + a_front, a1 - (trim_a - a_front), b0 + b_front,
                     b1 - (trim_b - b_front), label[keep]], axis=1)


def create_layouts(
    documents: Sequence[Sequence[int]],
    options: InstanceOptions,
    rng: np.random.Generator,
    cut: Sequence[int] | None = None,
) -> np.ndarray:
    """Cuts documents of token ranges into instance layouts (the original's algorithm).

    Args:
        documents: list of documents, each the boundaries `[b_0, ..., b_n]`
            of its n >= 1 non-empty segments (sentences) in one flat token
            array (segment i is `flat[b_i:b_(i+1)]`), in flat-array order.
            Random next segments come from these.
        options: `InstanceOptions`.
        rng: `np.random.Generator`. The only source of randomness.
        cut: indices of the documents to cut, or None for all of them.

    Returns:
        int64 `[N, 5]` rows `(a0, a1, b0, b1, label)` (see `cut_layouts`).

    Example:

    >>> create_layouts([[0, 3, 5]], InstanceOptions(), np.random.default_rng(1))
    """
    starts = np.cumsum([0, *(len(d) for d in documents)])
    bounds = np.fromiter(itertools.chain.from_iterable(documents), np.int64, int(starts[-1]))
    return cut_layouts(bounds, starts, options, rng, None if cut is None else np.asarray(cut))


def layouts_to_arrays(
    flat: np.ndarray, layouts: np.ndarray, options: InstanceOptions, vocab: VocabInfo
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Builds the unmasked token matrix of layouts.

    Args:
        flat: int array of token ids.
        layouts: int array `[N, 5]` from `cut_layouts`.
        options: `InstanceOptions`.
        vocab: `VocabInfo`.

    Returns:
        `(token_ids, segment_ids, lengths)`: int32 and uint8
        `[N, max_seq_length]` matrices, zero padded, `[CLS] A [SEP] B [SEP]`
        (or `[CLS] A [SEP]`), and the int64 lengths `[N]`.
    """
    n, s = len(layouts), options.max_seq_length
    # One gather from the tokens followed by [CLS], [SEP] and padding builds
    # every row; int32 halves the memory traffic of int64 (a chunk's token
    # count is far below 2**31).
    source = np.concatenate(
        [np.asarray(flat, np.int32).ravel(), np.array([vocab.cls_id, vocab.sep_id, 0], np.int32)]
    )
    cls_index, sep_index, pad_index = len(source) - 3, len(source) - 2, len(source) - 1
    a0, a1, b0, b1 = (np.asarray(layouts[:, k : k + 1], np.int32) for k in range(4))
    len_a = a1 - a0
    pair = options.next_sentence != "none"
    lengths = len_a + 2 + (b1 - b0 + 1 if pair else 0)
    b_start = len_a + 2
    j = np.arange(s, dtype=np.int32)[None, :]
    index = np.where(j <= len_a, a0 - 1 + j, b0 - b_start + j)
    index = np.where(j < lengths, index, pad_index)
    rows = np.arange(n)
    index[:, 0] = cls_index
    index[rows, len_a[:, 0] + 1] = sep_index
    if pair:
        index[rows, lengths[:, 0] - 1] = sep_index
    tokens = source[index]
    segment_ids = ((j >= b_start) & (j < lengths)).view(np.uint8)
    return tokens, segment_ids, lengths[:, 0].astype(np.int64)


def mask_tokens_batch(
    token_ids: np.ndarray, lengths: np.ndarray, options: InstanceOptions, vocab: VocabInfo,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per-token masking of many instances at once (the default, no whole-word/n-gram).

    The original's procedure, vectorized: `num_to_predict` positions drawn
    uniformly without replacement among the non-`[CLS]`/`[SEP]` tokens, each
    replaced by `[MASK]` (80%), a random vocabulary id (10%) or kept (10%).

    Args:
        token_ids: int `[N, S]`, zero padded.
        lengths: int `[N]`.
        options: `InstanceOptions` (`masked_lm_prob`, `max_predictions_per_seq`).
        vocab: `VocabInfo`.
        rng: `np.random.Generator`.

    Returns:
        `(masked_ids, positions, labels, num_masked)`: `[N, S]` ids after
        masking (the dtype of `token_ids`); int64 `[N, max_predictions_per_seq]`
        sorted positions and their original ids, zero padded; int64 `[N]`
        counts.
    """
    n, s = token_ids.shape
    p = options.max_predictions_per_seq
    candidate = (token_ids != vocab.cls_id) & (token_ids != vocab.sep_id)
    candidate &= np.arange(s)[None, :] < lengths[:, None]
    # Python's round() and np.rint both round half to even.
    num_masked = np.minimum(p, np.maximum(1, np.rint(lengths * options.masked_lm_prob))).astype(np.int64)
    num_masked = np.minimum(num_masked, candidate.sum(axis=1))
    # Uniform keys; the smallest `num_masked` candidates are a uniform sample.
    # 24-bit float32 keys tie with probability ~s**2 / 2**25 per row, and a
    # tie only decides which of two equally likely positions is taken.
    keys = rng.random((n, s), dtype=np.float32)
    keys[~candidate] = 2.0
    if p < s:
        chosen = np.argpartition(keys, p - 1, axis=1)[:, :p]
    else:
        chosen = np.argsort(keys, axis=1)[:, :p]
    chosen_keys = np.take_along_axis(keys, chosen, axis=1)
    chosen = np.take_along_axis(chosen, np.argsort(chosen_keys, axis=1), axis=1)
    valid = np.arange(p)[None, :] < num_masked[:, None]
    positions = np.sort(np.where(valid, chosen, s), axis=1)
    valid = positions < s
    positions = np.where(valid, positions, 0)
    rows = np.arange(n)[:, None]
    labels = np.where(valid, token_ids[rows, positions], 0).astype(np.int64)
    u = rng.random((n, p), dtype=np.float32)
    random_ids = rng.integers(0, vocab.vocab_size, (n, p))
    replacement = np.where(u < 0.8, vocab.mask_id, np.where(u < 0.9, labels, random_ids))
    masked_ids = token_ids.copy()
    r, c = np.nonzero(valid)
    masked_ids[r, positions[r, c]] = replacement[r, c]
    return masked_ids, positions, labels, num_masked


def _flatten(documents: Sequence[Sequence[Sequence[int]]]) -> tuple[list[int], list[list[int]]]:
    """Concatenates documents of segments: `(flat ids, per document its segment boundaries)`."""
    flat: list[int] = []
    bounds: list[list[int]] = []
    for document in documents:
        doc = [len(flat)]
        for segment in document:
            flat.extend(segment)
            doc.append(len(flat))
        bounds.append(doc)
    return flat, bounds


def instance_from_layout(
    flat: Sequence[int], layout: Layout, options: InstanceOptions, vocab: VocabInfo,
    rng: random.Random,
) -> TrainingInstance:
    """Builds and masks (with `create_masked_lm_predictions`) one layout."""
    a0, a1, b0, b1, label = layout
    tokens_a = list(flat[a0:a1])
    if label < 0:
        tokens = [vocab.cls_id, *tokens_a, vocab.sep_id]
        segment_ids = [0] * len(tokens)
        is_random_next = None
    else:
        tokens_b = list(flat[b0:b1])
        tokens = [vocab.cls_id, *tokens_a, vocab.sep_id, *tokens_b, vocab.sep_id]
        segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
        is_random_next = bool(label)
    output, positions, labels = create_masked_lm_predictions(tokens, options, vocab, rng)
    return TrainingInstance(output, segment_ids, positions, labels, is_random_next)


def create_instances_from_document(
    documents: Sequence[Sequence[Sequence[int]]],
    document_index: int,
    options: InstanceOptions,
    vocab: VocabInfo,
    rng: random.Random,
) -> list[TrainingInstance]:
    """Cuts one document into masked training instances.

    The one-document, list-based form of what `create_pretraining_data` does
    for a whole chunk with `cut_layouts` and `mask_tokens_batch`.

    Args:
        documents: list of documents, each a list of segments (sentences),
            each a non-empty list of token ids. Random next sentences come from
            these.
        document_index: int. The document to cut.
        options: `InstanceOptions`.
        vocab: `VocabInfo`.
        rng: `random.Random`. The only source of randomness.

    Returns:
        A list of `TrainingInstance`.

    Example:

    >>> instances = create_instances_from_document(
    ...     [[[7592, 2088], [2129, 2024, 2017]]], 0, InstanceOptions(), vocab,
    ...     random.Random(12345))
    """
    flat, bounds = _flatten(documents)
    layouts = create_layouts(
        bounds, options, np.random.default_rng(rng.getrandbits(128)), cut=[document_index]
    )
    return [instance_from_layout(flat, layout, options, vocab, rng) for layout in layouts.tolist()]
