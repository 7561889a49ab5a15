"""Server-side batching: concurrent requests run as one batch, like TF Serving's `--enable_batching`.

Requests for the same servable, signature and per-example input shapes queue
together; `num_batch_threads` workers each take the oldest queue that is full
(`max_batch_size` examples) or whose first request has waited
`batch_timeout_micros`, run it once, and hand every request its rows. With the
default timeout of 0 a worker takes whatever has queued as soon as it is free,
so batches grow exactly as fast as requests arrive while the model is busy.

With a token budget (`max_batch_tokens`, text-embeddings-inference's
`--max-batch-tokens`) a batch is also capped by its padded tokens, rows times
its longest example, measured by `kbert.serving.token_counts`: the worker takes
the oldest request, then the queued requests closest to it in length while the
batch stays within `max_batch_size` rows and the budget, so long and short
texts run apart and little padding is computed. A request over the budget on
its own runs alone. A queue counts as full once its requests' own padded
tokens reach the budget.

The parameters file is TF Serving's `BatchingParameters` text proto. The
`tensorflow-serving-api` package does not ship that proto, so the few fields
are parsed here with a small reader of the same syntax. The token budget is a
flag (`--max_batch_tokens`), not a field, so the same file still loads in the
stock `tensorflow_model_server`.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import re
import threading
import time
from typing import Callable

import grpc
import numpy as np
import tensorflow as tf

from kbert.serving.errors import ServingError
from kbert.serving.limits import deadline_exceeded

log = logging.getLogger("kbert.serving")

_WRAPPED = re.compile(r"(\w+)\s*\{\s*value\s*:\s*(\"[^\"]*\"|[^\s}]+)\s*\}")
_PLAIN = re.compile(r"(\w+)\s*:\s*(\"[^\"]*\"|[^\s{}]+)")


@dataclasses.dataclass
class BatchingParameters:
    """TF Serving's batching knobs.

    Args:
        max_batch_size: int. Most examples in one batch. Defaults to 32.
        batch_timeout_micros: int. Longest a request waits for a fuller batch.
            Defaults to 0 (TF Serving's default).
        num_batch_threads: int. Batches run at once. Defaults to the CPU count.
        max_enqueued_batches: int. Queue length (in batches) past which
            requests are refused with UNAVAILABLE. Defaults to 100.
        allowed_batch_sizes: list of int. If set, batches are padded up to the
            next of these sizes (the last must equal `max_batch_size`).
        pad_variable_length_inputs: bool. Accepted for compatibility; inputs of
            different lengths are queued apart instead of padded.

    Example:

    >>> BatchingParameters.parse("max_batch_size { value: 32 } batch_timeout_micros { value: 1000 }")
    """

    max_batch_size: int = 32
    batch_timeout_micros: int = 0
    num_batch_threads: int = dataclasses.field(default_factory=lambda: os.cpu_count() or 1)
    max_enqueued_batches: int = 100
    allowed_batch_sizes: list[int] = dataclasses.field(default_factory=list)
    pad_variable_length_inputs: bool = False
    thread_pool_name: str = "batch_threads"

    @classmethod
    def parse(cls, text: str, source: str = "--batching_parameters_file") -> "BatchingParameters":
        """Reads the `BatchingParameters` text proto (`name { value: N }` fields)."""
        text = re.sub(r"#[^\n]*", "", text)
        values: dict = {}
        for pattern in (_WRAPPED, _PLAIN):
            for key, raw in pattern.findall(text):
                if key == "value":
                    continue
                raw = raw.strip('"')
                if key == "allowed_batch_sizes":
                    values.setdefault(key, []).append(int(raw))
                elif key not in values:
                    values[key] = raw
            text = pattern.sub(" ", text)
        if text.strip():
            raise ValueError(f"{source}: cannot read {text.strip()[:60]!r}; write fields as "
                             "`max_batch_size { value: 32 }`.")
        fields = {field.name: field for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise ValueError(f"{source}: unknown field(s) {unknown}; kbert-serve reads {sorted(fields)}.")
        params = cls()
        for key, raw in values.items():
            if key == "allowed_batch_sizes":
                params.allowed_batch_sizes = sorted(raw)
            elif key == "pad_variable_length_inputs":
                params.pad_variable_length_inputs = str(raw).lower() == "true"
            elif key == "thread_pool_name":
                params.thread_pool_name = raw
            else:
                try:
                    setattr(params, key, int(raw))
                except ValueError:
                    raise ValueError(f"{source}: {key} must be an integer, got {raw!r}.") from None
        params.validate(source)
        return params

    @classmethod
    def from_file(cls, path: str) -> "BatchingParameters":
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"--batching_parameters_file={path} does not exist.")
        with tf.io.gfile.GFile(path) as f:
            return cls.parse(f.read(), source=f"--batching_parameters_file={path}")

    def validate(self, source: str = "batching parameters") -> None:
        for key in ("max_batch_size", "num_batch_threads", "max_enqueued_batches"):
            if getattr(self, key) < 1:
                raise ValueError(f"{source}: {key} must be >= 1, got {getattr(self, key)}.")
        if self.batch_timeout_micros < 0:
            raise ValueError(f"{source}: batch_timeout_micros must be >= 0.")
        if self.allowed_batch_sizes and self.allowed_batch_sizes[-1] != self.max_batch_size:
            raise ValueError(f"{source}: the largest allowed_batch_sizes ({self.allowed_batch_sizes[-1]}) "
                             f"must equal max_batch_size ({self.max_batch_size}).")


@dataclasses.dataclass(eq=False)  # compared by identity: queues remove one request
class _Task:
    inputs: dict
    size: int
    run: Callable
    created: float
    deadline: float | None = None
    length: int = 0  # tokens of its longest example
    tokens: int = 0  # tokens of all its examples
    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    outputs: dict | None = None
    error: Exception | None = None


class BatchScheduler:
    """Merges concurrent requests into batches and runs them on worker threads.

    Args:
        params: `BatchingParameters`.
        max_batch_tokens: int. Most padded tokens (rows x the longest
            example's tokens) in one batch, `--max_batch_tokens`; 0 counts
            examples only (TF Serving's batching). Defaults to 0.
        on_batch: callable or None. Called after every batch runs (also a
            request run alone) as `on_batch(num_requests, num_tokens,
            padded_tokens)`: requests merged, tokens of their examples and
            rows x the longest example (rows padded up to
            `allowed_batch_sizes`), for metrics. Its errors are logged, never
            passed to the requests.

    Example:

    >>> scheduler = BatchScheduler(BatchingParameters(max_batch_size=32), max_batch_tokens=4096)
    >>> outputs = scheduler.run(key, servable_run, {"text": texts}, batch_size=len(texts),
    ...                         tokens=example_tokens({"text": texts}))
    """

    def __init__(self, params: BatchingParameters, max_batch_tokens: int = 0,
                 on_batch: Callable[[int, int, int], None] | None = None):
        params.validate()
        if max_batch_tokens < 0:
            raise ValueError(f"--max_batch_tokens={max_batch_tokens}; it must be >= 0 (0: count examples only).")
        self.params = params
        self.max_batch_tokens = max_batch_tokens
        self.on_batch = on_batch
        self._queues: dict = collections.OrderedDict()
        self._condition = threading.Condition()
        self._stopped = False
        self._workers = [threading.Thread(target=self._work, name=f"kbert-batch-{i}", daemon=True)
                         for i in range(params.num_batch_threads)]
        for worker in self._workers:
            worker.start()

    def run(self, key, run: Callable[[dict], dict], inputs: dict, batch_size: int,
            deadline: float | None = None, tokens=None) -> dict:
        """Runs `run(inputs)` as part of a batch; blocks until this request's rows are back.

        Args:
            key: hashable. Requests with equal keys may share a batch; include
                the servable, signature and per-example shapes.
            run: callable from batched inputs to batched outputs.
            inputs: dict of arrays with `batch_size` rows.
            batch_size: int.
            deadline: float or None. A `time.monotonic()` instant; a request
                still queued then is taken out and not run.
            tokens: sequence of int or None. Tokens of each example
                (`kbert.serving.token_counts.example_tokens`); None counts 1
                each, so the token budget then caps rows.

        Returns:
            This request's rows of every output.

        Raises:
            ServingError: UNAVAILABLE when the queue is full, DEADLINE_EXCEEDED
                when the deadline passes before the batch starts.
        """
        tokens = [1] * batch_size if tokens is None else [int(t) for t in tokens]
        task = _Task(inputs, batch_size, run, time.monotonic(), deadline, max(tokens), sum(tokens))
        budget = self.max_batch_tokens
        if batch_size >= self.params.max_batch_size or (budget and self._padded_tokens(batch_size, task.length)
                                                        >= budget):
            # Already a full batch, or over the token budget on its own: nothing to merge with.
            try:
                return run(inputs)
            finally:
                self._report(1, task.tokens, batch_size * task.length)
        with self._condition:
            if self._stopped:
                raise ServingError(grpc.StatusCode.UNAVAILABLE, "The server is shutting down.")
            queue = self._queues.setdefault(key, collections.deque())
            queued = sum(t.size for t in queue) + batch_size
            if queued > self.params.max_enqueued_batches * self.params.max_batch_size:
                raise ServingError(grpc.StatusCode.UNAVAILABLE,
                                   "The batch scheduling queue to which this task was submitted is full "
                                   f"({self.params.max_enqueued_batches} batches); retry later.")
            queue.append(task)
            self._condition.notify()
        if not task.done.wait(None if deadline is None else max(0.0, deadline - time.monotonic())):
            with self._condition:
                queue = self._queues.get(key)
                if queue is not None and task in queue:  # not started: leave the queue, never run
                    queue.remove(task)
                    if not queue:
                        del self._queues[key]
                    raise deadline_exceeded("its batch started")
            task.done.wait()  # already running: it cannot be stopped half-way
        if task.error is not None:
            raise task.error
        return task.outputs

    def _full(self, queue) -> bool:
        if sum(t.size for t in queue) >= self.params.max_batch_size:
            return True
        return bool(self.max_batch_tokens) and sum(t.size * t.length for t in queue) >= self.max_batch_tokens

    def _ready(self, now: float):
        """Returns (key, wait): a queue to run now, or how long until one is due."""
        timeout = self.params.batch_timeout_micros / 1e6
        best_key, best_time, wait = None, None, None
        for key, queue in self._queues.items():
            if not queue:
                continue
            due = queue[0].created + timeout
            if due <= now or self._full(queue):
                if best_time is None or queue[0].created < best_time:
                    best_key, best_time = key, queue[0].created
            else:
                wait = due - now if wait is None else min(wait, due - now)
        return best_key, wait

    def _work(self) -> None:
        while True:
            with self._condition:
                while True:
                    if self._stopped and not any(self._queues.values()):
                        return
                    key, wait = self._ready(time.monotonic())
                    if key is not None:
                        break
                    self._condition.wait(timeout=wait)
                queue = self._queues[key]
                tasks = self._take(queue, time.monotonic())
                if not queue:
                    del self._queues[key]
            if tasks:
                self._run_batch(tasks)

    def _take(self, queue: collections.deque, now: float) -> list[_Task]:
        """Removes and returns the next batch's requests from `queue` (expiring any past their deadline)."""
        for task in [t for t in queue if t.deadline is not None and t.deadline <= now]:
            queue.remove(task)
            self._expire(task)
        if not queue:
            return []
        if not self.max_batch_tokens:  # oldest first, as TF Serving
            tasks, size = [], 0
            while queue and size + queue[0].size <= self.params.max_batch_size:
                task = queue.popleft()
                tasks.append(task)
                size += task.size
            return tasks
        # The oldest request always goes (nothing waits forever); then the requests
        # closest to it in length, oldest first among equals, while rows and
        # padded tokens fit. Sorting the whole queue costs microseconds: it holds
        # at most the clients waiting.
        first = queue[0]
        tasks, size, length = [first], first.size, first.length
        candidates = sorted(range(1, len(queue)), key=lambda i: (abs(queue[i].length - first.length), i))
        for i in candidates:
            task = queue[i]
            rows, longest = size + task.size, max(length, task.length)
            if rows <= self.params.max_batch_size and self._padded_tokens(rows, longest) <= self.max_batch_tokens:
                tasks.append(task)
                size, length = rows, longest
        chosen = {id(task) for task in tasks}
        remaining = [task for task in queue if id(task) not in chosen]
        queue.clear()
        queue.extend(remaining)
        return tasks

    @staticmethod
    def _expire(task: _Task) -> None:
        task.error = deadline_exceeded("its batch started")
        task.done.set()

    def _padded_size(self, size: int) -> int:
        for allowed in self.params.allowed_batch_sizes:
            if allowed >= size:
                return allowed
        return size

    def _padded_tokens(self, rows: int, length: int) -> int:
        """Tokens the model runs for `rows` examples padded to `length` (and rows to an allowed size)."""
        return self._padded_size(rows) * length

    def _report(self, num_requests: int, tokens: int, padded_tokens: int) -> None:
        if self.on_batch is None:
            return
        try:
            self.on_batch(num_requests, tokens, padded_tokens)
        except Exception:  # metrics must never fail a request
            log.exception("kbert-serve: the on_batch hook failed")

    def _run_batch(self, tasks: list[_Task]) -> None:
        size = sum(task.size for task in tasks)
        padded = self._padded_size(size)
        try:
            if len(tasks) == 1 and not self.params.allowed_batch_sizes:
                results = [tasks[0].run(tasks[0].inputs)]
            else:
                batch = {}
                for name in tasks[0].inputs:
                    parts = [task.inputs[name] for task in tasks]
                    if padded > size:  # pad with copies of the first row, as TF Serving does
                        parts.append(np.repeat(parts[0][:1], padded - size, axis=0))
                    batch[name] = np.concatenate(parts, axis=0)
                outputs = tasks[0].run(batch)
                results, start = [], 0
                for task in tasks:
                    results.append({name: value[start:start + task.size] for name, value in outputs.items()})
                    start += task.size
            for task, result in zip(tasks, results):
                task.outputs = result
        except ServingError as e:
            for task in tasks:
                task.error = e
        except Exception as e:  # surfaced to every request of the batch, never kills the worker
            for task in tasks:
                task.error = ServingError(grpc.StatusCode.INTERNAL, f"batch failed: {e}")
        finally:
            for task in tasks:
                task.done.set()
        self._report(len(tasks), sum(task.tokens for task in tasks),
                     padded * max(task.length for task in tasks))

    def queued_examples(self) -> int:
        """Examples waiting for a batch now (`kbert_serving_queued_examples`)."""
        with self._condition:
            return sum(task.size for queue in self._queues.values() for task in queue)

    def stop(self) -> None:
        """Finishes queued requests, then stops the workers."""
        with self._condition:
            self._stopped = True
            self._condition.notify_all()
        for worker in self._workers:
            worker.join(timeout=30)
