"""Held-out evaluation of pre-training: exact metrics, resume, eval-only, bad input.

The figures are checked against numpy computations from the same model's
logits over every masked position; a run with evaluation must train exactly as
one without (the mirrored strategy: test_step.py). The data's baselines are
tested in tests/data/pretraining/test_baselines.py.
"""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest

from tests import forked_python
from tests.conftest import REPO
from tests.conftest import tiny_encoder_kwargs as _tiny_encoder_kwargs
from tests.training.pretraining_data import RUN
from tests.training.pretraining_data import build_vocab
from tests.training.pretraining_data import drop_second_prediction_of_every_third_row
from tests.training.pretraining_data import gin_params
from tests.training.pretraining_data import kill_at_line
from tests.training.pretraining_data import read_losses
from tests.training.pretraining_data import subprocess_env
from tests.training.pretraining_data import write_pretraining_data

from kbert.checkpoints import load_pretrainer
from kbert.checkpoints import read_tokenizer_config
from kbert.checkpoints import save_pretrained
from kbert.data import pretraining_dataset
from kbert.models import BertEncoder
from kbert.models import BertPretrainer
from kbert.training import evaluate_pretrainer
from kbert.training import run_pretraining

# 30 held-out examples in batches of 7: four full batches and a short one of 2.
EVAL_BATCH = 7
HISTORY_KEYS = ("step", "masked_lm_loss", "masked_lm_accuracy", "perplexity",
                "next_sentence_loss", "next_sentence_accuracy", "unigram_masked_lm_loss",
                "unigram_masked_lm_accuracy", "majority_next_sentence_accuracy")


def tiny_encoder_kwargs(**overrides):
    """The suite's tiny sizes with one layer: evaluation treats every layer alike, and a
    layer less is a cheaper trace of every run (here and in kbert-pretrain)."""
    return _tiny_encoder_kwargs(**{"num_layers": 1, **overrides})


def _build():
    return BertPretrainer(BertEncoder(**tiny_encoder_kwargs(dropout=0.1)))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    directory = tmp_path_factory.mktemp("eval_data")
    train = write_pretraining_data(str(directory / "train.tfrecord"))
    heldout = write_pretraining_data(str(directory / "heldout.tfrecord"), num_examples=30, seed=1)
    drop_second_prediction_of_every_third_row(heldout)
    return train, heldout


@pytest.fixture(scope="module")
def runs(data, tmp_path_factory):
    """The same run without and with evaluation (every 4 steps)."""
    train, heldout = data
    plain, evaluated = tmp_path_factory.mktemp("plain"), tmp_path_factory.mktemp("evaluated")
    run_pretraining(train, str(plain), _build, print_fn=lambda _: None, **RUN)
    lines = []
    summary = run_pretraining(train, str(evaluated), _build, print_fn=lines.append,
                              eval_input_file=heldout, eval_batch_size=EVAL_BATCH, **RUN)
    return plain, evaluated, summary, lines


def _numpy_metrics(pretrainer, heldout):
    """The masked-LM and NSP figures over every eval example, by hand from the logits."""
    losses, hits, weights, nsp_losses, nsp_hits = [], [], [], [], []
    for features, labels, sample_weights in pretraining_dataset(
            heldout, 5, 16, 3, is_training=False).as_numpy_iterator():
        outputs = pretrainer(features, training=False)
        logits = keras.ops.convert_to_numpy(outputs["mlm"]).astype(np.float64)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        picked = np.take_along_axis(log_probs, labels["mlm"][..., None], -1)[..., 0]
        losses.append(-picked.ravel())
        hits.append((logits.argmax(-1) == labels["mlm"]).ravel())
        weights.append(sample_weights["mlm"].ravel())
        nsp = keras.ops.convert_to_numpy(outputs["nsp"]).astype(np.float64)
        nsp_log_probs = nsp - np.log(np.exp(nsp).sum(-1, keepdims=True))
        nsp_losses.append(-nsp_log_probs[np.arange(len(nsp)), labels["nsp"][:, 0]])
        nsp_hits.append(nsp.argmax(-1) == labels["nsp"][:, 0])
    w = np.concatenate(weights)
    return {"masked_lm_loss": (np.concatenate(losses) * w).sum() / w.sum(),
            "masked_lm_accuracy": (np.concatenate(hits) * w).sum() / w.sum(),
            "next_sentence_loss": np.concatenate(nsp_losses).mean(),
            "next_sentence_accuracy": np.concatenate(nsp_hits).mean(),
            "masked_tokens": w.sum()}


