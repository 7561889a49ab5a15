"""An output file that takes bytes, or byte ranges of another file copied by the kernel.

`create_pretraining_data`'s pool workers leave each task's TFRecords in a
temporary file, and the parent process appends them to the outputs: about
1 GB for 48 MB of text at dupe_factor 5. Reading them into Python and writing
them out again cost the parent ~2 CPU seconds there, time taken from the
workers on a machine whose cores they already fill. `os.copy_file_range`
moves the bytes inside the kernel instead. Neither `tf.io.gfile` nor a
library we use offers a range copy, so this small class does.
"""

from __future__ import annotations

import os

import tensorflow as tf

# Largest piece moved per system call on the fallback path.
_PIECE_BYTES = 16 << 20


class OutputFile:
    """A file open for writing: `write(data)` and `copy_range(source_fd, offset, size)`.

    Local paths are plain unbuffered files, and `copy_range` asks the kernel
    to copy (`os.copy_file_range`), falling back to reading and writing where
    the kernel or file system cannot (older kernels; some cross-file-system
    copies). Other paths (`gs://...`) are `tf.io.gfile.GFile`s, and ranges
    are read and written.

    Args:
        path: str. The file to create (truncated if it exists).

    Raises:
        OSError or tf.errors.OpError: the file cannot be created.

    Example:

    >>> out = OutputFile("all.tfrecord")
    >>> out.write(header)
    >>> with open("part.tfrecord", "rb") as part:
    ...     out.copy_range(part.fileno(), 0, os.path.getsize("part.tfrecord"))
    >>> out.close()
    """

    def __init__(self, path: str):
        self.path = path
        self._gfile = None
        self._file = None
        if "://" in path:
            self._gfile = tf.io.gfile.GFile(path, "wb")
            self._gfile.write(b"")  # GFile opens lazily: fail here, not mid-run.
        else:
            self._file = open(path, "wb", buffering=0)  # pylint: disable=consider-using-with
        self._kernel_copy = self._file is not None and hasattr(os, "copy_file_range")

    def write(self, data: bytes | memoryview) -> None:
        """Appends `data`."""
        if self._file is None:
            self._gfile.write(bytes(data))
            return
        view = memoryview(data)
        while view.nbytes:  # An unbuffered write may take only part.
            view = view[self._file.write(view) :]

    def copy_range(self, source_fd: int, offset: int, size: int) -> None:
        """Appends `size` bytes of the open file `source_fd` from `offset` (its position is kept)."""
        while size > 0 and self._kernel_copy:
            try:
                copied = os.copy_file_range(source_fd, self._file.fileno(), size, offset)
            except OSError:
                self._kernel_copy = False  # The generic path below copies the rest.
                break
            if copied == 0:
                raise OSError(f"{self.path}: source ended {size} bytes early at offset {offset}")
            offset, size = offset + copied, size - copied
        while size > 0:
            piece = os.pread(source_fd, min(size, _PIECE_BYTES), offset)
            if not piece:
                raise OSError(f"{self.path}: source ended {size} bytes early at offset {offset}")
            self.write(piece)
            offset, size = offset + len(piece), size - len(piece)

    def close(self) -> None:
        """Closes the file; a second call does nothing."""
        if self._gfile is not None:
            self._gfile.close()
        if self._file is not None:
            self._file.close()
