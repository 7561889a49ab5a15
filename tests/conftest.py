"""Shared test settings: quiet TF, tiny sizes in one place, shared built models, one temp dir."""

import atexit
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# Tiny sizes used across the suite (STYLE.md): vocabulary, hidden, layers, heads,
# intermediate, positions, batch and sequence length.
V, H, L, A, I, P = 99, 32, 2, 4, 37, 16
BATCH, SEQ, PREDICTIONS = 3, 7, 2

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Kept equal to tests/serving_testlib.py's (which imports this module).
SHARED_DIR_VARIABLE = "KBERT_TESTS_SHARED_DIR"


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


# tools/<name>.py modules loaded in this process, and the absl flags each defined.
_TOOLS = {}
_TOOL_FLAGS = {}


def load_tool(name: str):
    """`tools/<name>.py` as a module, loaded once per process; tests call its functions.

    A tool defines its absl flags when loaded, and two tools may define the same
    name (`--output_file`), which absl refuses. A pytest-xdist worker runs the test
    files it is handed in one process, so the flags of tools loaded before are
    dropped first (the tests call the tools' functions, never their `main`).

    Args:
        name: str. The tool's file name without `.py`, such as `"extract_features"`.

    Returns:
        The loaded module.
    """
    import importlib.util

    from absl import flags

    if name not in _TOOLS:
        for defined in _TOOL_FLAGS.values():
            for flag in defined & set(flags.FLAGS):
                delattr(flags.FLAGS, flag)
        before = set(flags.FLAGS)
        spec = importlib.util.spec_from_file_location(f"{name}_tool",
                                                      os.path.join(REPO, "tools", f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _TOOLS[name], _TOOL_FLAGS[name] = module, set(flags.FLAGS) - before
    return _TOOLS[name]


@pytest.fixture(scope="session")
def tiny_encoder():
    """One tiny encoder shared by tests that only read it."""
    from kbert.models import BertEncoder

    return BertEncoder(**tiny_encoder_kwargs())


def pytest_configure(config):
    """One temporary directory for the run; a GPU, where visible, set up for parity tests.

    pytest's tmp_path, the serving tests' shared exports, kbert-serve logs and
    the files of subprocesses (they inherit TMPDIR) land there, and so do the
    directories of pytest-xdist workers (`make test` runs two); it is removed
    when the run passes (pytest_unconfigure), so nothing is left in /tmp. A
    failed run keeps it, named in its last line, to be looked at.
    """
    root = tempfile.mkdtemp(prefix="kbert-tests-")
    config.stash[_TEMP_ROOT] = root
    os.environ["TMPDIR"] = tempfile.tempdir = root
    if not hasattr(config, "workerinput"):
        # What the whole run builds once (tests/serving_testlib.py: built_once);
        # pytest-xdist workers inherit it, and their own directories lie inside.
        os.environ[SHARED_DIR_VARIABLE] = root
    # Where a GPU is visible (pytest and every subprocess a test starts read
    # these; set here, not at import, so scripts importing tests.* keep theirs):
    # full float32 matmuls, since TF32's 10-bit mantissa would break the parity
    # tests' float32 tolerances on Ampere and later; and GPU memory taken as
    # needed, so the servers and workers that tests start beside pytest share
    # the GPU instead of the first process taking all of it.
    os.environ.setdefault("NVIDIA_TF32_OVERRIDE", "0")
    os.environ.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")


# The longest test files, longest first (summed seconds of each file's tests, `make test`
# with two workers on a 2-core AMD EPYC VM, 2026-11-29, lightly loaded): `make test` hands
# whole files to its two pytest-xdist workers in collection order (`--dist=loadfile
# --no-loadscope-reorder`), so these start first and the short files fill in at the end,
# where a long file would leave one worker alone.
# The order only: a stale list costs a minute of wall time, never a result.
LONGEST_FILES = (
    "tests/export/test_quantization.py",  # 439 s
    "tests/models/modernbert/test_modernbert_uses.py",  # 237
    "tests/training/distillation/test_distillation.py",  # 219
    "tests/bin/test_finetune.py",  # 193
    "tests/training/pretraining/test_loop.py",  # 143
    "tests/export/test_saved_model.py",  # 129
    "tests/presets/test_text_classifier.py",  # 120
    "tests/index/test_index.py",  # 108
    "tests/training/pretraining/test_evaluation.py",  # 101
    "tests/training/finetuning/test_selection.py",  # 100
    "tests/training/pretraining/test_step.py",  # 95
    "tests/training/pretraining/test_electra.py",  # 95
    "tests/models/modernbert/test_modernbert_pretraining.py",  # 81
    "tests/tasks/token_classification/test_crf.py",  # 77
    "tests/training/pretraining/test_modes.py",  # 63
    "tests/presets/test_served_answers.py",  # 60
    "tests/presets/test_mirrored.py",  # 60
    "tests/serving/test_server.py",  # 59
)


def pytest_collection_modifyitems(items):
    """Runs LONGEST_FILES first, in that order; every other file after, as collected."""
    rank = {path: i for i, path in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable


def pytest_sessionfinish(session, exitstatus):
    session.config.stash[_SESSION] = session


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """Cleans up and leaves at once, with pytest's exit status, once pytest has reported.

    Why at once: at interpreter shutdown TensorFlow 2.21 can block for good
    while it destroys tf.data iterators that outlived their tests (their thread
    pool waits on a worker thread; seen twice on this suite after "N passed" was
    printed, never inside a test). So the `atexit` clean-ups (the serving tests'
    shared exports) run here, then the run's temporary directory goes, then
    `os._exit`. Where no session ran (`pytest --markers`), pytest exits its own way.
    """
    import sys

    root = config.stash[_TEMP_ROOT]
    session = config.stash.get(_SESSION, None)
    if hasattr(config, "workerinput"):
        # A pytest-xdist worker: its directory lies inside the main process's
        # (TMPDIR is inherited), which goes with it. It must not leave at once:
        # its last report to the main process may still be in flight, and the
        # main process ends a worker that has not left within 10 seconds.
        atexit._run_exitfuncs()  # pylint: disable=protected-access
        return
    if session is None:
        shutil.rmtree(root, ignore_errors=True)
        return
    status = int(session.exitstatus)
    atexit._run_exitfuncs()  # pylint: disable=protected-access
    if status in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"(this run's temporary files are kept in {root})", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


_SESSION = pytest.StashKey[pytest.Session]()
_TEMP_ROOT = pytest.StashKey[str]()
