"""Writes tiny pre-training TFRecords from a real text excerpt (Emma, chapter 1).

Word-level vocabulary of the excerpt's most frequent words, BERT's feature
names and masking (15% of positions, 80/10/10), NSP pairs with label 1 meaning
"B is random". Small and deterministic (seeded), so tests share one file.
"""

import collections
import json
import os
import re
import signal
import subprocess
import threading
import time

import numpy as np
import tensorflow as tf

from tests.conftest import REPO

TESTDATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "testdata")
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def build_vocab(vocab_size):
    text = open(os.path.join(TESTDATA, "emma_chapter1.txt"), encoding="utf-8").read().lower()
    sentences = [re.findall(r"[a-z]+|[,;.]", s) for s in re.split(r"(?<=[.!?])\s+", text)]
    sentences = [s for s in sentences if len(s) > 3]
    counts = collections.Counter(w for s in sentences for w in s)
    words = SPECIAL + [w for w, _ in counts.most_common(vocab_size - len(SPECIAL))]
    return words, sentences


def write_pretraining_data(path, num_examples=64, seq_length=16, max_predictions=3,
                           vocab_size=99, seed=0, sidecar=None):
    """Writes `num_examples` examples to `path`; `sidecar` dict -> `<path>.meta.json`."""
    rng = np.random.default_rng(seed)
    words, sentences = build_vocab(vocab_size)
    ids = {w: i for i, w in enumerate(words)}
    encoded = [[ids.get(w, 1) for w in s] for s in sentences]
    half = (seq_length - 3) // 2
    with tf.io.TFRecordWriter(path) as writer:
        for n in range(num_examples):
            a_index = int(rng.integers(len(encoded) - 1))
            is_random = int(rng.random() < 0.5)
            b_index = int(rng.integers(len(encoded))) if is_random else a_index + 1
            a, b = encoded[a_index][:half], encoded[b_index][:seq_length - 3 - half]
            tokens = [2] + a + [3] + b + [3]
            segments = [0] * (len(a) + 2) + [1] * (len(b) + 1)
            candidates = [i for i, t in enumerate(tokens) if t not in (2, 3)]
            count = min(max_predictions, max(1, round(len(tokens) * 0.15)))
            positions = sorted(rng.choice(candidates, size=count, replace=False).tolist())
            labels = [tokens[p] for p in positions]
            for p in positions:
                r = rng.random()
                tokens[p] = 4 if r < 0.8 else (tokens[p] if r < 0.9 else int(rng.integers(5, vocab_size)))
            pad = seq_length - len(tokens)
            extra = max_predictions - count
            feature = {
                "input_ids": tokens + [0] * pad,
                "input_mask": [1] * len(tokens) + [0] * pad,
                "segment_ids": segments + [0] * pad,
                "masked_lm_positions": positions + [0] * extra,
                "masked_lm_ids": labels + [0] * extra,
                "next_sentence_labels": [is_random],
            }
            example = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=v))
                       for k, v in feature.items()}
            example["masked_lm_weights"] = tf.train.Feature(
                float_list=tf.train.FloatList(value=[1.0] * count + [0.0] * extra))
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=example)).SerializeToString())
    if sidecar is not None:
        with open(path + ".meta.json", "w") as f:
            json.dump(sidecar, f)
    return path


def drop_second_prediction_of_every_third_row(path):
    """Rewrites `path` so that rows hold 1 or 2 real masked positions (weights 0 after)."""
    records = list(tf.data.TFRecordDataset(path).as_numpy_iterator())
    with tf.io.TFRecordWriter(path) as writer:
        for n, record in enumerate(records):
            example = tf.train.Example.FromString(record)
            feature = example.features.feature
            if n % 3 == 0:
                weights = list(feature["masked_lm_weights"].float_list.value)
                position = int(feature["masked_lm_positions"].int64_list.value[1])
                # Unmask the token again: the label becomes the input.
                feature["input_ids"].int64_list.value[position] = (
                    feature["masked_lm_ids"].int64_list.value[1])
                for name in ("masked_lm_positions", "masked_lm_ids"):
                    feature[name].int64_list.value[1] = 0
                weights[1] = 0.0
                del feature["masked_lm_weights"].float_list.value[:]
                feature["masked_lm_weights"].float_list.value.extend(weights)
            writer.write(example.SerializeToString())


# Run settings shared by in-process runs and the binary/subprocess runs, so
# their per-step losses can be compared exactly.
RUN = dict(train_batch_size=8, max_seq_length=16, max_predictions_per_seq=3, num_train_steps=16,
           num_warmup_steps=2, learning_rate=1e-3, save_checkpoints_steps=4, log_every_steps=4,
           shuffle_buffer_size=32, seed=7)


