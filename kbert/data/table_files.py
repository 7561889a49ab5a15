"""Users' labelled files: CSV, TSV, JSON lines and Parquet, read into rows that know their line.

The formats Hugging Face's `run_classification.py` and `run_ner.py` take, chosen
by extension: `.csv`, `.tsv`, `.jsonl` / `.json` (JSON lines; a `.json` file
holding one JSON array of objects is read too) and `.parquet`; the text formats
may be gzip-compressed (`train.csv.gz`). Every row keeps where it came from
(`train.csv:14`, `train.parquet row 3`) so that an error about it names the
file and line.

Which library reads what, and why:
- CSV and TSV: pyarrow's CSV reader (quoted fields with commas and newlines,
  doubled quotes, a UTF-8 byte-order mark, CRLF; C++, multi-threaded). Every
  column is read as text, so an id `007` or a text `42` stays as written; a
  label column's type is inferred afterwards by whoever reads labels
  (`infer_value`), as pandas infers it for Hugging Face.
- Parquet: pyarrow, with the file's own column types.
- JSON lines: the standard library's `json`, line by line through
  `kbert.files.iter_jsonl`: its errors give the line and column, and rows of
  one file may hold different types (an integer label here, a string there),
  which pyarrow's JSON reader refuses with no line number.

Example:

>>> table = kbert.data.read_table("tickets.csv")
>>> table.columns
('id', 'text', 'label')
>>> table.rows[0].source, table.rows[0].values["label"]
('tickets.csv:2', 'billing')
"""

from __future__ import annotations

import ast
import csv
import dataclasses
import io
import json
import os
from typing import Any
from typing import Iterator
from typing import Sequence

import tensorflow as tf

from kbert.files import iter_jsonl
from kbert.files import open_binary
from kbert.files import temporary_name

# Extension -> format. A text format may also end in `.gz`.
TABLE_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl",
                 ".parquet": "parquet"}
_DELIMITERS = {"csv": ",", "tsv": "\t"}
# Rows handed out at a time by `iter_table` (pyarrow reads CSV in blocks of this many bytes).
_BLOCK_BYTES = 1 << 24


@dataclasses.dataclass(frozen=True)
class TableRow:
    """One row of a user's file and where it is.

    Args:
        values: dict. Column name -> value (str for CSV and TSV cells; JSON's
            or Parquet's own types otherwise).
        source: str. `<file>:<line>` for CSV, TSV and JSON lines (the line the
            row starts on), `<file> row <n>` (1-based) for Parquet.
    """

    values: dict[str, Any]
    source: str


@dataclasses.dataclass(frozen=True)
class Table:
    """A whole file: its columns in file order and its rows.

    Args:
        path: str. The file.
        columns: tuple of str. Column names (for JSON lines: every key seen, in
            order of first appearance).
        rows: list of `TableRow`.
    """

    path: str
    columns: tuple[str, ...]
    rows: list[TableRow]


def table_format(path: str, flag: str = "file") -> str:
    """The format of a file by its extension: `csv`, `tsv`, `jsonl` or `parquet`.

    Args:
        path: str. The file; `.gz` after a text format's extension is allowed.
        flag: str. The flag that named the file, for the error.

    Returns:
        str. The format.

    Raises:
        ValueError: an extension kbert does not read; the message lists those it does.

    Example:

    >>> table_format("train.jsonl.gz")
    'jsonl'
    """
    base = path[:-3] if path.endswith(".gz") else path
    extension = os.path.splitext(base)[1].lower()
    form = TABLE_FORMATS.get(extension)
    if form is None or (form == "parquet" and base != path):
        known = ", ".join(sorted(TABLE_FORMATS))
        raise ValueError(f"--{flag}={path}: unknown file type {extension or '(none)'!r}; kbert "
                         f"reads {known} (text formats also gzip-compressed, e.g. train.csv.gz).")
    return form


