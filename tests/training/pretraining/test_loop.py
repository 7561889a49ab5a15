"""run_pretraining on tiny real data: losses fall, runs resume and save, bad input fails clearly.

The distributed step (accumulation, strategies) is tested in test_step.py,
the data checks alone in tests/data/pretraining/test_checks.py.
"""

import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO
from tests.conftest import V
from tests.conftest import tiny_encoder_kwargs as _tiny_encoder_kwargs
from tests.training.pretraining_data import RUN
from tests.training.pretraining_data import TESTDATA
from tests.training.pretraining_data import build_vocab
from tests.training.pretraining_data import gin_params
from tests.training.pretraining_data import kill_at_line
from tests.training.pretraining_data import read_losses
from tests.training.pretraining_data import signal_at_line
from tests.training.pretraining_data import subprocess_env
from tests.training.pretraining_data import write_pretraining_data

from kbert.data import create_pretraining_data
from kbert.data import read_pretraining_metadata
from kbert.models import BertEncoder
from kbert.models import BertPretrainer
from kbert.checkpoints import load_encoder
from kbert.checkpoints import load_pretrainer
from kbert.training import run_pretraining
from kbert.training.strategy import cpu_has_native_bfloat16


def tiny_encoder_kwargs(**overrides):
    """The suite's tiny sizes with one layer: what these tests check (losses, resume,
    refusals) holds for any depth, and a layer less is a cheaper trace of every run."""
    return _tiny_encoder_kwargs(**{"num_layers": 1, **overrides})


def _build(dropout=0.1):
    return lambda: BertPretrainer(BertEncoder(**tiny_encoder_kwargs(dropout=dropout)))


def _run(data_file, model_dir, dropout=0.1, **overrides):
    lines = []
    summary = run_pretraining(data_file, str(model_dir), _build(dropout),
                              print_fn=lines.append, **{**RUN, **overrides})
    return summary, lines


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    return write_pretraining_data(str(tmp_path_factory.mktemp("data") / "train.tfrecord"))


@pytest.fixture(scope="module")
def small_data_file(tmp_path_factory):
    # 8 examples = one batch: every step sees the same examples, so losses are comparable.
    return write_pretraining_data(str(tmp_path_factory.mktemp("small") / "train.tfrecord"),
                                  num_examples=8)


@pytest.fixture(scope="module")
def reference(data_file, tmp_path_factory):
    """The uninterrupted default-strategy float32 run the resume test compares with."""
    model_dir = tmp_path_factory.mktemp("reference")
    summary, lines = _run(data_file, model_dir)
    return model_dir, summary, lines


def test_loss_falls_and_outputs_are_written(reference):
    model_dir, summary, lines = reference
    losses, steps = read_losses(str(model_dir))
    assert steps == list(range(1, 17))
    assert np.mean(losses[-4:]) < np.mean(losses[:4]) - 0.15
    assert summary["global_step"] == 16 and summary["resumed_from_step"] == 0
    assert summary["loss"] == pytest.approx(np.mean(losses[-4:]), rel=1e-5)
    assert 0.0 <= summary["masked_lm_accuracy"] <= 1.0 and summary["examples_per_second"] > 0
    assert json.load(open(model_dir / "summary.json")) == pytest.approx(summary)
    assert [line.split()[1] for line in lines if line.startswith("step ")] == [
        "4/16", "8/16", "12/16", "16/16"]
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-16")
    encoder = load_encoder(str(model_dir))
    assert encoder.num_layers == 1 and encoder.hidden_dim == 32


