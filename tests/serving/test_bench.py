"""serving/bench.py, the shipped load tool, against a real kbert-serve on loopback.

The server is `kbert.serving.server.ModelServer`, the object `kbert-serve` runs,
started in this process (no new interpreter) on a free gRPC port with the tests'
tiny classifier and embedding exports. bench.py's own counts are checked against
the server's Prometheus counters: every request and text it says were answered,
the server answered.
"""

import importlib.util
import os
import re
import sys

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tensorflow_serving.apis import prediction_service_pb2_grpc

from tests import serving_testlib as lib

SERVING = os.path.join(lib.REPO, "serving")
MODELS = ("sst2", "embed")


def _load_bench():
    spec = importlib.util.spec_from_file_location("serving_bench", os.path.join(SERVING, "bench.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # puts serving/ on sys.path for its `client` import
    return module


bench = _load_bench()


@pytest.fixture(scope="module")
def server():
    from kbert.serving.model_config import ModelConfig
    from kbert.serving.server import ModelServer

    exported = lib.exported_models()
    served = ModelServer([ModelConfig(name, exported[name]["export_dir"]) for name in MODELS],
                         port=0, rest_api_port=0, poll_wait_seconds=0)
    served.start()
    yield served
    served.stop(grace=1.0)


def _answered(server) -> dict:
    """model -> (Predict requests answered OK, texts the model ran), from the server's own counters."""
    found = {model: [0.0, 0.0] for model in MODELS}
    for family in text_string_to_metric_families(server.metrics.exposition().decode()):
        for sample in family.samples:
            labels = sample.labels
            if labels.get("model") not in found or labels.get("api") != "predict":
                continue
            if sample.name == "kbert_serving_requests_total" and labels["status"] == "OK":
                found[labels["model"]][0] += sample.value
            elif sample.name == "kbert_serving_request_examples_total":
                found[labels["model"]][1] += sample.value
    return {model: tuple(int(v) for v in values) for model, values in found.items()}


def _rows(output: str) -> list[list[str]]:
    lines = output.splitlines()
    header = bench.HEADER.splitlines()[0]
    assert header in lines, output
    return [line.strip("| ").split(" | ") for line in lines[lines.index(header) + 2:] if line.startswith("| ")]


@pytest.mark.parametrize("batch_size, models", [(1, ["sst2"]), (4, list(MODELS))])
def test_bench_reports_each_model_and_concurrency_with_the_server_s_own_counts(server, capsys, batch_size,
                                                                                models):
    before = _answered(server)
    code = bench.main([f"--server=127.0.0.1:{server.port}", f"--models={','.join(models)}",
                       "--concurrency=1,2", f"--batch_size={batch_size}", "--seconds=1"])
    output = capsys.readouterr().out
    assert code == 0, output
    assert f"batch_size={batch_size}, 1 s a run" in output
    rows = _rows(output)
    assert [(row[0], int(row[1])) for row in rows] == [(model, clients) for model in models for clients in (1, 2)]
    after = _answered(server)
    for model in models:
        requests = 0
        for row in (row for row in rows if row[0] == model):
            count, errors, qps, texts_per_s, p50, p90, p99 = (float(value) for value in row[2:9])
            assert count > 0 and errors == 0
            assert 0 < p50 <= p90 <= p99
            # over the run's 1 s and the last answers' tail (well under 1 s with this tiny model);
            # figures printed to 0.1
            assert count / 2 < qps <= count + 0.05
            assert texts_per_s == pytest.approx(batch_size * qps, abs=0.05 * (batch_size + 1))
            requests += int(count)
        # every request bench.py counted, plus its one warm-up request, the server answered; each with
        # batch_size texts
        assert after[model][0] - before[model][0] == requests + 1
        assert after[model][1] - before[model][1] == (requests + 1) * batch_size


def test_run_load_counts_texts_and_orders_its_percentiles(server):
    channel = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        before = _answered(server)["embed"]
        found = bench.run_load(stub, "embed", ["one text", "two texts here"], concurrency=2, batch_size=3,
                               seconds=0.5)
        after = _answered(server)["embed"]
    finally:
        channel.close()
    assert found["errors"] == 0 and found["first_error"] == "" and found["requests"] > 0
    assert found["texts"] == 3 * found["requests"]
    assert (after[0] - before[0], after[1] - before[1]) == (found["requests"], found["texts"])
    assert found["seconds"] >= 0.5
    assert found["qps"] == pytest.approx(found["requests"] / found["seconds"])
    assert 0 < found["p50_ms"] <= found["p90_ms"] <= found["p99_ms"]


def test_an_unknown_model_stops_the_run_naming_it(server, capsys):
    before = _answered(server)
    with pytest.raises(SystemExit, match=r"--models: the server refused a request to model 'sst3' .*NOT_FOUND"):
        bench.main([f"--server=127.0.0.1:{server.port}", "--models=sst2,sst3", "--seconds=1"])
    assert "| model |" not in capsys.readouterr().out  # refused before any load ran
    assert _answered(server)["sst2"][0] == before["sst2"][0] + 1  # sst2's one check request
    with pytest.raises(SystemExit):
        bench.main(["--models=sst2,,embed"])
    assert "an empty model name" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--models=sst2", "--concurrency=1,0"])
    assert "each must be a positive integer" in capsys.readouterr().err