def test_evaluation_equals_the_masked_positions_by_hand(runs, data):
    _, evaluated, _, _ = runs
    pretrainer = load_pretrainer(str(evaluated))
    # Uneven batches: 30 examples in 7s; rows hold 1 or 2 real masked positions of 3.
    weights = np.concatenate([w["mlm"] for _, _, w in pretraining_dataset(
        data[1], 30, 16, 3, is_training=False).as_numpy_iterator()])
    assert set(weights.sum(1)) == {1.0, 2.0}
    results = evaluate_pretrainer(pretrainer, data[1], batch_size=EVAL_BATCH)
    expected = _numpy_metrics(pretrainer, data[1])
    assert results["eval_batches"] == 5 and results["eval_masked_tokens"] == expected["masked_tokens"]
    for name in ("masked_lm_loss", "masked_lm_accuracy", "next_sentence_loss",
                 "next_sentence_accuracy"):
        np.testing.assert_allclose(results[name], expected[name], rtol=1e-6, err_msg=name)
    assert results["perplexity"] == pytest.approx(math.exp(results["masked_lm_loss"]), rel=1e-12)


def test_the_keras_route_reports_the_same_losses(runs, data):
    _, evaluated, _, _ = runs
    pretrainer = load_pretrainer(str(evaluated))
    pretrainer.compile()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        keras_results = pretrainer.evaluate(
            pretraining_dataset(data[1], EVAL_BATCH, 16, 3, is_training=False), verbose=0,
            return_dict=True)
    assert not [w for w in caught if "ran out of data" in str(w.message)]
    expected = _numpy_metrics(pretrainer, data[1])
    np.testing.assert_allclose(keras_results["mlm_loss"], expected["masked_lm_loss"], rtol=1e-5)
    np.testing.assert_allclose(keras_results["nsp_loss"], expected["next_sentence_loss"], rtol=1e-5)
    np.testing.assert_allclose(keras_results["mlm_masked_lm_accuracy"],
                               expected["masked_lm_accuracy"], rtol=1e-6)
    np.testing.assert_allclose(keras_results["nsp_next_sentence_accuracy"],
                               expected["next_sentence_accuracy"], rtol=1e-6)


def test_evaluation_does_not_change_training_and_writes_every_record(runs):
    plain, evaluated, summary, lines = runs
    assert read_losses(str(evaluated)) == read_losses(str(plain))
    history = [json.loads(line) for line in open(evaluated / "eval_history.jsonl")]
    assert [h["step"] for h in history] == [4, 8, 12, 16]
    assert json.load(open(evaluated / "eval_results.json")) == history[-1] == summary["eval_results"]
    assert history[-1]["masked_lm_loss"] < history[0]["masked_lm_loss"]
    assert [line.split("  ")[0] for line in lines if line.startswith("eval")] == [
        f"eval step {step}" for step in (4, 8, 12, 16)]
    assert "(unigram " in lines[-2] and "(majority " in lines[-2]
    eval_scalars, steps = read_losses(str(evaluated / "eval"), tag="masked_lm_accuracy")
    assert steps == [4, 8, 12, 16]
    np.testing.assert_allclose(eval_scalars, [h["masked_lm_accuracy"] for h in history], rtol=1e-6)


