"""`--help` of every installed console script lists that binary's own flags, and only kbert's.

absl's `--help` lists the flags of the module named `sys.argv[0]`; an installed
console script (`.venv/bin/kbert-serve`) is a generated `__main__` that imports
`kbert.bin.serve`, so before `kbert.bin.common.run` said otherwise it printed
only a usage line. Each script file runs as `python` runs it (`runpy`, in a
child forked from the suite's preloaded interpreter: no TensorFlow start-up each).
"""

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata

import pytest

from tests import forked_python
from tests.conftest import REPO

# Each script, a flag it defines and, where it has them, a shared flag it defines
# through kbert.bin.common (gin, quantization).
OWN_FLAGS = {
    "kbert-pretrain": ("--input_file", "--gin_file"),
    "kbert-convert": ("--output_dir", None),
    "kbert-finetune": ("--init_checkpoint", "--quantize"),
    "kbert-distill": ("--teacher_dir", "--gin_params"),
    "kbert-export": ("--export_dir", "--max_quantization_drop"),
    "kbert-serve": ("--model_base_path", None),
    "kbert-index": ("--index_dir", None),
    "kbert-vocab": ("--max_new_tokens", None),
    "kbert-predict": ("--input_file", "--text_column_names"),
}
# absl's and TensorFlow's flags, which only --helpfull lists.
OTHERS_FLAGS = ("--verbosity", "--logtostderr", "--flagfile", "--undefok", "--test_tmpdir",
                "--tt_check_filter")


def _scripts():
    return sorted(entry.name for entry in metadata.distribution("kbert-tf").entry_points
                  if entry.group == "console_scripts")


def _run(script, flag):
    path = os.path.join(os.path.dirname(sys.executable), script)
    return forked_python.run([path, flag], cwd=REPO, timeout=120,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))


@pytest.fixture(scope="module")
def helps():
    """`--help` of every script, and `--helpshort` of one (absl's alias of `--help`)."""
    runs = [(script, "--help") for script in _scripts()] + [("kbert-serve", "--helpshort")]
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda run: _run(*run), runs))
    return dict(zip(runs, results))


def test_every_console_script_is_checked():
    assert _scripts() == sorted(OWN_FLAGS)


@pytest.mark.parametrize("script", sorted(OWN_FLAGS))
def test_help_lists_the_binarys_flags_and_no_others(helps, script):
    result = helps[script, "--help"]
    assert result.returncode == 1, result.stderr[-2000:]  # absl exits 1 after help
    text = result.stdout
    own, shared = OWN_FLAGS[script]
    listed = [line.split(":")[0].strip() for line in text.splitlines()
              if line.startswith("  --")]
    assert own in listed, text
    assert shared is None or shared in listed, text
    assert not set(listed) & set(OTHERS_FLAGS), listed
    # The binary's docstring, as `python -m kbert.bin.<name> --help` prints it.
    assert text.startswith(f"{script}: "), text[:200]


def test_helpshort_is_the_same_short_list(helps):
    short, full = helps["kbert-serve", "--helpshort"], helps["kbert-serve", "--help"]
    assert short.returncode == 1 and short.stdout == full.stdout
    assert "--grpc_max_threads" in short.stdout and "--verbosity" not in short.stdout
