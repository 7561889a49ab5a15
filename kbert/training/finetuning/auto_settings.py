"""Fine-tuning settings that follow the encoder and the data: `learning_rate`,
`train_batch_size`, `num_train_epochs` and `warmup_proportion` set to `"auto"`.

google-research/bert fine-tunes BERT-base at 2e-5 to 5e-5, but its README
for the 24 small BERTs (L2..L12 x H128..H768) picks each task's rate from
3e-4, 1e-4, 5e-5 and 3e-5: small encoders want rates several times higher,
and at BERT-base's rate a MiniLM-sized encoder barely moves in a few epochs.
`AUTO_LEARNING_RATES` is kbert's table of those recommendations by hidden
size, checked by `benchmarks/finetuning_quality.py` (see BENCHMARKS.md,
finetuning_quality, and docs/finetuning.md). Small training sets also need more passes than BERT's 3
epochs (Mosbach et al., 2021; Zhang et al., 2021): with the best dev
checkpoint kept, extra epochs cost time, not quality. A tiny training set (a
few hundred SQuAD questions, under 2,000 rows) also gets the smallest batch of
the small-BERT grid, 8: the same passes then make four times the updates
(XQuAD, CoNLL; see BENCHMARKS.md, finetuning_quality). An explicit number always wins.

Reference: Mosbach et al., 2021. "On the Stability of Fine-tuning BERT:
Misconceptions, Explanations, and Strong Baselines"; Zhang et al., 2021.
"Revisiting Few-sample BERT Fine-tuning".
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class RateRow:
    """One row of `AUTO_LEARNING_RATES`: encoders up to `max_hidden_dim` get `learning_rate`."""

    max_hidden_dim: int
    learning_rate: float
    examples: str


# Ordered by size; the first row whose `max_hidden_dim` >= the encoder's applies.
AUTO_LEARNING_RATES = (
    RateRow(128, 3e-4, "BERT-tiny (L2/H128), L4..L12/H128"),
    RateRow(512, 1e-4, "BERT-mini (L4/H256), BERT-small (L4/H512), BERT-medium (L8/H512), "
            "all-MiniLM-L6-v2 (L6/H384)"),
    RateRow(768, 3e-5, "BERT-base (L12/H768), L2..L10/H768"),
    RateRow(10**9, 2e-5, "BERT-large (L24/H1024) and larger"),
)
# Feature-based use (`--freeze_encoder`) trains only a head that starts from
# scratch; the rates above are for nudging pre-trained weights and leave such a
# head undertrained. A sweep of a frozen MiniLM's head on CoNLL (1e-4 to 1e-2; see
# BENCHMARKS.md, ner_crf) put 3e-3 near the top without the largest step.
FROZEN_ENCODER_LEARNING_RATE = 3e-3
# Batch of "auto": BERT's 32, or 8 (the smallest of google-research/bert's
# small-BERT grid, 8..128) for training sets under SMALL_TRAINING_SET rows, which
# at 32 make too few updates even over 10 epochs; rounded up to a multiple of the
# replicas. On MiniLM, XQuAD and CoNLL 1,500 scored higher at each smaller batch
# (see BENCHMARKS.md, finetuning_quality).
DEFAULT_BATCH_SIZE = 32
SMALL_SET_BATCH_SIZE = 8
SMALL_TRAINING_SET = 2000
# Epochs of "auto": BERT's 3, raised for small training sets until the run
# makes MIN_AUTO_STEPS optimizer steps and sees MIN_AUTO_EXAMPLES rows (BERT's
# 3 epochs of a ~3,300-row set such as MRPC), but never beyond MAX_AUTO_EPOCHS.
DEFAULT_EPOCHS = 3
MIN_AUTO_STEPS = 300
MIN_AUTO_EXAMPLES = 10_000
MAX_AUTO_EPOCHS = 10
# Warm-up of "auto": BERT's 10% of the steps, but at least MIN_WARMUP_STEPS
# (at most a third of the run): Adam's first updates move every weight by about
# the learning rate whatever the gradient's size, and a 5-step warm-up at a
# small encoder's rate can wreck the pre-trained weights before the new head
# has learnt anything.
WARMUP_PROPORTION = 0.1
MIN_WARMUP_STEPS = 20


def auto_learning_rate(hidden_dim: int) -> float:
    """The fine-tuning learning rate `AUTO_LEARNING_RATES` gives an encoder of this width.

    Args:
        hidden_dim: int. The encoder's hidden size (`hidden_size` in bert_config.json).

    Returns:
        float: the peak AdamW learning rate.

    Example:

    >>> auto_learning_rate(384)  # all-MiniLM-L6-v2
    0.0001
    """
    return next(row.learning_rate for row in AUTO_LEARNING_RATES
                if hidden_dim <= row.max_hidden_dim)


def resolve_learning_rate(learning_rate: float | str, encoder_config: Mapping[str, Any],
                          frozen_encoder: bool = False) -> float:
    """`learning_rate` as a number: the table's rate for `"auto"`, else the value itself.

    Args:
        learning_rate: float or `"auto"`. The `run_finetuning.learning_rate` binding.
        encoder_config: mapping with `hidden_dim` (keras-hub names: the
            arguments `kbert.checkpoints.read_encoder_config` returns).
        frozen_encoder: bool. Only the head trains (`--freeze_encoder`): `"auto"`
            is then `FROZEN_ENCODER_LEARNING_RATE`, whatever the encoder's size.

    Returns:
        float, > 0.

    Raises:
        ValueError: neither `"auto"` nor a positive number.
    """
    if learning_rate == AUTO:
        if frozen_encoder:
            return FROZEN_ENCODER_LEARNING_RATE
        return auto_learning_rate(encoder_config["hidden_dim"])
    _check_number("learning_rate", learning_rate, low=0.0, low_inclusive=False)
    return float(learning_rate)


def resolve_train_batch_size(train_batch_size: int | str, num_rows: int,
                             num_replicas: int = 1) -> int:
    """`train_batch_size` as a number: for `"auto"`, 32, or 8 for tiny training sets.

    Args:
        train_batch_size: int or `"auto"`. The `run_finetuning.train_batch_size` binding.
        num_rows: int. Rows of one training epoch (examples, QA windows or packed rows).
        num_replicas: int. Replicas in sync; `"auto"` rounds up to a multiple of them.

    Returns:
        int >= 1: the value itself, or for `"auto"` 32 (8 under 2,000 rows),
        rounded up to a multiple of `num_replicas`.

    Raises:
        ValueError: neither `"auto"` nor an integer >= 1.

    Example:

    >>> resolve_train_batch_size("auto", 5749), resolve_train_batch_size("auto", 1147)
    (32, 8)
    """
    if train_batch_size != AUTO:
        check_train_batch_size(train_batch_size)
        return int(train_batch_size)
    size = SMALL_SET_BATCH_SIZE if num_rows < SMALL_TRAINING_SET else DEFAULT_BATCH_SIZE
    return math.ceil(size / num_replicas) * num_replicas


def resolve_num_train_epochs(num_train_epochs: float | str, steps_per_epoch: int,
                             num_rows: int = 0) -> float:
    """`num_train_epochs` as a number: for `"auto"`, 3, or more for small training sets.

    Args:
        num_train_epochs: float or `"auto"`. The `run_finetuning.num_train_epochs` binding.
        steps_per_epoch: int. Optimizer steps per pass over the training data.
        num_rows: int. Rows of one pass (0: only the step rule applies).

    Returns:
        float: the value itself, or for `"auto"` the fewest whole epochs from 3
        up to 10 that make at least 300 steps and see at least 10,000 rows.

    Example:

    >>> resolve_num_train_epochs("auto", 125, 4000), resolve_num_train_epochs("auto", 47)
    (3.0, 7.0)
    >>> resolve_num_train_epochs("auto", 144, 1147)  # XQuAD's windows at batch 8
    9.0
    """
    if num_train_epochs != AUTO:
        _check_number("num_train_epochs", num_train_epochs, low=0.0, low_inclusive=False)
        return float(num_train_epochs)
    needed = math.ceil(MIN_AUTO_STEPS / max(1, steps_per_epoch))
    if num_rows > 0:
        needed = max(needed, math.ceil(MIN_AUTO_EXAMPLES / num_rows))
    return float(min(MAX_AUTO_EPOCHS, max(DEFAULT_EPOCHS, needed)))


def resolve_warmup_steps(warmup_proportion: float | str, total_steps: int) -> int:
    """The warm-up steps of a run of `total_steps`.

    Args:
        warmup_proportion: float in [0, 1) (that fraction of the steps), or
            `"auto"`: 10% of the steps, but at least `MIN_WARMUP_STEPS` and at
            most a third of the run.
        total_steps: int. Steps of the whole run.

    Returns:
        int in [0, total_steps).

    Example:

    >>> resolve_warmup_steps("auto", 90), resolve_warmup_steps("auto", 1000)
    (20, 100)
    """
    if warmup_proportion == AUTO:
        return max(int(total_steps * WARMUP_PROPORTION), min(MIN_WARMUP_STEPS, total_steps // 3))
    check_warmup_proportion(warmup_proportion)
    return int(total_steps * warmup_proportion)


def check_learning_rate(learning_rate: float | str) -> None:
    """Raises a clear error unless `learning_rate` is `"auto"` or a number > 0."""
    if learning_rate != AUTO:
        _check_number("learning_rate", learning_rate, low=0.0, low_inclusive=False)


def check_train_batch_size(train_batch_size: int | str) -> None:
    """Raises a clear error unless `train_batch_size` is `"auto"` or an integer >= 1."""
    if train_batch_size == AUTO:
        return
    if (not isinstance(train_batch_size, int) or isinstance(train_batch_size, bool)
            or train_batch_size < 1):
        raise ValueError(f"run_finetuning.train_batch_size={train_batch_size!r}; it must be an "
                         "integer >= 1 or \"auto\".")


def check_num_train_epochs(num_train_epochs: float | str) -> None:
    """Raises a clear error unless `num_train_epochs` is `"auto"` or a number > 0."""
    if num_train_epochs != AUTO:
        _check_number("num_train_epochs", num_train_epochs, low=0.0, low_inclusive=False)


def check_warmup_proportion(warmup_proportion: float | str) -> None:
    """Raises a clear error unless `warmup_proportion` is `"auto"` or in [0, 1)."""
    if warmup_proportion != AUTO:
        _check_number("warmup_proportion", warmup_proportion, low=0.0, low_inclusive=True)
        if warmup_proportion >= 1:
            raise ValueError(f"run_finetuning.warmup_proportion={warmup_proportion!r}; it must be "
                             "in [0, 1) or \"auto\".")


def _check_number(name: str, value: Any, low: float, low_inclusive: bool) -> None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not number or math.isnan(value) or value < low or (value == low and not low_inclusive):
        bound = f">= {low}" if low_inclusive else f"> {low}"
        raise ValueError(f"run_finetuning.{name}={value!r}; it must be a number {bound} or "
                         "\"auto\".")
