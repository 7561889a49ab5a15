"""Reading raw text corpora: file patterns, encodings, documents.

The pre-training input format is google-research/bert's: one sentence per line
and a blank line between documents. kbert also starts a new document at every
file boundary (the original runs documents on across files when a file does not
end in a blank line).
"""

from __future__ import annotations

import codecs
import dataclasses
import re
from collections.abc import Iterable
from collections.abc import Iterator
from typing import Sequence

import tensorflow as tf

# A longer line is cut to this many characters. A segment never contributes more
# than max_seq_length tokens to an instance, so nothing useful is lost, and
# tokenizing a line of megabytes would hold up a worker for no gain.
MAX_LINE_CHARS = 1 << 16
READ_BLOCK_BYTES = 1 << 22


def expand_file_patterns(patterns: str | Sequence[str], flag_name: str = "input_file") -> list[str]:
    """Expands comma-separated file names and globs into a list of files.

    Args:
        patterns: str or list of str. File names or globs, comma-separated in a
            str. `gs://` and other `tf.io.gfile` schemes work.
        flag_name: str. The flag named in error messages. Defaults to
            `"input_file"`.

    Returns:
        The files, each pattern's matches sorted, in pattern order, without
        duplicates.

    Raises:
        ValueError: if no pattern is given or a pattern matches no file.

    Example:

    >>> kbert.data.expand_file_patterns("corpus/*.txt,extra.txt")
    """
    if isinstance(patterns, str):
        patterns = patterns.split(",")
    patterns = [p.strip() for p in patterns if p and p.strip()]
    if not patterns:
        raise ValueError(f"--{flag_name} is empty; pass a file name, glob or comma-separated list.")
    files: list[str] = []
    for pattern in patterns:
        matches = sorted(tf.io.gfile.glob(pattern))
        matches = [m for m in matches if not tf.io.gfile.isdir(m)]
        if not matches:
            raise ValueError(f"--{flag_name}: no file matches {pattern!r}.")
        for match in matches:
            if match not in files:
                files.append(match)
    return files


def iter_lines(
    path: str, encoding: str = "utf-8", max_line_chars: int = MAX_LINE_CHARS
) -> Iterator[tuple[int, str, bool, int]]:
    """Yields the stripped lines of a text file.

    Lines end in LF or CRLF. Decoding is strict so that a wrong encoding is
    reported instead of silently garbling text.

    Args:
        path: str. The file (any `tf.io.gfile` path).
        encoding: str. Python codec name, e.g. `"utf-8"` or `"latin-1"`.
            Defaults to `"utf-8"`.
        max_line_chars: int. Longer lines are cut to this many characters.

    Yields:
        `(line_number, text, truncated, num_bytes)`: 1-based line number,
        the line without surrounding whitespace, whether it was cut, and its
        size in the file.

    Raises:
        ValueError: naming the file and line when a line does not decode.
    """
    codecs.lookup(encoding)  # Fails early with LookupError on a bad codec name.
    line_number = 0
    for raw in _iter_raw_lines(path):
        line_number += 1
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError as e:
            raise ValueError(
                f"{path}:{line_number}: not valid {encoding} ({e.reason} at byte "
                f"{e.start} of the line); pass --input_encoding=latin-1 (or the "
                "file's encoding) or fix the file."
            ) from None
        truncated = len(text) > max_line_chars
        if truncated:
            text = text[:max_line_chars]
        yield line_number, text.strip(), truncated, len(raw)


class NonBlankLines:
    """The stripped, non-blank lines of text files, in order, counted as they are read.

    An iterable for a consumer that wants only the texts (a tokenizer trainer's
    `train_from_iterator`) while the caller still reports how many there were.
    Each pass reads the files again (`iter_lines`: strict decoding, long lines
    cut) and counts from zero.

    Args:
        files: sequence of str. The files, read one after the other.
        encoding: str. Python codec name. Defaults to `"utf-8"`.

    Attributes:
        count: int. Non-blank lines yielded by the latest pass.

    Example:

    >>> lines = NonBlankLines(["corpus.txt"], "utf-8")
    >>> tokenizer.train_from_iterator(lines, trainer=trainer)
    >>> lines.count
    12345
    """

    def __init__(self, files: Sequence[str], encoding: str = "utf-8"):
        self.files = list(files)
        self.encoding = encoding
        self.count = 0

    def __iter__(self) -> Iterator[str]:
        self.count = 0
        for path in self.files:
            for _, text, _, _ in iter_lines(path, self.encoding):
                if text:
                    self.count += 1
                    yield text


