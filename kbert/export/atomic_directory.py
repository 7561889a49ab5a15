"""Writing an output directory all at once: build beside it, then rename."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import tensorflow as tf


@contextlib.contextmanager
def atomic_directory(output_dir: str, overwrite: bool = False) -> Iterator[str]:
    """Yields a temporary sibling directory that becomes `output_dir` on success.

    Readers never see a half-written `output_dir`: files go to
    `<output_dir>.tmp-<pid>`, which is renamed to `output_dir` only when the
    block finishes without an exception, and removed otherwise. (On object
    stores such as `gs://`, directory renames copy and are not atomic.)

    Args:
        output_dir: str. The directory to create.
        overwrite: bool. Replace an existing `output_dir`. Defaults to False.

    Yields:
        The temporary directory to write into.

    Example:

    >>> with atomic_directory("out/minilm") as tmp:
    ...     kbert.models.save_pretrained(tmp, encoder)
    """
    output_dir = output_dir.rstrip("/")
    if not output_dir:
        raise ValueError("output_dir is empty; pass a directory path such as out/minilm.")
    if tf.io.gfile.exists(output_dir) and not overwrite:
        raise ValueError(
            f"output_dir {output_dir} already exists; choose a new directory or pass "
            "--overwrite (overwrite=True) to replace it."
        )
    parent = os.path.dirname(output_dir)
    if parent:
        tf.io.gfile.makedirs(parent)
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
