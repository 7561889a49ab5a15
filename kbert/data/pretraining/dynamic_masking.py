"""Dynamic masking: google-research/bert's masking rules as TensorFlow ops, anew for every batch.

`create_pretraining_data --masking=dynamic` writes unmasked instances; the
reader (`pretraining_dataset(..., masking="dynamic")`) masks each batch with
`DynamicMasker`, so every epoch sees new masks (RoBERTa). The rules are those
of `instances.create_masked_lm_predictions` (the static tool):

- `num_to_predict = min(max_predictions_per_seq, max(1, round(len * masked_lm_prob)))`
  with `len` counting `[CLS]`/`[SEP]` and Python's round-half-to-even;
- `[CLS]`, `[SEP]` and padding are never chosen;
- token masking: a uniformly random subset of `num_to_predict` tokens;
- whole-word masking: words in random order, a word that would overshoot
  `num_to_predict` is skipped;
- n-gram masking (`max_ngram_size > 1`): Model Garden's procedure (span
  length n drawn with weight 1/n among the lengths that still fit and have
  spans left, spans in random order, overlapping or overshooting ones
  skipped), one replacement choice per span;
- each chosen token (or span) becomes `[MASK]` with `mask_token_rate`, a
  random id from `[0, vocab_size)` with `random_token_rate`, else stays.

A `MaskingSchedule` changes the rate during a run (mmBERT's 30% -> 15% ->
5%): the reader asks it for the rate of each batch by the batch's place in
the stream, which the checkpointed iterator keeps, so a resumed run masks as
an uninterrupted one.

Why not tensorflow-text's `mask_language_model` with `RandomItemSelector` and
`MaskValuesChooser`: (1) their draws come from stateful random ops
(`tf.random.shuffle`, `tf.random.uniform`) whose state a tf.data iterator
checkpoint does not hold, so masks after a resume would differ from an
uninterrupted run's (here every draw is stateless, keyed by seed, input
pipeline and batch number); (2) `RandomItemSelector` selects
`ceil(selectable * rate)` items where the original takes
`round(len * rate)` with `[CLS]`/`[SEP]` counted and at least one;
(3) whole words as a `[batch, words, pieces]` RaggedTensor are counted and
capped in words, not in tokens, and without the original's skip of a word
that overshoots; (4) they have no n-gram spans, and `MaskValuesChooser`
sees the chosen tokens, not spans, so it cannot make one choice per span.
What is left of them (a gather and a scatter) is three lines on dense
tensors here.
"""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np
import tensorflow as tf