def _iter_raw_lines(path: str, block_bytes: int = READ_BLOCK_BYTES) -> Iterator[bytes]:
    """The lines of a file as bytes, each with its b"\\n" (the last may lack it).

    Reads blocks: `GFile.readline` costs microseconds a line, which adds up
    to seconds per 100k lines.
    """
    with tf.io.gfile.GFile(path, "rb") as reader:
        partial = b""
        while True:
            block = reader.read(block_bytes)
            if not block:
                break
            lines = (partial + block).split(b"\n") if partial else block.split(b"\n")
            partial = lines.pop()
            for line in lines:
                yield line + b"\n"
        if partial:
            yield partial


# A blank line: only ASCII whitespace between two line ends. Chunks are cut
# after one so that documents stay whole.
_BLANK_LINE = re.compile(rb"\n[ \t\r\f\v]*\n")


@dataclasses.dataclass
class TextPiece:
    """A run of whole lines of one file, as raw bytes.

    Args:
        path: str. The file.
        offset: int. Byte offset of `data` in the file.
        first_line: int or None. 1-based line number of the first line of
            `data`; None when not counted (`read_line_range`), in which case
            an error message counts it (`line_number`).
        data: bytes or None. The raw bytes (undecoded); None until read.
        length: int. Size of `data` in bytes.
    """

    path: str
    offset: int
    first_line: int | None
    length: int
    data: bytes | None = None

    def read(self) -> bytes:
        """Returns `data`, reading it from the file when it is not held."""
        if self.data is not None:
            return self.data
        with tf.io.gfile.GFile(self.path, "rb") as reader:
            reader.seek(self.offset)
            return reader.read(self.length)

    def without_data(self) -> "TextPiece":
        return dataclasses.replace(self, data=None)

    def line_number(self, position: int, data: bytes) -> int:
        """The 1-based line number in the file of byte `position` of `data` (this piece's bytes)."""
        first_line = self.first_line
        if first_line is None:  # Only error messages need it: count the lines before the piece.
            first_line, remaining = 1, self.offset
            with tf.io.gfile.GFile(self.path, "rb") as reader:
                while remaining > 0:
                    block = reader.read(min(READ_BLOCK_BYTES, remaining))
                    if not block:
                        break
                    first_line += block.count(b"\n")
                    remaining -= len(block)
        return first_line + data.count(b"\n", 0, position)


def _cut_point(block: bytes) -> int:
    """Where to end a piece in `block`: after its last blank line, else after its last line end."""
    for tail in (1 << 12, 1 << 16, len(block)):
        last = None
        for last in _BLANK_LINE.finditer(block, max(0, len(block) - tail)):
            pass
        if last is not None:
            return last.end()
        if tail >= len(block):
            break
    return block.rfind(b"\n") + 1


def iter_text_pieces(path: str, piece_bytes: int) -> Iterator[TextPiece]:
    """Cuts a file into pieces of about `piece_bytes` that end after a blank line.

    A piece ends after the last blank line of its ~`piece_bytes`, so
    documents stay whole; where there is none (a document longer than
    `piece_bytes`), after the last line end, which splits that document. A
    line longer than `piece_bytes` makes its piece longer.

    Args:
        path: str. The file (any `tf.io.gfile` path).
        piece_bytes: int. Target size of a piece.

    Yields:
        `TextPiece`s with `data`, in file order, covering the whole file.
    """
    offset, line = 0, 1
    pending = b""
    with tf.io.gfile.GFile(path, "rb") as reader:
        while True:
            block = reader.read(max(piece_bytes - len(pending), 1))
            buffer = pending + block if pending else block
            if not block:
                if buffer:
                    yield TextPiece(path, offset, line, len(buffer), buffer)
                return
            if len(buffer) < piece_bytes:
                pending = buffer
                continue
            cut = _cut_point(buffer)
            if cut == 0:  # One line longer than piece_bytes: read on to its end.
                parts = [buffer]
                while True:
                    more = reader.read(piece_bytes)
                    newline = more.find(b"\n")
                    if newline >= 0:
                        cut = sum(len(p) for p in parts) + newline + 1
                    parts.append(more)
                    if not more or newline >= 0:
                        break
                buffer = b"".join(parts)
                cut = cut or len(buffer)
            data, pending = buffer[:cut], buffer[cut:]
            yield TextPiece(path, offset, line, len(data), data)
            offset += len(data)
            line += data.count(b"\n")


def iter_text_chunks(files: Sequence[str], chunk_bytes: int) -> Iterator[list[TextPiece]]:
    """Groups the pieces of files (`iter_text_pieces`) into chunks of about `chunk_bytes`.

    Args:
        files: list of str. Text files, read in this order.
        chunk_bytes: int. Target chunk size.

    Yields:
        Lists of `TextPiece`s (with `data`); a chunk holds whole pieces, each
        piece lies in one file, and every file boundary is a piece boundary.
    """
    pieces = (piece for path in files for piece in iter_text_pieces(path, chunk_bytes))
    yield from group_pieces(pieces, chunk_bytes)


