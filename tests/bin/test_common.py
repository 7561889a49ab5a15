"""What every binary shares through `kbert.bin.common.run`: an interruption is one line, no traceback.

(kbert-pretrain's checkpoint on SIGINT and SIGTERM: tests/training/pretraining/test_loop.py.)
"""

from tests import forked_python
from tests.conftest import REPO
from tests.training.pretraining_data import subprocess_env

BINARY = """\
from kbert.bin import common
from kbert.training import TrainingInterrupted

def main(argv):
    if argv[1:] == ["saved"]:
        raise TrainingInterrupted(15, "interrupted by SIGTERM at step 7: checkpoint saved to d/ckpt-7; "
                                      "rerun the same command to resume")
    raise KeyboardInterrupt

common.run(main)
"""


def test_ctrl_c_is_one_line_and_exit_130_and_a_saved_interruption_says_what_it_saved(tmp_path):
    script = tmp_path / "kbert-tool"
    script.write_text(BINARY)
    plain = forked_python.run([str(script)], cwd=REPO, env=subprocess_env(), timeout=120)
    assert plain.returncode == 130
    assert plain.stderr.strip().splitlines()[-1] == "kbert-tool: interrupted by SIGINT"
    assert "Traceback" not in plain.stderr
    saved = forked_python.run([str(script), "saved"], cwd=REPO, env=subprocess_env(),
                              timeout=120)
    assert saved.returncode == 143 and "Traceback" not in saved.stderr
    assert saved.stderr.strip().splitlines()[-1] == (
        "kbert-tool: interrupted by SIGTERM at step 7: checkpoint saved to d/ckpt-7; rerun the "
        "same command to resume")