def read_table(path: str, flag: str = "file") -> Table:
    """Reads a whole CSV, TSV, JSON lines or Parquet file.

    Args:
        path: str. The file (`gs://` works).
        flag: str. The flag that named it, for errors.

    Returns:
        `Table`.

    Raises:
        FileNotFoundError: no such file.
        ValueError: an unknown extension, a malformed row (its line named), or
            a file with no rows.

    Example:

    >>> read_table("train.jsonl").rows[0].values
    {'text': 'my card was charged twice', 'label': 'billing'}
    """
    columns: list[str] = []
    rows: list[TableRow] = []
    for batch_columns, batch in iter_table(path, flag):
        columns.extend(name for name in batch_columns if name not in columns)
        rows.extend(batch)
    if not rows:
        raise ValueError(f"--{flag}={path}: the file has no rows.")
    return Table(path, tuple(columns), rows)


def iter_table(path: str, flag: str = "file") -> Iterator[tuple[tuple[str, ...], list[TableRow]]]:
    """Streams a file in blocks of rows, for files larger than memory (`kbert-predict`).

    Args:
        path: str. The file (`gs://` works).
        flag: str. The flag that named it, for errors.

    Yields:
        `(columns, rows)`: the columns known so far and the next block of `TableRow`s,
        in file order.

    Raises:
        As `read_table`.
    """
    form = table_format(path, flag)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"--{flag}: file not found: {path}")
    if form == "jsonl":
        yield from _iter_json(path)
    elif form == "parquet":
        yield from _iter_parquet(path)
    else:
        yield from _iter_csv(path, _DELIMITERS[form])


def _read_bytes(path: str) -> bytes:
    with open_binary(path) as f:
        return f.read()


def _iter_csv(path: str, delimiter: str):
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    data = _read_bytes(path)
    parse = pa_csv.ParseOptions(delimiter=delimiter, newlines_in_values=True)
    read = pa_csv.ReadOptions(use_threads=False, block_size=_BLOCK_BYTES)
    try:
        names = pa_csv.open_csv(pa.BufferReader(data), parse_options=parse,
                                read_options=read).schema.names
        convert = pa_csv.ConvertOptions(column_types={name: pa.string() for name in names},
                                        strings_can_be_null=False)
        reader = pa_csv.open_csv(pa.BufferReader(data), parse_options=parse, read_options=read,
                                 convert_options=convert)
        line = 2  # the header is line 1
        for batch in reader:
            rows = batch.to_pylist()
            block = []
            for values in rows:
                block.append(TableRow(values, f"{path}:{line}"))
                # A quoted cell may span lines: the next row starts after them.
                line += 1 + sum(value.count("\n") for value in values.values())
            yield tuple(names), block
    except pa.ArrowInvalid as e:
        # pyarrow names the row ("Row #4", the header being row 1), not the line.
        raise ValueError(f"{path}: {e}".replace("Row #", "row ")) from None


def _iter_parquet(path: str):
    import pyarrow as pa
    import pyarrow.parquet as pa_parquet

    try:
        parquet = pa_parquet.ParquetFile(pa.BufferReader(_read_bytes(path)))
    except pa.ArrowInvalid as e:
        raise ValueError(f"{path}: not a Parquet file ({e}).") from None
    names = tuple(parquet.schema_arrow.names)
    number = 0
    for batch in parquet.iter_batches():
        block = []
        for values in batch.to_pylist():
            number += 1
            block.append(TableRow(values, f"{path} row {number}"))
        yield names, block


def _iter_json(path: str):
    with open_binary(path) as f:
        start = f.read(4096)
    if start.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"["):
        yield from _iter_json_array(path, _read_bytes(path))
        return
    columns: dict[str, None] = {}
    block = []
    for number, values in iter_jsonl(path):
        columns.update(dict.fromkeys(values))
        block.append(TableRow(values, f"{path}:{number}"))
        if len(block) == 4096:
            yield tuple(columns), block
            block = []
    yield tuple(columns), block


def _iter_json_array(path: str, data: bytes):
    try:
        values = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from None
    columns: dict[str, None] = {}
    block = []
    for number, row in enumerate(values, 1):
        if not isinstance(row, dict):
            raise ValueError(f"{path}: item {number} of the array is {type(row).__name__}, "
                             "expected an object with one field per column.")
        columns.update(dict.fromkeys(row))
        block.append(TableRow(row, f"{path} item {number}"))
    yield tuple(columns), block


