"""The pre-training step: one compiled call runs several optimizer steps under a strategy.

`make_train_loop` returns the `tf.function` that `run_pretraining` calls: each
step reads `gradient_accumulation_steps` micro-batches, runs the replica step
under the strategy and returns the loss and the pre-trainer's statistics
summed over replicas. The replica step divides each loss by totals over the
whole global batch and sums gradients across micro-batches and replicas once,
before the optimizer clips and applies them (Keras would clip each replica's
partial gradient). `distributed_input` deals each replica its share of the
global batch from a checkpointable iterator.

Benchmarks time this step alone: `benchmarks/pretraining_throughput.py`.
"""

from __future__ import annotations

from typing import Any
from typing import Callable

import keras
import tensorflow as tf


def distributed_input(strategy: tf.distribute.Strategy,
                      dataset_fn: Callable[[tf.distribute.InputContext], tf.data.Dataset]
                      ) -> tuple[Any, Callable[[], Any]]:
    """Returns `(iterator, next_batch)`: the input and a function giving one distributed batch.

    `distribute_datasets_from_function` hands each replica its share of the
    global batch, but outside the default strategy its iterator cannot be
    checkpointed. For those strategies (except TPU) each worker instead keeps
    a plain, checkpointable tf.data iterator over the very dataset that
    `distribute_datasets_from_function` would build (same `InputContext`) and
    deals its consecutive batches to its local replicas, as the distributed
    iterator does.

    Args:
        strategy: `tf.distribute.Strategy`.
        dataset_fn: callable. `tf.distribute.InputContext` -> the dataset of
            that input pipeline, batched per replica.

    Returns:
        `(iterator, next_batch)`: what the checkpoint saves as the input's
        position (a plain iterator, except under the default and TPU
        strategies), and a function returning the next distributed batch.
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


def make_train_loop(strategy: tf.distribute.Strategy, pretrainer: keras.Model,
                    optimizer: keras.optimizers.Optimizer, global_step: tf.Variable,
                    accumulation: int, jit_compile: bool, next_batch: Callable[[], Any]
                    ) -> tuple[Callable[[tf.Tensor], tuple[tf.Tensor, tf.Tensor]],
                               list[tuple[str, tuple[int, ...]]]]:
    """Returns `(train_loop, layout)`: `train_loop(num_steps)` runs `num_steps` optimizer steps.

    `train_loop` is one `tf.function` call: each step reads `accumulation`
    micro-batches from `next_batch`, runs the replica step under `strategy`
    and adds one to `global_step`. It returns two per-step tensors summed over
    replicas: the loss `[steps]`, and the pre-trainer's normalizers and
    statistics flattened into one vector per step `[steps, size]`. `layout`
    (filled when the step is traced) lists the `(name, shape)` of each part of
    that vector, in order.

    Args:
        strategy: `tf.distribute.Strategy` the model and optimizer were built in.
        pretrainer: a model with the pre-training methods (`loss_normalizers`,
            `pretraining_losses`; see `kbert.training.pretraining`).
        optimizer: its built optimizer (gradients are summed across replicas
            here, so the optimizer's own summing is switched off).
        global_step: int64 `tf.Variable`, incremented once per step.
        accumulation: int. Micro-batches per optimizer step.
        jit_compile: bool. XLA-compile the replica step.
        next_batch: callable returning one distributed micro-batch
            `(features, labels, sample_weights)` (`distributed_input`).

    Returns:
        `(train_loop, layout)` as above.

    Example:

    >>> train_loop, layout = make_train_loop(tf.distribute.get_strategy(), pretrainer,
    ...                                      optimizer, step, 1, False, lambda: batch)
    >>> losses, statistics = train_loop(tf.constant(10))
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
