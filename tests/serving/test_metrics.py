"""kbert.serving.metrics: what each recording call adds to the Prometheus exposition (no model, no server).

The server-level check that counters move with real traffic is in
test_encoder_apis.py (it shares that module's server).
"""

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kbert.serving.errors import ServingError
from kbert.serving.metrics import ServingMetrics
from kbert.serving.metrics import status_of_http


class _Servable:
    name, version = "sst2", 3
    truncation_length = None

    def __init__(self):
        self.batches = []

    def run(self, signature, inputs):
        self.batches.append((signature, {k: list(v) for k, v in inputs.items()}))
        return {"score": [0.5] * len(next(iter(inputs.values())))}


def _samples(metrics: ServingMetrics) -> dict:
    """(sample name, sorted label items) -> value, parsed by prometheus_client's own parser."""
    found = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def _labels(**labels):
    return tuple(sorted(labels.items()))


def test_a_request_is_counted_timed_and_labelled_with_its_servable():
    metrics = ServingMetrics()
    with metrics.request("classify", "grpc") as record:
        record.servable(_Servable(), "serving_default")
    samples = _samples(metrics)
    labels = dict(model="sst2", version="3", signature="serving_default", api="classify", entrypoint="grpc")
    assert samples[("kbert_serving_requests_total", _labels(**labels, status="OK"))] == 1
    assert samples[("kbert_serving_request_latency_seconds_count", _labels(**labels))] == 1
    assert samples[("kbert_serving_request_latency_seconds_bucket", _labels(**labels, le="+Inf"))] == 1


@pytest.mark.parametrize("code, refused", [(grpc.StatusCode.INVALID_ARGUMENT, False),
                                           (grpc.StatusCode.UNAVAILABLE, True),
                                           (grpc.StatusCode.RESOURCE_EXHAUSTED, True),
                                           (grpc.StatusCode.DEADLINE_EXCEEDED, True)])
def test_an_error_sets_the_status_and_busy_answers_count_as_refusals(code, refused):
    metrics = ServingMetrics()
    with pytest.raises(ServingError):
        with metrics.request("embeddings", "rest"):
            raise ServingError(code, "no")
    samples = _samples(metrics)
    # The model was never found: it is labelled "", so clients cannot create label values.
    key = _labels(model="", version="", signature="", api="embeddings", entrypoint="rest", status=code.name)
    assert samples[("kbert_serving_requests_total", key)] == 1
    refusals = samples.get(("kbert_serving_refusals_total", _labels(reason=code.name, entrypoint="rest")), 0)
    assert refusals == (1 if refused else 0)


def test_batches_record_examples_and_tokens_through_the_predictors_runner():
    import numpy as np

    from kbert.serving.predictor import Predictor

    metrics = ServingMetrics()
    servable = _Servable()
    run = Predictor(manager=None, metrics=metrics).batch_runner(servable, "serving_default")
    # token_counts' worked example: "a gorgeous film" is 7 tokens, "dull!" 5.
    assert run({"text": np.array([b"a gorgeous film", b"dull!", b"dull!"], object)}) == {
        "score": [0.5] * 3}
    run({"text": np.array([b"dull!"], object)})
    samples = _samples(metrics)
    names = dict(model="sst2", version="3", signature="serving_default")
    labels = _labels(**names)
    assert samples[("kbert_serving_batch_size_count", labels)] == 2
    assert samples[("kbert_serving_batch_size_sum", labels)] == 4
    assert samples[("kbert_serving_batch_size_bucket", _labels(**names, le="2.0"))] == 1  # the batch of 1
    # Padded tokens: 3 rows x 7, then 1 row x 5.
    assert samples[("kbert_serving_batch_tokens_count", labels)] == 2
    assert samples[("kbert_serving_batch_tokens_sum", labels)] == 3 * 7 + 5
    assert [batch for _, batch in servable.batches] == [
        {"text": [b"a gorgeous film", b"dull!", b"dull!"]}, {"text": [b"dull!"]}]


def test_queue_length_is_read_when_scraped():
    metrics = ServingMetrics()
    assert _samples(metrics)[("kbert_serving_queued_examples", ())] == 0
    queued = [7]
    metrics.track_queue(lambda: queued[0])
    assert _samples(metrics)[("kbert_serving_queued_examples", ())] == 7
    queued[0] = 2
    assert _samples(metrics)[("kbert_serving_queued_examples", ())] == 2


def test_http_statuses_map_to_grpc_codes():
    assert [status_of_http(s) for s in (200, 400, 404, 413, 429, 503, 504, 500)] == [
        "OK", "INVALID_ARGUMENT", "NOT_FOUND", "RESOURCE_EXHAUSTED", "RESOURCE_EXHAUSTED", "UNAVAILABLE",
        "DEADLINE_EXCEEDED", "INTERNAL"]


def test_two_servers_keep_their_own_numbers():
    first, second = ServingMetrics(), ServingMetrics()
    first.observe_refusal("UNAVAILABLE", "rest")
    assert _samples(first)[("kbert_serving_refusals_total", _labels(reason="UNAVAILABLE", entrypoint="rest"))] == 1
    assert ("kbert_serving_refusals_total", _labels(reason="UNAVAILABLE", entrypoint="rest")) not in _samples(second)
