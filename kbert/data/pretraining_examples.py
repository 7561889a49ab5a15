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


def truncate_seq_pair(
    tokens_a: list[int], tokens_b: list[int], max_num_tokens: int, rng: random.Random
) -> tuple[list[int], list[int]]:
    """Trims the longer of A and B, one token at a time from front or back.

    The same random walk as the original's `truncate_seq_pair`, in O(excess)
    without deleting from the front of lists.

    Returns:
        The truncated `(tokens_a, tokens_b)`.
    """
    a0, a1, b0, b1 = 0, len(tokens_a), 0, len(tokens_b)
    while (a1 - a0) + (b1 - b0) > max_num_tokens:
        front = rng.random() < 0.5
        if a1 - a0 >= b1 - b0:  # max() in the original returns A on ties.
            if front:
                a0 += 1
            else:
                a1 -= 1
        else:
            if front:
                b0 += 1
            else:
                b1 -= 1
    return tokens_a[a0:a1], tokens_b[b0:b1]


def _make_instance(
    tokens_a: list[int],
    tokens_b: list[int] | None,
    is_random_next: bool | None,
    options: InstanceOptions,
    vocab: VocabInfo,
    rng: random.Random,
) -> TrainingInstance:
    if tokens_b is None:
        tokens = [vocab.cls_id, *tokens_a, vocab.sep_id]
        segment_ids = [0] * len(tokens)
    else:
        tokens = [vocab.cls_id, *tokens_a, vocab.sep_id, *tokens_b, vocab.sep_id]
        segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
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
    document = documents[document_index]
    mode = options.next_sentence
    max_num_tokens = options.max_seq_length - options.num_special_tokens
    # Mostly fill the sequence; sometimes (short_seq_prob) aim shorter to
    # lessen the mismatch with short fine-tuning inputs.
    target_seq_length = max_num_tokens
    if rng.random() < options.short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)

    instances: list[TrainingInstance] = []
    current_chunk: list[Sequence[int]] = []
    current_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if mode == "none":
                tokens = [t for seg in current_chunk for t in seg]
                tokens, _ = truncate_seq_pair(tokens, [], max_num_tokens, rng)
                instances.append(_make_instance(tokens, None, None, options, vocab, rng))
            else:
                # How many segments of current_chunk go into A.
                a_end = 1
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                tokens_a = [t for seg in current_chunk[:a_end] for t in seg]
                tokens_b: list[int] = []
                if mode == "sop":
                    if len(current_chunk) >= 2:
                        tokens_b = [t for seg in current_chunk[a_end:] for t in seg]
                    elif len(tokens_a) >= 2:
                        cut = rng.randint(1, len(tokens_a) - 1)
                        tokens_a, tokens_b = tokens_a[:cut], tokens_a[cut:]
                    is_random_next = rng.random() < 0.5
                    if is_random_next:
                        tokens_a, tokens_b = tokens_b, tokens_a
                elif len(current_chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(tokens_a)
                    # Try not to pick this document (it is chosen anyway
                    # when the pool has no other).
                    for _ in range(10):
                        random_document_index = rng.randint(0, len(documents) - 1)
                        if random_document_index != document_index:
                            break
                    random_document = documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    # The unused segments of this chunk are put back.
                    i -= len(current_chunk) - a_end
                else:
                    is_random_next = False
                    tokens_b = [t for seg in current_chunk[a_end:] for t in seg]
                if tokens_a and tokens_b:
                    tokens_a, tokens_b = truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                    instances.append(
                        _make_instance(tokens_a, tokens_b, is_random_next, options, vocab, rng)
                    )
            current_chunk = []
            current_length = 0
        i += 1
    return instances
