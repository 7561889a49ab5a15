"""The outputs of a `create_pretraining_data` run: its files, totals, summary and publishing.

Every runner (this process, its pool, an Apache Beam pipeline) writes the data
files under temporary names ending in `.incomplete` (which `list_data_files`
skips, also after a crash), sums the tasks' counts (`Totals`), checks them
(`check_totals`: an empty corpus writes nothing), and publishes: each file's
JSON sidecar `<output>.meta.json` (`run_summary`, see `pretraining_metadata`),
then the renames into place (`publish_outputs`). On any error the temporary
files are removed.

`Outputs` is the local runner's set of open output files, appended task by
task; the Beam pipeline writes each output file on its own worker and
publishes through `publish_outputs` as well.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

import tensorflow as tf

from kbert.data.pretraining.chunk_processor import COUNT_KEYS
from kbert.data.pretraining.chunk_processor import ChunkResult
from kbert.data.pretraining.chunk_processor import GenerationConfig
from kbert.data.pretraining.metadata import METADATA_FORMAT
from kbert.data.pretraining.metadata import write_metadata
from kbert.data.pretraining.output_file import OutputFile
from kbert.data.tokenizers.identity import tokenizer_sha256
from kbert.data.tokenizers.loading import tokenizer_class

# The sidecar's `runner` for runs of the local runner (this process or its pool).
LOCAL_RUNNER = "local"


class Outputs:
    """The output files of a run: written as `<output>.incomplete`, renamed by `publish`.

    Used as a context manager: on leaving the block, the files are closed and,
    unless `publish` completed, every temporary file and sidecar is removed.

    The TFRecords are streamed (appended task by task, mostly by in-kernel
    range copies), so `kbert.files.write_text`, which takes a file's whole
    content, does not fit them; they keep this fixed temporary name, which
    readers skip like `kbert.files.temporary_name`'s (`list_data_files`).

    Args:
        paths: tuple of str. The output files.
    """

    def __init__(self, paths: Sequence[str]):
        self.paths = list(paths)
        self.temp_files = [path + ".incomplete" for path in paths]
        self.writers: list[OutputFile] = []
        self.instances_per_file = [0] * len(paths)
        self.published = False
        self._next_writer = 0  # Where the next task's first record goes.

    def __enter__(self) -> "Outputs":
        try:
            for output, temp in zip(self.paths, self.temp_files):
                try:
                    self.writers.append(OutputFile(temp))
                except (tf.errors.OpError, OSError) as e:
                    raise ValueError(f"--output_file={output!r} cannot be written: {e}") from None
        except BaseException:
            self._discard()
            raise
        return self

    def __exit__(self, *exc_info) -> None:
        self._discard()

    def write(self, result: ChunkResult) -> None:
        """Appends a task's records round-robin, continuing from the previous task.

        Group k of the result goes to `writers[(first + k) % len(writers)]`; a
        pool worker's records file is copied range by range (by the kernel
        where it can) and removed.
        """
        num_files, bounds, first = len(self.writers), result.group_bounds, self._next_writer
        source_fd = os.open(result.records_file, os.O_RDONLY) if result.records_file else None
        try:
            view = memoryview(result.records)
            for k in range(num_files):
                writer, size = self.writers[(first + k) % num_files], bounds[k + 1] - bounds[k]
                if size and source_fd is not None:
                    writer.copy_range(source_fd, bounds[k], size)
                elif size:
                    writer.write(view[bounds[k] : bounds[k + 1]])
                self.instances_per_file[(first + k) % num_files] += result.group_sizes[k]
        finally:
            if source_fd is not None:
                os.close(source_fd)
                os.remove(result.records_file)
        self._next_writer = (first + sum(result.group_sizes)) % num_files

    def close(self) -> None:
        """Closes the data files (a second call does nothing)."""
        for writer in self.writers:
            writer.close()

    def publish(self, metadata: dict[str, Any]) -> None:
        """Writes each file's sidecar, then renames the closed data files into place."""
        publish_outputs(self.paths, self.temp_files, self.instances_per_file, metadata)
        self.published = True

    def _discard(self) -> None:
        for writer in self.writers:
            try:
                writer.close()
            except Exception:  # pylint: disable=broad-except
                pass
        if not self.published:
            for temp in self.temp_files:
                if tf.io.gfile.exists(temp):
                    tf.io.gfile.remove(temp)


