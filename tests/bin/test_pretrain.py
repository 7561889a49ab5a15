"""kbert-pretrain run as users run it (a process of its own): --dry_run counts and one-line errors."""

import os
import subprocess
import sys

from tests import forked_python
from tests.conftest import REPO


def _env():
    return dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")


def _pretrain(*args):
    return forked_python.run(["-m", "kbert.bin.pretrain", *args], cwd=REPO, env=_env(),
                             timeout=300)


def test_dry_run_large_prints_exact_counts():
    # A new interpreter, as the console script starts: its stderr must be free of
    # TensorFlow's start-up lines, which a forked run has already left behind.
    result = subprocess.run([sys.executable, "-m", "kbert.bin.pretrain", "--gin_file=gin/large.gin",
                             "--dry_run"], cwd=REPO, env=_env(), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[-1] == "parameters: encoder=335141888 pretrainer=336226108"
    assert "BertEncoder.num_layers = 24" in result.stdout
    assert any(line.startswith("transformer_layer_23") for line in lines)
    assert not any(word in result.stderr for word in ("oneDNN", "cuInit", "cudart", "InitializeLog"))


def test_bad_gin_binding_is_one_clear_line():
    result = _pretrain("--gin_file=gin/tiny.gin", "--gin_params=BertEncoder.num_layer = 3", "--dry_run")
    assert result.returncode == 2
    assert "num_layer" in result.stderr and "Traceback" not in result.stderr


def test_training_flag_errors_are_one_clear_line():
    result = _pretrain("--gin_file=gin/tiny.gin", "--strategy=gpu", "--input_file=x",
                       "--model_dir=/tmp/unused")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "Unknown --strategy='gpu'; choose one of default, one_device, mirrored" in result.stderr


def test_truncated_data_is_one_line_naming_the_file_and_leaves_no_model_dir(tmp_path):
    from tests.training.pretraining_data import write_pretraining_data

    data = write_pretraining_data(str(tmp_path / "train.tfrecord"), num_examples=8)
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) - 7)
    model_dir = tmp_path / "model"
    result = _pretrain("--gin_file=gin/tiny.gin", f"--input_file={data}", f"--model_dir={model_dir}",
                       "--gin_params=BertEncoder.vocabulary_size = 99",
                       "--gin_params=run_pretraining.max_seq_length = 16",
                       "--gin_params=run_pretraining.max_predictions_per_seq = 3",
                       "--gin_params=run_pretraining.train_batch_size = 8",
                       "--gin_params=run_pretraining.num_train_steps = 2",
                       "--gin_params=run_pretraining.num_warmup_steps = 1")
    assert result.returncode == 2, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "train.tfrecord: corrupt or truncated TFRecord at byte" in last
    assert "Traceback" not in result.stderr and not model_dir.exists()
