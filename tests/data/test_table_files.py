"""Users' labelled files: the same rows from CSV, TSV, JSON lines and Parquet, lines named."""

import csv
import gzip
import json
import os

import pyarrow as pa
import pyarrow.parquet as pa_parquet
import pytest

from kbert.data.table_files import TableWriter
from kbert.data.table_files import infer_value
from kbert.data.table_files import read_table
from kbert.data.table_files import table_format

ROWS = [
    {"id": "t-1", "text": "my card was charged twice, and \"again\" today", "label": "billing"},
    {"id": "t-2", "text": "the app crashes\non start-up", "label": "bug"},
    {"id": "t-3", "text": "Zürich office: 42 ☃", "label": "other"},
]


def _write_csv(path, rows, delimiter=",", **open_options):
    # Python's csv module writes the file: someone else's writer than the reader's pyarrow.
    with open(path, "w", newline="", **open_options) as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), delimiter=delimiter)
        writer.writeheader()
        writer.writerows(rows)


def _write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def test_the_same_rows_from_every_format(tmp_path):
    paths = {"csv": tmp_path / "a.csv", "tsv": tmp_path / "a.tsv", "jsonl": tmp_path / "a.jsonl",
             "parquet": tmp_path / "a.parquet", "gz": tmp_path / "a.csv.gz", "jsonl.gz": tmp_path / "a.jsonl.gz"}
    _write_csv(paths["csv"], ROWS, encoding="utf-8")
    _write_csv(paths["tsv"], ROWS, delimiter="\t", encoding="utf-8")
    _write_jsonl(paths["jsonl"], ROWS)
    pa_parquet.write_table(pa.Table.from_pylist(ROWS), paths["parquet"])
    paths["gz"].write_bytes(gzip.compress(paths["csv"].read_bytes()))
    paths["jsonl.gz"].write_bytes(gzip.compress(paths["jsonl"].read_bytes()))
    for form, path in paths.items():
        table = read_table(str(path))
        assert table.columns == ("id", "text", "label"), form
        assert [row.values for row in table.rows] == ROWS, form


def test_csv_lines_count_quoted_newlines_and_the_header(tmp_path):
    path = tmp_path / "a.csv"
    _write_csv(path, ROWS, encoding="utf-8")
    sources = [row.source for row in read_table(str(path)).rows]
    # Row 2 spans lines 3-4, so row 3 starts on line 5.
    assert sources == [f"{path}:2", f"{path}:3", f"{path}:5"]
    parquet = tmp_path / "a.parquet"
    pa_parquet.write_table(pa.Table.from_pylist(ROWS), parquet)
    assert read_table(str(parquet)).rows[2].source == f"{parquet} row 3"


def test_csv_keeps_text_as_written_with_a_byte_order_mark_and_crlf(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes("\ufeffid,text,label\r\n007,42,1\r\n008,\"a, b\",0\r\n".encode("utf-8"))
    table = read_table(str(path))
    assert table.columns == ("id", "text", "label")
    assert [row.values for row in table.rows] == [{"id": "007", "text": "42", "label": "1"},
                                                  {"id": "008", "text": "a, b", "label": "0"}]


def test_json_lines_name_their_line_and_a_json_array_is_read(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "a", "label": 1}\n\n{"text": "b", "label": "x", "extra": 2}\n')
    table = read_table(str(path))
    assert table.columns == ("text", "label", "extra")
    assert [row.source for row in table.rows] == [f"{path}:1", f"{path}:3"]
    array = tmp_path / "b.json"
    array.write_text(json.dumps(ROWS))
    assert [row.values for row in read_table(str(array)).rows] == ROWS
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a"}\n{"text": "b",}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not a JSON object"):
        read_table(str(bad))


def test_bad_files_are_named(tmp_path):
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("text,label\na,1\nb,2,3\n")
    with pytest.raises(ValueError, match=r"ragged.csv: CSV parse error: row 3: Expected 2 columns"):
        read_table(str(ragged))
    with pytest.raises(ValueError, match=r"--train_file=x.xlsx: unknown file type '.xlsx'; kbert "
                                         r"reads .csv, .json, .jsonl, .parquet, .tsv"):
        table_format("x.xlsx", "train_file")
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        read_table(str(tmp_path / "missing.csv"))
    empty = tmp_path / "empty.csv"
    empty.write_text("text,label\n")
    with pytest.raises(ValueError, match="empty.csv: the file has no rows"):
        read_table(str(empty))
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_text("text\n")
    with pytest.raises(ValueError, match="x.parquet: not a Parquet file"):
        read_table(str(not_parquet))


def test_infer_value_as_pandas_would_plus_json_lists():
    assert infer_value("3") == 3 and isinstance(infer_value(" 3 "), int)
    assert infer_value("0.25") == 0.25 and infer_value("1e-3") == 0.001
    assert infer_value('["a", "b"]') == ["a", "b"]
    assert infer_value("[not json") == "[not json"
    # pandas' to_csv writes a column of lists as Python literals.
    assert infer_value("['a', \"b's\"]") == ["a", "b's"] and infer_value("[]") == []
    assert infer_value("[1, 2") == "[1, 2" and infer_value("[a, b]") == "[a, b]"
    assert infer_value("spam ") == "spam"
    assert infer_value(7) == 7 and infer_value(["x"]) == ["x"]


def test_writer_publishes_on_success_only(tmp_path):
    rows = [{"id": 1, "labels": ["a", "b"], "probabilities": {"a": 0.5}}, {"id": 2, "labels": [],
                                                                           "probabilities": {}}]
    out = tmp_path / "p.csv"
    with TableWriter(str(out)) as writer:
        writer.write(rows)
    with open(out, newline="", encoding="utf-8") as f:
        read = list(csv.DictReader(f))
    assert read[0] == {"id": "1", "labels": '["a", "b"]', "probabilities": '{"a": 0.5}'}
    jsonl = tmp_path / "p.jsonl"
    with TableWriter(str(jsonl)) as writer:
        writer.write(rows)
    assert [json.loads(line) for line in jsonl.read_text().splitlines()] == rows
    failed = tmp_path / "failed.jsonl"
    with pytest.raises(RuntimeError):
        with TableWriter(str(failed)) as writer:
            writer.write(rows)
            raise RuntimeError("killed")
    assert sorted(os.listdir(tmp_path)) == ["p.csv", "p.jsonl"]
