"""The pre-training loop: BERT (MLM + NSP) or ELECTRA under any `tf.distribute` strategy, resumable.

A custom loop rather than `Model.fit` because exact resume needs the input
pipeline's position and the dropout RNG state in the checkpoint, and because
loss normalisation and gradient clipping must see the global batch (Keras
clips each replica's partial gradient before summing them across replicas).

`run_pretraining` runs these steps, in this order in the file: `_check_settings`
(arguments and the data's sidecar), `_build_state` (model and optimizer in the
strategy's scope, input pipeline, checkpoint), `_restore_checkpoint` (exact
resume or `init_checkpoint`), `_train` (the loop, checkpoints and progress
lines; its compiled step is `_make_train_loop`), then it saves the pre-trained
directory and `summary.json`.

The loop knows no objective: the pre-trainer supplies it, keeping the
`kbert.models.Pretrainer` contract (`kbert/models/encoder.py`; `BertPretrainer`
and `ElectraPretrainer` keep it): `loss_normalizers` (what each loss is
averaged over, summed here over the global batch), `pretraining_losses` (the
loss and summable statistics of a micro-batch), `pretraining_metrics`
(statistics summed over a reporting interval -> metrics), and `encoder`,
`next_sentence` and `progress_labels`.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import os
import time
from typing import Any
from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from kbert.data import PackingConfig
from kbert.data import pretraining_dataset
from kbert.data import read_pretraining_metadata
from kbert.data.pretraining.dataset import check_pretraining_metadata
from kbert.data.pretraining.dynamic_masking import MaskingConfig
from kbert.data.pretraining.metadata import recorded_masking
from kbert.files import read_json
from kbert.files import write_text
from kbert.checkpoints import load_encoder
from kbert.checkpoints import load_pretrainer_weights
from kbert.checkpoints import save_pretrained
from kbert.models import encoder_sizes
from kbert.training.optimizer import create_optimizer
from kbert.training.strategy import cpu_has_native_bfloat16
from kbert.training.strategy import is_chief

DTYPE_POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
SUMMARY_FILE = "summary.json"


def run_pretraining(
    input_file: str | list[str],
    model_dir: str,
    build_pretrainer: Callable[[], keras.Model],
    strategy: tf.distribute.Strategy | None = None,
    train_batch_size: int = 32,
    max_seq_length: int = 128,
    max_predictions_per_seq: int = 20,
    num_train_steps: int = 100000,
    num_warmup_steps: int = 10000,
    learning_rate: float = 5e-5,
    optimizer: str = "adamw",
    weight_decay_rate: float = 0.01,
    save_checkpoints_steps: int = 1000,
    keep_checkpoint_max: int = 5,
    log_every_steps: int = 100,
    steps_per_execution: int = 1,
    gradient_accumulation_steps: int = 1,
    dtype_policy: str = "float32",
    jit_compile: bool = False,
    shuffle_buffer_size: int = 1000,
    seed: int = 12345,
    masking: str = "static",
    masking_config: MaskingConfig | None = None,
    packing: PackingConfig | None = None,
    init_checkpoint: str | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    print_fn: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Pre-trains a `BertPretrainer` or `ElectraPretrainer` on TFRecords, resuming exactly.

    The model and optimizer are built in `strategy.scope()`; each replica reads
    its share of the global batch through `distribute_datasets_from_function`.
    Every `save_checkpoints_steps` the model, optimizer, step, dropout RNG state
    and input-pipeline position are checkpointed into `model_dir`; calling
    again with the same arguments after a crash resumes from the last
    checkpoint and stops at `num_train_steps`. At the end the chief writes a
    pre-trained directory into `model_dir` (see `kbert.checkpoints.save_pretrained`)
    and `summary.json`.

    Args:
        input_file: str or list of str. TFRecord files or globs, comma-separated.
        model_dir: str. Checkpoints, TensorBoard events and the final model.
        build_pretrainer: callable returning a new `BertPretrainer` or
            `ElectraPretrainer` (or another `kbert.models.Pretrainer`, see
            the module docstring); called in `strategy.scope()`
            under `dtype_policy`. Its `encoder` is what the pre-trained
            directory holds.
        strategy: `tf.distribute.Strategy` or None (the default strategy).
        train_batch_size: int. Global batch size per optimizer step. Defaults to 32.
        max_seq_length: int. Sequence length of the data. Defaults to 128.
        max_predictions_per_seq: int. Masked positions per sequence. Defaults to 20.
        num_train_steps: int. Optimizer steps in total. Defaults to 100000.
        num_warmup_steps: int. Linear warmup steps. Defaults to 10000.
        learning_rate: float. Peak learning rate. Defaults to 5e-5.
        optimizer: str. `"adamw"` or `"lamb"`. Defaults to `"adamw"`.
        weight_decay_rate: float. Defaults to 0.01.
        save_checkpoints_steps: int. Checkpoint interval. Defaults to 1000.
        keep_checkpoint_max: int. Checkpoints kept. Defaults to 5.
        log_every_steps: int. Interval of progress lines and scalars. Defaults to 100.
        steps_per_execution: int. Steps per `tf.function` call. Defaults to 1.
        gradient_accumulation_steps: int. Micro-batches per optimizer step;
            each is `train_batch_size / gradient_accumulation_steps` examples.
            Defaults to 1.
        dtype_policy: str. `"float32"`, `"mixed_bfloat16"` or `"mixed_float16"`
            (with dynamic loss scaling). Defaults to `"float32"`.
        jit_compile: bool. XLA-compile the replica step (GPU/TPU; slower on
            CPU). Defaults to False.
        shuffle_buffer_size: int. Defaults to 1000.
        seed: int. Seeds weight initialisation, dropout, data shuffling and
            dynamic masks. Defaults to 12345.
        masking: str. `"static"` (the masks in the data) or `"dynamic"` (data
            from `--masking=dynamic`, masked anew for every batch). Must be
            what the data's sidecar records. Defaults to `"static"`.
        masking_config: `MaskingConfig` or None. Rate, `[MASK]`/random/keep
            split, whole words and n-grams of dynamic masking. Defaults to
            `MaskingConfig()` (15%, 80/10/10).
        packing: `PackingConfig` or None. Pack several instances into each
            row of `max_seq_length` (`train_batch_size` then counts packed
            rows). Defaults to None (one padded instance per row).
        init_checkpoint: str or None. Pre-trained directory to start from
            (weights only); ignored when `model_dir` has a checkpoint.
        vocab_file: str or None. Copied into `model_dir` at the end. Defaults
            to the vocabulary named by the data's sidecar, when it exists.
        do_lower_case: bool or None. Recorded in `model_dir`. Defaults to the
            data's sidecar value.
        print_fn: callable taking a str. Receives progress lines.

    Returns:
        The summary dict also written to `model_dir/summary.json`:
        `global_step`, `loss`, `masked_lm_accuracy`, `next_sentence_accuracy`
        (None for an MLM-only model), the pre-trainer's other metrics
        (`masked_lm_loss`; ELECTRA's `discriminator_loss`,
        `discriminator_accuracy`, `discriminator_auc`, `replaced_fraction`),
        `examples_per_second`, `resumed_from_step`, `wall_seconds`.

    Example:

    >>> kbert.training.run_pretraining(
    ...     "data/*.tfrecord", "out/",
    ...     lambda: kbert.models.BertPretrainer(kbert.models.BertEncoder(...)),
    ...     train_batch_size=256, num_train_steps=100000, learning_rate=1e-4)
    """
    start = time.time()
    fresh_model_dir = _is_missing_or_empty(model_dir)
    settings = _check_settings(_Settings(
        input_file=input_file, model_dir=model_dir,
        strategy=strategy or tf.distribute.get_strategy(), train_batch_size=train_batch_size,
        max_seq_length=max_seq_length, max_predictions_per_seq=max_predictions_per_seq,
        num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps,
        learning_rate=learning_rate, optimizer=optimizer, weight_decay_rate=weight_decay_rate,
        save_checkpoints_steps=save_checkpoints_steps, keep_checkpoint_max=keep_checkpoint_max,
        log_every_steps=log_every_steps, steps_per_execution=steps_per_execution,
        gradient_accumulation_steps=gradient_accumulation_steps, dtype_policy=dtype_policy,
        jit_compile=jit_compile, shuffle_buffer_size=shuffle_buffer_size, seed=seed,
        masking=masking, masking_config=masking_config, packing=packing,
        init_checkpoint=init_checkpoint, vocab_file=vocab_file, do_lower_case=do_lower_case,
        print_fn=print_fn))
    try:
        state = _build_state(settings, build_pretrainer)
        resumed_from_step = _restore_checkpoint(settings, state)
    except BaseException:
        _remove_if_fresh(model_dir, fresh_model_dir and settings.chief)
        raise
    try:
        finished = _finished_summary(settings, resumed_from_step)
        if finished is not None:
            return finished
        progress = _train(settings, state, resumed_from_step)
        if not settings.chief and tf.io.gfile.exists(settings.write_dir):
            tf.io.gfile.rmtree(settings.write_dir)
    except BaseException as e:
        state.release()
        _remove_if_fresh(model_dir, fresh_model_dir and settings.chief)
        if isinstance(e, tf.errors.DataLossError):
            raise _named_data_error(settings.files, e) from None
        raise
    finally:
        state.release()
    summary = progress.summary(resumed_from_step, wall_seconds=time.time() - start)
    if settings.chief:
        save_pretrained(model_dir, state.pretrainer.encoder, vocab_file=settings.vocab_file,
                        do_lower_case=settings.do_lower_case, pretrainer=state.pretrainer)
        write_text(os.path.join(model_dir, SUMMARY_FILE),
                   json.dumps(summary, indent=2, sort_keys=True) + "\n")
        state.writer.flush()
    print_fn("summary: " + json.dumps(summary))
    return summary


