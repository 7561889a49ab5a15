"""A tiny ModernBERT pre-trains through `run_pretraining` unchanged: its recipe in gin.

The paper's recipe (gin/modernbert_pretrain.gin, which modernbert_tiny.gin includes):
StableAdamW, 30% dynamic masking, packed rows, batch-size warmup, the warmup-stable-decay
schedule (1-sqrt here), at the tiny scale of the tests' RUN, with mmBERT's masking-rate
schedule on top; and the same run SIGKILLed and resumed.
"""

import os

import signal
import subprocess
import sys

import gin
import numpy as np
import pytest
import tensorflow as tf

from kbert import configurables
from kbert.checkpoints import load_encoder
from kbert.data import create_pretraining_data
from kbert.models import ModernBertEncoder
from tests import forked_python
from tests.training.pretraining_data import RUN
from tests.training.pretraining_data import TESTDATA
from tests.training.pretraining_data import build_vocab
from tests.conftest import REPO
from tests.training.pretraining_data import kill_at_line
from tests.training.pretraining_data import read_losses
from tests.training.pretraining_data import subprocess_env

# gin/modernbert_tiny.gin with a window of 4 (radius 2) on rows of 16, so local layers are local;
# the recipe's scale made tiny: micro-batches of 4 rows, the first 4 steps at one of them (the
# batch-size warmup's 4 x 16 x 4 = 256 tokens), then two; masks at 30% for 8 steps, then 15%.
GIN = ["ModernBertEncoder.local_attention_window = 4",
       "PackingConfig.max_instances_per_row = 3", "PackingConfig.window_size = 32",
       "run_pretraining.gradient_accumulation_steps = 2", "BatchSizeWarmup.min_batch_size = 4",
       "BatchSizeWarmup.warmup_tokens = 256",
       "StableDecay.decay_fraction = 0.5", 'StableDecay.decay_shape = "1-sqrt"',
       "run_pretraining.masking_schedule = @MaskingSchedule()",
       "MaskingSchedule.rates = (0.3, 0.15)", "MaskingSchedule.boundaries = (0.5,)"]
RECIPE_RUN = {**RUN, "max_predictions_per_seq": 6}


def _run_recipe(data, vocab_file, model_dir):
    configurables.parse_gin(["modernbert_tiny.gin"],
                            GIN + [f"run_pretraining.{k} = {v!r}" for k, v in RECIPE_RUN.items()])
    lines = []
    summary = configurables.run_pretraining(
        input_file=data, model_dir=str(model_dir), build_pretrainer=configurables.pretrainer,
        vocab_file=vocab_file, do_lower_case=True, print_fn=lines.append)
    return summary, lines


@pytest.fixture(scope="module")
def dynamic_data(tmp_path_factory):
    """Unmasked data from the data tool (--masking=dynamic) and its vocabulary (99 words)."""
    directory = tmp_path_factory.mktemp("modernbert_data")
    vocab_file = directory / "vocab.txt"
    vocab_file.write_text("\n".join(build_vocab(99)[0]) + "\n")
    path = str(directory / "train.tfrecord")
    create_pretraining_data(
        os.path.join(TESTDATA, "emma_chapter1.txt"), path, str(vocab_file),
        max_seq_length=RUN["max_seq_length"], max_predictions_per_seq=6, dupe_factor=1,
        num_workers=1, masking="dynamic")
    return path, str(vocab_file)


@pytest.fixture(scope="module")
def recipe_run(dynamic_data, tmp_path_factory):
    """The uninterrupted run the resume test compares with, and its operative config."""
    model_dir = tmp_path_factory.mktemp("recipe")
    summary, lines = _run_recipe(*dynamic_data, model_dir)
    return model_dir, summary, lines, gin.operative_config_str()


