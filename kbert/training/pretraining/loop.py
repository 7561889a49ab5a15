"""The pre-training driver: `run_pretraining`, BERT (MLM + NSP) or ELECTRA, resumable.

A custom loop rather than `Model.fit` because exact resume needs the input
pipeline's position and the dropout RNG state in the checkpoint, and because
loss normalisation and gradient clipping must see the global batch (Keras
clips each replica's partial gradient before summing them across replicas).

`run_pretraining` holds its arguments in one `PretrainingSettings`
(`settings.py`) and runs these steps: the settings and the data
checked against each other (`kbert.data.pretraining.checks`), the model,
optimizer, input and checkpoint built (`state.py`), an exact
resume or `init_checkpoint` restored, the loop `_train` (its compiled step is
`step.py`; progress lines, TensorBoard scalars and the summary are
`progress.py`), then the pre-trained directory and `summary.json`
saved. With `eval_input_file` the held-out data is evaluated every
`eval_every_steps` and at the end (`evaluation.py`); with
`do_train=False` a checkpoint is evaluated and nothing trained. This module
also keeps `model_dir` tidy: a run that fails before its first checkpoint
leaves no directory behind.

The loop knows no objective: the pre-trainer supplies it, keeping the
`kbert.models.Pretrainer` contract (`kbert/models/encoder.py`; `BertPretrainer`
and `ElectraPretrainer` keep it): `loss_normalizers` (what each loss is
averaged over, summed here over the global batch), `pretraining_losses` (the
loss and summable statistics of a micro-batch), `pretraining_metrics`
(statistics summed over a reporting interval -> metrics), and `encoder`,
`next_sentence` and `progress_labels`.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any
from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from kbert.checkpoints import save_pretrained
from kbert.data import PackingConfig
from kbert.data.pretraining.checks import check_pretraining_data
from kbert.data.pretraining.checks import named_data_error
from kbert.data.pretraining.dynamic_masking import MaskingConfig
from kbert.data.pretraining.dynamic_masking import MaskingSchedule
from kbert.data.pretraining.eval_data import EvalData
from kbert.files import read_json
from kbert.files import write_text
from kbert.training.pretraining.data_tokenizer import check_data_tokenizers
from kbert.training.pretraining.progress import Interval
from kbert.training.pretraining.progress import Progress
from kbert.training.pretraining.progress import current_learning_rate
from kbert.training.pretraining.progress import write_scalar
from kbert.training.pretraining.progress import write_step_losses
from kbert.training.pretraining.evaluation import EVAL_RESULTS_FILE
from kbert.training.pretraining.evaluation import PeriodicEvaluation
from kbert.training.pretraining.settings import PretrainingSettings
from kbert.training.pretraining.state import TrainingState
from kbert.training.pretraining.state import build_pretrainer_in_scope
from kbert.training.pretraining.state import build_state
from kbert.training.pretraining.state import carried_sentence_config
from kbert.training.pretraining.state import continued_settings
from kbert.training.pretraining.state import pretrainer_with_heads
from kbert.training.pretraining.state import restore_checkpoint
from kbert.training.pretraining.step import make_train_loop
from kbert.training.batch_size_warmup import BatchSizeWarmup
from kbert.training.interruption import StopSignals
from kbert.training.interruption import TrainingInterrupted
from kbert.training.optimizer import OptimizerConfig
from kbert.training.warmup_stable_decay import StableDecay

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
    stable_decay: StableDecay | None = None,
    optimizer_config: OptimizerConfig | None = None,
    batch_size_warmup: BatchSizeWarmup | None = None,
    masking_schedule: MaskingSchedule | None = None,
    init_checkpoint: str | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    print_fn: Callable[[str], None] = print,
    eval_input_file: str | list[str] | None = None,
    eval_every_steps: int | None = None,
    max_eval_steps: int | None = None,
    eval_batch_size: int | None = None,
    do_train: bool = True,
) -> dict[str, Any]:
    """Pre-trains a `BertPretrainer` or `ElectraPretrainer` on TFRecords, resuming exactly.

    The model and optimizer are built in `strategy.scope()`; each replica reads
    its share of the global batch through `distribute_datasets_from_function`.
    Every `save_checkpoints_steps` the model, optimizer, step, dropout RNG state
    and input-pipeline position are checkpointed into `model_dir`; calling
    again with the same arguments after a crash resumes from the last
    checkpoint and stops at `num_train_steps`. SIGINT (Ctrl-C) or SIGTERM
    stops it after the current call with a checkpoint and raises
    `kbert.training.TrainingInterrupted` (a `KeyboardInterrupt`); calling again
    resumes there. At the end the chief writes a pre-trained directory into
    `model_dir` (see `kbert.checkpoints.save_pretrained`) and `summary.json`.

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
        optimizer: str. `"adamw"`, `"lamb"` or `"stable_adamw"` (ModernBERT's,
            `kbert.training.StableAdamW`). Defaults to `"adamw"`.
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
        stable_decay: `StableDecay` or None. The warmup-stable-decay schedule
            (the peak rate held, then a linear or 1-sqrt decay over the last
            `decay_fraction` of the steps). Defaults to None: BERT's linear
            decay from step 0.
        optimizer_config: `OptimizerConfig` or None. Betas, epsilon, gradient
            clipping and fully decoupled weight decay (ModernBERT: 0.9/0.98,
            1e-6, no clipping, decoupled). Defaults to None: 0.9/0.999, 1e-6,
            global norm 1.0, decay times the rate.
        batch_size_warmup: `BatchSizeWarmup` or None. Start with
            `min_batch_size` rows and grow a micro-batch at a time to
            `train_batch_size` over `warmup_tokens` tokens (ModernBERT).
            Defaults to None (the full batch from the first step).
        masking_schedule: `MaskingSchedule` or None. Dynamic masking's rate
            over the run (mmBERT: 30% -> 15% -> 5%), in place of
            `masking_config.masked_lm_prob` for training. Defaults to None.
        init_checkpoint: str or None. Pre-trained directory to start from
            (weights only); ignored when `model_dir` has a checkpoint. With
            `eval_input_file` the directory is evaluated before the first
            step: step 0 of the history, the "before" figure.
        vocab_file: str or None. Copied into `model_dir` at the end. Defaults
            to the vocabulary named by the data's sidecar, when it exists.
        do_lower_case: bool or None. Recorded in `model_dir`. Defaults to the
            data's sidecar value.
        print_fn: callable taking a str. Receives progress lines.
        eval_input_file: str, list of str or None. Held-out TFRecords
            (comma-separated files or globs) evaluated every
            `eval_every_steps` and at the end (see
            `kbert.training.pretraining.evaluation`): each evaluation is a
            line of `model_dir/eval_history.jsonl`, TensorBoard scalars under
            `model_dir/eval`, and the last one `model_dir/eval_results.json`.
            Defaults to None (no evaluation).
        eval_every_steps: int or None. Defaults to `save_checkpoints_steps`.
        max_eval_steps: int or None. Eval batches per evaluation (None: the
            whole eval set).
        eval_batch_size: int or None. Global eval batch size (None:
            `train_batch_size`).
        do_train: bool. False evaluates without training (needs
            `eval_input_file`): the latest checkpoint in `model_dir`, else
            the pre-trained directory `init_checkpoint` with its masked-LM
            head; writes `model_dir/eval_results.json`. Defaults to True.

    Returns:
        The summary dict also written to `model_dir/summary.json`:
        `global_step`, `loss`, `masked_lm_accuracy`, `next_sentence_accuracy`
        (None for an MLM-only model), the pre-trainer's other metrics
        (`masked_lm_loss`; ELECTRA's `discriminator_loss`,
        `discriminator_accuracy`, `discriminator_auc`, `replaced_fraction`),
        `examples_per_second`, `resumed_from_step`, `wall_seconds`, and
        `eval_results` (the last evaluation) with `eval_input_file`. With
        `do_train=False`, the evaluation's results (`eval_results.json`).

    Example:

    >>> kbert.training.run_pretraining(
    ...     "data/*.tfrecord", "out/",
    ...     lambda: kbert.models.BertPretrainer(kbert.models.BertEncoder(...)),
    ...     train_batch_size=256, num_train_steps=100000, learning_rate=1e-4)
    """
    start = time.time()
    settings = PretrainingSettings(
        input_file=input_file, model_dir=model_dir, build_pretrainer=build_pretrainer,
        strategy=strategy or tf.distribute.get_strategy(), train_batch_size=train_batch_size,
        max_seq_length=max_seq_length, max_predictions_per_seq=max_predictions_per_seq,
        num_train_steps=num_train_steps, num_warmup_steps=num_warmup_steps,
        learning_rate=learning_rate, optimizer=optimizer, weight_decay_rate=weight_decay_rate,
        save_checkpoints_steps=save_checkpoints_steps, keep_checkpoint_max=keep_checkpoint_max,
        log_every_steps=log_every_steps, steps_per_execution=steps_per_execution,
        gradient_accumulation_steps=gradient_accumulation_steps, dtype_policy=dtype_policy,
        jit_compile=jit_compile, shuffle_buffer_size=shuffle_buffer_size, seed=seed,
        masking=masking, masking_config=masking_config, packing=packing,
        stable_decay=stable_decay, optimizer_config=optimizer_config,
        batch_size_warmup=batch_size_warmup, masking_schedule=masking_schedule,
        init_checkpoint=init_checkpoint, vocab_file=vocab_file,
        do_lower_case=do_lower_case, print_fn=print_fn, eval_input_file=eval_input_file,
        eval_every_steps=eval_every_steps, max_eval_steps=max_eval_steps,
        eval_batch_size=eval_batch_size, do_train=do_train)
    fresh_model_dir = _is_missing_or_empty(model_dir)
    # Mistakes that need no model to find (settings, data files, the sidecar,
    # an unwritable model_dir) fail here, before anything is built.
    settings.validate()
    files, metadata = [], None
    if do_train or input_file:
        files, metadata = check_pretraining_data(input_file, max_seq_length,
                                                 max_predictions_per_seq, masking)
    eval_data = (EvalData.from_files(eval_input_file, max_seq_length, max_predictions_per_seq,
                                     masking) if settings.evaluates else None)
    check_data_tokenizers(settings, files, metadata, eval_data)  # Before anything is built.
    if init_checkpoint and do_train:
        settings = continued_settings(settings)
    _check_writable(model_dir)
    settings = settings.with_sidecar_defaults(metadata)
    if not do_train:
        try:
            return _evaluate_only(settings, files, eval_data, start)
        except BaseException:
            _remove_if_fresh(model_dir, fresh_model_dir and settings.chief)
            raise
    try:
        state = build_state(settings, files, metadata)
        resumed_from_step = restore_checkpoint(settings, state)
    except BaseException:
        _remove_if_fresh(model_dir, fresh_model_dir and settings.chief)
        raise
    try:
        finished = _finished_summary(settings, resumed_from_step)
        if finished is not None:
            return finished
        evaluation = (PeriodicEvaluation(settings, state.pretrainer, files, eval_data,
                                         resumed_from_step) if eval_data else None)
        progress = _train(settings, state, resumed_from_step, evaluation)
        if not settings.chief and tf.io.gfile.exists(settings.write_dir):
            tf.io.gfile.rmtree(settings.write_dir)
    except BaseException as e:
        state.release()
        _remove_if_fresh(model_dir, fresh_model_dir and settings.chief)
        if isinstance(e, tf.errors.DataLossError):
            raise named_data_error(files, e) from None
        raise
    finally:
        state.release()
    summary = progress.summary(resumed_from_step, wall_seconds=time.time() - start)
    if evaluation is not None and evaluation.last is not None:
        summary["eval_results"] = evaluation.last
    if settings.chief:
        save_pretrained(model_dir, state.pretrainer.encoder, vocab_file=settings.vocab_file,
                        do_lower_case=settings.do_lower_case, pretrainer=state.pretrainer,
                        sentence_config=carried_sentence_config(settings))
        write_text(os.path.join(model_dir, SUMMARY_FILE),
                   json.dumps(summary, indent=2, sort_keys=True) + "\n")
        state.writer.flush()
    print_fn("summary: " + json.dumps(summary))
    return summary


def _evaluate_only(settings: PretrainingSettings, train_files: list[str],
                   eval_data: EvalData, start: float) -> dict[str, Any]:
    """`--nodo_train --do_eval`: evaluates a checkpoint and writes `eval_results.json`.

    The weights are `model_dir`'s latest training checkpoint (the gin-built
    pre-trainer, as the periodic evaluation saw it) or, without one, the
    pre-trained directory `init_checkpoint` with its masked-LM head. The line is
    appended to `eval_only_history.jsonl`, never to a training run's history; the
    unigram baseline is the training data's (`input_file`) or, without it, the
    held-out set's own, written as `heldout_unigram_*`.
    """
    latest = tf.train.latest_checkpoint(settings.model_dir)
    if latest:
        pretrainer = build_pretrainer_in_scope(settings)
        checkpoint_step = tf.Variable(0, dtype=tf.int64)
        try:
            tf.train.Checkpoint(model=pretrainer, step=checkpoint_step).restore(
                latest).expect_partial()
        except (ValueError, tf.errors.InvalidArgumentError) as e:
            first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ValueError(
                f"--nodo_train --do_eval: {latest} does not fit the model the gin config builds "
                f"({first_line}); evaluate a training run's checkpoint with its own "
                f"{settings.model_dir}/operative_config.gin (read when no --gin_file or "
                "--gin_params changes the model's sizes).") from None
        step, source = int(checkpoint_step.numpy()), latest
    elif settings.init_checkpoint:
        pretrainer = pretrainer_with_heads(settings.init_checkpoint, eval_data.next_sentence,
                                           settings.strategy)
        # The step the directory was trained to, when its run recorded it.
        summary_path = os.path.join(settings.init_checkpoint, SUMMARY_FILE)
        step = (int(read_json(summary_path).get("global_step") or 0)
                if tf.io.gfile.exists(summary_path) else 0)
        source = settings.init_checkpoint
    else:
        raise ValueError(f"--nodo_train --do_eval evaluates a checkpoint, but --model_dir="
                         f"{settings.model_dir} holds none and no --init_checkpoint was given; "
                         "pass --init_checkpoint=<pre-trained directory>.")
    settings.print_fn(f"evaluating {source} on {', '.join(eval_data.files)}")
    evaluation = PeriodicEvaluation(settings, pretrainer, train_files, eval_data,
                                    resumed_from_step=None)
    results = {**evaluation(step), "checkpoint": source,
               "wall_seconds": time.time() - start}
    if settings.chief:
        write_text(os.path.join(settings.model_dir, EVAL_RESULTS_FILE),
                   json.dumps(results, indent=2, sort_keys=True) + "\n")
    return results


def _finished_summary(settings: PretrainingSettings,
                      resumed_from_step: int) -> dict[str, Any] | None:
    """Returns the summary of a run that had already finished in `model_dir`, else None."""
    summary_path = os.path.join(settings.model_dir, SUMMARY_FILE)
    if resumed_from_step >= settings.num_train_steps and tf.io.gfile.exists(summary_path):
        # summary.json is written last, so the run had finished: nothing to do.
        settings.print_fn(f"{settings.model_dir} is already at step {resumed_from_step}; "
                          "nothing to train")
        return read_json(summary_path)
    return None


def _train(settings: PretrainingSettings, state: TrainingState,
           resumed_from_step: int, evaluation: PeriodicEvaluation | None = None) -> Progress:
    """Steps to `num_train_steps`, checkpointing, writing scalars and printing progress lines.

    Only `state` holds the input, the checkpoint and the traced loops (no local
    here does), so that `state.release()` frees them even while an error's
    traceback holds this frame. SIGINT or SIGTERM ends the run after the
    current call with a checkpoint (`kbert.training.interruption`).
    """
    state.writer = (tf.summary.create_file_writer(settings.model_dir) if settings.chief
                    else tf.summary.create_noop_writer())
    num_train_steps = settings.num_train_steps
    save_every, log_every = settings.save_checkpoints_steps, settings.log_every_steps
    batches = settings.batch_schedule
    layout = _train_loop(settings, state, batches.micro_batches(resumed_from_step))
    progress = Progress(step=resumed_from_step)
    step, interval, traced = resumed_from_step, Interval(state.pretrainer, layout), set()
    # A continued run's held-out figure before its first step ("before" in the
    # history); a run killed between a checkpoint and its evaluation evaluates it on resume.
    if evaluation is not None and (step > 0 or settings.init_checkpoint) and evaluation.due(step):
        evaluation(step)
    with _stop_signals(settings) as stop:
        while step < num_train_steps and stop.received is None:
            next_save = (step // save_every + 1) * save_every
            next_stop = next_save
            if evaluation is not None:
                next_stop = min(next_save,
                                (step // settings.eval_interval + 1) * settings.eval_interval)
            micro_batches = batches.micro_batches(step)
            num_steps = min(settings.steps_per_execution, next_stop - step,
                            num_train_steps - step, batches.steps_at_this_size(step))
            _train_loop(settings, state, micro_batches)
            call_start = time.time()
            losses, statistics = (t.numpy() for t in state.train_loops[micro_batches](
                tf.constant(num_steps, tf.int32)))
            seconds = time.time() - call_start
            examples = num_steps * micro_batches * settings.micro_batch_size
            if evaluation is not None:
                evaluation.train_seconds += seconds
            if micro_batches in traced:  # A loop's first call traces it.
                progress.timed_examples += examples
                progress.timed_seconds += seconds
            traced.add(micro_batches)
            _check_finite(losses, step, state.manager.latest_checkpoint)
            write_step_losses(state.writer, losses, step + 1)
            _write_schedules(settings, state.writer, step, num_steps)
            interval.add(losses, statistics, examples, seconds)
            step += num_steps
            if step % save_every == 0 or step == num_train_steps:
                state.manager.save(checkpoint_number=step)
            if step // log_every > (step - num_steps) // log_every or step == num_train_steps:
                progress.last = interval.report(step, num_train_steps,
                                                float(current_learning_rate(state.optimizer)),
                                                state.writer, settings.print_fn)
                interval = Interval(state.pretrainer, layout)
            if evaluation is not None and evaluation.due(step):
                evaluation(step)
        if stop.received is not None:
            raise _interrupted(state, step, stop)
    if evaluation is not None and evaluation.due(step):  # num_train_steps = 0
        evaluation(step)
    progress.step = step
    return progress


def _write_schedules(settings: PretrainingSettings, writer: tf.summary.SummaryWriter,
                     step: int, num_steps: int) -> None:
    """TensorBoard's `batch_size` and `masked_lm_prob` of steps `step + 1 ...`, when scheduled."""
    batches, masking = settings.batch_schedule, settings.masking_schedule
    if not batches.warmup_steps and masking is None:
        return
    with writer.as_default():
        for s in range(step, step + num_steps):
            if batches.warmup_steps:
                write_scalar("batch_size", batches.micro_batches(s) * settings.micro_batch_size,
                             s + 1)
            if masking is not None:
                write_scalar("masked_lm_prob", masking.rate(s, settings.num_train_steps), s + 1)