@dataclasses.dataclass(frozen=True)
class _Settings:
    """The run's settings: `run_pretraining`'s arguments and what `_check_settings` derives."""

    input_file: str | list[str]
    model_dir: str
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
    init_checkpoint: str | None
    vocab_file: str | None
    do_lower_case: bool | None
    print_fn: Callable[[str], None]
    # Derived by _check_settings: the data files, their sidecar and whether this
    # worker is the chief.
    files: list[str] = dataclasses.field(default_factory=list)
    metadata: dict[str, Any] | None = None
    chief: bool = True

    @property
    def micro_batch_size(self) -> int:
        """Global examples per micro-batch (one of `gradient_accumulation_steps`)."""
        return self.train_batch_size // self.gradient_accumulation_steps

    @property
    def write_dir(self) -> str:
        """Where this worker writes checkpoints."""
        return self.model_dir if self.chief else _worker_dir(self.model_dir, self.strategy)


@dataclasses.dataclass
class _TrainingState:
    """What the run builds and steps: model, optimizer, step, input, checkpoint and loop."""

    pretrainer: keras.Model
    optimizer: keras.optimizers.Optimizer
    global_step: tf.Variable
    iterator: Any
    next_batch: Callable[[], Any] | None
    checkpoint: tf.train.Checkpoint | None
    manager: tf.train.CheckpointManager | None
    # The checkpoint in model_dir this run resumes from, or None.
    latest: str | None
    # Made by _train: the traced loop and the TensorBoard writer.
    train_loop: Callable[[tf.Tensor], Any] | None = None
    writer: tf.summary.SummaryWriter | None = None

    def release(self) -> None:
        """Frees the input pipeline and the traced loop; keeps the model, optimizer and writer."""
        # The input iterator and the traced loop reference each other, so only
        # the garbage collector frees them. Collect now, also after an error:
        # the traceback keeps the frames that hold this state, so nothing but
        # this state may hold them. An iterator left for the interpreter's exit
        # is destroyed there, and its tf.data threads, busy until then, can
        # hold up the exit for minutes.
        self.train_loop = self.next_batch = self.iterator = None
        self.checkpoint = self.manager = None
        gc.collect()