from kbert.data.pretraining.instances import VocabInfo


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
    """How dynamic masking chooses and replaces tokens (the data tool's masking flags).

    Args:
        masked_lm_prob: float. Fraction of each instance's tokens to predict
            (MosaicBERT uses 0.3). Defaults to 0.15.
        mask_token_rate: float. Share of the chosen tokens replaced by
            `[MASK]`. Defaults to 0.8.
        random_token_rate: float. Share replaced by a random token; the rest
            (`1 - mask_token_rate - random_token_rate`) is kept. Defaults to
            0.1. ELECTRA: 0.85 / 0.0 (15% kept).
        do_whole_word_mask: bool. Choose whole words (a piece and the `##`
            pieces after it). Defaults to False.
        max_ngram_size: int. Longest span of words (or tokens) chosen
            together, with weights 1/n; 1 turns spans off. Defaults to 1.

    Example:

    >>> config = kbert.data.MaskingConfig(masked_lm_prob=0.3, do_whole_word_mask=True)
    """

    masked_lm_prob: float = 0.15
    mask_token_rate: float = 0.8
    random_token_rate: float = 0.1
    do_whole_word_mask: bool = False
    max_ngram_size: int = 1

    def validate(self) -> None:
        """Raises ValueError naming the setting that is out of range."""
        if not 0.0 < self.masked_lm_prob <= 1.0:
            raise ValueError(f"MaskingConfig.masked_lm_prob={self.masked_lm_prob} must be in (0, 1].")
        for name in ("mask_token_rate", "random_token_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"MaskingConfig.{name}={getattr(self, name)} must be in [0, 1].")
        if self.mask_token_rate + self.random_token_rate > 1.0 + 1e-9:
            raise ValueError(
                f"MaskingConfig.mask_token_rate={self.mask_token_rate} + random_token_rate="
                f"{self.random_token_rate} exceeds 1; the rest of the chosen tokens is kept.")
        if self.max_ngram_size < 1:
            raise ValueError(f"MaskingConfig.max_ngram_size={self.max_ngram_size} must be at least 1.")


@dataclasses.dataclass(frozen=True)
class MaskingSchedule:
    """`run_pretraining.masking_schedule`: the masking rate falls in steps over a run.

    `rates[0]` until step `round(boundaries[0] * num_train_steps)`, then
    `rates[1]` until the next boundary, and so on. The defaults are mmBERT's
    (Marone et al. 2025): 30% for its first 2.3T tokens, 15% for the next
    600B (with the context extension), 5% for the last 100B (the decay),
    as shares of its 3T. It replaces `MaskingConfig.masked_lm_prob` in
    training; held-out evaluation keeps `masked_lm_prob`, so every
    evaluation of the run is comparable. `max_predictions_per_seq` must hold
    the largest rate's predictions.

    Args:
        rates: tuple of float in (0, 1]. Defaults to (0.3, 0.15, 0.05).
        boundaries: tuple of float, increasing, in (0, 1): where each next
            rate starts, as a share of `num_train_steps`; one fewer than
            `rates`. Defaults to (0.767, 0.967).

    Example:

    >>> schedule = kbert.data.MaskingSchedule((0.3, 0.15), (0.5,))
    >>> float(schedule.rate_at(tf.constant(600), num_train_steps=1000))
    0.15

    Reference:
        - [Marone et al., 2025](https://arxiv.org/abs/2509.06888) (mmBERT)
        - [Ankner et al., 2023](https://arxiv.org/abs/2305.15096)
    """

    rates: tuple[float, ...] = (0.3, 0.15, 0.05)
    boundaries: tuple[float, ...] = (0.767, 0.967)

    def validate(self) -> None:
        """Raises ValueError naming the setting that is out of range."""
        rates, boundaries = tuple(self.rates), tuple(self.boundaries)
        if not rates or any(not 0.0 < rate <= 1.0 for rate in rates):
            raise ValueError(f"MaskingSchedule.rates={rates} must be rates in (0, 1].")
        if len(boundaries) != len(rates) - 1:
            raise ValueError(f"MaskingSchedule.boundaries={boundaries} must have one value "
                             f"fewer than MaskingSchedule.rates={rates}.")
        if any(not 0.0 < b < 1.0 for b in boundaries) or list(boundaries) != sorted(
                set(boundaries)):
            raise ValueError(f"MaskingSchedule.boundaries={boundaries} must increase within "
                             "(0, 1): shares of num_train_steps.")

    def boundary_steps(self, num_train_steps: int) -> list[int]:
        """The steps where each next rate starts."""
        return [round(share * num_train_steps) for share in self.boundaries]

    def rate(self, step: int, num_train_steps: int) -> float:
        """The rate of step `step` (0-based)."""
        return self.rates[bisect.bisect_right(self.boundary_steps(num_train_steps), step)]

    def rate_at(self, step: tf.Tensor, num_train_steps: int) -> tf.Tensor:
        """`rate` in TensorFlow ops: of step `step` (an int tensor), as a float64 scalar tensor."""
        index = tf.searchsorted(tf.constant(self.boundary_steps(num_train_steps), tf.int64),
                                tf.reshape(tf.cast(step, tf.int64), [1]), side="right")[0]
        return tf.gather(tf.constant(self.rates, tf.float64), index)


class DynamicMasker:
    """Masks batches of unmasked instances with stateless random ops.

    The same `(token_ids, lengths, seed)` always gives the same masks, on any
    machine and after any resume; the reader keys `seed` by its seed, the
    input pipeline and the batch number.

    Args:
        vocab: `VocabInfo`. `[CLS]`, `[SEP]`, `[MASK]` ids, vocabulary size
            (random replacements) and `##` piece ids (whole words).
        max_predictions_per_seq: int. Most predictions per instance: the
            width of the outputs' prediction axis.
        config: `MaskingConfig` or None (its defaults).

    Example:

    >>> masker = DynamicMasker(VocabInfo.from_vocab(read_vocab("vocab.txt")), 20)
    >>> ids, positions, labels, weights = masker(token_ids, lengths, tf.constant([1, 2]))
    """

    def __init__(self, vocab: VocabInfo, max_predictions_per_seq: int,
                 config: MaskingConfig | None = None):
        self.vocab = vocab
        self.max_predictions_per_seq = max_predictions_per_seq
        self.config = config or MaskingConfig()
        self.config.validate()
        if max_predictions_per_seq < 1:
            raise ValueError(f"max_predictions_per_seq={max_predictions_per_seq} must be at least 1.")
        continuation = np.zeros(vocab.vocab_size, bool)
        continuation[sorted(vocab.continuation_ids)] = True
        self._continuation = tf.constant(continuation)

    def __call__(self, token_ids: tf.Tensor, lengths: tf.Tensor, seed: tf.Tensor,
                 masked_lm_prob: tf.Tensor | None = None):
        """Masks a batch.

        Args:
            token_ids: int `[N, S]`. Unmasked instances, zero padded.
            lengths: int `[N]`. Tokens per instance (the rest is padding).
            seed: int `[2]`. Stateless seed of this batch.
            masked_lm_prob: float scalar tensor or None. This batch's rate
                (a `MaskingSchedule`'s); None: the config's `masked_lm_prob`.

        Returns:
            `(masked_ids, positions, labels, weights)`: int32 `[N, S]`, int32
            `[N, P]` sorted positions (zero padded), int32 `[N, P]` original
            ids there, float32 `[N, P]` 1 for a prediction and 0 for padding,
            with `P = max_predictions_per_seq`.
        """
        token_ids = tf.cast(token_ids, tf.int32)
        lengths = tf.cast(lengths, tf.int32)
        config, vocab = self.config, self.vocab
        select_seed, replace_seed, random_seed = tf.unstack(
            tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), 3))
        width = tf.shape(token_ids)[1]
        index = tf.range(width)[None, :]
        candidate = ((index < lengths[:, None]) & tf.not_equal(token_ids, vocab.cls_id)
                     & tf.not_equal(token_ids, vocab.sep_id))
        budget = self._num_to_predict(lengths, masked_lm_prob)
        if config.do_whole_word_mask or config.max_ngram_size > 1:
            chosen, span_start = self._choose_spans(token_ids, candidate, budget, select_seed)
        else:
            chosen = _choose_tokens(candidate, budget, select_seed)
            span_start = index + tf.zeros_like(token_ids)
        # One uniform draw per token; a span uses its first token's (Model Garden).
        draw = tf.random.stateless_uniform(tf.shape(token_ids), replace_seed)
        if config.max_ngram_size > 1:
            draw = tf.gather(draw, tf.maximum(span_start, 0), batch_dims=1)
        to_mask = chosen & (draw < config.mask_token_rate)
        to_random = chosen & (draw >= config.mask_token_rate) & (
            draw < config.mask_token_rate + config.random_token_rate)
        random_ids = tf.random.stateless_uniform(tf.shape(token_ids), random_seed, minval=0,
                                                 maxval=vocab.vocab_size, dtype=tf.int32)
        masked = tf.where(to_mask, vocab.mask_id, tf.where(to_random, random_ids, token_ids))
        positions, weights = _sorted_positions(chosen, self.max_predictions_per_seq)
        labels = tf.gather(token_ids, positions, batch_dims=1) * tf.cast(weights, tf.int32)
        return masked, positions, labels, weights

    def _num_to_predict(self, lengths: tf.Tensor, rate: tf.Tensor | None = None) -> tf.Tensor:
        # float64 and round-half-to-even: Python's `round(len * rate)` exactly.
        rate = self.config.masked_lm_prob if rate is None else tf.cast(rate, tf.float64)
        rounded = tf.round(tf.cast(lengths, tf.float64) * rate)
        return tf.cast(tf.clip_by_value(rounded, 1.0, self.max_predictions_per_seq), tf.int32)

    def _choose_spans(self, token_ids, candidate, budget, seed):
        """Whole words and n-grams: returns `(chosen [N, S] bool, span start per chosen token)`.

        A `tf.while_loop` pops one span per active instance per round: the
        original's loop, run for every instance of the batch at once.
        """
        sizes = self.config.max_ngram_size
        spans = _Spans(candidate, self._starts(token_ids, candidate), sizes)
        order_seed, size_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
        keys = tf.where(spans.valid, tf.random.stateless_uniform(tf.shape(spans.begin), order_seed), 2.0)
        order = tf.argsort(keys, axis=-1, stable=True)
        begins = tf.gather(spans.begin, order, batch_dims=2)
        ends = tf.gather(spans.end, order, batch_dims=2)
        counts = tf.reduce_sum(tf.cast(spans.valid, tf.int32), axis=-1)  # [N, sizes]
        n_rows, width = tf.shape(candidate)[0], tf.shape(candidate)[1]
        rows = tf.range(n_rows)
        index = tf.range(width)[None, :]
        size_of = tf.range(1, sizes + 1)[None, :]
        log_weights = tf.math.log(1.0 / tf.cast(size_of, tf.float32))

        def available(pointer, num_masked):
            return (pointer < counts) & (size_of <= (budget - num_masked)[:, None])

        def cond(step, pointer, num_masked, covered, span_start):
            return tf.reduce_any(available(pointer, num_masked))

        def body(step, pointer, num_masked, covered, span_start):
            usable = available(pointer, num_masked)
            active = tf.reduce_any(usable, axis=1)
            logits = tf.where(usable, log_weights, -1e9)
            size = tf.random.stateless_categorical(
                logits, 1, tf.random.experimental.stateless_fold_in(size_seed, step),
                dtype=tf.int32)[:, 0]
            slot = tf.stack([rows, size, tf.minimum(tf.gather(pointer, size, batch_dims=1),
                                                    width - 1)], axis=1)
            begin, end = tf.gather_nd(begins, slot), tf.gather_nd(ends, slot)
            pointer += tf.one_hot(size, sizes, dtype=tf.int32) * tf.cast(active, tf.int32)[:, None]
            inside = (index >= begin[:, None]) & (index < end[:, None])
            accept = (active & (num_masked + end - begin <= budget)
                      & ~tf.reduce_any(inside & covered, axis=1))
            new = inside & accept[:, None]
            return (step + 1, pointer, num_masked + tf.where(accept, end - begin, 0),
                    covered | new, tf.where(new, begin[:, None], span_start))

        state = (tf.constant(0, tf.int64), tf.zeros_like(counts), tf.zeros_like(budget),
                 tf.zeros_like(candidate), -tf.ones_like(token_ids))
        _, _, _, covered, span_start = tf.while_loop(cond, body, state)
        return covered, span_start

    def _starts(self, token_ids, candidate):
        """Where a word (or, without whole words, a token) starts among the candidates."""
        if not self.config.do_whole_word_mask:
            return candidate
        continuation = tf.gather(self._continuation, tf.clip_by_value(
            token_ids, 0, self.vocab.vocab_size - 1))
        previous = tf.pad(candidate[:, :-1], [[0, 0], [1, 0]])
        return candidate & ~(continuation & previous)


