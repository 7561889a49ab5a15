"""Users' classification files: text columns and a label column, each row knowing its line.

Any file `kbert.data.table_files` reads (CSV, TSV, JSON lines, Parquet;
gzip-compressed text), with Hugging Face `run_classification.py`'s column
flags: `--text_column_names=a` or `a,b` (default `text`, or
`sentence1,sentence2` when the file has those and no `text`) and `--label_column_name`
(default `label`). A label is kept as the file spells it (CSV cells as
`infer_value` reads them: `3`, `0.5`, `["a", "b"]`); what kind of problem the
labels make is decided once the whole training file is read
(`kbert.tasks.classification.labels`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from kbert.data.table_files import Table
from kbert.data.table_files import infer_value
from kbert.data.table_files import read_table
from kbert.data.table_files import table_format

DEFAULT_LABEL_COLUMN = "label"
# The text columns taken when none are named: `text`, else the pair `sentence1`, `sentence2`.
DEFAULT_TEXT_COLUMNS = (("text",), ("sentence1", "sentence2"))


@dataclasses.dataclass(frozen=True)
class ClassificationExample:
    """One text (or text pair) and its label, as a user's file gives them.

    Args:
        text: str. The (first) text.
        text_pair: str or None. The second text of a pair.
        label: the label as written (str, int, float, or a list of labels for
            multi-label), or None when the row has none (a file to predict).
        source: str. Where it came from (`train.csv:14`), named in errors.
        row: dict or None. The whole input row, carried into prediction files.
    """

    text: str
    text_pair: str | None
    label: Any
    source: str
    row: dict | None = dataclasses.field(default=None, compare=False, repr=False)


def text_columns_of(table_columns: Sequence[str], wanted: Sequence[str] | None,
                    where: str) -> tuple[str, ...]:
    """The text columns to read: those named (all present), else the default the file has.

    Args:
        table_columns: sequence of str. The file's columns.
        wanted: sequence of str or None. `--text_column_names`, or what the task recorded.
        where: str. The file (and flag), for errors.

    Returns:
        tuple of one or two column names.

    Raises:
        ValueError: a named column is missing, or none of the defaults is
            there; the message lists the columns found.
    """
    found = ", ".join(table_columns)
    if wanted:
        if not 1 <= len(wanted) <= 2:
            raise ValueError(f"--text_column_names={','.join(wanted)}: give one text column, or "
                             "two for text pairs.")
        missing = [name for name in wanted if name not in table_columns]
        if missing:
            raise ValueError(f"{where}: no text column {missing[0]!r}; the columns found are "
                             f"{found}. Name yours with --text_column_names.")
        return tuple(wanted)
    for columns in DEFAULT_TEXT_COLUMNS:
        if all(name in table_columns for name in columns):
            return columns
    raise ValueError(f"{where}: no text column 'text' (nor 'sentence1' and 'sentence2'); the "
                     f"columns found are {found}. Name yours with --text_column_names=a "
                     "(or a,b for text pairs).")


def read_classification_file(path: str, flag: str, text_columns: Sequence[str] | None,
                             label_column: str | None, labels_required: bool = True
                             ) -> tuple[list[ClassificationExample], tuple[str, ...]]:
    """Reads a user's file into examples, naming the file and line of any bad row.

    Args:
        path: str. The file.
        flag: str. The flag that named it (`train_file`), for errors.
        text_columns: sequence of str or None. The text columns (None: the default).
        label_column: str or None. The label column (None: `label`).
        labels_required: bool. Every row must have a label (training and dev
            files); else a file without the label column reads unlabelled.

    Returns:
        `(examples, text_columns)`: the examples in file order and the text
        columns read.

    Raises:
        ValueError: an unknown extension, a missing column (the columns found
            are listed), an empty or missing label cell, a text that is not a
            string.

    Example:

    >>> examples, columns = read_classification_file("tickets.csv", "train_file", None, None)
    >>> examples[0].label, columns
    ('billing', ('text',))
    """
    table = read_table(path, flag)
    where = f"--{flag}={path}"
    columns = text_columns_of(table.columns, text_columns, where)
    label_column = label_column or DEFAULT_LABEL_COLUMN
    if label_column not in table.columns:
        if labels_required:
            raise ValueError(f"{where}: no label column {label_column!r}; the columns found are "
                             f"{', '.join(table.columns)}. Name yours with --label_column_name.")
        label_column = None
    return _examples(table, columns, label_column), columns


def _examples(table: Table, columns: tuple[str, ...],
              label_column: str | None) -> list[ClassificationExample]:
    spelled_as_text = table_format(table.path) in ("csv", "tsv")
    examples = []
    for row in table.rows:
        texts = [text_value(row.values.get(name), name, row.source) for name in columns]
        label = None
        if label_column is not None:
            label = read_label(row.values.get(label_column), label_column, row.source,
                               spelled_as_text)
        examples.append(ClassificationExample(texts[0], texts[1] if len(texts) > 1 else None,
                                              label, row.source, row.values))
    return examples


def read_label(value: Any, column: str, source: str, spelled_as_text: bool = False) -> Any:
    """One label cell as its value: refused when missing or empty.

    Args:
        value: the cell.
        column: str. The label column, for the error.
        source: str. The row (`train.csv:14`), for the error.
        spelled_as_text: bool. The cell is CSV/TSV text, read as
            `kbert.data.table_files.infer_value` reads it (`3`, `0.5`, a list).

    Returns:
        The label.

    Raises:
        ValueError: naming the row.
    """
    if spelled_as_text:
        value = infer_value(value)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ValueError(f"{source}: the label cell ({column!r}) is "
                         f"{'missing' if value is None else 'empty'}; every row needs a label.")
    return value


def text_value(value: Any, name: str, source: str) -> str:
    """One text cell, refused unless it is a string (a missing cell included)."""
    if not isinstance(value, str):
        what = "missing" if value is None else f"a {type(value).__name__} ({value!r:.40})"
        raise ValueError(f"{source}: the text column {name!r} is {what}; expected a string.")
    return value
