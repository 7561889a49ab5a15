"""Token-budget batching (`--max_batch_tokens`) and the request cap (`--max_concurrent_requests`).

The scheduler is tested in this process with a stand-in model whose input is
each example's token count, so batch shapes are known exactly; one in-process
`ModelServer` with a tiny exported classifier checks real answers against
unbatched ones and the 429 / RESOURCE_EXHAUSTED refusal.
"""

import json
import threading
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2
from tensorflow_serving.apis import prediction_service_pb2_grpc

from kbert.serving.batching import BatchingParameters
from kbert.serving.batching import BatchScheduler
from kbert.serving.errors import ServingError
from kbert.serving.limits import RequestSlots
from kbert.serving.process import free_port
from kbert.serving.token_counts import example_tokens
from kbert.serving.token_counts import read_truncation_length
from kbert.serving.token_counts import text_tokens
from tests import serving_testlib as lib

TIMEOUT = 60


def _wait_for(condition, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)


def _strings(values):
    return np.array([v.encode("utf-8") for v in values], dtype=object)


# ---- The length measure. ----

def test_example_tokens_follow_words_punctuation_and_bytes_capped_at_the_models_length():
    # words + punctuation + ASCII letters / 8 + non-ASCII bytes / 3, rounded up, + [CLS] [SEP]
    assert text_tokens(b"a gorgeous film") == 3 + 13 / 8
    assert text_tokens("dull!") == 1 + 1 + 4 / 8
    assert text_tokens("北京") == 1 + 6 / 3  # a CJK character is a piece of its own
    texts = _strings(["a gorgeous film", "dull!", "é", "x" * 500])
    assert example_tokens({"text": texts}).tolist() == [7, 5, 4, 66]
    assert example_tokens({"text": texts}, truncation=32).tolist() == [7, 5, 4, 32]
    pairs = {"text": texts, "text_pair": _strings(["ab", "", "", "c"])}  # + [CLS] [SEP] [SEP]
    assert example_tokens(pairs, truncation=128).tolist() == [9, 6, 5, 68]
    words = {"words": np.array([[b"EU", b"rejects", b""], [b"Peter", b"", b""]], dtype=object)}
    assert example_tokens(words).tolist() == [6, 4]  # ceil(1.25 + 1.875) + 2, ceil(1.625) + 2
    ids = {name: np.ones((2, 9), np.int32) for name in ("token_ids", "segment_ids", "padding_mask")}
    assert example_tokens(ids, truncation=4).tolist() == [9, 9]  # the length axis, exactly


def test_truncation_length_is_read_from_the_exports_record(tmp_path):
    def export(name, info):
        (tmp_path / name / "assets.extra").mkdir(parents=True)
        (tmp_path / name / "assets.extra" / "kbert_export.json").write_text(json.dumps(info))
        return str(tmp_path / name)

    assert read_truncation_length(export("sst2", {"model_type": "classifier",
                                                  "task_config": {"max_seq_length": 128}})) == 128
    assert read_truncation_length(export("embed", {"model_type": "embedding", "max_seq_length": 256})) == 256
    # NER reads long texts in windows: no cap; nor for files that are not kbert's.
    assert read_truncation_length(export("ner", {"model_type": "token_classifier",
                                                 "task_config": {"max_seq_length": 128}})) is None
    assert read_truncation_length(str(tmp_path / "absent")) is None
    # What the export records wins over the model type (exports made before the record
    # have none and are read by their model type, as above).
    assert read_truncation_length(export("recorded", {
        "model_type": "classifier", "task_config": {"max_seq_length": 128},
        "serving": {"encoder_apis": [], "truncation_length": 64}})) == 64
    assert read_truncation_length(export("windowed", {
        "model_type": "classifier", "task_config": {"max_seq_length": 128},
        "serving": {"encoder_apis": [], "truncation_length": None}})) is None


# ---- The scheduler with a stand-in model. ----

