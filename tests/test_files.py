"""kbert.files: every writer's output appears whole or not at all; JSON readers name file and line."""

import os

import pytest

from kbert import files


def test_write_text_replaces_whole_and_leaves_no_temporary(tmp_path):
    path = str(tmp_path / "eval_results.json")
    files.write_text(path, "old\n")
    files.write_text(path, "new\n")
    assert open(path).read() == "new\n"
    files.write_text(path, b"\xffbytes")
    assert open(path, "rb").read() == b"\xffbytes"
    assert os.listdir(tmp_path) == ["eval_results.json"]
    assert files.temporary_name(path).endswith(".incomplete")


def test_write_text_into_a_missing_directory_fails_and_leaves_nothing(tmp_path):
    with pytest.raises(Exception):
        files.write_text(str(tmp_path / "missing" / "a.txt"), "x")
    assert os.listdir(tmp_path) == []


def test_copy_file_and_copy_onto_itself(tmp_path):
    source = tmp_path / "vocab.txt"
    source.write_text("[PAD]\n")
    files.copy_file(str(source), str(tmp_path / "copy.txt"))
    files.copy_file(str(source), str(source))
    assert sorted(os.listdir(tmp_path)) == ["copy.txt", "vocab.txt"]
    assert (tmp_path / "copy.txt").read_text() == "[PAD]\n"


def test_local_output_publishes_only_on_success(tmp_path):
    target = str(tmp_path / "weights.h5")
    with pytest.raises(RuntimeError):
        with files.local_output(target) as local:
            open(local, "w").write("half")
            raise RuntimeError("killed while writing")
    assert os.listdir(tmp_path) == []
    with files.local_output(target) as local:
        open(local, "w").write("whole")
    assert open(target).read() == "whole"
    with files.local_copy(target) as local:
        assert open(local).read() == "whole" and local != target
    with pytest.raises(FileNotFoundError, match="nope.h5"):
        with files.local_copy(str(tmp_path / "nope.h5")):
            pass


@pytest.mark.parametrize("hidden", [False, True])
def test_atomic_directory_renames_on_success_and_removes_on_failure(tmp_path, hidden):
    output = str(tmp_path / "7")
    with pytest.raises(ValueError, match="boom"):
        with files.atomic_directory(output, hidden=hidden) as temporary:
            open(os.path.join(temporary, "saved_model.pb"), "w").write("half")
            if hidden:
                assert os.path.basename(temporary).startswith(".7.tmp-")
            raise ValueError("boom")
    assert os.listdir(tmp_path) == []
    with files.atomic_directory(output, hidden=hidden) as temporary:
        open(os.path.join(temporary, "saved_model.pb"), "w").write("whole")
    assert os.listdir(tmp_path) == ["7"] and os.listdir(output) == ["saved_model.pb"]
    with pytest.raises(ValueError, match="already exists"):
        with files.atomic_directory(output):
            pass
    with files.atomic_directory(output, overwrite=True) as temporary:
        open(os.path.join(temporary, "other"), "w").write("x")
    assert os.listdir(output) == ["other"] and os.listdir(tmp_path) == ["7"]


# ---- read_json / iter_jsonl ----

def test_read_json_returns_the_value_and_names_the_file_and_position(tmp_path):
    path = tmp_path / "bert_config.json"
    path.write_text('{"hidden_size": 32}\n')
    assert files.read_json(str(path)) == {"hidden_size": 32}
    path.write_text('{\n  "hidden_size": 32\n  "num_layers": 2\n}\n')
    with pytest.raises(ValueError, match=r"bert_config\.json: not valid JSON: Expecting ',' delimiter: "
                                         r"line 3 column 3 \(char 24\)$"):
        files.read_json(str(path))
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ValueError, match=r"bert_config\.json: not UTF-8 text \(invalid start byte at byte 7\)"):
        files.read_json(str(path))


def test_read_json_keeps_refusing_a_byte_order_mark(tmp_path):
    # json.load over a text file refused one before this helper; so does it now, naming the file.
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf{}")
    with pytest.raises(ValueError, match=r"config\.json: not valid JSON: Unexpected UTF-8 BOM"):
        files.read_json(str(path))


def test_read_json_missing_file_names_what_and_path(tmp_path):
    missing = str(tmp_path / "nope.json")
    with pytest.raises(FileNotFoundError, match=r"^SQuAD file not found: .*nope\.json$"):
        files.read_json(missing, "SQuAD file")
    with pytest.raises(FileNotFoundError, match=r"^file not found: .*nope\.json$"):
        files.read_json(missing)


def test_iter_jsonl_yields_line_numbers_and_skips_blank_lines(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"_id": "a"}\n\n   \n{"_id": "b"}\r\n  {"_id": "c"}')
    assert list(files.iter_jsonl(str(path))) == [(1, {"_id": "a"}), (4, {"_id": "b"}), (5, {"_id": "c"})]
    path.write_text("")
    assert list(files.iter_jsonl(str(path))) == []


def test_iter_jsonl_bad_json_names_file_line_and_column(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"_id": "a"}\n\n  {"_id": "b" "text": "x"}\n')
    rows = files.iter_jsonl(str(path))
    assert next(rows) == (1, {"_id": "a"})
    # Column 15 of the line as written (two leading spaces), where json stops.
    with pytest.raises(ValueError, match=r"train\.jsonl:3: not a JSON object: Expecting ',' delimiter "
                                         r"at column 15\.$"):
        next(rows)


def test_iter_jsonl_refuses_a_line_that_is_not_an_object(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text('{"_id": "a"}\n["b"]\n')
    with pytest.raises(ValueError, match=r"train\.jsonl:2: expected a JSON object, got list\.$"):
        list(files.iter_jsonl(str(path)))


def test_iter_jsonl_bytes_that_are_not_utf8_fail_or_are_replaced(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_bytes(b'{"text": "a"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"corpus\.jsonl:2: not UTF-8 text"):
        list(files.iter_jsonl(str(path)))
    assert list(files.iter_jsonl(str(path), errors="replace"))[1] == (2, {"text": "caf\ufffd"})


def test_iter_jsonl_missing_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"^file not found: .*nope\.jsonl$"):
        list(files.iter_jsonl(str(tmp_path / "nope.jsonl")))
