"""docs/pretraining.md's other training modes, run on the CPU: `one_device`, `jit_compile=True`, `mixed_float16`.

The tiny model trains 8 steps on one shared batch. The `one_device` run is
stopped after its step-4 checkpoint (as a crash would stop it) and resumed; an
uninterrupted `jit_compile=True` run must repeat its losses to rounding, which
holds only if both the strategy's run and its resume are exact (seen on a
2-core x86 VM: equal to 2e-7, the same as against the default strategy). A
`mixed_float16` run, stopped and resumed too (its optimizer also holds the
dynamic loss scale), must follow them to half-precision rounding (seen: 2e-5).
A resume that lost the weights, the optimizer's moments or the loss scale moves
steps 5-8 by far more than these bounds. XLA is compiled once: the costly run.
On a machine with a GPU every mode runs there (TF32 is off for the suite:
tests/conftest.py).
"""

import numpy as np
import pytest

from tests.conftest import tiny_encoder_kwargs
from tests.training.pretraining_data import RUN
from tests.training.pretraining_data import read_losses
from tests.training.pretraining_data import write_pretraining_data

from kbert.checkpoints import load_encoder
from kbert.models import BertEncoder
from kbert.models import BertPretrainer
from kbert.training import create_strategy
from kbert.training import run_pretraining

STEPS = 8
# Every step sees the same 8 examples (one batch), so the loss falls fast and
# runs are comparable step by step.
SETTINGS = {**RUN, "num_train_steps": STEPS, "learning_rate": 3e-3, "log_every_steps": 4}


class _Stop(Exception):
    """Raised from print_fn to stop a run as a crash would, after a checkpoint."""


def _run(data_file, model_dir, stop_at=None, **overrides):
    def print_fn(line):
        if stop_at is not None and line.startswith(f"step {stop_at}/"):
            raise _Stop(line)

    return run_pretraining(
        data_file, str(model_dir),
        # One layer: the modes touch every layer alike, and tracing costs less.
        lambda: BertPretrainer(BertEncoder(**tiny_encoder_kwargs(dropout=0.0, num_layers=1))),
        print_fn=print_fn, **{**SETTINGS, **overrides})


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    return write_pretraining_data(str(tmp_path_factory.mktemp("data") / "train.tfrecord"),
                                  num_examples=8)


@pytest.fixture(scope="module")
def one_device(data_file, tmp_path_factory):
    """The `one_device` run, stopped after step 4 and resumed: (summary, losses, model_dir)."""
    return _stopped_and_resumed(data_file, tmp_path_factory.mktemp("one_device"),
                                strategy=create_strategy("one_device"))


def _stopped_and_resumed(data_file, model_dir, **arguments):
    with pytest.raises(_Stop, match="step 4/8"):
        _run(data_file, model_dir, stop_at=4, **arguments)
    summary = _run(data_file, model_dir, **arguments)
    losses, steps = read_losses(str(model_dir))
    assert steps == list(range(1, STEPS + 1))
    return summary, losses, model_dir


def test_one_device_resumes_and_the_loss_falls(one_device):
    summary, losses, model_dir = one_device
    assert summary["resumed_from_step"] == 4 and summary["global_step"] == STEPS
    assert losses[-1] < losses[0] - 0.4, losses
    assert load_encoder(str(model_dir)).token_embedding.embeddings.dtype == "float32"


def test_jit_compile_repeats_the_resumed_one_device_losses(data_file, one_device, tmp_path):
    summary = _run(data_file, tmp_path, jit_compile=True)
    losses, steps = read_losses(str(tmp_path))
    assert summary["global_step"] == STEPS and steps == list(range(1, STEPS + 1))
    # XLA fuses and reorders float32 arithmetic: equal to rounding.
    np.testing.assert_allclose(losses, one_device[1], rtol=1e-5)


def test_mixed_float16_resumes_and_follows_float32(data_file, one_device, tmp_path):
    summary, losses, model_dir = _stopped_and_resumed(data_file, tmp_path,
                                                      dtype_policy="mixed_float16")
    assert summary["resumed_from_step"] == 4 and summary["global_step"] == STEPS
    # float16 activations under dynamic loss scaling: equal to half-precision rounding.
    np.testing.assert_allclose(losses, one_device[1], rtol=1e-3)
    assert losses[-1] < losses[0] - 0.4, losses
    # Variables stay float32 under the mixed policy.
    assert load_encoder(str(model_dir)).token_embedding.embeddings.dtype == "float32"