def test_dynamic_masks_are_the_same_in_every_evaluation(tmp_path):
    from kbert.data import create_pretraining_data
    from tests.training.pretraining_data import TESTDATA

    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(build_vocab(99)[0]) + "\n")
    heldout = str(tmp_path / "heldout.tfrecord")
    create_pretraining_data(os.path.join(TESTDATA, "emma_chapter1.txt"), heldout, str(vocab_file),
                            max_seq_length=16, max_predictions_per_seq=3, dupe_factor=1,
                            num_workers=1, masking="dynamic")
    pretrainer = BertPretrainer(BertEncoder(**tiny_encoder_kwargs()), next_sentence=False)
    first = evaluate_pretrainer(pretrainer, heldout, batch_size=16, max_steps=3)
    second = evaluate_pretrainer(pretrainer, heldout, batch_size=16, max_steps=3)
    assert first["eval_batches"] == 3 and first["eval_masked_tokens"] > 0
    for name in ("masked_lm_loss", "masked_lm_accuracy", "eval_masked_tokens"):
        assert first[name] == second[name]


@pytest.mark.slow
def test_resume_after_sigkill_repeats_the_losses_and_the_eval_history(runs, data, tmp_path):
    """kbert-pretrain SIGKILLed after its step-8 evaluation, resumed in this process with
    the same settings (a second binary would pay TensorFlow's import and the traces again;
    the binary's steps equal the in-process runs', as the losses below show)."""
    plain, evaluated, _, _ = runs
    train, heldout = data
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(build_vocab(99)[0]) + "\n")
    model_dir = tmp_path / "model"
    command = [sys.executable, "-m", "kbert.bin.pretrain", "--gin_file=gin/tiny.gin",
               f"--input_file={train}", f"--eval_input_file={heldout}",
               f"--model_dir={model_dir}", f"--vocab_file={vocab_file}", "--do_lower_case"]
    command += [f"--gin_params={p}" for p in gin_params(
        tiny_encoder_kwargs(), log_every_steps=1, eval_batch_size=EVAL_BATCH)]
    with open(tmp_path / "stderr.txt", "w") as stderr:
        killed = subprocess.Popen(command, cwd=REPO, env=subprocess_env(),
                                  stdout=subprocess.PIPE, stderr=stderr, text=True)
        kill_at_line(killed, "step 10/16")  # after the evaluation of step 8
    assert killed.returncode == -signal.SIGKILL, open(tmp_path / "stderr.txt").read()
    lines = []
    run_pretraining(train, str(model_dir), _build, print_fn=lines.append,
                    eval_input_file=heldout, eval_batch_size=EVAL_BATCH,
                    vocab_file=str(vocab_file), do_lower_case=True, **RUN)
    assert "resuming from" in "\n".join(lines)
    summary = json.load(open(model_dir / "summary.json"))
    assert summary["global_step"] == 16 and summary["resumed_from_step"] in (4, 8)
    losses, steps = read_losses(str(model_dir))
    assert steps == list(range(1, 17))
    # The same losses as a run without evaluation: evaluating changes nothing in training.
    np.testing.assert_allclose(losses, read_losses(str(plain))[0], atol=1e-5)
    assert "run_pretraining.train_batch_size = 8" in open(model_dir / "operative_config.gin").read()
    assert read_tokenizer_config(str(model_dir)) == {
        "vocab_file": str(model_dir / "vocab.txt"), "do_lower_case": True}
    history = [json.loads(line) for line in open(model_dir / "eval_history.jsonl")]
    expected = [json.loads(line) for line in open(evaluated / "eval_history.jsonl")]
    assert [h["step"] for h in history] == [4, 8, 12, 16]
    for got, want in zip(history, expected):
        for key in HISTORY_KEYS:
            assert got[key] == pytest.approx(want[key], abs=1e-5), (got["step"], key)