@pytest.mark.slow
def test_sigint_and_sigterm_save_a_checkpoint_print_one_line_and_the_rerun_resumes_exactly(
        reference, data_file, tmp_path):
    """kbert-pretrain sent Ctrl-C's SIGINT and, in a second process at the same time, SIGTERM
    after its 3rd step: each finishes the step it is in, saves a checkpoint there, says so in
    one line and exits 128 + the signal; the SIGINT run, resumed in this process, repeats the
    uninterrupted losses."""
    processes = {}
    for number in (signal.SIGINT, signal.SIGTERM):
        model_dir = tmp_path / number.name
        command = [sys.executable, "-m", "kbert.bin.pretrain", "--gin_file=gin/tiny.gin",
                   f"--input_file={data_file}", f"--model_dir={model_dir}"]
        command += [f"--gin_params={p}" for p in gin_params(tiny_encoder_kwargs(),
                                                             log_every_steps=1)]
        with open(tmp_path / f"{number.name}.txt", "w") as stderr:
            processes[number] = subprocess.Popen(command, cwd=REPO, env=subprocess_env(),
                                                 stdout=subprocess.PIPE, stderr=stderr, text=True)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for future in [pool.submit(signal_at_line, process, "step 3/16", number)
                       for number, process in processes.items()]:
            future.result(timeout=600)
    stopped_at = {}
    for number, process in processes.items():
        stderr = open(tmp_path / f"{number.name}.txt").read()
        assert process.returncode == 128 + number, stderr
        assert "Traceback" not in stderr and stderr.count("interrupted") == 1, stderr
        last = stderr.strip().splitlines()[-1]
        found = re.fullmatch(rf"pretrain\.py: interrupted by {number.name} at step (\d+): "
                             rf"checkpoint saved to (.*ckpt-(\d+)); rerun the same command to "
                             r"resume", last)
        assert found and found[1] == found[3], last
        stopped_at[number] = int(found[1])
        assert 3 <= stopped_at[number] < 16
        assert tf.train.latest_checkpoint(str(tmp_path / number.name)) == found[2]
    summary, lines = _run(data_file, tmp_path / "SIGINT")
    assert summary["resumed_from_step"] == stopped_at[signal.SIGINT]
    losses, steps = read_losses(str(tmp_path / "SIGINT"))
    assert steps == list(range(1, 17))
    np.testing.assert_allclose(losses, read_losses(str(reference[0]))[0], atol=1e-5)


def test_rerun_after_the_end_does_not_train_again(reference, data_file):
    model_dir, _, _ = reference
    before = json.load(open(model_dir / "summary.json"))
    summary, lines = _run(data_file, model_dir)
    assert summary == before and lines[-1].endswith("is already at step 16; nothing to train")


def test_mixed_bfloat16_tracks_float32(small_data_file, tmp_path):
    settings = dict(num_train_steps=8, dropout=0.0, learning_rate=3e-3)
    _, f32_lines = _run(small_data_file, tmp_path / "f32", **settings)
    _, bf16_lines = _run(small_data_file, tmp_path / "bf16", dtype_policy="mixed_bfloat16", **settings)
    # Where the CPU has no bfloat16 matmuls the run says that it is slower.
    note = [line for line in bf16_lines if "no bfloat16 matmul instructions" in line]
    assert len(note) == (cpu_has_native_bfloat16() is False and not tf.config.list_logical_devices("GPU"))
    assert not [line for line in f32_lines if "bfloat16" in line]
    f32, bf16 = read_losses(str(tmp_path / "f32"))[0], read_losses(str(tmp_path / "bf16"))[0]
    np.testing.assert_allclose(bf16, f32, rtol=0.02)
    assert bf16[-1] < bf16[0] - 0.4
    # Variables stay float32 under the mixed policy.
    assert load_encoder(str(tmp_path / "bf16")).token_embedding.embeddings.dtype == "float32"


def test_lamb_lowers_the_loss(small_data_file, tmp_path):
    # LAMB scales each update to the weights' norm (0.02-scale at init), so it
    # needs a larger rate than AdamW to move a fresh tiny model in 8 steps.
    _run(small_data_file, tmp_path, num_train_steps=8, dropout=0.0, optimizer="lamb",
         learning_rate=3e-2)
    losses = read_losses(str(tmp_path))[0]
    assert losses[-1] < losses[0] - 0.15


