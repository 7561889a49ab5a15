"""tools/build_vocab.py and `kbert-vocab build`: two front doors, one run, the same vocab.txt."""

import os
import sys

from tests import forked_python
from tests.conftest import REPO
from kbert.data import build_vocab

PERSUASION = os.path.join(REPO, "tests", "testdata", "austen-persuasion-head.txt")
FLAGS = [f"--input_file={PERSUASION}", "--vocab_size=600", "--nodo_lower_case", "--num_unused=5"]


def _run(args):
    return forked_python.run(args, cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, timeout=180)


def test_both_front_doors_write_the_library_s_vocab_byte_for_byte(tmp_path):
    build_vocab(PERSUASION, str(tmp_path / "library.txt"), vocab_size=600, do_lower_case=False,
                num_unused=5)
    for name, command in (("tool", ["tools/build_vocab.py"]),
                          ("cli", ["-m", "kbert.bin.vocab", "build"])):
        output = tmp_path / f"{name}.txt"
        result = _run(command + FLAGS + [f"--output_file={output}"])
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(f"Wrote 600 tokens to {output} in "), result.stdout
        assert result.stdout.rstrip().endswith(" lines).")
        assert output.read_bytes() == (tmp_path / "library.txt").read_bytes(), name


def test_kbert_vocab_help_lists_build_s_flags_and_errors_are_one_line(tmp_path):
    # The installed console script and `python -m` (absl lists sys.argv[0]'s key flags).
    script = os.path.join(os.path.dirname(sys.executable), "kbert-vocab")
    for command in ([script], ["-m", "kbert.bin.vocab"]):
        helped = _run(command + ["--help"])
        listed = [line.split(":")[0].strip() for line in helped.stdout.splitlines()
                  if line.startswith("  --")]
        assert {"--input_file", "--output_file", "--vocab_size", "--[no]do_lower_case",
                "--num_unused", "--input_encoding", "--min_frequency", "--limit_alphabet",
                "--runner", "--model_dir", "--max_new_tokens"} <= set(listed), command
    output = str(tmp_path / "vocab.txt")
    missing = _run(["-m", "kbert.bin.vocab", "build", f"--output_file={output}"])
    assert (missing.returncode, missing.stderr.strip()) == (
        2, "vocab.py: error: kbert-vocab build needs --input_file.")
    # Apache Beam's options follow `--` and need --runner; the tool takes them without `--`.
    beam = "unknown flag(s) --direct_num_workers=2; Apache Beam options need --runner."
    cli = _run(["-m", "kbert.bin.vocab", "build", *FLAGS, f"--output_file={output}", "--",
                "--direct_num_workers=2"])
    assert (cli.returncode, cli.stderr.strip()) == (2, f"vocab.py: error: {beam}")
    tool = _run(["tools/build_vocab.py", *FLAGS, f"--output_file={output}",
                 "--direct_num_workers=2"])
    # (Its stderr may start with TensorFlow's start-up notices: the tool does not hide them.)
    assert (tool.returncode, tool.stderr.strip().splitlines()[-1]) == (
        1, f"build_vocab: error: {beam}")
    assert os.listdir(tmp_path) == []
