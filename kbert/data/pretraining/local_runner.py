"""`create_pretraining_data`'s local runner: the (dupe, chunk) tasks in this process or a process pool.

Differences from google-research/bert's tool, which holds the corpus and all
`dupe_factor` copies in memory and runs in one process:

- Streaming. The input is read in file order and cut into chunks of about
  `chunk_bytes` of whole lines, each ending after a blank line where there
  is one (so documents stay whole). Each (dupe, chunk) task is tokenized,
  cut into instances and serialized by a worker; the parent writes the
  results in task order (all chunks of dupe 0, then of dupe 1, ...),
  round-robin over the output files. At most `2 * num_workers` task results
  are in flight, so memory is bounded by the chunk size, not by the corpus
  size or `dupe_factor`.
- Tokens cached on disk. With `dupe_factor > 1` a chunk's dupe-0 task saves
  its token ids (2 bytes each for vocabularies up to 65536 tokens: about the
  size of the text) in a temporary directory (`tempfile`, so `TMPDIR`), and
  the later dupes load them instead of reading and tokenizing again. Pool
  workers hand their records to the parent through files there too
  (`_process_in_pool`), grouped by output file (`ChunkResult`), and the
  parent appends each group to its output with one in-kernel copy
  (`OutputFile.copy_range`). The directory is removed at the end.
- Determinism. A task's randomness (numpy and `random.Random` generators)
  is seeded with `(random_seed, dupe index, chunk index)` only, and results
  are written in task order, so the output is byte-identical for any
  `num_workers`.

The steps of `run_generation`: plan the (dupe, chunk) tasks (`_iter_tasks`),
run them in this process or a pool (`_task_results`), write the results in
task order (`_write_results` into `outputs.Outputs`), check the totals
(`check_totals`), then publish: sidecars, then renames (`Outputs.publish`,
with the metadata of `run_summary`). The work on one chunk is
`ChunkProcessor.process` (`chunk_processor.py`), a plain method of an object
built from the config, which needs no pool: a pool worker holds one in
`_POOL_WORKER`.

Workers are forked when this process has not run TensorFlow ops yet (the
command-line tool never does before starting them): they then share the
parent's imported TensorFlow instead of importing it again (seconds and
~800 MiB each). Otherwise they are spawned, because TensorFlow's runtime
thread pools, created when the first op runs, do not survive `fork`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Sequence

import tensorflow as tf

from kbert.data import text_files
from kbert.data.pretraining.chunk_processor import ChunkProcessor
from kbert.data.pretraining.chunk_processor import ChunkResult
from kbert.data.pretraining.chunk_processor import ChunkTask
from kbert.data.pretraining.chunk_processor import GenerationConfig
from kbert.data.pretraining.instances import TrainingInstance
from kbert.data.pretraining.outputs import Outputs
from kbert.data.pretraining.outputs import Totals
from kbert.data.pretraining.outputs import check_totals
from kbert.data.pretraining.outputs import run_summary
from kbert.data.pretraining.worker_process import tune_worker_process


class _PoolWorker:
    """The per-process state of a pool worker: its `ChunkProcessor`.

    `multiprocessing.Pool` runs a module-level initializer once per worker
    and then module-level functions per task, so what the initializer builds
    has to live in the module; this one holder (`_POOL_WORKER`) is the only
    such slot. It stays empty in the parent process: with one worker, the
    caller keeps its `ChunkProcessor` in a local variable.
    """

    processor: ChunkProcessor | None = None


_POOL_WORKER = _PoolWorker()


def _init_pool_worker(config: GenerationConfig) -> None:
    """Pool initializer: tunes this worker process and builds its `ChunkProcessor`."""
    tune_worker_process()
    _POOL_WORKER.processor = ChunkProcessor(config)



def _process_in_pool(task: ChunkTask) -> ChunkResult:
    """`ChunkProcessor.process` in a pool worker: the records go back through a temporary file.

    A pipe moves a task's ~25 MB of records in 64 KiB pieces, each a context
    switch between worker and parent; measured here that costs about 6 times
    the CPU of writing the same bytes to a file (page cache) for the parent to
    read.
    """
    result = _POOL_WORKER.processor.process(task)
    with open(task.records_file, "wb") as f:
        f.write(result.records)
    return dataclasses.replace(result, records=b"", records_file=task.records_file)


def _iter_tasks(
    files: Sequence[str], dupe_factor: int, chunk_bytes: int, work_dir: str,
    cached_chunks: set[int], in_pool: bool,
) -> Iterator[ChunkTask]:
    """The (dupe, chunk) tasks in output order.

    Dupe 0 reads the input; its tasks save the chunk's tokens in `work_dir`
    when there are more dupes. A later dupe's task loads them once the
    caller has added the chunk to `cached_chunks` (its dupe-0 result was
    received, so the file is complete), else it reads the text again. With
    `in_pool`, each task's records go through a file in `work_dir`.
    """

    def records_file(dupe_index: int, chunk_index: int) -> str | None:
        return os.path.join(work_dir, f"records-{dupe_index}-{chunk_index}") if in_pool else None

    plan: list[list[text_files.TextPiece]] = []
    for chunk_index, pieces in enumerate(text_files.iter_text_chunks(files, chunk_bytes)):
        plan.append([piece.without_data() for piece in pieces])
        cache_file = os.path.join(work_dir, f"chunk-{chunk_index}.npz") if dupe_factor > 1 else None
        yield ChunkTask(0, chunk_index, pieces, cache_file, dupe_factor > 1, records_file(0, chunk_index))
    for dupe_index in range(1, dupe_factor):
        for chunk_index, pieces in enumerate(plan):
            records = records_file(dupe_index, chunk_index)
            if chunk_index in cached_chunks:
                cache_file = os.path.join(work_dir, f"chunk-{chunk_index}.npz")
                yield ChunkTask(dupe_index, chunk_index, None, cache_file, records_file=records)
            else:
                yield ChunkTask(dupe_index, chunk_index, pieces, records_file=records)


def worker_start_method() -> str:
    """`"fork"` while this process has not initialized TensorFlow's runtime, else `"spawn"`.

    Forked workers reuse the parent's imported modules; spawned ones import
    TensorFlow again. Forking is only safe before the eager context exists
    (its thread pools would be missing in the child), which TensorFlow does
    not expose publicly, hence the guarded private check.
    """
    if "fork" not in multiprocessing.get_all_start_methods():
        return "spawn"
    try:
        from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import

        ctx = context.context_safe()
        if ctx is None or getattr(ctx, "_context_handle", True) is None:
            return "fork"
    except Exception:  # pylint: disable=broad-except
        pass
    return "spawn"


def _bounded_imap(pool, func, tasks: Iterator, window: int) -> Iterator:
    """Ordered `pool.imap` that reads ahead at most `window` tasks.

    `Pool.imap` pulls its whole input at once, which would read the corpus
    into memory.
    """
    pending: collections.deque = collections.deque()
    for task in tasks:
        pending.append(pool.apply_async(func, (task,)))
        if len(pending) >= window:
            yield pending.popleft().get()
    while pending:
        yield pending.popleft().get()


@contextlib.contextmanager
def _task_results(
    config: GenerationConfig, tasks: Iterator[ChunkTask], num_workers: int
) -> Iterator[Iterator[ChunkResult]]:
    """Yields the results of `tasks` in task order: computed here for one worker, else by a pool.

    The pool is stopped when the block ends, also on error.
    """
    if num_workers == 1:
        processor = ChunkProcessor(config)
        yield map(processor.process, tasks)
        return
    start_method = worker_start_method()
    if start_method == "fork":
        # Keeps the collector from touching, and so copying, every
        # object inherited from this process in each worker.
        gc.freeze()
    pool = multiprocessing.get_context(start_method).Pool(
        num_workers, initializer=_init_pool_worker, initargs=(config,)
    )
    try:
        yield _bounded_imap(pool, _process_in_pool, tasks, window=2 * num_workers)
    finally:
        pool.terminate()
        pool.join()


@dataclasses.dataclass
class _Callbacks:
    """The caller's callbacks and what they need between tasks."""

    start: float
    examples_left: int
    example_callback: Callable[[TrainingInstance], None] | None
    progress_callback: Callable[[dict[str, Any]], None] | None

    def report(self, result: ChunkResult, counts: dict[str, int]) -> None:
        """Passes on the first instances (until `examples_left` are shown) and the running counts."""
        if self.example_callback:
            for instance in result.examples[: self.examples_left]:
                self.example_callback(instance)
            self.examples_left -= min(self.examples_left, len(result.examples))
        if self.progress_callback:
            self.progress_callback(
                {
                    "dupe": result.dupe_index,
                    "chunk": result.chunk_index,
                    "seconds": time.time() - self.start,
                    **counts,
                }
            )


