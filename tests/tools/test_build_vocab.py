"""tools/build_vocab.py and `kbert-vocab build`: two front doors, one run, the same vocab.txt
(or, with --tokenizer=bpe, the same tokenizer.json)."""

import os
import sys

from tests import forked_python
from tests.conftest import REPO
from kbert.data import build_vocab
from kbert.data.vocab import build_bpe_tokenizer

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


def test_bpe_with_output_dir_writes_the_library_s_tokenizer_json(tmp_path):
    build_bpe_tokenizer(PERSUASION, str(tmp_path / "library.json"), vocab_size=400)
    for name, command in (("tool", ["tools/build_vocab.py"]),
                          ("cli", ["-m", "kbert.bin.vocab", "build"])):
        output_dir = tmp_path / name  # Made by the run.
        result = _run(command + ["--tokenizer=bpe", f"--input_file={PERSUASION}",
                                 "--vocab_size=400", f"--output_dir={output_dir}"])
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith(
            f"Wrote 448 tokens (443 learned, 5 special, 0 [unusedN] to a multiple of 64) to "
            f"{output_dir}/tokenizer.json in "), result.stdout
        assert os.listdir(output_dir) == ["tokenizer.json"]
        assert (output_dir / "tokenizer.json").read_bytes() == (
            tmp_path / "library.json").read_bytes(), name
    # WordPiece into a directory: vocab.txt and its lower casing, as a model directory holds them.
    wordpiece = _run(["-m", "kbert.bin.vocab", "build", *FLAGS, f"--output_dir={tmp_path}/wp"])
    assert wordpiece.returncode == 0, wordpiece.stderr
    assert sorted(os.listdir(tmp_path / "wp")) == ["tokenizer_config.json", "vocab.txt"]
    assert (tmp_path / "wp" / "tokenizer_config.json").read_text() == '{"do_lower_case": false}\n'


def test_bpe_refuses_wordpiece_flags_and_wants_one_output(tmp_path):
    refused = _run(["-m", "kbert.bin.vocab", "build", "--tokenizer=bpe", *FLAGS,
                    f"--output_dir={tmp_path}/out"])
    assert (refused.returncode, refused.stderr.strip()) == (
        2, "vocab.py: error: --do_lower_case, --num_unused shape(s) a WordPiece vocab.txt; a "
           "byte-level BPE is cased, has every byte and pads with [unusedN] to a multiple of 64 "
           "ids: drop them or pass --tokenizer=wordpiece.")
    both = _run(["-m", "kbert.bin.vocab", "build", f"--input_file={PERSUASION}",
                 f"--output_file={tmp_path}/v.txt", f"--output_dir={tmp_path}/out"])
    assert (both.returncode, both.stderr.strip()) == (
        2, "vocab.py: error: kbert-vocab build needs one of --output_file (the file) and "
           "--output_dir (a directory to write it into).")
    assert os.listdir(tmp_path) == []
