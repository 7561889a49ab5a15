"""The README's other training modes, run on the CPU: `one_device`, `jit_compile=True`, `mixed_float16`.

Each mode trains the tiny model on one shared data set, is stopped after its
step-4 checkpoint (as a crash would stop it), resumes, and must give the
uninterrupted default float32 run's losses for all 8 steps (to rounding; to
half-precision rounding for `mixed_float16`): the loss falls and the resume
restores weights, optimizer and loss scale. On a machine with a GPU, every mode
runs there (TF32 is off for the suite: tests/conftest.py).
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
        lambda: BertPretrainer(BertEncoder(**tiny_encoder_kwargs(dropout=0.0))),
        print_fn=print_fn, **{**SETTINGS, **overrides})


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    return write_pretraining_data(str(tmp_path_factory.mktemp("data") / "train.tfrecord"),
                                  num_examples=8)


@pytest.fixture(scope="module")
def float32_losses(data_file, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("float32")
    _run(data_file, model_dir)
    return read_losses(str(model_dir))[0]


# (mode, run_pretraining arguments, tolerance against the default float32 run).
# Seen on a 2-core x86 VM: one_device equal to the bit, XLA within 2e-7 and
# mixed_float16 within 1e-5 (relative); a resume that lost the optimizer's
# moments or the loss scale moves steps 5-8 by far more than these bounds.
MODES = [
    ("one_device", lambda: {"strategy": create_strategy("one_device")}, dict(rtol=1e-5)),
    # XLA fuses and reorders float32 arithmetic: equal to rounding.
    ("jit_compile", lambda: {"jit_compile": True}, dict(rtol=1e-5)),
    # float16 activations under dynamic loss scaling: equal to half-precision rounding.
    ("mixed_float16", lambda: {"dtype_policy": "mixed_float16"}, dict(rtol=1e-3)),
]


@pytest.mark.parametrize("mode, arguments, tolerance", MODES, ids=[m[0] for m in MODES])
def test_mode_trains_like_float32_and_resumes(mode, arguments, tolerance, data_file, float32_losses,
                                              tmp_path):
    with pytest.raises(_Stop, match="step 4/8"):
        _run(data_file, tmp_path, stop_at=4, **arguments())
    summary = _run(data_file, tmp_path, **arguments())
    assert summary["resumed_from_step"] == 4 and summary["global_step"] == STEPS
    losses, steps = read_losses(str(tmp_path))
    assert steps == list(range(1, STEPS + 1))
    # Steps 1-4 before the stop and 5-8 after the resume follow the uninterrupted float32 run.
    np.testing.assert_allclose(losses, float32_losses, **tolerance)
    assert losses[-1] < losses[0] - 0.4, losses
    # The saved encoder keeps float32 variables whatever the compute dtype.
    assert load_encoder(str(tmp_path)).token_embedding.embeddings.dtype == "float32"
