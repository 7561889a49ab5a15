"""Apache Beam stays optional: kbert.data imports and works without it; --runner says what to install."""

import os
import subprocess
import sys

import pytest

from kbert.data import beam_support
from tests.conftest import REPO
from tests.data.conftest import PERSUASION

# Runs with apache_beam made unimportable, as where the beam extra is not installed.
WITHOUT_BEAM = f"""
import sys
class NoBeam:
    def find_spec(self, name, path=None, target=None):
        if name == "apache_beam" or name.startswith("apache_beam."):
            raise ImportError("No module named 'apache_beam'")
sys.meta_path.insert(0, NoBeam())
import kbert.data
assert "apache_beam" not in sys.modules
out = sys.argv[1]
kbert.data.build_vocab({PERSUASION!r}, out, vocab_size=600)
try:
    kbert.data.build_vocab({PERSUASION!r}, out, vocab_size=600, runner="DataflowRunner")
except ValueError as e:
    print(e)
"""


def test_kbert_data_works_without_beam(tmp_path):
    out = str(tmp_path / "vocab.txt")
    result = subprocess.run([sys.executable, "-c", WITHOUT_BEAM, out], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": REPO}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.path.getsize(out) > 0
    assert ("--runner=DataflowRunner needs Apache Beam: pip install -e '.[beam]' in the kbert "
            "checkout (or pip install 'apache-beam>=2.77,<3')") in result.stdout


def test_pipeline_options_refuse_unknown_flags():
    options = beam_support.pipeline_options(
        "DirectRunner", ["--direct_num_workers=2", "--direct_running_mode=multi_processing"])
    assert beam_support.runner_name(options) == "DirectRunner"
    assert not beam_support.runs_in_this_process(options)
    assert beam_support.runs_in_this_process(beam_support.pipeline_options("DirectRunner", []))
    with pytest.raises(ValueError, match=r"--dupe_facter: neither a flag of this tool nor an Apache "
                                         r"Beam pipeline option"):
        beam_support.pipeline_options("DirectRunner", ["--dupe_facter=5"])


def test_kbert_error_message_from_a_worker_traceback():
    report = RuntimeError(
        "Pipeline failed:\nTraceback (most recent call last):\n  File \"x.py\", line 3\n"
        "ValueError: corpus.txt:7: not valid utf-8 (invalid start byte at byte 2 of the line); "
        "pass --input_encoding=latin-1 (or the file's encoding) or fix the file. "
        "[while running 'Cut files into pieces']\n")
    assert beam_support.kbert_error_message(report) == (
        "corpus.txt:7: not valid utf-8 (invalid start byte at byte 2 of the line); pass "
        "--input_encoding=latin-1 (or the file's encoding) or fix the file.")
    assert beam_support.kbert_error_message(RuntimeError("worker lost")) is None