def test_nan_loss_stops_with_step_and_last_checkpoint_and_keeps_the_model_dir(small_data_file,
                                                                             tmp_path):
    _run(small_data_file, tmp_path / "kept", num_train_steps=4)
    with pytest.raises(ValueError, match=r"loss is nan at step 6; stopping. The last good "
                                         r"checkpoint is .*ckpt-4"):
        # Resuming with an absurd learning rate blows the weights up at once.
        _run(small_data_file, tmp_path / "kept", num_train_steps=16, learning_rate=1e30)
    # A failure after a checkpoint keeps the model_dir (and so that checkpoint).
    assert (tmp_path / "kept" / "checkpoint").exists()


def test_no_matching_files_names_the_flag(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--input_file='.*nothing-\*' matches no files"):
        _run(str(tmp_path / "nothing-*"), tmp_path / "model")


def test_data_config_mismatch_names_both_values(tmp_path):
    data = write_pretraining_data(str(tmp_path / "a.tfrecord"), num_examples=8, sidecar={
        "max_seq_length": 16, "max_predictions_per_seq": 3, "vocab_size": 30522})
    with pytest.raises(ValueError, match=r"max_seq_length=32 does not match 16 recorded in "
                                         r"the data's sidecar \(.*a.tfrecord.meta.json\)"):
        _run(data, tmp_path / "model", max_seq_length=32)
    with pytest.raises(ValueError, match=r"vocabulary_size=99 does not match vocab_size=30522"):
        _run(data, tmp_path / "model")


@pytest.fixture(scope="module")
def tool_data(tmp_path_factory):
    """The data tool's own output (TFRecords and sidecars) per --next_sentence mode."""
    directory = tmp_path_factory.mktemp("tool_data")
    vocab_file = directory / "vocab.txt"
    vocab_file.write_text("\n".join(build_vocab(V)[0]) + "\n")
    files = {}
    for mode in ("nsp", "none"):
        files[mode] = str(directory / f"{mode}.tfrecord")
        create_pretraining_data(
            os.path.join(TESTDATA, "emma_chapter1.txt"), files[mode], str(vocab_file),
            max_seq_length=RUN["max_seq_length"],
            max_predictions_per_seq=RUN["max_predictions_per_seq"], dupe_factor=2,
            next_sentence=mode, num_workers=1)
    # The same data made by the Apache Beam pipeline (tools/create_pretraining_data.py --runner).
    files["beam"] = str(directory / "beam.tfrecord")
    create_pretraining_data(
        os.path.join(TESTDATA, "emma_chapter1.txt"), files["beam"], str(vocab_file),
        max_seq_length=RUN["max_seq_length"], max_predictions_per_seq=RUN["max_predictions_per_seq"],
        dupe_factor=2, runner="DirectRunner")
    return files


def test_trains_on_the_data_tools_output_in_each_sentence_mode(tool_data, tmp_path):
    steps = dict(num_train_steps=2, save_checkpoints_steps=2, log_every_steps=1)
    summary, _ = _run(tool_data["nsp"], tmp_path / "nsp", **steps)
    assert summary["global_step"] == 2 and 0.0 <= summary["next_sentence_accuracy"] <= 1.0
    # RoBERTa-style: --next_sentence=none data and an MLM-only model; no NSP accuracy.
    lines = []
    summary = run_pretraining(
        tool_data["none"], str(tmp_path / "none"),
        lambda: BertPretrainer(BertEncoder(**tiny_encoder_kwargs()), next_sentence=False),
        print_fn=lines.append, **{**RUN, **steps})
    assert summary["global_step"] == 2 and summary["next_sentence_accuracy"] is None
    assert [line for line in lines if line.startswith("step ")][-1].split()[4] == "mlm_acc"
    assert "nsp_acc" not in "".join(lines)
    # The pooler, unused without NSP, keeps its initial weights (no update, no decay).
    keras.utils.set_random_seed(RUN["seed"])
    initial, trained = BertEncoder(**tiny_encoder_kwargs()), load_encoder(str(tmp_path / "none"))
    for before, after in zip(initial.pooled_dense.get_weights(), trained.pooled_dense.get_weights()):
        np.testing.assert_array_equal(after, before)
    assert not np.array_equal(trained.token_embedding.embeddings.numpy(),
                              initial.token_embedding.embeddings.numpy())
    # An NSP head on data without next_sentence_labels is refused before training.
    with pytest.raises(ValueError, match=r"BertPretrainer.next_sentence=True needs "
                                         r"next_sentence_labels, but the data's sidecar "
                                         r"\(.*none.tfrecord.meta.json\) records "
                                         r"next_sentence='none'"):
        _run(tool_data["none"], tmp_path / "refused", **steps)
    assert not os.path.exists(tmp_path / "refused" / "summary.json")


def test_beam_output_is_checked_by_its_sidecar_and_trains(tool_data, tmp_path):
    beam = tool_data["beam"]
    assert open(beam, "rb").read() == open(tool_data["nsp"], "rb").read()
    metadata = read_pretraining_metadata(beam)
    assert metadata["runner"] == "DirectRunner" and metadata["vocab_size"] == V
    with pytest.raises(ValueError, match=r"max_seq_length=32 does not match 16 recorded in "
                                         r"the data's sidecar \(.*beam.tfrecord.meta.json\)"):
        _run(beam, tmp_path / "refused", max_seq_length=32)
    other_vocab = tmp_path / "other_vocab.txt"
    other_vocab.write_text("\n".join(reversed(build_vocab(V)[0])) + "\n")
    with pytest.raises(ValueError, match=r"--input_file: the data's sidecar \(.*beam.tfrecord."
                                         r"meta.json\) says the data was made with the WordPiece "
                                         r".*vocab.txt \(99 ids, sha256 .*\), but the model's "
                                         r"tokenizer is the WordPiece .*other_vocab.txt \(99 ids, "
                                         r"sha256 .*\), from --vocab_file"):
        _run(beam, tmp_path / "refused", vocab_file=str(other_vocab))
    steps = dict(num_train_steps=2, save_checkpoints_steps=2, log_every_steps=1)
    summary, _ = _run(beam, tmp_path / "model", **steps)
    assert summary["global_step"] == 2 and 0.0 <= summary["next_sentence_accuracy"] <= 1.0


def test_batch_not_divisible_names_the_multiple(data_file, tmp_path):
    with pytest.raises(ValueError, match=r"train_batch_size=8 is not divisible by 1 replica\(s\) "
                                         r"x gradient_accumulation_steps=3; use a multiple of 3"):
        _run(data_file, tmp_path, gradient_accumulation_steps=3)


def test_unwritable_model_dir_is_named(data_file, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(PermissionError, match=r"--model_dir=.*file/model is not writable"):
        _run(data_file, blocker / "model")


def test_user_code_compile_and_fit_with_create_optimizer(small_data_file):
    import kbert

    model = BertPretrainer(BertEncoder(**tiny_encoder_kwargs(dropout=0.0)))
    model.compile(optimizer=kbert.training.create_optimizer(3e-3, num_train_steps=8,
                                                            num_warmup_steps=1))
    kbert.training.build_optimizer_state(model)  # as its docstring shows: one trace of the step
    dataset = kbert.data.pretraining_dataset(small_data_file, batch_size=8, max_seq_length=16,
                                             max_predictions_per_seq=3, seed=0)
    history = model.fit(dataset, steps_per_epoch=8, epochs=1, verbose=0)
    assert history.history["loss"][0] < 5.2  # the first batch's loss is about 5.3
    assert 0.0 <= history.history["mlm_masked_lm_accuracy"][0] <= 1.0


def test_init_checkpoint_loads_weights_and_refuses_other_sizes(reference, small_data_file, tmp_path):
    source = str(reference[0])
    built = []

    def build():
        built.append(BertPretrainer(BertEncoder(**tiny_encoder_kwargs())))
        return built[-1]

    # A zero learning rate leaves the loaded weights as they were.
    run_pretraining(small_data_file, str(tmp_path / "a"), build, init_checkpoint=source,
                    print_fn=lambda line: None, **{**RUN, "num_train_steps": 1,
                                                    "num_warmup_steps": 0, "learning_rate": 0.0})
    for ours, theirs in zip(built[0].get_weights(), load_pretrainer_weights(source)):
        np.testing.assert_array_equal(ours, theirs)
    with pytest.raises(ValueError, match=r"--init_checkpoint=.* is not the encoder the gin config "
                                         r"builds; hidden_dim: directory 32, gin 64\. Set "
                                         r"BertEncoder\.hidden_dim = 32 "):
        run_pretraining(small_data_file, str(tmp_path / "b"),
                        lambda: BertPretrainer(BertEncoder(**tiny_encoder_kwargs(hidden_dim=64))),
                        init_checkpoint=source, **RUN)


def load_pretrainer_weights(directory):
    return load_pretrainer(directory).get_weights()


def _record_offsets(path):
    """(start, data length) of every record of a TFRecord file."""
    import struct

    data, offset, records = open(path, "rb").read(), 0, []
    while offset < len(data):
        length = struct.unpack("<Q", data[offset:offset + 8])[0]
        records.append((offset, length))
        offset += 16 + length
    return records


def test_truncated_tfrecord_is_named_with_its_offset_and_nothing_is_left(tmp_path):
    good = write_pretraining_data(str(tmp_path / "a-0.tfrecord"), num_examples=8)
    bad = write_pretraining_data(str(tmp_path / "a-1.tfrecord"), num_examples=8)
    start, length = _record_offsets(bad)[3]
    with open(bad, "r+b") as f:  # A copy cut off inside its fourth record.
        f.truncate(start + 20)
    model_dir = tmp_path / "fresh"
    with pytest.raises(ValueError, match=(
            rf"a-1.tfrecord: corrupt or truncated TFRecord at byte {start}: the file ends "
            rf"8 bytes into a record of {length} bytes")):
        _run(f"{good},{bad}", model_dir, shuffle_buffer_size=1)
    assert not model_dir.exists()


def test_data_without_sidecar_of_another_length_is_named_before_building(tmp_path):
    data = write_pretraining_data(str(tmp_path / "b.tfrecord"), num_examples=8)
    with pytest.raises(ValueError, match=(
            r"b.tfrecord: records have input_ids of length 16 but run_pretraining.max_seq_length="
            r"32 \(the file has no .meta.json sidecar to say so\); pass --gin_params="
            r"'run_pretraining.max_seq_length = 16'")):
        _run(data, tmp_path / "model", max_seq_length=32)
    with pytest.raises(ValueError, match=r"masked_lm_positions of length 3 but "
                                         r"run_pretraining.max_predictions_per_seq=5"):
        _run(data, tmp_path / "model", max_predictions_per_seq=5)
    assert not (tmp_path / "model").exists()


# Dynamic masking with whole words and 2-grams: the masking loop runs in every batch.
DYNAMIC = dict(masking="dynamic")
DYNAMIC_GIN = ['run_pretraining.masking = "dynamic"', "MaskingConfig.max_ngram_size = 2",
               "MaskingConfig.do_whole_word_mask = True"]


@pytest.fixture(scope="module")
def dynamic_data(tmp_path_factory):
    """Unmasked data from the data tool (--masking=dynamic), its vocabulary and sidecar."""
    directory = tmp_path_factory.mktemp("dynamic_data")
    vocab_file = directory / "vocab.txt"
    vocab_file.write_text("\n".join(build_vocab(V)[0]) + "\n")
    path = str(directory / "train.tfrecord")
    create_pretraining_data(
        os.path.join(TESTDATA, "emma_chapter1.txt"), path, str(vocab_file),
        max_seq_length=RUN["max_seq_length"], max_predictions_per_seq=5, dupe_factor=1,
        num_workers=1, masking="dynamic")
    return path, str(vocab_file)


@pytest.mark.slow
def test_resume_after_sigkill_with_dynamic_masking_repeats_the_uninterrupted_losses(
        dynamic_data, tmp_path):
    """kbert-pretrain SIGKILLed after its step-4 checkpoint, resumed in this process with
    the same settings (a second binary would pay TensorFlow's import and the traces again;
    the in-process reference equals the binary's run, as the losses below show)."""
    from kbert.data import MaskingConfig

    data, vocab_file = dynamic_data
    settings = dict(masking="dynamic",
                    masking_config=MaskingConfig(max_ngram_size=2, do_whole_word_mask=True))
    _run(data, tmp_path / "reference", **settings)
    model_dir = tmp_path / "model"
    command = [sys.executable, "-m", "kbert.bin.pretrain", "--gin_file=gin/tiny.gin",
               f"--input_file={data}", f"--model_dir={model_dir}", f"--vocab_file={vocab_file}"]
    params = gin_params(tiny_encoder_kwargs(), log_every_steps=1) + DYNAMIC_GIN
    command += [f"--gin_params={p}" for p in params]
    with open(tmp_path / "stderr.txt", "w") as stderr:
        killed = subprocess.Popen(command, cwd=REPO, env=subprocess_env(),
                                  stdout=subprocess.PIPE, stderr=stderr, text=True)
        kill_at_line(killed, "step 6/16")
    assert killed.returncode == -signal.SIGKILL, open(tmp_path / "stderr.txt").read()
    assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-4")
    summary, lines = _run(data, model_dir, vocab_file=vocab_file, **settings)
    assert summary["resumed_from_step"] == 4 and "resuming from" in "\n".join(lines)
    losses, steps = read_losses(str(model_dir))
    assert steps == list(range(1, 17))
    reference = read_losses(str(tmp_path / "reference"))[0]
    np.testing.assert_allclose(losses, reference, atol=1e-5)
    assert np.mean(losses[-4:]) < np.mean(losses[:4]) - 0.15
    operative = open(model_dir / "operative_config.gin").read()
    assert "MaskingConfig.max_ngram_size = 2" in operative


def test_dynamic_and_static_data_are_refused_for_each_other(dynamic_data, tool_data, tmp_path):
    data, _ = dynamic_data
    with pytest.raises(ValueError, match=r"masking='static', but .*train.tfrecord.meta.json "
                                         r"records masking='dynamic'"):
        _run(data, tmp_path / "a")
    with pytest.raises(ValueError, match=r"masking='dynamic', but .*nsp.tfrecord.meta.json "
                                         r"records masking='static'"):
        _run(tool_data["nsp"], tmp_path / "b", **DYNAMIC)
    # Without a sidecar the first record tells: google-research/bert's data is masked.
    static = write_pretraining_data(str(tmp_path / "plain.tfrecord"), num_examples=8)
    with pytest.raises(ValueError, match=r"plain.tfrecord: run_pretraining.masking=\"dynamic\" "
                                         r"but the records are already masked"):
        _run(static, tmp_path / "c", **DYNAMIC)
    assert not [p for p in ("a", "b", "c") if (tmp_path / p).exists()]


def test_packed_rows_train_with_nsp_per_instance(dynamic_data, tmp_path):
    from kbert.data import PackingConfig

    data, _ = dynamic_data
    summary, lines = _run(data, tmp_path, masking="dynamic", num_train_steps=8,
                          packing=PackingConfig(max_instances_per_row=3, window_size=32))
    losses = read_losses(str(tmp_path))[0]
    assert summary["global_step"] == 8 and losses[-1] < losses[0]
    assert 0.0 <= summary["next_sentence_accuracy"] <= 1.0
    assert 0.0 <= summary["masked_lm_accuracy"] <= 1.0
