"""Batch-size warmup and the masking-rate schedule: their values at known steps, which step each
input batch feeds, and the settings they refuse. (Exact resume of a run using both:
tests/models/modernbert/test_modernbert_pretraining.py.)"""

import inspect

import pytest
import tensorflow as tf

from kbert.data import MaskingSchedule
from kbert.training import BatchSizeWarmup
from kbert.training import run_pretraining
from kbert.training.batch_size_warmup import BatchSizeSchedule
from kbert.training.pretraining.settings import PretrainingSettings
from kbert.training.pretraining.state import _masking_rate


def _settings(**overrides):
    """`run_pretraining`'s defaults with `overrides`, as the run holds them."""
    arguments = {name: parameter.default
                 for name, parameter in inspect.signature(run_pretraining).parameters.items()}
    arguments.update(input_file="train.tfrecord", model_dir="out", build_pretrainer=None,
                     strategy=tf.distribute.get_strategy())
    return PretrainingSettings(**{**arguments, **overrides})


def test_the_batch_grows_a_micro_batch_at_a_time_with_equal_steps_at_each_size():
    # Micro-batches of 8 rows of 128 tokens; 8 -> 32 rows over 100,000 tokens: sizes 1, 2 and 3
    # take ceil(100000 / (8 * 128 * (1 + 2 + 3))) = 17 steps each (104,448 tokens), then 4.
    schedule = BatchSizeSchedule(32, 4, 128, BatchSizeWarmup(8, 100_000))
    assert (schedule.steps_per_size, schedule.warmup_steps) == (17, 51)
    assert [schedule.micro_batches(s) for s in (0, 16, 17, 33, 34, 50, 51, 10**6)] == [
        1, 1, 2, 2, 3, 3, 4, 4]
    assert schedule.micro_batches_before(51) * 8 * 128 == 104_448
    assert [schedule.steps_at_this_size(s) for s in (0, 16, 17)] == [17, 1, 17]
    # Each micro-batch feeds the step that takes it, during the warmup and after.
    number = 0
    for step in range(60):
        assert schedule.micro_batches_before(step) == number
        for _ in range(schedule.micro_batches(step)):
            assert int(schedule.step_of_micro_batch(tf.constant(number))) == step
            number += 1
    # Without a warmup every step takes all of them.
    plain = BatchSizeSchedule(32, 4, 128)
    assert plain.warmup_steps == 0 and plain.micro_batches(0) == 4
    assert [int(plain.step_of_micro_batch(tf.constant(n))) for n in (0, 3, 4, 9)] == [0, 0, 1, 2]


def test_the_masking_rate_falls_at_its_boundaries():
    schedule = MaskingSchedule()  # mmBERT's 30% -> 15% -> 5% at 76.7% and 96.7%
    assert schedule.boundary_steps(1000) == [767, 967]
    steps = [0, 766, 767, 966, 967, 999]
    assert [schedule.rate(s, 1000) for s in steps] == [0.3, 0.3, 0.15, 0.15, 0.05, 0.05]
    assert [float(schedule.rate_at(tf.constant(s), 1000)) for s in steps] == [
        0.3, 0.3, 0.15, 0.15, 0.05, 0.05]


def test_each_input_batch_is_masked_at_the_rate_of_the_step_it_feeds():
    """Two replicas fed by one input pipeline, micro-batches of 4 rows, the first 2 steps at
    one micro-batch, 15% from step 4 (of 8): the pipeline's n-th batch feeds step s."""
    settings = _settings(
        train_batch_size=8, gradient_accumulation_steps=2, max_seq_length=16,
        num_train_steps=8, masking="dynamic", batch_size_warmup=BatchSizeWarmup(4, 128),
        masking_schedule=MaskingSchedule((0.3, 0.15), (0.5,)))
    settings.validate()
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0,
                                         num_replicas_in_sync=2)
    rate = _masking_rate(settings, context)
    # Steps 0-1 take 1 micro-batch (2 pipeline batches, one per replica), then 2 (4 batches).
    step_of_batch = [0, 0, 1, 1] + [2] * 4 + [3] * 4 + [4] * 4
    assert [float(rate(tf.constant(n, tf.int64))) for n in range(len(step_of_batch))] == [
        0.3 if step < 4 else 0.15 for step in step_of_batch]
    assert _masking_rate(_settings(), context) is None


@pytest.mark.parametrize("overrides, message", [
    (dict(masking_schedule=MaskingSchedule()), r"masking_schedule .* needs run_pretraining."
                                               r"masking = \"dynamic\".*not 'static'"),
    (dict(masking="dynamic", masking_schedule=MaskingSchedule((0.3, 0.15), (0.5, 0.9)))
     , r"boundaries=\(0.5, 0.9\) must have one value fewer than MaskingSchedule.rates"),
    (dict(masking="dynamic", masking_schedule=MaskingSchedule((0.3, 0.0), (0.5,))),
     r"rates=\(0.3, 0.0\) must be rates in \(0, 1\]"),
    (dict(masking="dynamic", masking_schedule=MaskingSchedule((0.3, 0.1), (1.5,))),
     r"boundaries=\(1.5,\) must increase within \(0, 1\)"),
    (dict(train_batch_size=32, gradient_accumulation_steps=4,
          batch_size_warmup=BatchSizeWarmup(12, 1000)),
     r"min_batch_size=12 must be a multiple of the micro-batch \(train_batch_size=32 / "
     r"gradient_accumulation_steps=4 = 8 rows\) from 8 to 32"),
    (dict(train_batch_size=32, gradient_accumulation_steps=4,
          batch_size_warmup=BatchSizeWarmup(8, -1)), r"warmup_tokens=-1 must be a non-negative"),
])
def test_bad_schedules_are_refused_naming_the_binding(overrides, message):
    with pytest.raises(ValueError, match=message):
        _settings(**overrides).validate()
