"""Shared test settings: quiet TF, tiny sizes in one place, shared built models."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# Tiny sizes used across the suite (STYLE.md): vocabulary, hidden, layers, heads,
# intermediate, positions, batch and sequence length.
V, H, L, A, I, P = 99, 32, 2, 4, 37, 16
BATCH, SEQ, PREDICTIONS = 3, 7, 2

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_encoder_kwargs(**overrides):
    kwargs = dict(
        vocabulary_size=V, num_layers=L, num_heads=A, hidden_dim=H,
        intermediate_dim=I, max_sequence_length=P,
    )
    kwargs.update(overrides)
    return kwargs


def tiny_inputs(seed: int = 0, batch: int = BATCH, seq: int = SEQ) -> dict:
    """Random token ids, two segments, and a padding mask with some padding."""
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(1, V, size=(batch, seq)).astype("int32")
    segment_ids = np.zeros((batch, seq), "int32")
    segment_ids[:, seq // 2:] = 1
    padding_mask = np.ones((batch, seq), "int32")
    padding_mask[0, -2:] = 0
    token_ids[0, -2:] = 0
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


@pytest.fixture(scope="session")
def tiny_encoder():
    """One tiny encoder shared by tests that only read it."""
    from kbert.models import BertEncoder

    return BertEncoder(**tiny_encoder_kwargs())


def pytest_sessionfinish(session, exitstatus):
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Leaves the process at once, with pytest's exit status, once pytest has reported.

    Why: at interpreter shutdown TensorFlow 2.21 can block for good while it
    destroys tf.data iterators that outlived their tests (their thread pool
    waits on a worker thread; seen twice on this suite after "N passed" was
    printed, never inside a test). Everything pytest writes is written by now.
    """
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(config.stash.get(_EXIT_STATUS, 0))


_EXIT_STATUS = pytest.StashKey[int]()
