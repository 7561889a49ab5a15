"""ELECTRA through run_pretraining: both losses fall, exact resume, the saved discriminator fine-tunes."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tests import forked_python
from tests.conftest import REPO
from tests.conftest import tiny_encoder_kwargs
from tests.finetune_testing import TESTDATA as FINETUNE_DATA
from tests.finetune_testing import character_vocabulary
from tests.training.pretraining_data import RUN
from tests.training.pretraining_data import read_losses
from tests.training.pretraining_data import write_character_data

from kbert.checkpoints import load_encoder
from kbert.data import MaskingConfig
from kbert.models import BertEncoder
from kbert.models import BertPretrainer
from kbert.models import ElectraPretrainer
from kbert.training import run_pretraining

# The character vocabulary of the fine-tuning tests (the data's ids, < 99, are
# within it), and positions for their 64-token fine-tuning.
VOCABULARY = character_vocabulary()
# One layer: ELECTRA's heads and sampler are what these tests check, and a layer
# less is a cheaper trace of every run.
ENCODER = tiny_encoder_kwargs(vocabulary_size=len(VOCABULARY), max_sequence_length=96,
                              embedding_dim=16, num_layers=1)


def _build(dropout=0.1):
    return lambda: ElectraPretrainer(BertEncoder(**{**ENCODER, "dropout": dropout}))


# google-research/electra's masking (gin/electra_small.gin): 85% [MASK], 15% kept, none random.
ELECTRA_MASKING = dict(masking="dynamic",
                       masking_config=MaskingConfig(mask_token_rate=0.85, random_token_rate=0.0))


def _run(data_file, model_dir, build=None, print_fn=None, **overrides):
    lines = []
    summary = run_pretraining(data_file, str(model_dir), build or _build(),
                              print_fn=print_fn or lines.append,
                              **{**RUN, **ELECTRA_MASKING, **overrides})
    return summary, lines


@pytest.fixture(scope="module")
def character_data(tmp_path_factory):
    """Unmasked data from the data tool (--masking=dynamic), as BERT runs read: the same data."""
    return write_character_data(str(tmp_path_factory.mktemp("data")))


@pytest.fixture(scope="module")
def data_file(character_data):
    return character_data[0]


@pytest.fixture(scope="module")
def vocab_file(character_data):
    return character_data[1]


@pytest.fixture(scope="module")
def reference(data_file, vocab_file, tmp_path_factory):
    """An uninterrupted 16-step ELECTRA run (the resume test compares with it)."""
    model_dir = tmp_path_factory.mktemp("electra")
    summary, lines = _run(data_file, model_dir, vocab_file=vocab_file, do_lower_case=True,
                          learning_rate=3e-3)
    return model_dir, summary, lines


def test_both_losses_fall_and_progress_shows_generator_and_discriminator(reference):
    model_dir, summary, lines = reference
    progress = [line for line in lines if line.startswith("step ")]
    assert [line.split()[1] for line in progress] == ["4/16", "8/16", "12/16", "16/16"]
    words = progress[-1].split()
    assert words[2::2][:6] == ["loss", "mlm_loss", "mlm_acc", "disc_loss", "disc_acc", "disc_auc"]
    mlm, _ = read_losses(str(model_dir), "masked_lm_loss")
    discriminator, _ = read_losses(str(model_dir), "discriminator_loss")
    auc, _ = read_losses(str(model_dir), "discriminator_auc")
    assert mlm[-1] < mlm[0] - 0.15, mlm  # from about ln(193) = 5.26
    assert discriminator[-1] < discriminator[0] - 0.05, (discriminator, mlm, auc)
    assert auc[-1] > 0.5
    losses, steps = read_losses(str(model_dir))
    assert steps == list(range(1, 17)) and np.mean(losses[-4:]) < np.mean(losses[:4])
    assert summary["discriminator_auc"] == pytest.approx(auc[-1], rel=1e-6)
    assert 0 < summary["replaced_fraction"] < 0.2
    assert summary["next_sentence_accuracy"] is None


def test_saves_the_discriminator_as_a_pretrained_directory(reference):
    model_dir = str(reference[0])
    names = os.listdir(model_dir)
    assert {"bert_config.json", "encoder.weights.h5", "electra_pretrainer.weights.h5",
            "vocab.txt", "tokenizer_config.json"} <= set(names)
    assert "pretrainer.weights.h5" not in names  # no BERT heads to mistake for these
    config = json.load(open(os.path.join(model_dir, "bert_config.json")))
    assert (config["embedding_size"], config["hidden_size"]) == (16, 32)
    encoder = load_encoder(model_dir)
    assert encoder.embedding_dim == 16 and encoder.vocabulary_size == len(VOCABULARY)


def test_resume_after_a_crash_repeats_the_uninterrupted_losses(reference, data_file, tmp_path):
    class Crash(Exception):
        pass

    def crash_at_step_8(line):
        if line.startswith("step 8/16"):  # after checkpoint 8 is written
            raise Crash()

    with pytest.raises(Crash):
        _run(data_file, tmp_path, print_fn=crash_at_step_8, learning_rate=3e-3)
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("ckpt-8")
    summary, lines = _run(data_file, tmp_path, learning_rate=3e-3)
    assert summary["resumed_from_step"] == 8 and "resuming from" in lines[0]
    # The generator's samples (sampler RNG in the checkpoint), dropout and data
    # order all continue where they stopped: the same losses as uninterrupted.
    np.testing.assert_allclose(read_losses(str(tmp_path))[0],
                               read_losses(str(reference[0]))[0], atol=1e-5)


def test_init_checkpoint_takes_electra_heads_and_a_bert_encoder(reference, data_file, tmp_path):
    source = str(reference[0])
    built = []

    def build():
        built.append(_build()())
        return built[-1]

    settings = dict(num_train_steps=1, num_warmup_steps=0, learning_rate=0.0)
    _, lines = _run(data_file, tmp_path / "electra", build=build, init_checkpoint=source,
                    **settings)
    assert any("(encoder and pre-training heads)" in line for line in lines)
    saved = ElectraPretrainer(BertEncoder(**ENCODER))
    saved.load_weights(os.path.join(source, "electra_pretrainer.weights.h5"))
    for ours, theirs in zip(built[0].get_weights(), saved.get_weights()):
        np.testing.assert_array_equal(ours, theirs)
    # The discriminator can start a BERT run (its MLM head starts fresh; MLM only, as the
    # data has no NSP labels).
    _, lines = _run(data_file, tmp_path / "bert", init_checkpoint=source, **settings,
                    build=lambda: BertPretrainer(BertEncoder(**ENCODER), next_sentence=False))
    assert any("(encoder (no pre-training heads of this kind there))" in line for line in lines)


def test_the_saved_discriminator_fine_tunes(reference, tmp_path):
    from kbert.export.saved_model import export_saved_model
    from kbert.training.finetuning import run_finetuning

    results = run_finetuning(
        "glue", str(reference[0]), str(tmp_path / "stsb"), task_name="sts-b",
        data_dir=os.path.join(FINETUNE_DATA, "glue", "STS-B"), num_train_epochs=8,
        train_batch_size=4, eval_batch_size=8, learning_rate=2e-2, warmup_proportion=0.0,
        max_seq_length=64, verbose=0)
    assert results["train_loss"][-1] < 0.5 * results["train_loss"][0], results["train_loss"]
    path = export_saved_model(str(tmp_path / "stsb"), str(tmp_path / "export"), check=False)
    assert "saved_model.pb" in os.listdir(path)


# ELECTRA on MirroredStrategy (packed rows, two logical CPUs) runs in the process of
# test_step.py's mirrored BERT run: test_mirrored_over_two_cpus_trains_electra.


@pytest.mark.slow
def test_kbert_pretrain_runs_electra_small_gin(data_file, vocab_file, tmp_path):
    model_dir = tmp_path / "model"
    params = [f"BertEncoder.{k} = {v!r}" for k, v in {
        **ENCODER, "num_layers": 1, "activation": "gelu_exact"}.items()]
    params += [f"run_pretraining.{k} = {v!r}" for k, v in {
        **RUN, "num_train_steps": 4, "log_every_steps": 2}.items()]
    result = forked_python.run(
        ["-m", "kbert.bin.pretrain", "--gin_file=gin/electra_small.gin",
         f"--input_file={data_file}", f"--model_dir={model_dir}", f"--vocab_file={vocab_file}",
         *[f"--gin_params={p}" for p in params]],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3"), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "disc_auc" in result.stdout and "step 4/4" in result.stdout
    operative = open(model_dir / "operative_config.gin").read()
    assert "pretrainer.model = @ElectraPretrainer" in operative
    assert "ElectraPretrainer.discriminator_weight = 50.0" in operative
    assert load_encoder(str(model_dir)).activation == "gelu_exact"

