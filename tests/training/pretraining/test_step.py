"""The pre-training step: accumulation and strategies give the default strategy's losses."""

import concurrent.futures
import json
import os
import socket

import numpy as np
import pytest
import tensorflow as tf

from tests import forked_python
from tests.conftest import REPO
from tests.conftest import tiny_encoder_kwargs
from tests.training.pretraining_data import RUN
from tests.training.pretraining_data import read_losses
from tests.training.pretraining_data import cpu_only_env
from tests.training.pretraining_data import write_character_data
from tests.training.pretraining_data import write_pretraining_data

from kbert.data import pretraining_dataset
from kbert.models import BertEncoder
from kbert.models import BertPretrainer
from kbert.training import create_optimizer
from kbert.training import run_pretraining
from kbert.training.pretraining.step import make_train_loop

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(data_file, model_dir, **overrides):
    # One layer, as distributed_run.py builds: accumulation and strategies treat
    # every layer alike, and tracing a layer less costs less.
    run_pretraining(data_file, str(model_dir),
                    lambda: BertPretrainer(BertEncoder(**tiny_encoder_kwargs(dropout=0.0,
                                                                             num_layers=1))),
                    print_fn=lambda line: None, **{**RUN, **overrides})


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    return write_pretraining_data(str(tmp_path_factory.mktemp("data") / "train.tfrecord"))


@pytest.fixture(scope="module")
def no_dropout(data_file, tmp_path_factory):
    model_dir = tmp_path_factory.mktemp("no_dropout")
    _run(data_file, model_dir, num_train_steps=6)
    return read_losses(str(model_dir))[0]


def test_gradient_accumulation_matches_the_full_batch(data_file, no_dropout, tmp_path):
    _run(data_file, tmp_path, num_train_steps=6, gradient_accumulation_steps=2)
    np.testing.assert_allclose(read_losses(str(tmp_path))[0], no_dropout, atol=1e-5)


@pytest.fixture(scope="module")
def mirrored_run(data_file, tmp_path_factory):
    """One process over two logical CPUs: BERT with held-out evaluation (the data file
    again, 64 examples in batches of 6: the last batch of 4 is shared unevenly by the
    replicas), which must not change training; then ELECTRA on packed rows."""
    out_dir = tmp_path_factory.mktemp("mirrored")
    electra_data, _ = write_character_data(str(tmp_path_factory.mktemp("electra_data")))
    result = forked_python.run(
        [os.path.join(HERE, "distributed_run.py"), "mirrored", data_file, str(out_dir)],
        cwd=REPO, timeout=300,
        env=cpu_only_env(EVAL_INPUT_FILE=data_file, ELECTRA_INPUT_FILE=electra_data))
    assert result.returncode == 0, result.stderr[-3000:]
    return out_dir


@pytest.mark.slow
def test_mirrored_over_two_cpus_matches_default_strategy(data_file, no_dropout, mirrored_run):
    result = json.load(open(mirrored_run / "result_0.json"))
    assert result["replicas"] == 2 and result["global_step"] == 6
    assert result["refusal"] == (
        "run_pretraining.train_batch_size=7 is not divisible by 2 replica(s) x "
        "gradient_accumulation_steps=1; use a multiple of 2.")
    np.testing.assert_allclose(read_losses(str(mirrored_run / "model"))[0], no_dropout, atol=1e-4)
    history = [json.loads(line) for line in open(mirrored_run / "model" / "eval_history.jsonl")]
    assert [h["step"] for h in history] == [2, 4, 6]
    # The default strategy's evaluation of the mirrored run's final weights.
    from kbert.checkpoints import load_pretrainer
    from kbert.training import evaluate_pretrainer

    expected = evaluate_pretrainer(load_pretrainer(str(mirrored_run / "model")), data_file,
                                   batch_size=6, max_seq_length=16)
    for key in ("masked_lm_loss", "masked_lm_accuracy", "next_sentence_loss", "eval_masked_tokens"):
        assert history[-1][key] == pytest.approx(expected[key], rel=1e-5), key


@pytest.mark.slow
def test_mirrored_over_two_cpus_trains_electra_on_packed_rows(mirrored_run):
    result = json.load(open(mirrored_run / "result_electra.json"))
    assert result["replicas"] == 2 and result["global_step"] == 6
    summary = json.load(open(mirrored_run / "electra" / "summary.json"))
    assert np.isfinite(summary["loss"]) and 0.0 <= summary["discriminator_auc"] <= 1.0
    losses = read_losses(str(mirrored_run / "electra"))[0]
    assert len(losses) == 6 and losses[-1] < losses[0]


@pytest.mark.slow
def test_two_workers_finish_with_the_same_step_and_weights(data_file, tmp_path):
    ports = _free_ports(2)
    cluster = {"worker": [f"localhost:{port}" for port in ports]}

    def worker(index):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        return forked_python.run(
            [os.path.join(HERE, "distributed_run.py"), "multi_worker", data_file, str(tmp_path)],
            cwd=REPO, env=cpu_only_env(TF_CONFIG=tf_config, STEPS="4"), timeout=300)

    # Two processes at once; one that outlives its timeout is killed by `run`.
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        workers = list(pool.map(worker, range(2)))
    assert [worker.returncode for worker in workers] == [0, 0], [w.stderr[-3000:] for w in workers]
    results = [json.load(open(tmp_path / f"result_{i}.json")) for i in range(2)]
    assert [r["replicas"] for r in results] == [2, 2]
    assert [r["global_step"] for r in results] == [4, 4]
    assert results[0]["checksum"] == results[1]["checksum"]
    assert results[0]["first_weights"] == results[1]["first_weights"]
    # Only the chief (worker 0) writes the final files; worker 1's scratch is gone.
    assert sorted(os.listdir(tmp_path / "model")).count("summary.json") == 1
    assert not [name for name in os.listdir(tmp_path / "model") if name.startswith(".worker")]


def test_one_call_runs_several_steps_and_lays_out_the_statistics(data_file):
    pretrainer = BertPretrainer(BertEncoder(**tiny_encoder_kwargs(dropout=0.0, num_layers=1)))
    optimizer = create_optimizer(1e-3, num_train_steps=10)
    optimizer.build(pretrainer.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64)
    batch = next(iter(pretraining_dataset(data_file, 8, 16, 3, seed=0)))
    train_loop, layout = make_train_loop(tf.distribute.get_strategy(), pretrainer, optimizer,
                                         step, 1, False, lambda: batch)
    losses, statistics = (t.numpy() for t in train_loop(tf.constant(3)))
    assert int(step.numpy()) == 3 and losses.shape == (3,)
    # The normalizers first, then the statistics, each flattened into one vector per step.
    sizes = {name: int(np.prod(shape)) for name, shape in layout}
    assert statistics.shape == (3, sum(sizes.values()))
    assert list(sizes)[:2] == ["mlm_weight", "nsp_weight"]
    offset = list(sizes).index("mlm_weight")
    # The same batch each step: the same masked positions to average over.
    assert statistics[0, offset] == statistics[2, offset] == float(batch[2]["mlm"].numpy().sum())
    assert losses[2] < losses[0]


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports
