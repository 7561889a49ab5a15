"""The settings of one pre-training run: `run_pretraining`'s arguments, held once and checked.

`run_pretraining` builds a `PretrainingSettings` from its keyword arguments as
its first step (the same names; the defaults live in its signature, which gin
reads) and passes it down; `validate` refuses bad values before any file is
read. The data's sidecar may then fill in `vocab_file` and `do_lower_case`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any
from typing import Callable

import keras
import tensorflow as tf

from kbert.data.packing import PackingConfig
from kbert.data.pretraining.dynamic_masking import MaskingConfig
from kbert.data.pretraining.dynamic_masking import MaskingSchedule
from kbert.training.batch_size_warmup import BatchSizeSchedule
from kbert.training.batch_size_warmup import BatchSizeWarmup
from kbert.training.optimizer import OptimizerConfig
from kbert.training.strategy import is_chief
from kbert.training.warmup_stable_decay import StableDecay

DTYPE_POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


@dataclasses.dataclass(frozen=True)
class PretrainingSettings:
    """`run_pretraining`'s arguments (see its docstring), with `strategy` resolved.

    Example:

    >>> settings = PretrainingSettings(**arguments)  # every argument of run_pretraining
    >>> settings.validate()
    >>> settings.micro_batch_size
    """

    input_file: str | list[str]
    model_dir: str
    build_pretrainer: Callable[[], keras.Model]
    strategy: tf.distribute.Strategy
    train_batch_size: int
    max_seq_length: int
    max_predictions_per_seq: int
    num_train_steps: int
    num_warmup_steps: int
    learning_rate: float
    optimizer: str
    weight_decay_rate: float
    save_checkpoints_steps: int
    keep_checkpoint_max: int
    log_every_steps: int
    steps_per_execution: int
    gradient_accumulation_steps: int
    dtype_policy: str
    jit_compile: bool
    shuffle_buffer_size: int
    seed: int
    masking: str
    masking_config: MaskingConfig | None
    packing: PackingConfig | None
    stable_decay: StableDecay | None
    optimizer_config: OptimizerConfig | None
    batch_size_warmup: BatchSizeWarmup | None
    masking_schedule: MaskingSchedule | None
    init_checkpoint: str | None
    vocab_file: str | None
    do_lower_case: bool | None
    print_fn: Callable[[str], None]
    eval_input_file: str | list[str] | None
    eval_every_steps: int | None
    max_eval_steps: int | None
    eval_batch_size: int | None
    do_train: bool

    def validate(self) -> None:
        """Refuses settings that are wrong whatever the data: counts, dtype policy, batch split.

        Raises:
            ValueError: naming the binding, its value and what it must be.
        """
        _check_positive(train_batch_size=self.train_batch_size,
                        save_checkpoints_steps=self.save_checkpoints_steps,
                        log_every_steps=self.log_every_steps,
                        steps_per_execution=self.steps_per_execution,
                        keep_checkpoint_max=self.keep_checkpoint_max,
                        gradient_accumulation_steps=self.gradient_accumulation_steps)
        # 0 steps writes the never-pre-trained model: a baseline for comparisons.
        if not isinstance(self.num_train_steps, int) or self.num_train_steps < 0:
            raise ValueError(f"run_pretraining.num_train_steps={self.num_train_steps!r} must be "
                             "0 (write the never-pre-trained model) or a positive integer.")
        _check_positive(**{name: value for name, value in (
            ("eval_every_steps", self.eval_every_steps), ("max_eval_steps", self.max_eval_steps),
            ("eval_batch_size", self.eval_batch_size)) if value is not None})
        if not self.do_train and not self.eval_input_file:
            raise ValueError("--nodo_train needs --do_eval with --eval_input_file (the held-out "
                             "TFRecords to evaluate); there is nothing else to do.")
        if self.dtype_policy not in DTYPE_POLICIES:
            raise ValueError(f"run_pretraining.dtype_policy={self.dtype_policy!r} is not one of "
                             f"{', '.join(DTYPE_POLICIES)}.")
        replicas = self.strategy.num_replicas_in_sync
        accumulation = self.gradient_accumulation_steps
        if self.train_batch_size % (replicas * accumulation):
            raise ValueError(
                f"run_pretraining.train_batch_size={self.train_batch_size} is not divisible by "
                f"{replicas} replica(s) x gradient_accumulation_steps={accumulation}; use a "
                f"multiple of {replicas * accumulation}."
            )
        self.batch_schedule  # pylint: disable=pointless-statement  (checks batch_size_warmup)
        if self.masking_schedule is not None:
            if self.masking != "dynamic":
                raise ValueError(
                    "run_pretraining.masking_schedule changes the rate of masks drawn while "
                    f"reading: it needs run_pretraining.masking = \"dynamic\" (and data made "
                    f"with --masking=dynamic), not {self.masking!r}.")
            self.masking_schedule.validate()

    def with_sidecar_defaults(self, metadata: dict[str, Any] | None) -> PretrainingSettings:
        """These settings, with `vocab_file` and `do_lower_case` from the data's sidecar if unset.

        Args:
            metadata: dict or None. The data's sidecar (`read_pretraining_metadata`).

        Returns:
            A `PretrainingSettings`; the vocabulary the sidecar names counts
            only where it exists.
        """
        if not metadata:
            return self
        return dataclasses.replace(
            self, vocab_file=self.vocab_file or _sidecar_vocab(metadata),
            do_lower_case=(metadata.get("do_lower_case") if self.do_lower_case is None
                           else self.do_lower_case))

    @property
    def evaluates(self) -> bool:
        """Whether held-out data is evaluated (`--eval_input_file`)."""
        return bool(self.eval_input_file)

    @property
    def eval_interval(self) -> int:
        """Steps between evaluations: `eval_every_steps`, else every checkpoint."""
        return self.eval_every_steps or self.save_checkpoints_steps

    @property
    def chief(self) -> bool:
        """Whether this worker writes the summaries and the final files."""
        return is_chief(self.strategy)

    @property
    def batch_schedule(self) -> BatchSizeSchedule:
        """Micro-batches per step (`batch_size_warmup`), and which step a micro-batch feeds."""
        return BatchSizeSchedule(self.train_batch_size, self.gradient_accumulation_steps,
                                 self.max_seq_length, self.batch_size_warmup)

    @property
    def optimizer_settings(self) -> OptimizerConfig:
        """`optimizer_config`, or BERT's values when None."""
        return self.optimizer_config or OptimizerConfig()

    @property
    def micro_batch_size(self) -> int:
        """Global examples per micro-batch (one of `gradient_accumulation_steps`)."""
        return self.train_batch_size // self.gradient_accumulation_steps

    @property
    def write_dir(self) -> str:
        """Where this worker writes checkpoints."""
        return self.model_dir if self.chief else _worker_dir(self.model_dir, self.strategy)


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"run_pretraining.{name}={value!r} must be a positive integer.")


def _sidecar_vocab(metadata: dict[str, Any]) -> str | None:
    flags = metadata.get("flags") or {}
    candidate = metadata.get("vocab_file") or flags.get("vocab_file")
    return candidate if candidate and tf.io.gfile.exists(candidate) else None


def _worker_dir(model_dir: str, strategy: tf.distribute.Strategy) -> str:
    # MultiWorkerMirroredStrategy needs every worker to take part in saving;
    # non-chief workers write to a scratch directory they delete afterwards.
    resolver = strategy.cluster_resolver
    return os.path.join(model_dir, f".worker_{resolver.task_type}_{resolver.task_id}")