def _run_with_full_queue(scheduler, lengths, key="k"):
    """Queues one request per length while the only worker is busy, then lets it go.

    Returns:
        (batches: list of the token counts of each batch's rows, answers by index, errors).
    """
    release, running = threading.Event(), threading.Event()
    batches, answers, errors = [], {}, []

    def block(inputs):
        running.set()
        assert release.wait(TIMEOUT)
        return {"y": inputs["x"]}

    def model(inputs):
        batches.append(inputs["x"].tolist())
        return {"y": inputs["x"] * 10}

    blocker = threading.Thread(target=scheduler.run, args=("block", block, {"x": np.array([1])}, 1))
    blocker.start()
    assert running.wait(TIMEOUT)

    def client(index, length):
        try:
            out = scheduler.run(key, model, {"x": np.array([length])}, 1, tokens=[length])
            answers[index] = out["y"].tolist()
        except Exception as e:  # recorded, asserted by the caller
            errors.append(e)

    clients = [threading.Thread(target=client, args=(i, n)) for i, n in enumerate(lengths)]
    for thread in clients:
        thread.start()
    _wait_for(lambda: len(scheduler._queues.get(key, ())) == len(lengths))
    release.set()
    for thread in [blocker, *clients]:
        thread.join(TIMEOUT)
    return batches, answers, errors


def test_token_budget_batches_group_by_length_and_never_pass_the_budget():
    recorded = []
    scheduler = BatchScheduler(BatchingParameters(max_batch_size=32, num_batch_threads=1), max_batch_tokens=1024,
                               on_batch=lambda *stats: recorded.append(stats))
    rng = np.random.default_rng(0)
    short, long = rng.integers(5, 21, size=20).tolist(), rng.integers(100, 129, size=20).tolist()
    lengths = [n for pair in zip(short, long) for n in pair]  # interleaved, as they would arrive
    batches, answers, errors = _run_with_full_queue(scheduler, lengths)
    scheduler.stop()
    assert not errors
    assert answers == {i: [n * 10] for i, n in enumerate(lengths)}  # each request its own rows
    assert sorted(n for batch in batches for n in batch) == sorted(lengths)
    for batch in batches:
        assert len(batch) * max(batch) <= 1024, batch  # rows x longest: the padded tokens
        assert max(batch) < 100 or min(batch) >= 100, batch  # short and long texts never share a batch
    assert [len(b) for b in batches if max(b) < 100] == [20]  # all short texts in one batch: 20 x 20 fits
    stats = recorded[1:]  # the first is the blocker's
    assert [s[0] for s in stats] == [len(b) for b in batches]
    assert [s[1] for s in stats] == [sum(b) for b in batches]
    assert [s[2] for s in stats] == [len(b) * max(b) for b in batches]
    assert all(padded <= 1024 for _, _, padded in stats)


def test_request_count_batching_still_takes_the_oldest_requests_in_order():
    scheduler = BatchScheduler(BatchingParameters(max_batch_size=4, num_batch_threads=1))
    batches, answers, errors = _run_with_full_queue(scheduler, [10, 100, 10, 100, 10, 100])
    scheduler.stop()
    assert not errors and len(answers) == 6
    assert sorted(map(len, batches)) == [2, 4]  # arrival order, 4 rows a batch, lengths ignored


def test_request_over_the_budget_runs_alone_and_rows_padded_to_allowed_sizes_count():
    recorded, seen = [], []
    scheduler = BatchScheduler(BatchingParameters(max_batch_size=8, allowed_batch_sizes=[4, 8], num_batch_threads=1,
                                                  batch_timeout_micros=30_000_000),
                               max_batch_tokens=400, on_batch=lambda *stats: recorded.append(stats))

    def model(inputs):
        seen.append(inputs["x"].tolist())
        return {"y": inputs["x"] + 1}

    # One example of 500 tokens, and two of 150 (2 x 150 = 300, but padded to 4 rows: 600).
    assert scheduler.run("k", model, {"x": np.array([500])}, 1, tokens=[500])["y"].tolist() == [501]
    assert scheduler.run("k", model, {"x": np.array([150, 150])}, 2, tokens=[150, 150])["y"].tolist() == [151, 151]
    scheduler.stop()
    assert seen == [[500], [150, 150]]  # each alone, at once (the 30 s timeout never waited)
    assert recorded == [(1, 500, 500), (1, 300, 300)]