@dataclasses.dataclass
class _Progress:
    """Where the train loop stopped and what it measured."""

    step: int
    # The values of the last progress line (empty when no step ran).
    last: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Examples and seconds of every call but the first, which traces the step.
    timed_examples: int = 0
    timed_seconds: float = 0.0

    def summary(self, resumed_from_step: int, wall_seconds: float) -> dict[str, Any]:
        """Returns the dict `run_pretraining` returns and writes to summary.json."""
        # The last progress line's metrics: always the MLM and NSP accuracies
        # (None when not measured), and whatever else the pre-trainer reports.
        metrics = {"masked_lm_accuracy": None, "next_sentence_accuracy": None,
                   **{k: v for k, v in self.last.items()
                      if k not in ("loss", "learning_rate", "examples_per_second")}}
        return {
            "global_step": self.step,
            "loss": self.last.get("loss"),
            **metrics,
            "examples_per_second": (self.timed_examples / self.timed_seconds
                                    if self.timed_seconds
                                    else self.last.get("examples_per_second")),
            "resumed_from_step": resumed_from_step,
            "wall_seconds": wall_seconds,
        }


def _check_settings(settings: _Settings) -> _Settings:
    """Checks the arguments and the data's sidecar; returns them with the files and defaults.

    Mistakes that need no model to find (flags, data files, sidecar shapes, an
    unwritable `model_dir`) fail here, before anything is built.
    """
    _check_positive(train_batch_size=settings.train_batch_size,
                    num_train_steps=settings.num_train_steps,
                    save_checkpoints_steps=settings.save_checkpoints_steps,
                    log_every_steps=settings.log_every_steps,
                    steps_per_execution=settings.steps_per_execution,
                    keep_checkpoint_max=settings.keep_checkpoint_max,
                    gradient_accumulation_steps=settings.gradient_accumulation_steps)
    if settings.dtype_policy not in DTYPE_POLICIES:
        raise ValueError(f"run_pretraining.dtype_policy={settings.dtype_policy!r} is not one of "
                         f"{', '.join(DTYPE_POLICIES)}.")
    train_batch_size = settings.train_batch_size
    replicas = settings.strategy.num_replicas_in_sync
    accumulation = settings.gradient_accumulation_steps
    if train_batch_size % (replicas * accumulation):
        raise ValueError(
            f"run_pretraining.train_batch_size={train_batch_size} is not divisible by "
            f"{replicas} replica(s) x gradient_accumulation_steps={accumulation}; use a "
            f"multiple of {replicas * accumulation}."
        )
    files = _list_input_files(settings.input_file)
    metadata = read_pretraining_metadata(files)
    _check_data_shapes(metadata, settings.max_seq_length, settings.max_predictions_per_seq, files)
    check_pretraining_metadata(metadata, settings.max_seq_length, settings.masking,
                               settings.packing)
    if not metadata:
        _check_first_record(files[0], settings.max_seq_length, settings.max_predictions_per_seq,
                            settings.masking)
    chief = is_chief(settings.strategy)
    _check_writable(settings.model_dir)
    vocab_file, do_lower_case = settings.vocab_file, settings.do_lower_case
    if metadata:
        vocab_file = vocab_file or _sidecar_vocab(metadata)
        do_lower_case = metadata.get("do_lower_case") if do_lower_case is None else do_lower_case
    return dataclasses.replace(settings, files=files, metadata=metadata, chief=chief,
                               vocab_file=vocab_file, do_lower_case=do_lower_case)