class _Spans:
    """Every n-gram of contiguous groups (words or tokens), n = 1..sizes, as `[N, sizes, S]` tensors.

    Slot `[i, n - 1, g]` is the span of groups `g .. g + n - 1` of instance
    i: token range `[begin, end)`, `valid` when those groups exist and
    follow each other with nothing (`[SEP]`) between.
    """

    def __init__(self, candidate: tf.Tensor, starts: tf.Tensor, sizes: int):
        n_rows, width = tf.shape(candidate)[0], tf.shape(candidate)[1]
        group = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1  # Group of each token.
        num_groups = tf.reduce_sum(tf.cast(starts, tf.int32), axis=1)
        flat = tf.reshape(tf.range(n_rows)[:, None] * width + group, [-1])
        position = tf.reshape(tf.broadcast_to(tf.range(width)[None, :], [n_rows, width]), [-1])
        keep = tf.reshape(candidate, [-1])
        segments = n_rows * width
        # Exclusive ends and begins of each group: min / max + 1 of its tokens.
        begin = tf.math.unsorted_segment_min(tf.boolean_mask(position, keep),
                                             tf.boolean_mask(flat, keep), segments)
        end = tf.math.unsorted_segment_max(tf.boolean_mask(position, keep),
                                           tf.boolean_mask(flat, keep), segments) + 1
        begin, end = tf.reshape(begin, [n_rows, width]), tf.reshape(end, [n_rows, width])
        exists = tf.range(width)[None, :] < num_groups[:, None]
        # Group g + 1 starts where group g ends.
        follows = tf.pad(tf.equal(end[:, :-1], begin[:, 1:]), [[0, 0], [0, 1]])
        begins, ends, valids = [], [], []
        valid, span_end = exists, end
        for n in range(1, sizes + 1):
            if n > 1:
                valid = valid & _shift_left(follows, n - 2) & _shift_left(exists, n - 1)
                span_end = _shift_left(end, n - 1)
            begins.append(begin)
            ends.append(span_end)
            valids.append(valid)
        self.begin = tf.stack(begins, axis=1)
        self.end = tf.stack(ends, axis=1)
        self.valid = tf.stack(valids, axis=1)