def test_tiny_modernbert_pretrains_with_its_recipe(recipe_run):
    tmp_path, summary, lines, operative = recipe_run
    for binding in ('run_pretraining.optimizer = "stable_adamw"', "OptimizerConfig.beta_2 = 0.98",
                    "OptimizerConfig.global_clipnorm = None", 'run_pretraining.masking = "dynamic"',
                    "MaskingConfig.masked_lm_prob = 0.3", "run_pretraining.packing = @PackingConfig()",
                    "OptimizerConfig.decoupled_weight_decay = True"):
        assert binding.replace('"', "'") in operative.replace('"', "'"), binding
    losses, steps = read_losses(str(tmp_path))
    assert steps == list(range(1, 17))
    # One micro-batch of 4 rows for the first 4 steps, then two; 30% masks, then 15% from step 9.
    assert read_losses(str(tmp_path), "batch_size")[0] == [4] * 4 + [8] * 12
    assert read_losses(str(tmp_path), "masked_lm_prob")[0] == pytest.approx([0.3] * 8 + [0.15] * 8)
    assert np.mean(losses[-4:]) < np.mean(losses[:4]) - 0.15
    assert 0.0 <= summary["masked_lm_accuracy"] <= 1.0
    assert summary["next_sentence_accuracy"] is None
    progress = [line for line in lines if line.startswith("step ")]
    assert "mlm_acc" in progress[-1] and "nsp_acc" not in progress[-1]
    # The data was made for NSP (the data tool's default): ModernBERT has no NSP head, and
    # the run says so before its first step.
    warnings = [line for line in lines if line.startswith("warning: ")]
    assert len(warnings) == 1 and "records next_sentence='nsp', but the model has no " \
        "next-sentence head" in warnings[0] and lines.index(warnings[0]) < lines.index(progress[0])
    # RUN warms up 2 steps, then holds 1e-3 until the 1-sqrt decay over the last 8 of 16.
    rates = [float(line.split(" lr ")[1].split()[0]) for line in progress]
    assert rates == pytest.approx([1e-3, 1e-3, 1e-3 * (1 - np.sqrt(0.5)), 0.0], rel=1e-3)
    encoder = load_encoder(str(tmp_path))
    assert type(encoder) is ModernBertEncoder and encoder.local_attention_window == 4


@pytest.mark.slow
def test_the_recipe_resumes_exactly_after_sigkill(recipe_run, dynamic_data, tmp_path):
    """kbert-pretrain SIGKILLed after its step-8 checkpoint (the batch grown, the masking rate
    about to fall), resumed in this process: the uninterrupted run's losses, step for step."""
    data, vocab_file = dynamic_data
    model_dir = tmp_path / "model"
    command = [sys.executable, "-m", "kbert.bin.pretrain", "--gin_file=gin/modernbert_tiny.gin",
               f"--input_file={data}", f"--model_dir={model_dir}", f"--vocab_file={vocab_file}"]
    command += [f"--gin_params={p}" for p in GIN + [
        f"run_pretraining.{k} = {v!r}" for k, v in RECIPE_RUN.items()]]
    with open(tmp_path / "stderr.txt", "w") as stderr:
        killed = subprocess.Popen(command, cwd=REPO, env=subprocess_env(),
                                  stdout=subprocess.PIPE, stderr=stderr, text=True)
        kill_at_line(killed, "step 8/16")
    assert killed.returncode == -signal.SIGKILL, open(tmp_path / "stderr.txt").read()
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-8")
    summary, lines = _run_recipe(data, vocab_file, model_dir)
    assert summary["resumed_from_step"] == 8 and "resuming from" in "\n".join(lines)
    np.testing.assert_allclose(read_losses(str(model_dir))[0], read_losses(str(recipe_run[0]))[0],
                               atol=1e-5)
    assert read_losses(str(model_dir), "masked_lm_prob")[0] == pytest.approx(
        [0.3] * 8 + [0.15] * 8)


def test_dry_run_prints_the_counts_of_the_closed_form():
    """`kbert-pretrain --gin_file=gin/modernbert_tiny.gin --dry_run`'s report.

    A subprocess, as users run it: importing kbert.bin.pretrain here would define
    its absl flags in the test process, where other tools define flags of the same names.
    """
    V, L, H, I = 99, 3, 64, 96
    layer = 3 * H * H + H * H + H * 2 * I + I * H + 2 * H
    encoder = V * H + H + L * layer - H + H  # layer 0 has no attention norm
    pretrainer = encoder + H * H + H + V  # head dense and norm, decoder bias (tied)
    result = forked_python.run(
        ["-m", "kbert.bin.pretrain", "--gin_file=gin/modernbert_tiny.gin", "--dry_run"],
        cwd=REPO, env=subprocess_env(), timeout=300)
    assert result.returncode == 0, result.stderr
    output = result.stdout.rstrip("\n")
    assert output.splitlines()[-1] == f"parameters: encoder={encoder} pretrainer={pretrainer}"
    assert "pretrainer.model = @ModernBertPretrainer" in output
    assert f"{'masked_lm_head':<32s}{H * H + H + V:>14,d}" in output
