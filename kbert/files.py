"""File I/O every part of kbert shares: atomic output, and JSON input that names its file.

Each writer builds its output under a temporary name beside the destination and
renames it into place only when it is complete, so a crash, a kill or a full disk
leaves the old file (or none), never a truncated one. Everything goes through
`tf.io.gfile`, so `gs://` paths work (on object stores a rename is a copy, so it
is complete-or-absent but not instantaneous).

Each JSON reader goes through `read_json` (one JSON document) or `iter_jsonl`
(JSON Lines of objects), whose errors name the file, the line and the position.

This module is the floor below `kbert.layers`: any part of kbert may import it, and
it imports nothing of kbert.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import tempfile
import uuid
from typing import Any
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


def read_json(path: str, what: str | None = None) -> Any:
    """Reads one JSON file (UTF-8) through `tf.io.gfile`, naming the file in every error.

    Args:
        path: str. The file (`gs://` works).
        what: str, optional. What the file is, for the not-found message
            (`"bert_config.json"`, `"SQuAD file"`). Defaults to "file".

    Returns:
        The decoded value (a dict for every kbert file; callers check the type).

    Raises:
        FileNotFoundError: `path` does not exist ("bert_config.json not found: <path>").
        ValueError: the file is not UTF-8 or not valid JSON; the message gives
            the position json reports ("<path>: not valid JSON: Expecting ','
            delimiter: line 3 column 5 (char 40)").

    Example:

    >>> kbert.files.read_json("minilm/bert_config.json", "bert_config.json")["hidden_size"]
    384
    """
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            data = f.read()
    except tf.errors.NotFoundError:
        raise FileNotFoundError(f"{what or 'file'} not found: {path}") from None
    try:
        # Strict UTF-8 as json.load over a text file read it: a byte-order mark
        # stays an error ("Unexpected UTF-8 BOM"), as it was before this helper.
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}).") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from None


def read_text(path: str) -> str:
    """Reads a whole UTF-8 text file through `tf.io.gfile`, naming the line of a bad byte.

    A UTF-8 byte-order mark at the start is dropped (GLUE's MRPC files have one).

    Args:
        path: str. The file (`gs://` works).

    Returns:
        str: the text.

    Raises:
        ValueError: a byte that is not UTF-8; the message starts `<path>:<line>:`
            ("train.tsv:12: not UTF-8 text (invalid start byte 0xff at column 8)").

    Example:

    >>> kbert.files.read_text("glue/SST-2/dev.tsv").split("\n")[0]
    'sentence\tlabel'
    """
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line_start = data.rfind(b"\n", 0, e.start) + 1
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(
            f"{path}:{line}: not UTF-8 text ({e.reason} 0x{data[e.start]:02x} at column "
            f"{e.start - line_start + 1}); convert the file to UTF-8 (iconv -f latin1 -t utf-8)."
        ) from None


def iter_jsonl(path: str, errors: str = "strict") -> Iterator[tuple[int, dict]]:
    """Streams the objects of a JSON Lines file with their 1-based line numbers.

    Blank lines (whitespace only) are skipped; a UTF-8 byte-order mark before
    the first line is ignored (editors on Windows write one). Every other line
    must hold one JSON object. A path ending in `.gz` is read through gzip.

    Args:
        path: str. The file (`gs://` works).
        errors: str. How bytes that are not UTF-8 are decoded, as in
            `bytes.decode`: "strict" (an error naming the line) or "replace"
            (U+FFFD). Defaults to "strict".

    Yields:
        `(line_number, value)` for each non-blank line; `value` is a dict.

    Raises:
        FileNotFoundError: `path` does not exist ("file not found: <path>").
        ValueError: a line that is not UTF-8 (with `errors="strict"`), not
            JSON, or not an object; the message starts `<path>:<line>:` and
            gives the column json reports ("corpus.jsonl:12: not a JSON
            object: Expecting ',' delimiter at column 30.").

    Example:

    >>> for number, row in kbert.files.iter_jsonl("beir/scifact/corpus.jsonl"):
    ...     print(number, row["_id"])
    """
    try:
        with open_binary(path) as f:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8", errors)
                except UnicodeDecodeError as e:
                    raise ValueError(f"{path}:{number}: not UTF-8 text ({e.reason} at byte "
                                     f"{e.start}); pass errors='replace' to read such text.") from None
                text = line.strip()
                if not text:
                    continue
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as e:
                    # Columns count from the line as written, before the strip.
                    column = e.colno + len(line) - len(line.lstrip())
                    raise ValueError(f"{path}:{number}: not a JSON object: {e.msg} at column "
                                     f"{column}.") from None
                if not isinstance(value, dict):
                    raise ValueError(f"{path}:{number}: expected a JSON object, got "
                                     f"{type(value).__name__}.")
                yield number, value
    except tf.errors.NotFoundError:
        raise FileNotFoundError(f"file not found: {path}") from None


@contextlib.contextmanager
def open_binary(path: str) -> Iterator[Any]:
    """Opens `path` for reading bytes through `tf.io.gfile`, through gzip when it ends in `.gz`.

    Args:
        path: str. The file (`gs://` works).

    Yields:
        A binary file object (iterating it gives lines).

    Raises:
        tf.errors.NotFoundError: no such file.
    """
    with tf.io.gfile.GFile(path, "rb") as f:
        if path.endswith(".gz"):
            with gzip.GzipFile(fileobj=f) as unzipped:
                yield unzipped
        else:
            yield f


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
