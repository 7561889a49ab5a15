"""kbert-pretrain --dry_run, run as users run it: a subprocess."""

import os
import subprocess
import sys

from tests.conftest import REPO


def _pretrain(*args):
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, "-m", "kbert.bin.pretrain", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def test_dry_run_large_prints_exact_counts():
    result = _pretrain("--gin_file=gin/large.gin", "--dry_run")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "parameters: encoder=335141888 pretrainer=336226108"
    assert "BertEncoder.num_layers = 24" in result.stdout
    assert any(line.startswith("transformer_layer_23") for line in lines)


def test_bad_gin_binding_is_one_clear_line():
    result = _pretrain("--gin_file=gin/tiny.gin", "--gin_params=BertEncoder.num_layer = 3", "--dry_run")
    assert result.returncode == 2
    assert "num_layer" in result.stderr and "Traceback" not in result.stderr


def test_training_flag_errors_are_one_clear_line():
    result = _pretrain("--gin_file=gin/tiny.gin", "--strategy=gpu", "--input_file=x",
                       "--model_dir=/tmp/unused")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "Unknown --strategy='gpu'; choose one of default, one_device, mirrored" in result.stderr