def group_pieces(pieces: Iterable[TextPiece], chunk_bytes: int) -> Iterator[list[TextPiece]]:
    """Groups pieces, in order, into chunks that end once they hold `chunk_bytes` or more.

    The grouping `iter_text_chunks` applies, apart from the reading: a runner
    that cuts each file into pieces on its own (an Apache Beam pipeline, one
    file per worker) groups the pieces of all files here and gets the same
    chunks.

    Args:
        pieces: iterable of `TextPiece`. The pieces of the files in reading order.
        chunk_bytes: int. Target chunk size.

    Yields:
        Lists of consecutive pieces.

    Example:

    >>> pieces = [p.without_data() for p in text_files.iter_text_pieces("a.txt", 1 << 20)]
    >>> chunks = list(text_files.group_pieces(pieces, 1 << 20))
    """
    chunk: list[TextPiece] = []
    size = 0
    for piece in pieces:
        chunk.append(piece)
        size += piece.length
        if size >= chunk_bytes:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def read_line_range(path: str, start: int, end: int) -> TextPiece | None:
    """The whole lines of a file that start in bytes `[start, end)`.

    Consecutive ranges give every line of the file exactly once, so a file
    can be read by many workers at once, each from its own byte range (the
    rule of Hadoop's and Beam's text sources). A line belongs to the range
    its first byte is in; the last one is read to its end.

    Args:
        path: str. The file (any `tf.io.gfile` path).
        start: int. First byte of the range.
        end: int. Byte after the range.

    Returns:
        A `TextPiece` with `data` and `first_line=None` (not counted), or
        None when no line starts in the range.

    Example:

    >>> size = tf.io.gfile.stat("a.txt").length
    >>> pieces = [text_files.read_line_range("a.txt", s, s + 1000) for s in range(0, size, 1000)]
    """
    with tf.io.gfile.GFile(path, "rb") as reader:
        begin = 0
        if start > 0:
            reader.seek(start - 1)  # The first line starts after the first b"\n" from start - 1 on.
            newline = _read_to_newline(reader)
            if not newline or not newline.endswith(b"\n"):
                return None
            begin = start - 1 + len(newline)
        if begin >= end:
            return None
        reader.seek(begin)
        data = reader.read(end - begin)
        if data and not data.endswith(b"\n"):
            data += _read_to_newline(reader)
    if not data:
        return None
    return TextPiece(path, begin, None, len(data), data)


def _read_to_newline(reader, block_bytes: int = 1 << 16) -> bytes:
    """Reads up to and including the next b"\n" (or to the end of the file)."""
    parts = []
    while True:
        block = reader.read(block_bytes)
        newline = block.find(b"\n")
        if newline >= 0:
            parts.append(block[: newline + 1])
            return b"".join(parts)
        parts.append(block)
        if not block:
            return b"".join(parts)


def decode_piece(piece: TextPiece, data: bytes, encoding: str) -> bytes:
    """Checks and converts a piece's bytes to UTF-8.

    Args:
        piece: `TextPiece`. Names the file and line in errors.
        data: bytes. The piece's raw bytes.
        encoding: str. Codec of the file.

    Returns:
        The text as UTF-8 bytes (`data` itself when it is ASCII or valid
        UTF-8 already).

    Raises:
        ValueError: naming file and line when the bytes do not decode.
    """
    if data.isascii():
        return data
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as e:
        line_start = data.rfind(b"\n", 0, e.start) + 1
        line_number = piece.line_number(e.start, data)
        raise ValueError(
            f"{piece.path}:{line_number}: not valid {encoding} ({e.reason} at byte "
            f"{e.start - line_start} of the line); pass --input_encoding=latin-1 (or the "
            "file's encoding) or fix the file."
        ) from None
    if codecs.lookup(encoding).name == "utf-8":
        return data
    return text.encode("utf-8")


# A sentence ends at ".", "!" or "?" (closing quotes and brackets included) before white space.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+")


def split_sentences(text: str) -> list[str]:
    """Splits a paragraph into sentences for the corpus format (one sentence a line).

    A rule, not a model (abbreviations such as "Mr." end a sentence too): the
    pre-training data tool fills each instance with consecutive lines up to
    `max_seq_length`, so a sentence cut in two costs little. Line breaks
    inside `text` are white space.

    Args:
        text: str. A paragraph.

    Returns:
        Its sentences, stripped, without empty ones.

    Example:

    >>> kbert.data.split_sentences("It rained. Did it? Yes!")
    ['It rained.', 'Did it?', 'Yes!']
    """
    text = " ".join(text.split())
    sentences, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        sentences.append(text[start:match.end()].strip())
        start = match.end()
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]
