"""Batching parameters parse like TF Serving's text proto; the scheduler merges and splits requests."""

import os
import threading
import time

import grpc
import numpy as np
import pytest

from tests.serving_testlib import REPO

from kbert.serving.batching import BatchingParameters
from kbert.serving.batching import BatchScheduler
from kbert.serving.errors import ServingError


def test_parse_the_shipped_parameters_file():
    params = BatchingParameters.from_file(os.path.join(REPO, "serving", "batching_parameters.txt"))
    assert (params.max_batch_size, params.batch_timeout_micros, params.num_batch_threads,
            params.max_enqueued_batches) == (32, 0, 2, 100)


def test_parse_allowed_sizes_and_reject_unknown_fields():
    params = BatchingParameters.parse("max_batch_size { value: 8 }\nallowed_batch_sizes: 2\n"
                                      "allowed_batch_sizes: 8  # comment\npad_variable_length_inputs: true")
    assert params.allowed_batch_sizes == [2, 8] and params.pad_variable_length_inputs
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['max_batch'\]"):
        BatchingParameters.parse("max_batch { value: 8 }")
    with pytest.raises(ValueError, match="must equal max_batch_size"):
        BatchingParameters.parse("max_batch_size { value: 8 } allowed_batch_sizes: 4")


def test_scheduler_merges_concurrent_requests_and_returns_each_its_rows():
    scheduler = BatchScheduler(BatchingParameters(max_batch_size=8, batch_timeout_micros=200_000,
                                                  num_batch_threads=1))
    sizes, results, errors = [], {}, []
    started = threading.Barrier(16)

    def run(inputs):
        sizes.append(len(inputs["x"]))
        return {"y": inputs["x"] * 10}

    def client(i):
        try:
            started.wait(timeout=30)
            results[i] = scheduler.run("key", run, {"x": np.array([i])}, 1)["y"].tolist()
        except Exception as e:  # recorded, asserted below
            errors.append(e)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    scheduler.stop()
    assert not errors
    assert results == {i: [i * 10] for i in range(16)}
    assert sum(sizes) == 16 and max(sizes) <= 8 and len(sizes) < 16


def test_scheduler_pads_to_allowed_sizes_and_passes_errors_to_every_request():
    scheduler = BatchScheduler(BatchingParameters(max_batch_size=4, allowed_batch_sizes=[2, 4],
                                                  num_batch_threads=1))
    seen = []

    def run(inputs):
        seen.append(inputs["x"].tolist())
        return {"y": inputs["x"] + 1}

    assert scheduler.run("k", run, {"x": np.array([5])}, 1)["y"].tolist() == [6]
    assert seen == [[5, 5]]  # padded with a copy of the first row

    def fail(inputs):
        raise ServingError(grpc.StatusCode.INVALID_ARGUMENT, "bad row")

    with pytest.raises(ServingError, match="bad row"):
        scheduler.run("k", fail, {"x": np.array([1])}, 1)
    scheduler.stop()


def test_scheduler_takes_a_request_whose_deadline_passes_out_of_the_queue_unrun():
    scheduler = BatchScheduler(BatchingParameters(max_batch_size=8, batch_timeout_micros=30_000_000,
                                                  num_batch_threads=1))
    ran = []

    def run(inputs):
        ran.append(len(inputs["x"]))
        return {"y": inputs["x"]}

    for deadline in (time.monotonic() - 1, time.monotonic() + 0.2):  # already past; passes while queued
        with pytest.raises(ServingError) as error:
            scheduler.run("k", run, {"x": np.array([1])}, 1, deadline=deadline)
        assert error.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "deadline passed before its batch started; it was not run" in error.value.message
    assert scheduler.run("k", run, {"x": np.arange(8)}, 8, deadline=time.monotonic() + 60)["y"].tolist() == list(
        range(8))
    scheduler.stop()
    assert ran == [8]  # only the full batch ran