def publish_outputs(
    paths: Sequence[str], temp_files: Sequence[str], instances_per_file: Sequence[int],
    metadata: dict[str, Any],
) -> None:
    """Writes each output's sidecar, then renames its complete temporary file into place.

    Sidecars first: data that is in place always has its sidecar, so the
    trainer's checks never silently find none. On an error the sidecars of
    files not renamed yet are removed (the caller removes the temporary
    files).

    Args:
        paths: list of str. The output files.
        temp_files: list of str. Their complete data, under temporary names.
        instances_per_file: list of int. Records in each.
        metadata: dict. The run's metadata (`run_summary`); each sidecar adds
            `data_file`, `num_instances_in_file` and `bytes_in_file` (the
            trainer refuses a file whose size then differs: a copy cut short).
    """
    sidecars: dict[str, str] = {}
    try:
        for output, num, temp in zip(paths, instances_per_file, temp_files):
            sidecars[output] = write_metadata(
                output, {**metadata, "data_file": output, "num_instances_in_file": num,
                         "bytes_in_file": tf.io.gfile.stat(temp).length}
            )
        for output, temp in zip(paths, temp_files):
            tf.io.gfile.rename(temp, output, overwrite=True)
            del sidecars[output]  # In place with its data.
    except BaseException:
        for sidecar in sidecars.values():
            if tf.io.gfile.exists(sidecar):
                tf.io.gfile.remove(sidecar)
        raise


@dataclasses.dataclass
class Totals:
    """The running counts of a run: `counts` summed over tasks (documents of dupe 0 only), `line_counts` of dupe 0.

    Add each task's `ChunkResult` (or anything with its `dupe_index`,
    `counts` and `line_counts`) once, in any order.
    """

    counts: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(COUNT_KEYS, 0))
    line_counts: dict[str, int] = dataclasses.field(
        default_factory=lambda: {"lines": 0, "truncated_lines": 0}
    )

    def add(self, result: ChunkResult) -> None:
        for key, value in result.counts.items():
            if key != "documents" or result.dupe_index == 0:
                self.counts[key] += value
        if result.dupe_index == 0:
            for key, value in result.line_counts.items():
                self.line_counts[key] += value




def check_totals(config: GenerationConfig, totals: Totals) -> None:
    """Raises ValueError when a run made nothing to write: no text, or no instance.

    Args:
        config: `GenerationConfig`. The run's settings (named in the message).
        totals: `Totals`. The run's counts, every task added.
    """
    input_files = ",".join(config.input_files)
    if totals.counts["documents"] == 0:
        raise ValueError(
            f"--input_file={input_files!r} holds no text (after "
            f"{config.input_encoding} decoding and tokenization): nothing to write."
        )
    if totals.counts["instances"] == 0:
        raise ValueError(
            f"--input_file={input_files!r} gave no instances: documents are "
            f"too short for --next_sentence={config.options.next_sentence}."
        )


def run_summary(
    config: GenerationConfig,
    vocab_size: int,
    flags: dict[str, Any],
    input_bytes: int,
    totals: Totals,
    seconds: float,
    runner: str = LOCAL_RUNNER,
) -> dict[str, Any]:
    """The metadata of a run, as the sidecars hold it (without the per-file keys).

    Args:
        config: `GenerationConfig`. The run's settings.
        vocab_size: int. Tokens in the vocabulary.
        flags: dict. The flag values to record.
        input_bytes: int. Size of the input files.
        totals: `Totals`. The run's counts.
        seconds: float. Wall time of the run.
        runner: str. What ran the tasks: `"local"` (this process or its
            pool) or the Apache Beam runner's name. Defaults to "local".

    Returns:
        The dict each sidecar holds, without `data_file` and
        `num_instances_in_file`.
    """
    options, counts = config.options, totals.counts
    kind = tokenizer_class(config.vocab_file)
    return {
        "format": METADATA_FORMAT,
        "runner": runner,
        "max_seq_length": options.max_seq_length,
        "max_predictions_per_seq": options.max_predictions_per_seq,
        "next_sentence": options.next_sentence,
        "masking": options.masking,
        # The tokenizer: its kind, file, size and the hash of what its ids mean
        # (a vocab.txt's bytes; a tokenizer.json's tokens and merges), which
        # kbert-pretrain compares with the model's.
        "tokenizer_kind": kind.kind,
        "do_lower_case": config.do_lower_case if kind.lower_casing else None,
        "vocab_file": config.vocab_file,
        "vocab_sha256": tokenizer_sha256(config.vocab_file),
        "vocab_size": vocab_size,
        "input_files": list(config.input_files),
        "output_files": list(config.output_files),
        "chunk_bytes": config.chunk_bytes,
        "flags": flags,
        "counts": {
            "input_bytes": input_bytes,
            **totals.line_counts,
            **counts,
            "masked_fraction": counts["masked_tokens"] / max(1, counts["tokens"]),
            "random_next_fraction": (
                None
                if options.next_sentence == "none"
                else counts["random_next"] / max(1, counts["instances"])
            ),
        },
        "seconds": round(seconds, 3),
        "input_mb_per_s": round(input_bytes / 1e6 / max(seconds, 1e-9), 3),
    }