def _build_state(settings: _Settings, build_pretrainer: Callable[[], keras.Model]
                 ) -> _TrainingState:
    """Builds the model and optimizer, the input pipeline and the checkpoint holding them."""
    pretrainer, optimizer, global_step = _build_in_scope(settings, build_pretrainer)
    _check_data_vocab(settings.metadata, pretrainer, settings.vocab_file, settings.files)
    latest = tf.train.latest_checkpoint(settings.model_dir)
    iterator, next_batch = _make_input(settings, pretrainer.next_sentence, latest)
    # Keras keeps each Dropout's RNG in a SeedGenerator whose state variable is
    # not reachable through the model's checkpoint dependencies; save it apart.
    dropout_rng = [v.value for v in pretrainer.variables if "seed_generator_state" in v.path]
    # These object names are the checkpoint's layout: renaming one breaks resuming
    # from checkpoints already written.
    checkpoint = tf.train.Checkpoint(model=pretrainer, optimizer=optimizer, step=global_step,
                                     dropout_rng=dropout_rng)
    if isinstance(iterator, tf.__internal__.tracking.Trackable):
        checkpoint.data = iterator
    else:
        settings.print_fn("note: TPU input iterators cannot be checkpointed; a resumed run reads "
                          "the data in a new order (seed + step)")
    manager = tf.train.CheckpointManager(checkpoint, settings.write_dir,
                                         max_to_keep=settings.keep_checkpoint_max)
    return _TrainingState(pretrainer, optimizer, global_step, iterator, next_batch, checkpoint,
                          manager, latest)


def _build_in_scope(settings: _Settings, build_pretrainer: Callable[[], keras.Model]
                    ) -> tuple[keras.Model, keras.optimizers.Optimizer, tf.Variable]:
    """Builds the pre-trainer, optimizer and step counter in the strategy's scope and dtype."""
    strategy, dtype_policy = settings.strategy, settings.dtype_policy
    if (dtype_policy == "mixed_bfloat16" and settings.chief
            and not tf.config.list_logical_devices("GPU")
            and not isinstance(strategy, tf.distribute.TPUStrategy)
            and cpu_has_native_bfloat16() is False):
        settings.print_fn("note: this CPU has no bfloat16 matmul instructions (avx512_bf16, "
                          "amx_bf16); mixed_bfloat16 runs slower than float32 on it (see "
                          "BENCHMARKS.md)")
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(dtype_policy)
    keras.utils.set_random_seed(settings.seed)
    try:
        with strategy.scope():
            pretrainer = build_pretrainer()
            optimizer = create_optimizer(
                settings.learning_rate, settings.num_train_steps, settings.num_warmup_steps,
                settings.optimizer, weight_decay_rate=settings.weight_decay_rate,
                dtype_policy=dtype_policy)
            optimizer.build(pretrainer.trainable_variables)
            global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    finally:
        keras.config.set_dtype_policy(previous_policy)
    return pretrainer, optimizer, global_step


def _make_input(settings: _Settings, next_sentence: bool, latest: str | None):
    """Returns `(iterator, next_batch)` over the training data, as `_distributed_input`."""
    data_seed = settings.seed
    if latest and isinstance(settings.strategy, tf.distribute.TPUStrategy):
        # TPU input iterators cannot be checkpointed: reshuffle instead of
        # replaying the data seen before the checkpoint.
        data_seed = settings.seed + int(
            tf.train.load_variable(latest, "step/.ATTRIBUTES/VARIABLE_VALUE"))

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return pretraining_dataset(
            settings.files, context.get_per_replica_batch_size(settings.micro_batch_size),
            settings.max_seq_length, settings.max_predictions_per_seq,
            next_sentence=next_sentence, is_training=True,
            shuffle_buffer_size=settings.shuffle_buffer_size, seed=data_seed,
            input_context=context, masking=settings.masking,
            masking_config=settings.masking_config, vocab_file=settings.vocab_file,
            packing=settings.packing)

    return _distributed_input(settings.strategy, dataset_fn)


def _restore_checkpoint(settings: _Settings, state: _TrainingState) -> int:
    """Restores the latest checkpoint (exact resume) or `init_checkpoint`; returns the step."""
    if state.latest:
        state.checkpoint.restore(state.latest).assert_existing_objects_matched()
        settings.print_fn(f"resuming from {state.latest} (step {int(state.global_step.numpy())})")
    elif settings.init_checkpoint:
        loaded = _load_init_checkpoint(state.pretrainer, settings.init_checkpoint)
        settings.print_fn(f"initialised from {settings.init_checkpoint} ({loaded})")
    return int(state.global_step.numpy())