def test_eval_only_on_a_directory_equals_the_periodic_evaluation(runs, data, tmp_path):
    _, evaluated, _, _ = runs
    heldout = data[1]
    out = tmp_path / "eval_only"
    result = forked_python.run(
        ["-m", "kbert.bin.pretrain", "--nodo_train", "--do_eval",
         f"--init_checkpoint={evaluated}", f"--eval_input_file={heldout}", f"--model_dir={out}",
         f"--gin_params=run_pretraining.eval_batch_size = {EVAL_BATCH}",
         "--gin_params=run_pretraining.max_seq_length = 16",
         "--gin_params=run_pretraining.max_predictions_per_seq = 3"],
        cwd=REPO, env=subprocess_env(), timeout=300)
    assert result.returncode == 0, result.stderr
    results = json.load(open(out / "eval_results.json"))
    periodic = json.load(open(evaluated / "eval_results.json"))
    assert results["step"] == 16 and results["checkpoint"] == str(evaluated)
    for key in ("masked_lm_loss", "masked_lm_accuracy", "perplexity", "next_sentence_loss",
                "next_sentence_accuracy", "eval_masked_tokens"):
        assert results[key] == pytest.approx(periodic[key], rel=1e-6), key
    assert sorted(os.listdir(out)) == ["eval_only", "eval_only_history.jsonl", "eval_results.json"]


def test_eval_only_leaves_a_training_run_as_it_was_and_labels_a_held_out_baseline(
        runs, data, tmp_path):
    """Issue 51, defects 2 and 3: `--nodo_train --do_eval` on a training run's own model_dir
    needs no --gin_file (the run's operative_config.gin builds the model), appends to
    eval_only_history.jsonl and leaves eval_history.jsonl and the config byte for byte; without
    --input_file the unigram figures are the held-out set's own, written as such and printed
    apart; with it, they are the training run's baseline."""
    import gin
    import tensorflow as tf

    from kbert import configurables

    _, evaluated, _, _ = runs
    train, heldout = data
    run_dir = tmp_path / "run"
    shutil.copytree(evaluated, run_dir)
    configurables.parse_gin(["tiny.gin"], gin_params(tiny_encoder_kwargs(dropout=0.1)))
    with tf.Graph().as_default():
        configurables.pretrainer()
    config = gin.operative_config_str() + "\n" + "\n".join(
        f"run_pretraining.{k} = {v!r}" for k, v in {**RUN, "eval_batch_size": EVAL_BATCH}.items())
    gin.clear_config()
    (run_dir / "operative_config.gin").write_text(config)
    history = (run_dir / "eval_history.jsonl").read_text()
    periodic = [json.loads(line) for line in history.splitlines()]
    result = forked_python.run(
        ["-m", "kbert.bin.pretrain", "--nodo_train", "--do_eval", f"--model_dir={run_dir}",
         f"--eval_input_file={heldout}"], cwd=REPO, env=subprocess_env(), timeout=300)
    assert result.returncode == 0, result.stderr
    assert (run_dir / "eval_history.jsonl").read_text() == history
    assert (run_dir / "operative_config.gin").read_text() == config
    [line] = [json.loads(text) for text in open(run_dir / "eval_only_history.jsonl")]
    assert line["step"] == 16 and len(periodic) == 4
    assert line["masked_lm_loss"] == pytest.approx(periodic[-1]["masked_lm_loss"], rel=1e-6)
    assert "unigram_masked_lm_loss" not in line
    assert line["heldout_unigram_instances"] == 30  # the held-out set, not the training data
    # The fixture's two sets draw tokens alike, so the two unigram losses differ little.
    assert abs(line["heldout_unigram_masked_lm_loss"]
               - periodic[-1]["unigram_masked_lm_loss"]) > 1e-3
    assert "(unigram " not in result.stdout and "no baseline to compare with" in result.stdout
    results = run_pretraining(train, str(run_dir), _build, print_fn=lambda _: None,
                              do_train=False, eval_input_file=heldout,
                              eval_batch_size=EVAL_BATCH, **RUN)
    for key in ("unigram_masked_lm_loss", "unigram_masked_lm_accuracy", "unigram_instances"):
        assert results[key] == pytest.approx(periodic[-1][key], rel=1e-6), key
    assert len((run_dir / "eval_only_history.jsonl").read_text().splitlines()) == 2
    assert (run_dir / "eval_history.jsonl").read_text() == history


