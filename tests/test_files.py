"""kbert.files: every writer's output appears whole or not at all."""

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