def _finished_summary(settings: _Settings, resumed_from_step: int) -> dict[str, Any] | None:
    """Returns the summary of a run that had already finished in `model_dir`, else None."""
    summary_path = os.path.join(settings.model_dir, SUMMARY_FILE)
    if resumed_from_step >= settings.num_train_steps and tf.io.gfile.exists(summary_path):
        # summary.json is written last, so the run had finished: nothing to do.
        settings.print_fn(f"{settings.model_dir} is already at step {resumed_from_step}; "
                          "nothing to train")
        return read_json(summary_path)
    return None


def _train(settings: _Settings, state: _TrainingState, resumed_from_step: int) -> _Progress:
    """Steps to `num_train_steps`, checkpointing, writing scalars and printing progress lines.

    Only `state` holds the input, the checkpoint and the traced loop (no local
    here does), so that `state.release()` frees them even while an error's
    traceback holds this frame.
    """
    state.train_loop, layout = _make_train_loop(
        settings.strategy, state.pretrainer, state.optimizer, state.global_step,
        settings.gradient_accumulation_steps, settings.jit_compile, state.next_batch)
    state.writer = (tf.summary.create_file_writer(settings.model_dir) if settings.chief
                    else tf.summary.create_noop_writer())
    num_train_steps, batch_size = settings.num_train_steps, settings.train_batch_size
    save_every, log_every = settings.save_checkpoints_steps, settings.log_every_steps
    progress = _Progress(step=resumed_from_step)
    step, interval, first_call = resumed_from_step, _Interval(state.pretrainer, layout), True
    while step < num_train_steps:
        next_save = (step // save_every + 1) * save_every
        num_steps = min(settings.steps_per_execution, next_save - step, num_train_steps - step)
        call_start = time.time()
        losses, statistics = (t.numpy() for t in state.train_loop(tf.constant(num_steps, tf.int32)))
        seconds = time.time() - call_start
        if not first_call:  # The first call traces the step function.
            progress.timed_examples += num_steps * batch_size
            progress.timed_seconds += seconds
        first_call = False
        _check_finite(losses, step, state.manager.latest_checkpoint)
        with state.writer.as_default():
            for i, loss in enumerate(losses):
                _scalar("loss", loss, step + i + 1)
        interval.add(losses, statistics, num_steps * batch_size, seconds)
        step += num_steps
        if step % save_every == 0 or step == num_train_steps:
            state.manager.save(checkpoint_number=step)
        if step // log_every > (step - num_steps) // log_every or step == num_train_steps:
            progress.last = interval.report(step, num_train_steps,
                                            float(_current_learning_rate(state.optimizer)),
                                            state.writer, settings.print_fn)
            interval = _Interval(state.pretrainer, layout)
    progress.step = step
    return progress


def _check_finite(losses: np.ndarray, step: int, last_checkpoint: str | None) -> None:
    """Raises if a loss of the steps after `step` is NaN or infinite."""
    bad = np.flatnonzero(~np.isfinite(losses))
    if bad.size:
        raise ValueError(
            f"loss is {losses[bad[0]]} at step {step + bad[0] + 1}; stopping. The last good "
            f"checkpoint is {last_checkpoint or 'none (none was written yet)'}. "
            "Lower run_pretraining.learning_rate or raise num_warmup_steps and resume."
        )


def _distributed_input(strategy, dataset_fn):
    """Returns `(iterator, next_batch)`: the input and a function giving one distributed batch.

    `distribute_datasets_from_function` hands each replica its share of the
    global batch, but outside the default strategy its iterator cannot be
    checkpointed. For those strategies (except TPU) each worker instead keeps
    a plain, checkpointable tf.data iterator over the very dataset that
    `distribute_datasets_from_function` would build (same `InputContext`) and
    deals its consecutive batches to its local replicas, as the distributed
    iterator does.
    """
    contexts = []

    def recording_dataset_fn(context):
        contexts.append(context)
        return dataset_fn(context)

    distributed = strategy.distribute_datasets_from_function(recording_dataset_fn)
    if strategy is tf.distribute.get_strategy() or isinstance(strategy, tf.distribute.TPUStrategy):
        iterator = iter(distributed)
        return iterator, lambda: next(iterator)
    context = contexts[0]
    local_replicas = len(strategy.extended.worker_devices)
    iterator = iter(dataset_fn(context))

    def next_batch():
        batches = [next(iterator) for _ in range(local_replicas)]
        return strategy.experimental_distribute_values_from_function(
            lambda replica: batches[replica.replica_id_in_sync_group % local_replicas])

    return iterator, next_batch


def _make_train_loop(strategy, pretrainer, optimizer, global_step, accumulation, jit_compile,
                     next_batch):
    """Returns `(train_loop, layout)`: `train_loop(num_steps)` runs `num_steps` optimizer steps.

    `train_loop` is one `tf.function` call: each step reads `accumulation`
    micro-batches from `next_batch`, runs the replica step under `strategy`
    and adds one to `global_step`. It returns two per-step tensors summed over
    replicas: the loss `[steps]`, and the pre-trainer's normalizers and
    statistics flattened into one vector per step `[steps, size]`. `layout`
    (filled when the step is traced) lists the `(name, shape)` of each part of
    that vector, in order.
    """
    layout = []
    replica_step = _make_replica_step(strategy, pretrainer, optimizer, accumulation, layout)
    step_fn = tf.function(replica_step, jit_compile=True) if jit_compile else replica_step

    @tf.function
    def train_loop(num_steps):
        # One TensorArray per output: autograph tracks names, not list items.
        losses = tf.TensorArray(tf.float32, size=num_steps)
        statistics = tf.TensorArray(tf.float32, size=num_steps)
        for i in tf.range(num_steps):
            micro_batches = tuple(next_batch() for _ in range(accumulation))
            loss, flat = strategy.run(step_fn, args=(micro_batches,))
            global_step.assign_add(1)
            losses = losses.write(i, strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None))
            statistics = statistics.write(
                i, strategy.reduce(tf.distribute.ReduceOp.SUM, flat, axis=None))
        return losses.stack(), statistics.stack()

    return train_loop, layout


