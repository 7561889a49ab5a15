"""tests/forked_python.py runs a script as a new `python` would: same streams, status, env, cwd."""

import os
import subprocess
import sys
import time

import pytest

from tests import forked_python
from tests.conftest import REPO

SCRIPT = """\
import os, sys
print("argv", sys.argv[1:], "cwd", os.getcwd(), "env", os.environ.get("FORKED_TEST"))
print("stdin", sys.stdin.read().strip())
print("to stderr", file=sys.stderr)
mode = sys.argv[1]
if mode == "raise":
    raise ValueError("broken input on line 3")
if mode == "message":
    sys.exit("one clear line")
if mode == "sleep":
    import time
    time.sleep(60)
sys.exit(int(mode))
"""


@pytest.mark.parametrize("mode", ["0", "3", "raise", "message"])
def test_status_and_streams_equal_a_new_interpreters(tmp_path, mode):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, FORKED_TEST="yes")
    forked = forked_python.run([str(script), mode], cwd=str(tmp_path), env=env, timeout=60,
                               input="a line\n")
    fresh = subprocess.run([sys.executable, str(script), mode], cwd=str(tmp_path), env=env,
                           input="a line\n", capture_output=True, text=True, timeout=60)
    assert forked.returncode == fresh.returncode == {"0": 0, "3": 3}.get(mode, 1)
    assert forked.stdout == fresh.stdout
    assert f"cwd {tmp_path} env yes" in forked.stdout and "stdin a line" in forked.stdout
    # A traceback names the same file, line and error; the rest of stderr is equal.
    assert forked.stderr.splitlines()[0] == fresh.stderr.splitlines()[0] == "to stderr"
    assert forked.stderr.splitlines()[-1] == fresh.stderr.splitlines()[-1]


def test_a_module_runs_as_python_dash_m():
    result = forked_python.run(["-m", "kbert.bin.pretrain", "--gin_file=gin/tiny.gin",
                                "--gin_params=BertEncoder.num_layer = 3", "--dry_run"],
                               cwd=REPO, env=dict(os.environ), timeout=120)
    assert result.returncode == 2 and "num_layer" in result.stderr


def test_a_child_past_its_timeout_is_killed_and_reported(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as expired:
        forked_python.run([str(script), "sleep"], cwd=str(tmp_path), env=dict(os.environ),
                          timeout=2)
    assert time.monotonic() - started < 30
    assert "to stderr" in expired.value.stderr