def test_zero_steps_write_the_never_pretrained_baseline(data, tmp_path):
    train, heldout = data
    summary = run_pretraining(train, str(tmp_path), _build, print_fn=lambda _: None,
                              eval_input_file=heldout, **{**RUN, "num_train_steps": 0})
    assert summary["global_step"] == 0 and summary["eval_results"]["step"] == 0
    keras.utils.set_random_seed(RUN["seed"])  # as run_pretraining seeds its initialisation
    fresh = _build()
    saved = load_pretrainer(str(tmp_path))
    for mine, theirs in zip(saved.get_weights(), fresh.get_weights()):
        np.testing.assert_array_equal(mine, theirs)


def _error(command_args, tmp_path):
    result = forked_python.run(["-m", "kbert.bin.pretrain", *command_args], cwd=REPO,
                               env=subprocess_env(), timeout=300)
    assert result.returncode != 0
    return result.stderr.strip().splitlines()[-1]


def _refused(tmp_path, **arguments):
    with pytest.raises((ValueError, FileNotFoundError)) as refused:
        run_pretraining(model_dir=str(tmp_path / "fresh"), build_pretrainer=_build,
                        print_fn=lambda _: None, **{**RUN, **arguments})
    return str(refused.value)


def test_bad_eval_input_is_named_and_nothing_is_left(data, tmp_path):
    """Two refusals in this process (the library's messages) and one through kbert-pretrain,
    which prints the message as its last line (each binary start costs seconds)."""
    train, _ = data
    other_length = write_pretraining_data(str(tmp_path / "long.tfrecord"), seq_length=24,
                                          num_examples=4)
    model_dir = tmp_path / "fresh"
    message = _refused(tmp_path, input_file=train, eval_input_file=other_length)
    assert "--eval_input_file" in message and "long.tfrecord" in message
    assert "max_seq_length=24" in message and "max_seq_length=16" in message
    assert not model_dir.exists()
    message = _refused(tmp_path, input_file=train,
                       eval_input_file=f"{tmp_path}/missing-*.tfrecord")
    assert "--eval_input_file=" in message and "missing-*" in message and "matches no files" in message
    assert not model_dir.exists()
    encoder_only = tmp_path / "encoder_only"
    save_pretrained(str(encoder_only), BertEncoder(**tiny_encoder_kwargs()))
    message = _error(["--nodo_train", "--do_eval", f"--init_checkpoint={encoder_only}",
                      f"--eval_input_file={data[1]}", f"--model_dir={model_dir}",
                      "--gin_params=run_pretraining.max_seq_length = 16"], tmp_path)
    assert "masked-LM head" in message and str(encoder_only) in message
    assert not model_dir.exists()


def test_electra_evaluation_repeats_and_leaves_the_sampler_where_training_left_it(data):
    from kbert.models import ElectraPretrainer

    pretrainer = ElectraPretrainer(BertEncoder(**tiny_encoder_kwargs(embedding_dim=16)))
    states = [v for v in pretrainer.variables if "seed_generator_state" in v.path]
    before = [v.numpy().copy() for v in states]
    first = evaluate_pretrainer(pretrainer, data[1], batch_size=EVAL_BATCH)
    second = evaluate_pretrainer(pretrainer, data[1], batch_size=EVAL_BATCH)
    assert states and all((v.numpy() == b).all() for v, b in zip(states, before))
    for name in ("masked_lm_loss", "discriminator_loss", "discriminator_accuracy",
                 "discriminator_auc"):
        assert first[name] == second[name], name
    assert 0.0 <= first["discriminator_auc"] <= 1.0 and "next_sentence_loss" not in first