def _make_replica_step(strategy, pretrainer, optimizer, accumulation, layout):
    """Returns `replica_step(micro_batches)`: one optimizer step on one replica's micro-batches.

    The loss is the pre-trainer's (`pretraining_losses`), divided by totals of
    its `loss_normalizers` over the whole global batch. Gradients are summed
    over micro-batches and then across replicas, once, before the optimizer
    clips and applies them.
    """
    variables = pretrainer.trainable_variables
    contributions = strategy.num_replicas_in_sync * accumulation
    _stop_optimizer_summing_gradients(optimizer)

    def replica_step(micro_batches):
        context = tf.distribute.get_replica_context()
        local = _add_statistics([pretrainer.loss_normalizers(*batch) for batch in micro_batches])
        # Each loss is averaged over the whole global batch, so every replica
        # and micro-batch divides by the same totals.
        totals = context.all_reduce(tf.distribute.ReduceOp.SUM, local)
        grads, loss_sum, statistics = None, 0.0, []
        # Indices of the variables the loss reaches, known when tracing: an
        # MLM-only model never uses the pooler, which then gets neither an
        # update nor weight decay.
        used = None
        for features, labels, weights in micro_batches:
            with tf.GradientTape() as tape:
                loss, micro_statistics = pretrainer.pretraining_losses(
                    features, labels, weights, totals, training=True)
                if pretrainer.losses:
                    loss += tf.add_n(pretrainer.losses) / contributions
                scaled_loss = optimizer.scale_loss(loss)
            raw_grads = tape.gradient(scaled_loss, variables)
            if used is None:
                used = [i for i, g in enumerate(raw_grads) if g is not None]
            micro_grads = [tf.convert_to_tensor(raw_grads[i]) for i in used]
            grads = micro_grads if grads is None else [a + b for a, b in zip(grads, micro_grads)]
            loss_sum += loss
            statistics.append(micro_statistics)
        grads = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        optimizer.apply_gradients(zip(grads, [variables[i] for i in used]))
        statistics = {**local, **_add_statistics(statistics)}
        layout[:] = [(name, tuple(value.shape)) for name, value in statistics.items()]
        return loss_sum, tf.concat(
            [tf.reshape(tf.cast(value, tf.float32), [-1]) for value in statistics.values()], 0)

    return replica_step


def _add_statistics(dicts: list[dict[str, tf.Tensor]]) -> dict[str, tf.Tensor]:
    """Sums dicts of tensors key by key (the first dict's keys and order)."""
    return {name: tf.add_n([d[name] for d in dicts]) if len(dicts) > 1 else dicts[0][name]
            for name in dicts[0]}


def _stop_optimizer_summing_gradients(optimizer) -> None:
    # We sum gradients across replicas ourselves (once, before clipping), so
    # the optimizer must not sum them again. Keras has no public switch.
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    if not hasattr(inner, "_all_reduce_sum_gradients"):
        raise RuntimeError("this Keras version's optimizer has no _all_reduce_sum_gradients; "
                           "kbert's pre-training loop needs updating for it")
    inner._all_reduce_sum_gradients = lambda grads_and_vars: list(grads_and_vars)


class _Interval:
    """Sums per-step statistics between two progress lines."""

    def __init__(self, pretrainer, layout: list[tuple[str, tuple[int, ...]]]):
        self.pretrainer, self.layout = pretrainer, layout
        self.steps, self.loss, self.statistics = 0, 0.0, 0.0
        self.examples, self.seconds = 0, 0.0

    def add(self, losses: np.ndarray, statistics: np.ndarray, examples: int, seconds: float):
        self.steps += len(losses)
        self.loss += float(losses.sum())
        self.statistics = self.statistics + statistics.astype(np.float64).sum(axis=0)
        self.examples += examples
        self.seconds += seconds

    def sums(self) -> dict[str, np.ndarray]:
        """The summed statistics by name, in their shapes."""
        sums, offset = {}, 0
        for name, shape in self.layout:
            size = int(np.prod(shape))
            sums[name] = np.reshape(self.statistics[offset:offset + size], shape)
            offset += size
        return sums

    def report(self, step, total, learning_rate, writer, print_fn):
        metrics = self.pretrainer.pretraining_metrics(self.sums())
        values = {
            "loss": self.loss / self.steps,
            **metrics,
            "learning_rate": learning_rate,
            "examples_per_second": self.examples / max(self.seconds, 1e-9),
        }
        with writer.as_default():
            for name, value in values.items():
                if name != "loss" and value is not None:
                    _scalar(name, value, step)
        # Metrics the model labels for the progress line; None ones (an
        # MLM-only model's NSP accuracy) are left out.
        shown = "".join(f"{label} {metrics[name]:.4f}  "
                        for name, label in self.pretrainer.progress_labels.items()
                        if metrics.get(name) is not None)
        print_fn(f"step {step}/{total}  loss {values['loss']:.4f}  {shown}"
                 f"lr {learning_rate:.3e}  examples/s {values['examples_per_second']:.1f}")
        return values


