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

import bisect
import dataclasses
import itertools
import random
from typing import Sequence

import numpy as np

NEXT_SENTENCE_MODES = ("nsp", "sop", "none")


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
    """

    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    next_sentence: str = "nsp"
    do_whole_word_mask: bool = False
    max_ngram_size: int = 1

    @property
    def num_special_tokens(self) -> int:
        return 2 if self.next_sentence == "none" else 3

    def validate(self) -> None:
        """Raises ValueError naming the flag of an impossible setting."""
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
        continuation_ids: frozenset of int. Ids of `##` pieces (whole-word
            masking).
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
    excess = len_a + len_b - max_num_tokens
    if excess <= 0:
        return 0, 0, 0, 0
    # The longer one is cut down to a tie, then they alternate, B first.
    gap = abs(len_a - len_b)
    first, rest = min(excess, gap), max(0, excess - gap)
    trim_a, trim_b = rest // 2, (rest + 1) // 2
    if len_a > len_b:
        trim_a += first
    else:
        trim_b += first
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


def _randint(rng: random.Random, low: int, high: int) -> int:
    """`rng.randint(low, high)` at a third of the cost.

    From one 53-bit float draw: the deviation from uniform is below 2**-40
    for any range here, far under what sampling could ever show. The
    per-document loop below inlines the same formula.
    """
    return low + int(rng.random() * (high - low + 1))


# A layout is one instance before masking: token ranges `[a0, a1)` and
# `[b0, b1)` of a flat token array (`b0 == b1` with next_sentence="none") and
# the label (1 random next / swapped, 0 not, -1 none).
Layout = tuple[int, int, int, int, int]


def _document_layouts(
    documents: Sequence[Sequence[int]],
    document_index: int,
    options: InstanceOptions,
    rng: random.Random,
    out: list[Layout],
) -> None:
    """Cuts one document, given by its segment boundaries, into layouts.

    Segments of a document are consecutive in the flat array, so A, B and a
    random-next B are each one contiguous range, and where the original adds
    up segment lengths one at a time until a target length, a binary search
    over the boundaries finds the same segment. This runs once per document
    and dupe of the whole corpus, so method lookups are bound once and
    `_randint` is inlined (`low + int(uniform() * span)`); the random draws
    are the same, in the same order, as the segment-at-a-time form.
    """
    uniform = rng.random
    bounds = documents[document_index]
    n = len(bounds) - 1  # Segments.
    mode = options.next_sentence
    max_num_tokens = options.max_seq_length - options.num_special_tokens
    # Mostly fill the sequence; sometimes (short_seq_prob) aim shorter to
    # lessen the mismatch with short fine-tuning inputs.
    target_seq_length = max_num_tokens
    if uniform() < options.short_seq_prob:
        target_seq_length = 2 + int(uniform() * (max_num_tokens - 1))

    chunk_begin = 0  # First segment of the current chunk.
    while chunk_begin < n:
        begin = bounds[chunk_begin]
        # The chunk ends with the first segment that brings it to the target
        # length, or with the document.
        last = min(bisect.bisect_left(bounds, begin + target_seq_length, chunk_begin + 1), n) - 1
        end = bounds[last + 1]
        num_segments = last - chunk_begin + 1
        next_chunk = last + 1
        if mode == "none":
            a_front, a_back, _, _ = _truncation(end - begin, 0, max_num_tokens, rng)
            out.append((begin + a_front, end - a_back, end, end, -1))
        else:
            # How many segments of the chunk go into A.
            a_end = 1
            if num_segments >= 2:
                a_end = 1 + int(uniform() * (num_segments - 1))
            a0, a1 = begin, bounds[chunk_begin + a_end]
            b0 = b1 = a1
            if mode == "sop":
                if num_segments >= 2:
                    b0, b1 = a1, end
                elif a1 - a0 >= 2:
                    cut = a0 + 1 + int(uniform() * (a1 - a0 - 1))
                    a1, b0, b1 = cut, cut, a1
                label = int(uniform() < 0.5)
                if label:
                    a0, a1, b0, b1 = b0, b1, a0, a1
            elif num_segments == 1 or uniform() < 0.5:
                label = 1
                target_b_length = target_seq_length - (a1 - a0)
                # Try not to pick this document (it is chosen anyway when
                # the pool has no other).
                for _ in range(10):
                    random_document_index = int(uniform() * len(documents))
                    if random_document_index != document_index:
                        break
                random_bounds = documents[random_document_index]
                random_start = int(uniform() * (len(random_bounds) - 1))
                b0 = random_bounds[random_start]
                # B runs from a random segment to the target length, or to
                # the end of that document.
                b_end = bisect.bisect_left(random_bounds, b0 + target_b_length, random_start + 1)
                b1 = random_bounds[min(b_end, len(random_bounds) - 1)]
                # The unused segments of this chunk are put back.
                next_chunk = chunk_begin + a_end
            else:
                label = 0
                b0, b1 = a1, end
            if a1 > a0 and b1 > b0:
                a_front, a_back, b_front, b_back = _truncation(a1 - a0, b1 - b0, max_num_tokens, rng)
                out.append((a0 + a_front, a1 - a_back, b0 + b_front, b1 - b_back, label))
        chunk_begin = next_chunk


def create_layouts(
    documents: Sequence[Sequence[int]], options: InstanceOptions, rng: random.Random
) -> list[Layout]:
    """Cuts documents of token ranges into instance layouts (the original's algorithm).

    Args:
        documents: list of documents, each the boundaries `[b_0, ..., b_n]`
            of its n >= 1 non-empty segments (sentences) in one flat token
            array: segment i is `flat[b_i:b_(i+1)]`. Random next segments come
            from these.
        options: `InstanceOptions`.
        rng: `random.Random`. The only source of randomness.

    Returns:
        A list of `(a0, a1, b0, b1, label)`: A is `flat[a0:a1]`, B is
        `flat[b0:b1]` (empty with next_sentence="none"), already truncated;
        label 1 = random next (NSP) / swapped (SOP), 0 = not, -1 = none.

    Example:

    >>> create_layouts([[0, 3, 5]], InstanceOptions(), random.Random(1))
    """
    out: list[Layout] = []
    for document_index in range(len(documents)):
        _document_layouts(documents, document_index, options, rng, out)
    return out


def layouts_to_arrays(
    flat: np.ndarray, layouts: np.ndarray, options: InstanceOptions, vocab: VocabInfo
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Builds the unmasked token matrix of layouts.

    Args:
        flat: int array of token ids.
        layouts: int array `[N, 5]` from `create_layouts`.
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
    for a whole chunk with `create_layouts` and `mask_tokens_batch`.

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
    layouts: list[Layout] = []
    _document_layouts(bounds, document_index, options, rng, layouts)
    return [instance_from_layout(flat, layout, options, vocab, rng) for layout in layouts]