def test_a_queue_whose_tokens_reach_the_budget_runs_without_waiting_for_the_timeout():
    scheduler = BatchScheduler(BatchingParameters(max_batch_size=32, num_batch_threads=1,
                                                  batch_timeout_micros=30_000_000), max_batch_tokens=100)
    sizes = []

    def model(inputs):
        sizes.append(len(inputs["x"]))
        return {"y": inputs["x"]}

    threads = [threading.Thread(target=scheduler.run, args=("k", model, {"x": np.array([50])}, 1),
                                kwargs={"tokens": [50]}) for _ in range(2)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
    scheduler.stop()
    assert sizes == [2] and time.monotonic() - started < 20


def test_request_slots_refuse_past_capacity_with_429_and_take_again_once_given_back():
    slots = RequestSlots(2)
    slots.take()
    slots.take()
    with pytest.raises(ServingError) as error:
        slots.take()
    assert error.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and error.value.http_status == 429
    assert "(--max_concurrent_requests=2); retry later." in error.value.message
    slots.give()
    slots.take()
    assert slots.used == 2


# ---- A ModelServer in this process with a real (tiny) model. ----

BUDGET = 64  # the model truncates at 32 tokens: two long texts, or about ten short ones
SLOTS = 16  # more than the requests sent at once below


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from kbert.serving import Limits
    from kbert.serving import ModelServer
    from kbert.serving.model_config import ModelConfig

    # The exports the other serving tests share when this process has made them (the
    # whole suite); run alone, this file exports only the one model it needs.
    if lib.exported_models.cache_info().currsize:
        export_dir = lib.exported_models()["sst2"]["export_dir"]
    else:
        export_dir = lib.export_task("sst2", str(tmp_path_factory.mktemp("token-batching")))["export_dir"]
    server = ModelServer([ModelConfig("sst2", export_dir)], port=0, rest_api_port=free_port(),
                         poll_wait_seconds=0, max_batch_tokens=BUDGET,
                         batching=BatchingParameters(max_batch_size=16, batch_timeout_micros=20_000,
                                                     num_batch_threads=1),
                         limits=Limits(max_concurrent_requests=SLOTS))
    server.recorded = []
    server.scheduler.on_batch = lambda *stats: server.recorded.append(stats)
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    server.stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    yield server
    channel.close()
    server.stop()


def _request(texts):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "sst2"
    request.inputs["text"].CopyFrom(tf.make_tensor_proto(_strings(texts)))
    return request


def test_token_budget_answers_equal_unbatched_ones(server):
    servable = server.manager.get("sst2")
    assert servable.truncation_length == 32
    texts = ["a gorgeous film", "dull", "the plot is thin and the acting is dull, " * 5, "one of the best",
             "it 's a charming and often affecting journey .", "unflinchingly bleak and desperate " * 3] * 2
    requests = [[text] for text in texts] + [texts[2:5]]  # the last: 3 rows x 32 tokens, over the budget
    expected = [servable.run("serving_default", {"text": _strings(r)})["logits"] for r in requests]
    futures = [server.stub.Predict.future(_request(r), timeout=TIMEOUT) for r in requests]
    got = [tf.make_ndarray(f.result().outputs["logits"]) for f in futures]
    for want, answer in zip(expected, got):
        np.testing.assert_allclose(answer, want, rtol=1e-5, atol=1e-6)
    assert sum(n for n, _, _ in server.recorded) == len(requests)
    over = [s for s in server.recorded if s[2] > BUDGET]
    tokens = example_tokens({"text": _strings(requests[-1])}, 32).tolist()
    assert tokens[0] == 32 and max(tokens[1:]) < 32  # the long text is cut at the model's 32
    assert over == [(1, sum(tokens), 96)]  # 3 rows x 32: alone; every other batch within the budget
    assert any(n > 1 for n, _, _ in server.recorded)  # and requests did merge


def test_past_max_concurrent_requests_is_refused_at_once_and_the_server_keeps_serving(server):
    url = f"http://127.0.0.1:{server.rest_api_port}/v1/models/sst2:predict"
    body = json.dumps({"instances": ["a gorgeous film"]}).encode()
    for _ in range(SLOTS):  # as if that many requests were in flight
        server.slots.take()
    try:
        started = time.monotonic()
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"), timeout=TIMEOUT)
        assert error.value.code == 429
        assert json.load(error.value)["error"].endswith("(--max_concurrent_requests=16); retry later.")
        with pytest.raises(grpc.RpcError) as refused:
            server.stub.Predict(_request(["a gorgeous film"]), timeout=TIMEOUT)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max_concurrent_requests=16" in refused.value.details()
        assert time.monotonic() - started < 5  # refused, not queued
    finally:
        for _ in range(SLOTS):
            server.slots.give()
    with urllib.request.urlopen(urllib.request.Request(url, data=body, method="POST"), timeout=TIMEOUT) as reply:
        assert reply.status == 200
    assert tf.make_ndarray(server.stub.Predict(_request(["a gorgeous film"]), timeout=TIMEOUT)
                           .outputs["label"]).shape == (1,)
    _wait_for(lambda: server.slots.used == 0)  # every slot given back as its answer left