def _scalar(name: str, value: float, step: int) -> None:
    # tf.summary.scalar lives in the tensorboard package, which TF no longer
    # installs; write the same scalar event with core TF instead.
    metadata = tf.compat.v1.SummaryMetadata(data_class="DATA_CLASS_SCALAR")
    metadata.plugin_data.plugin_name = "scalars"
    tf.summary.write(name, tf.constant(value, tf.float32), step=step, metadata=metadata)


def _current_learning_rate(optimizer) -> float:
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    return float(keras.ops.convert_to_numpy(inner.learning_rate))


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"run_pretraining.{name}={value!r} must be a positive integer.")


def _list_input_files(input_file: str | list[str]) -> list[str]:
    patterns = input_file if isinstance(input_file, (list, tuple)) else str(input_file).split(",")
    files = []
    for pattern in (p.strip() for p in patterns):
        if pattern:
            # Sidecars (`<file>.meta.json`) may match a glob like `data/*`.
            files += [f for f in sorted(tf.io.gfile.glob(pattern)) if not f.endswith(".json")]
    if not files:
        raise FileNotFoundError(
            f"--input_file={','.join(patterns) if isinstance(input_file, (list, tuple)) else input_file!r} "
            "matches no files; pass TFRecord files or globs made by tools/create_pretraining_data.py."
        )
    return files


def _check_data_shapes(metadata, max_seq_length, max_predictions_per_seq, files) -> None:
    if not metadata:
        return
    where = f"the data's sidecar ({files[0]}.meta.json)"
    for key, value in (("max_seq_length", max_seq_length),
                       ("max_predictions_per_seq", max_predictions_per_seq)):
        if key == "max_predictions_per_seq" and recorded_masking(metadata) == "dynamic":
            continue  # Unmasked data: the run's setting sizes the masks.
        if key in metadata and metadata[key] != value:
            raise ValueError(
                f"run_pretraining.{key}={value} does not match {metadata[key]} recorded in "
                f"{where}; regenerate the data or pass --gin_params='run_pretraining.{key} = "
                f"{metadata[key]}'."
            )