def infer_value(value: Any) -> Any:
    """A CSV cell as the value it spells: int, float, a JSON list, or the text itself.

    What pandas (Hugging Face's CSV reader) would infer for one cell, plus a
    list for a multi-label cell: JSON (`["billing", "bug"]`) or Python's
    literal (`['billing', 'bug']`, what pandas' `to_csv` writes for a column
    of lists). Values that are not str (JSON lines, Parquet) are returned
    unchanged.

    Args:
        value: a cell.

    Returns:
        int, float, list or str (stripped).

    Example:

    >>> infer_value("3"), infer_value("0.5"), infer_value('["a", "b"]'), infer_value("spam")
    (3, 0.5, ['a', 'b'], 'spam')
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if text.startswith("[") and text.endswith("]"):
        for parse in (json.loads, ast.literal_eval):
            try:
                parsed = parse(text)
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
            if isinstance(parsed, list):
                return parsed
    return text


class TableWriter:
    """Writes rows as JSON lines or CSV (by extension), published atomically on `close`.

    Rows are written to a temporary sibling as they come and renamed into
    place when the writer closes without an error, so a killed run leaves no
    half-written file. In CSV, a value that is a list or a dict is written as
    JSON text in its cell; the header is the first row's keys.

    Args:
        path: str. The output file: `.jsonl` / `.json` or `.csv` / `.tsv`
            (`gs://` works).
        flag: str. The flag that named it, for the error.

    Example:

    >>> with TableWriter("predictions.jsonl") as writer:
    ...     writer.write([{"id": 1, "label": "billing", "score": 0.93}])
    """

    def __init__(self, path: str, flag: str = "output_file"):
        self.path = path
        self.form = table_format(path, flag)
        if self.form == "parquet" or path.endswith(".gz"):
            raise ValueError(f"--{flag}={path}: predictions are written as .jsonl or .csv "
                             "(or .tsv), uncompressed.")
        self._temporary = temporary_name(path)
        self._file = tf.io.gfile.GFile(self._temporary, "w")
        self._csv = None
        self._columns: list[str] | None = None

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        """Appends rows in order."""
        for row in rows:
            if self.form == "jsonl":
                self._file.write(json.dumps(row, ensure_ascii=False) + "\n")
            else:
                self._write_csv(row)

    def _write_csv(self, row: dict[str, Any]) -> None:
        if self._columns is None:
            self._columns = list(row)
            self._write_csv_line(self._columns)
        cells = [row.get(column) for column in self._columns]
        self._write_csv_line(["" if value is None else json.dumps(value, ensure_ascii=False)
                              if isinstance(value, (list, dict)) else value for value in cells])

    def _write_csv_line(self, cells: list) -> None:
        buffer = io.StringIO()
        csv.writer(buffer, delimiter=_DELIMITERS[self.form], lineterminator="\n").writerow(cells)
        self._file.write(buffer.getvalue())

    def close(self, publish: bool = True) -> None:
        """Closes the file; publishes it under `path` when `publish`, else removes it."""
        self._file.close()
        if publish:
            tf.io.gfile.rename(self._temporary, self.path, overwrite=True)
        elif tf.io.gfile.exists(self._temporary):
            tf.io.gfile.remove(self._temporary)

    def __enter__(self) -> "TableWriter":
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self.close(publish=kind is None)


def prediction_row(values: dict[str, Any], answers: dict[str, Any]) -> dict[str, Any]:
    """An output row of predictions: the input row's columns, in order, then the answers.

    An input column named as an answer (a gold `label` beside the predicted
    one) is carried as `input_<name>`, so that neither hides the other.

    Args:
        values: dict. The input row (`TableRow.values`).
        answers: dict. What the model answered for it.

    Returns:
        dict.

    Example:

    >>> prediction_row({"id": 7, "text": "refund me", "label": "billing"}, {"label": "bug"})
    {'id': 7, 'text': 'refund me', 'input_label': 'billing', 'label': 'bug'}
    """
    row = {(f"input_{name}" if name in answers else name): value for name, value in values.items()}
    row.update(answers)
    return row