def write_character_data(directory):
    """Unmasked records of Emma's first chapter (`--masking=dynamic`), in the character
    vocabulary of the fine-tuning tests: ELECTRA's test data. Returns (data_file, vocab_file).
    """
    from kbert.data import create_pretraining_data
    from tests.finetune_testing import character_vocabulary

    vocab_file = os.path.join(directory, "vocab.txt")
    with open(vocab_file, "w") as f:
        f.write("\n".join(character_vocabulary()) + "\n")
    data_file = os.path.join(directory, "train.tfrecord")
    create_pretraining_data(
        os.path.join(TESTDATA, "emma_chapter1.txt"), data_file, vocab_file,
        max_seq_length=RUN["max_seq_length"], max_predictions_per_seq=RUN["max_predictions_per_seq"],
        dupe_factor=1, num_workers=1, masking="dynamic", next_sentence="none")  # ELECTRA: no NSP
    return data_file, vocab_file


def gin_params(encoder_kwargs, **run_overrides):
    """`--gin_params` values giving the encoder sizes and RUN (plus overrides)."""
    params = [f"BertEncoder.{k} = {v!r}" for k, v in encoder_kwargs.items()]
    params += [f"run_pretraining.{k} = {v!r}" for k, v in {**RUN, **run_overrides}.items()]
    return params


def read_losses(model_dir, tag="loss"):
    """Per-step `tag` scalars from TensorBoard events; the latest write of a step wins."""
    latest = {}
    for name in tf.io.gfile.listdir(model_dir):
        if not name.startswith("events.out.tfevents"):
            continue
        for event in tf.compat.v1.train.summary_iterator(os.path.join(model_dir, name)):
            for value in event.summary.value:
                if value.tag == tag:
                    previous = latest.get(event.step)
                    if previous is None or event.wall_time >= previous[0]:
                        latest[event.step] = (event.wall_time, float(tf.make_ndarray(value.tensor)))
    return [latest[step][1] for step in sorted(latest)], sorted(latest)


def subprocess_env(**extra):
    """The environment of a test's `kbert-pretrain` or `distributed_run.py` subprocess."""
    return dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3", **extra)


def cpu_only_env(**extra):
    """`subprocess_env` with GPUs hidden, for runs over logical CPU devices.

    `distributed_run.py` replicates over 2 logical CPUs or 2 worker processes;
    with a GPU visible, 2 workers would share it (NCCL refuses one GPU for 2
    ranks) and TF would place the replicas' ops on it.
    """
    return subprocess_env(CUDA_VISIBLE_DEVICES="", **extra)


def kill_at_line(process, prefix, timeout_s=300.0):
    """SIGKILLs `process` as soon as its stdout prints a line starting with `prefix`.

    Reads in a thread, so a run that hangs or never prints the line fails the
    test after `timeout_s` instead of blocking it; the process is killed and
    waited for either way.

    Args:
        process: `subprocess.Popen` with `stdout=PIPE` in text mode.
        prefix: str. The line to kill at, e.g. `"step 6/16"`.
        timeout_s: float. Seconds to wait for that line.

    Raises:
        AssertionError: no such line within `timeout_s` (with the last lines read).
    """
    signal_at_line(process, prefix, signal.SIGKILL, timeout_s)


def signal_at_line(process, prefix, signal_number, timeout_s=300.0, exit_timeout_s=120.0):
    """Sends `signal_number` to `process` as soon as its stdout prints a line starting with `prefix`.

    The reading thread sends it the moment it reads the line, so the process is
    at most a step past it. Then waits up to `exit_timeout_s` for it to exit (a
    signal it handles lets it save first); a process still running then, or
    that never printed the line within `timeout_s`, is SIGKILLed and the test fails.

    Args:
        process: `subprocess.Popen` with `stdout=PIPE` in text mode.
        prefix: str. The line to signal at, e.g. `"step 6/16"`.
        signal_number: int. `signal.SIGINT`, `signal.SIGTERM` or `signal.SIGKILL`.
        timeout_s: float. Seconds to wait for that line.
        exit_timeout_s: float. Seconds to wait for the exit after the signal.

    Raises:
        AssertionError: no such line within `timeout_s`, or no exit in
            `exit_timeout_s` (with the last lines read).
    """
    found, lines = threading.Event(), []

    def read():
        for line in process.stdout:  # bounded by the deadline below
            lines.append(line)
            if line.startswith(prefix):
                process.send_signal(signal_number)
                found.set()
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + timeout_s
    while not found.wait(0.2) and reader.is_alive() and time.monotonic() < deadline:
        pass
    try:
        if not found.is_set():
            raise subprocess.TimeoutExpired(process.args, timeout_s)
        process.wait(timeout=exit_timeout_s)
        exited = True
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        exited = False
    reader.join(timeout=60)
    assert found.is_set(), f"no line starting with {prefix!r} in {timeout_s:g} s; last: {lines[-5:]}"
    assert exited, f"still running {exit_timeout_s:g} s after signal {signal_number}; last: {lines[-5:]}"