def _train_loop(settings: PretrainingSettings, state: TrainingState,
                micro_batches: int) -> list[tuple[str, tuple[int, ...]]]:
    """Makes (once) the loop whose steps take `micro_batches` micro-batches; returns its layout."""
    if micro_batches not in state.train_loops:
        state.train_loops[micro_batches], layout = make_train_loop(
            settings.strategy, state.pretrainer, state.optimizer, state.global_step,
            micro_batches, settings.jit_compile, state.next_batch)
        state.layouts[micro_batches] = layout
    return state.layouts[micro_batches]


def _stop_signals(settings: PretrainingSettings) -> contextlib.AbstractContextManager:
    # Workers of a multi-worker run save together: one worker stopping alone
    # would wait for the others for ever, so there the signals act as usual.
    if isinstance(settings.strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return contextlib.nullcontext(StopSignals())
    return StopSignals()


def _interrupted(state: TrainingState, step: int, stop: StopSignals) -> TrainingInterrupted:
    """Saves a checkpoint at `step` unless one holds it; returns the exception to raise."""
    latest = state.manager.latest_checkpoint
    if latest is None and step == 0:
        return TrainingInterrupted(
            stop.received, f"interrupted by {stop.name} before the first step: nothing to save; "
            "rerun the same command to start")
    if latest is None or int(latest.rsplit("-", 1)[1]) != step:
        latest = state.manager.save(checkpoint_number=step)
    state.writer.flush()
    return TrainingInterrupted(
        stop.received, f"interrupted by {stop.name} at step {step}: checkpoint saved to {latest}; "
        "rerun the same command to resume")


def _check_finite(losses: np.ndarray, step: int, last_checkpoint: str | None) -> None:
    """Raises if a loss of the steps after `step` is NaN or infinite."""
    bad = np.flatnonzero(~np.isfinite(losses))
    if bad.size:
        raise ValueError(
            f"loss is {losses[bad[0]]} at step {step + bad[0] + 1}; stopping. The last good "
            f"checkpoint is {last_checkpoint or 'none (none was written yet)'}. "
            "Lower run_pretraining.learning_rate or raise num_warmup_steps and resume."
        )


def _is_missing_or_empty(directory: str) -> bool:
    return not tf.io.gfile.isdir(directory) or not tf.io.gfile.listdir(directory)


def _remove_if_fresh(model_dir: str, fresh: bool) -> None:
    # A run that fails before its first checkpoint, in a directory that was
    # empty or missing, leaves nothing behind (no operative_config.gin, no
    # events file); once a checkpoint exists the directory is kept to resume.
    if fresh and tf.io.gfile.isdir(model_dir) and tf.train.latest_checkpoint(model_dir) is None:
        tf.io.gfile.rmtree(model_dir)


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

