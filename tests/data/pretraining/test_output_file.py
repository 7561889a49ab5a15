"""OutputFile: writes and byte-range copies give exactly the bytes asked for."""

import os

import pytest

from kbert.data.pretraining.output_file import OutputFile


@pytest.mark.parametrize("kernel_copy", [True, False])
def test_writes_and_range_copies_append_in_order(tmp_path, kernel_copy):
    source = tmp_path / "source"
    source_bytes = os.urandom(3 << 20)
    source.write_bytes(source_bytes)
    out = OutputFile(str(tmp_path / "out"))
    out._kernel_copy = out._kernel_copy and kernel_copy  # False: the read-and-write path.
    with open(source, "rb") as f:
        out.write(b"head")
        out.copy_range(f.fileno(), 5, 2 << 20)
        out.write(memoryview(b"-middle-")[1:7])
        out.copy_range(f.fileno(), 0, 3)
        assert f.tell() == 0  # The source's position is left alone.
    out.close()
    out.close()
    expected = b"head" + source_bytes[5 : 5 + (2 << 20)] + b"middle" + source_bytes[:3]
    assert (tmp_path / "out").read_bytes() == expected


def test_a_range_past_the_end_of_the_source_is_an_error(tmp_path):
    source = tmp_path / "source"
    source.write_bytes(b"0123456789")
    out = OutputFile(str(tmp_path / "out"))
    with open(source, "rb") as f, pytest.raises(OSError, match=r"out: source ended 5 bytes early"):
        out.copy_range(f.fileno(), 5, 10)
    out.close()
