"""Batch-size warmup (ModernBERT): the batch grows from a few micro-batches to the full one."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class BatchSizeWarmup:
    """`run_pretraining.batch_size_warmup`: start with a smaller batch, grow it over the first tokens.

    The batch grows in whole micro-batches (`train_batch_size /
    gradient_accumulation_steps` rows each): from `min_batch_size` rows, one
    micro-batch more at a time, to `train_batch_size`, spending the same
    number of steps at each size so that the sizes below the full one take
    `warmup_tokens` tokens together (a row counts `max_seq_length` tokens).
    ModernBERT's `BatchSizeWarmupScheduler` does the same in token time
    (768 -> 4,608 rows over 50B tokens for ModernBERT-base); early in
    training small batches give more updates for the same data at no loss.
    The learning-rate schedule still counts optimizer steps.

    Args:
        min_batch_size: int. Rows of the first steps' batch; a multiple of
            the micro-batch, at most `train_batch_size`.
        warmup_tokens: int. Tokens the smaller batches take together.

    Example:

    >>> run_pretraining(..., train_batch_size=4608, gradient_accumulation_steps=6,
    ...                 batch_size_warmup=BatchSizeWarmup(768, 50_000_000_000))

    Reference:
        - [Warner et al., 2024](https://arxiv.org/abs/2412.13663) (ModernBERT)
    """

    min_batch_size: int
    warmup_tokens: int


class BatchSizeSchedule:
    """How many micro-batches each optimizer step takes, and which step a micro-batch feeds.

    Without a `BatchSizeWarmup` every step takes `gradient_accumulation_steps`
    micro-batches. With one, sizes `k = first, first + 1, ..., full - 1` (in
    micro-batches) are held `steps_per_size` steps each, then `full`. Both
    directions are functions of the step alone, so a resumed run takes the
    batches an uninterrupted one takes.

    Args:
        train_batch_size: int. Rows of a full step.
        gradient_accumulation_steps: int. Micro-batches of a full step.
        max_seq_length: int. Tokens a row counts.
        warmup: `BatchSizeWarmup` or None.

    Raises:
        ValueError: `min_batch_size` is not a multiple of the micro-batch, or
            out of range, or `warmup_tokens` is negative (naming the binding).

    Example:

    >>> schedule = BatchSizeSchedule(32, 4, 128, BatchSizeWarmup(8, 100_000))
    >>> [schedule.micro_batches(step) for step in (0, 100, 1000)]
    [1, 2, 4]
    """

    def __init__(self, train_batch_size: int, gradient_accumulation_steps: int,
                 max_seq_length: int, warmup: BatchSizeWarmup | None = None):
        self.full = gradient_accumulation_steps
        self.micro_batch_size = train_batch_size // gradient_accumulation_steps
        self.first, self.steps_per_size = self.full, 0
        if warmup is None:
            return
        micro = self.micro_batch_size
        if (not isinstance(warmup.min_batch_size, int) or warmup.min_batch_size < micro
                or warmup.min_batch_size > train_batch_size or warmup.min_batch_size % micro):
            raise ValueError(
                f"BatchSizeWarmup.min_batch_size={warmup.min_batch_size!r} must be a multiple "
                f"of the micro-batch (train_batch_size={train_batch_size} / "
                f"gradient_accumulation_steps={gradient_accumulation_steps} = {micro} rows) "
                f"from {micro} to {train_batch_size}; the batch grows a micro-batch at a time, "
                "so raise gradient_accumulation_steps for a smaller start.")
        if not isinstance(warmup.warmup_tokens, int) or warmup.warmup_tokens < 0:
            raise ValueError(f"BatchSizeWarmup.warmup_tokens={warmup.warmup_tokens!r} must be a "
                             "non-negative integer.")
        self.first = warmup.min_batch_size // micro
        micro_batches = sum(range(self.first, self.full))
        if micro_batches and warmup.warmup_tokens:
            tokens_per_micro_batch = micro * max_seq_length
            self.steps_per_size = math.ceil(
                warmup.warmup_tokens / (tokens_per_micro_batch * micro_batches))
        else:
            self.first = self.full

    @property
    def warmup_steps(self) -> int:
        """Steps before the batch is full."""
        return (self.full - self.first) * self.steps_per_size

    def micro_batches(self, step: int) -> int:
        """Micro-batches step `step` (0-based) takes."""
        if step >= self.warmup_steps:
            return self.full
        return self.first + step // self.steps_per_size

    def steps_at_this_size(self, step: int) -> int:
        """Steps from `step` on that take as many micro-batches as it does (at least 1)."""
        if step >= self.warmup_steps:
            return 2**62
        return self.steps_per_size - step % self.steps_per_size

    def micro_batches_before(self, step: int) -> int:
        """Micro-batches the steps before `step` took together."""
        starts = self._starts()
        if step >= self.warmup_steps:
            return int(starts[-1]) + (step - self.warmup_steps) * self.full
        phase, into = divmod(step, self.steps_per_size)
        return int(starts[phase]) + into * (self.first + phase)

    def _starts(self) -> np.ndarray:
        """Micro-batches before each size's first step, and before the first full step."""
        sizes = np.arange(self.first, self.full, dtype=np.int64)
        return np.concatenate([[0], np.cumsum(sizes * self.steps_per_size)])

    def step_of_micro_batch(self, index: tf.Tensor) -> tf.Tensor:
        """The step (0-based) that micro-batch `index` (0-based, int64 tensor) feeds.

        Args:
            index: int64 scalar tensor. The micro-batch's number in the run.

        Returns:
            int64 scalar tensor.
        """
        index = tf.cast(index, tf.int64)
        full = tf.constant(self.full, tf.int64)
        if not self.warmup_steps:
            return index // full
        starts = tf.constant(self._starts(), tf.int64)
        phase = tf.searchsorted(starts, index[None], side="right", out_type=tf.int64)[0] - 1
        start = tf.gather(starts, phase)
        first_step = phase * self.steps_per_size
        size = tf.minimum(tf.constant(self.first, tf.int64) + phase, full)
        return first_step + (index - start) // size