def _check_data_vocab(metadata, pretrainer, vocab_file, files) -> None:
    if not metadata:
        return
    where = f"the data's sidecar ({files[0]}.meta.json)"
    vocabulary_size = pretrainer.encoder.vocabulary_size
    if "vocab_size" in metadata and metadata["vocab_size"] != vocabulary_size:
        raise ValueError(
            f"BertEncoder.vocabulary_size={vocabulary_size} does not match vocab_size="
            f"{metadata['vocab_size']} recorded in {where}; pass --gin_params="
            f"'BertEncoder.vocabulary_size = {metadata['vocab_size']}' or regenerate the data."
        )
    # The sidecar records the data tool's --next_sentence: "nsp" and "sop" data
    # carry next_sentence_labels, "none" data does not. An MLM-only model reads
    # either kind (the labels are not parsed); an NSP head needs the labels.
    if pretrainer.next_sentence and metadata.get("next_sentence") in ("none", False):
        raise ValueError(
            f"BertPretrainer.next_sentence=True needs next_sentence_labels, but {where} records "
            f"next_sentence={metadata['next_sentence']!r} (data written with "
            "--next_sentence=none has none); pass --gin_params='BertPretrainer.next_sentence = "
            "False' for MLM-only training or regenerate the data with --next_sentence=nsp or sop."
        )
    if vocab_file and metadata.get("vocab_sha256"):
        with tf.io.gfile.GFile(vocab_file, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if digest != metadata["vocab_sha256"]:
            raise ValueError(
                f"--vocab_file={vocab_file} has sha256 {digest[:12]}... but {where} records "
                f"vocab_sha256 {metadata['vocab_sha256'][:12]}...; pass the vocabulary the data "
                "was made with."
            )


def _check_first_record(path: str, max_seq_length: int, max_predictions_per_seq: int,
                        masking: str = "static") -> None:
    """Without a sidecar, reads one record to check its lengths against the settings.

    google-research/bert's tool writes no sidecar; a length mismatch would
    otherwise surface as a parse error deep in the first step, naming no file.
    """
    try:
        record = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
    except tf.errors.OpError as e:
        raise _named_data_error([path], e) from None
    if record is None:
        raise ValueError(f"{path} holds no records; regenerate it or leave it out of --input_file.")
    example = tf.train.Example.FromString(record.numpy())
    lengths = {name: len(feature.int64_list.value)
               for name, feature in example.features.feature.items()}
    if masking == "dynamic" and "masked_lm_positions" in lengths:
        raise ValueError(
            f"{path}: run_pretraining.masking=\"dynamic\" but the records are already masked "
            "(they have masked_lm_positions; the file has no .meta.json sidecar to say so); use "
            "run_pretraining.masking = \"static\" or data from create_pretraining_data "
            "--masking=dynamic.")
    checks = [("input_ids", "max_seq_length", max_seq_length)]
    if masking == "static":
        checks.append(("masked_lm_positions", "max_predictions_per_seq", max_predictions_per_seq))
    for feature, key, value in checks:
        if feature not in lengths:
            raise ValueError(f"{path}: the first record has no {feature!r} feature; is it "
                             "pre-training data from tools/create_pretraining_data.py?")
        if lengths[feature] != value:
            raise ValueError(
                f"{path}: records have {feature} of length {lengths[feature]} but "
                f"run_pretraining.{key}={value} (the file has no .meta.json sidecar to say so); "
                f"pass --gin_params='run_pretraining.{key} = {lengths[feature]}'.")


def _named_data_error(files: list[str], error: tf.errors.OpError) -> ValueError:
    """A clear error naming the corrupt or truncated file (and offset) of a data error."""
    from kbert.data.pretraining.tfrecord_framing import find_framing_error

    cause = str(error.message if hasattr(error, "message") else error).splitlines()[0]
    for path in files:
        problem = find_framing_error(path)
        if problem is not None:
            offset, reason = problem
            return ValueError(
                f"{path}: corrupt or truncated TFRecord at byte {offset}: {reason}. Regenerate "
                "the file (e.g. it was copied while being written) or leave it out of "
                f"--input_file. (TensorFlow: {cause})")
    return ValueError(f"reading --input_file failed: {cause}; every file's TFRecord framing "
                      "checks out, so a record's contents may be bad.")


def _is_missing_or_empty(directory: str) -> bool:
    return not tf.io.gfile.isdir(directory) or not tf.io.gfile.listdir(directory)


def _remove_if_fresh(model_dir: str, fresh: bool) -> None:
    # A run that fails before its first checkpoint, in a directory that was
    # empty or missing, leaves nothing behind (no operative_config.gin, no
    # events file); once a checkpoint exists the directory is kept to resume.
    if fresh and tf.io.gfile.isdir(model_dir) and tf.train.latest_checkpoint(model_dir) is None:
        tf.io.gfile.rmtree(model_dir)


def _sidecar_vocab(metadata) -> str | None:
    flags = metadata.get("flags") or {}
    candidate = metadata.get("vocab_file") or flags.get("vocab_file")
    return candidate if candidate and tf.io.gfile.exists(candidate) else None


def _check_writable(model_dir: str) -> None:
    probe = os.path.join(model_dir, f".write_test_{os.getpid()}")
    try:
        tf.io.gfile.makedirs(model_dir)
        with tf.io.gfile.GFile(probe, "w") as f:
            f.write("ok")
        tf.io.gfile.remove(probe)
    except (tf.errors.OpError, OSError) as e:
        raise PermissionError(
            f"--model_dir={model_dir} is not writable ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}); pass a directory you can write to."
        ) from None


def _worker_dir(model_dir: str, strategy) -> str:
    # MultiWorkerMirroredStrategy needs every worker to take part in saving;
    # non-chief workers write to a scratch directory they delete afterwards.
    resolver = strategy.cluster_resolver
    return os.path.join(model_dir, f".worker_{resolver.task_type}_{resolver.task_id}")


def _load_init_checkpoint(pretrainer, directory: str) -> str:
    """Loads a pre-trained directory's encoder (and matching heads); returns what was loaded."""
    source = load_encoder(directory)
    encoder = pretrainer.encoder
    if type(source) is not type(encoder):
        raise ValueError(f"--init_checkpoint={directory} holds a {type(source).__name__} but the "
                         f"gin config builds a {type(encoder).__name__}; use another checkpoint.")
    # The sizes must agree (the architecture's `size_keys`).
    sizes = encoder_sizes(source)
    for key, value in encoder_sizes(encoder).items():
        if sizes[key] != value:
            name = "embedding_dim" if key == "embedding_width" else key
            raise ValueError(
                f"--init_checkpoint={directory} has {key}={sizes[key]} but the gin "
                f"config builds {key}={value}; set {type(encoder).__name__}.{name} = "
                f"{sizes[key]} or use another checkpoint."
            )
    encoder.set_weights(source.get_weights())
    if load_pretrainer_weights(pretrainer, directory):
        return "encoder and pre-training heads"
    # A BERT directory starting an ELECTRA run (or the other way round) gives
    # its encoder; the heads of another kind of pre-trainer cannot be used.
    return "encoder (no pre-training heads of this kind there)"
