"""Atomic output for every kbert writer: a reader never sees half a file or directory.

Each writer builds its output under a temporary name beside the destination and
renames it into place only when it is complete, so a crash, a kill or a full disk
leaves the old file (or none), never a truncated one. Everything goes through
`tf.io.gfile`, so `gs://` paths work (on object stores a rename is a copy, so it
is complete-or-absent but not instantaneous).

This module is the floor below `kbert.layers`: any part of kbert may import it, and
it imports nothing of kbert.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from typing import Iterator

import tensorflow as tf


def temporary_name(path: str) -> str:
    """Returns a unique sibling name for `path` under which a writer fills it.

    Args:
        path: str. The final path.

    Returns:
        `<path>.<random>.incomplete`: unique, so two writers never share it,
        and ending in `.incomplete`, which readers that glob for data files
        skip (`kbert.data.pretraining.list_data_files`).
    """
    return f"{path}.{uuid.uuid4().hex[:8]}.incomplete"


def write_text(path: str, text: str | bytes) -> None:
    """Writes `text` to `path` atomically (temporary sibling, then rename).

    Args:
        path: str. Destination (`gs://` works). Its directory must exist.
        text: str or bytes. The whole content.

    Example:

    >>> kbert.files.write_text("out/eval_results.json", '{"accuracy": 0.9}\\n')
    """
    temporary = temporary_name(path)
    try:
        with tf.io.gfile.GFile(temporary, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
        tf.io.gfile.rename(temporary, path, overwrite=True)
    finally:
        _remove_if_present(temporary)


def copy_file(source: str, destination: str) -> None:
    """Copies `source` to `destination` atomically; a copy onto itself does nothing.

    Args:
        source: str. File to copy (`gs://` works).
        destination: str. Where it goes (`gs://` works).
    """
    if os.path.normpath(source) == os.path.normpath(destination):
        return
    temporary = temporary_name(destination)
    try:
        tf.io.gfile.copy(source, temporary, overwrite=True)
        tf.io.gfile.rename(temporary, destination, overwrite=True)
    finally:
        _remove_if_present(temporary)


@contextlib.contextmanager
def local_output(path: str) -> Iterator[str]:
    """Yields a local file path whose content is published to `path` on success.

    For writers that only write local files (Keras `.h5` and `.keras`): write
    to the yielded path; when the block ends without an exception the file is
    copied to `path` atomically, otherwise nothing is published.

    Args:
        path: str. The final destination (`gs://` works).

    Yields:
        A local path with the same base name, in a fresh temporary directory.

    Example:

    >>> with kbert.files.local_output("gs://bucket/run/encoder.weights.h5") as local:
    ...     encoder.save_weights(local)
    """
    with tempfile.TemporaryDirectory(prefix="kbert-") as directory:
        local = os.path.join(directory, os.path.basename(path))
        yield local
        copy_file(local, path)


@contextlib.contextmanager
def local_copy(path: str) -> Iterator[str]:
    """Yields a local copy of `path`, for readers that only read local files.

    Args:
        path: str. The file (`gs://` works).

    Yields:
        A local path holding the same bytes, removed after the block.

    Raises:
        FileNotFoundError: `path` does not exist.
    """
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"file not found: {path}")
    with tempfile.TemporaryDirectory(prefix="kbert-") as directory:
        local = os.path.join(directory, os.path.basename(path))
        tf.io.gfile.copy(path, local)
        yield local


def check_output_dir(output_dir: str, overwrite: bool = False) -> None:
    """Raises early if `output_dir` is empty, or exists and `overwrite` is False."""
    if not output_dir.rstrip("/"):
        raise ValueError("output_dir is empty; pass a directory path such as out/minilm.")
    if tf.io.gfile.exists(output_dir) and not overwrite:
        raise ValueError(
            f"output_dir {output_dir.rstrip('/')} already exists; choose a new directory or pass "
            "--overwrite (overwrite=True) to replace it."
        )


@contextlib.contextmanager
def atomic_directory(output_dir: str, overwrite: bool = False,
                     hidden: bool = False) -> Iterator[str]:
    """Yields a temporary sibling directory that becomes `output_dir` on success.

    Readers never see a half-written `output_dir`: files go to
    `<output_dir>.tmp-<pid>` (or, with `hidden`, `.<name>.tmp-<random>`),
    which is renamed to `output_dir` only when the block finishes without an
    exception, and removed otherwise. (On object stores such as `gs://`,
    directory renames copy and are not atomic.)

    Args:
        output_dir: str. The directory to create.
        overwrite: bool. Replace an existing `output_dir`. Defaults to False.
        hidden: bool. Give the temporary directory a name that starts with "."
            and is not a number, so that a model server polling the parent for
            numbered versions never looks at it. Defaults to False.

    Yields:
        The temporary directory to write into.

    Example:

    >>> with kbert.files.atomic_directory("out/minilm") as tmp:
    ...     kbert.checkpoints.save_pretrained(tmp, encoder)
    """
    check_output_dir(output_dir, overwrite)
    output_dir = output_dir.rstrip("/")
    parent = os.path.dirname(output_dir)
    if parent:
        tf.io.gfile.makedirs(parent)
    if hidden:
        temporary = os.path.join(parent, f".{os.path.basename(output_dir)}.tmp-{uuid.uuid4().hex[:8]}")
    else:
        temporary = f"{output_dir}.tmp-{os.getpid()}"
    if tf.io.gfile.exists(temporary):
        tf.io.gfile.rmtree(temporary)
    tf.io.gfile.makedirs(temporary)
    try:
        yield temporary
    except BaseException:
        tf.io.gfile.rmtree(temporary)
        raise
    if tf.io.gfile.exists(output_dir):
        old = f"{output_dir}.old-{os.getpid()}"
        tf.io.gfile.rename(output_dir, old, overwrite=True)
        tf.io.gfile.rename(temporary, output_dir)
        tf.io.gfile.rmtree(old)
    else:
        tf.io.gfile.rename(temporary, output_dir)


def _remove_if_present(path: str) -> None:
    try:
        if tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)
    except tf.errors.OpError:
        pass