def _run_tasks(
    config: GenerationConfig, num_workers: int, outputs: Outputs, callbacks: _Callbacks
) -> Totals:
    """Plans the tasks, runs them and writes their results in task order; returns the totals."""
    # Token caches and the records of pool workers.
    with tempfile.TemporaryDirectory(
        prefix="kbert-pretraining-data-", ignore_cleanup_errors=True
    ) as work_dir:
        # Chunks whose dupe-0 result is written, so their token cache is complete.
        cached_chunks: set[int] = set()
        tasks = _iter_tasks(
            config.input_files, config.dupe_factor, config.chunk_bytes, work_dir, cached_chunks,
            in_pool=num_workers > 1,
        )
        with _task_results(config, tasks, num_workers) as results:
            return _write_results(results, outputs, cached_chunks, callbacks)


def _write_results(
    results: Iterable[ChunkResult], outputs: Outputs, cached_chunks: set[int], callbacks: _Callbacks
) -> Totals:
    """Writes each result as it arrives, tells `_iter_tasks` which token caches are complete."""
    totals = Totals()
    for result in results:
        outputs.write(result)
        totals.add(result)
        if result.dupe_index == 0:
            cached_chunks.add(result.chunk_index)
        callbacks.report(result, totals.counts)
    return totals




def run_generation(
    config: GenerationConfig,
    num_workers: int,
    vocab_size: int,
    flags: dict[str, Any],
    start: float,
    example_callback: Callable[[TrainingInstance], None] | None = None,
    progress_callback: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Runs `create_pretraining_data`'s checked config here: the tasks, the totals, the published outputs.

    Called by `create_pretraining_data` without `runner`, which checks the
    arguments first.

    Args:
        config: `GenerationConfig`. The checked settings.
        num_workers: int. Worker processes; 1 works in this process.
        vocab_size: int. Tokens in the vocabulary.
        flags: dict. Flag values for the sidecars.
        start: float. `time.time()` when the run began (for `seconds`).
        example_callback: callable or None. Called with the first
            `config.num_verbose_examples` instances in output order.
        progress_callback: callable or None. Called with the running counts
            after each task.

    Returns:
        The metadata written to the sidecars (without the per-file keys).

    Raises:
        ValueError: bad input (naming file and line), an empty corpus or an
            output that cannot be written. No output is left behind then.

    Example:

    >>> run_generation(config, num_workers=4, vocab_size=30522, flags={}, start=time.time())
    """
    callbacks = _Callbacks(start, config.num_verbose_examples, example_callback, progress_callback)
    input_bytes = sum(tf.io.gfile.stat(f).length for f in config.input_files)
    with Outputs(config.output_files) as outputs:
        totals = _run_tasks(config, num_workers, outputs, callbacks)
        check_totals(config, totals)
        outputs.close()
        seconds = time.time() - callbacks.start
        metadata = run_summary(config, vocab_size, flags, input_bytes, totals, seconds)
        outputs.publish(metadata)
    return metadata