def _shift_left(x: tf.Tensor, k: int) -> tf.Tensor:
    """`x[:, g + k]` at `g` (zeros/False past the end)."""
    if k == 0:
        return x
    return tf.pad(x[:, k:], [[0, 0], [0, k]])


def _choose_tokens(candidate: tf.Tensor, budget: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """A uniformly random subset of `budget` candidates per row (the original's `sample`)."""
    keys = tf.where(candidate, tf.random.stateless_uniform(tf.shape(candidate), seed), 2.0)
    rank = tf.argsort(tf.argsort(keys, axis=1, stable=True), axis=1, stable=True)
    return candidate & (rank < budget[:, None])


def _sorted_positions(chosen: tf.Tensor, width: int) -> tuple[tf.Tensor, tf.Tensor]:
    """The chosen positions in increasing order, zero padded to `width`, and their weights."""
    length = tf.shape(chosen)[1]
    index = tf.range(length)[None, :]
    order = tf.argsort(tf.where(chosen, index, length + index), axis=1, stable=True)
    if width > 0:
        order = tf.pad(order, [[0, 0], [0, tf.maximum(width - length, 0)]])[:, :width]
    count = tf.reduce_sum(tf.cast(chosen, tf.int32), axis=1)
    valid = tf.range(width)[None, :] < count[:, None]
    return tf.where(valid, order, 0), tf.cast(valid, tf.float32)
