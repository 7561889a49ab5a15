import pytest

from kbert.data import text_files
from tests.data.conftest import MOBY_CRLF
from tests.data.conftest import PERSUASION


@pytest.mark.parametrize("piece_bytes", [1, 300, 4000, 1 << 20])
def test_pieces_cover_the_file_and_end_after_blank_lines(piece_bytes):
    data = open(PERSUASION, "rb").read()
    pieces = list(text_files.iter_text_pieces(PERSUASION, piece_bytes))
    assert b"".join(p.data for p in pieces) == data
    offset, line = 0, 1
    for piece in pieces:
        assert (piece.offset, piece.first_line, piece.length) == (offset, line, len(piece.data))
        assert piece.without_data().read() == piece.data
        offset += piece.length
        line += piece.data.count(b"\n")
    if piece_bytes == 4000:
        assert len(pieces) > 5
        # Each piece but the last ends with a blank line: documents stay whole.
        assert all(p.data.endswith(b"\n\n") for p in pieces[:-1])
        assert all(p.length <= 4000 for p in pieces)
        assert sum(p.length for p in pieces[:-1]) > 2000 * (len(pieces) - 1)


def test_long_line_and_missing_final_newline(tmp_path):
    path = tmp_path / "long.txt"
    path.write_bytes(b"x" * 10_000 + b"\nshort\n\nlast line without newline")
    pieces = list(text_files.iter_text_pieces(str(path), 1000))
    assert pieces[0].data == b"x" * 10_000 + b"\n"
    assert b"".join(p.data for p in pieces) == path.read_bytes()


def test_chunks_group_whole_files():
    chunks = list(text_files.iter_text_chunks([PERSUASION, MOBY_CRLF], 1 << 30))
    assert len(chunks) == 1 and [p.path for p in chunks[0]] == [PERSUASION, MOBY_CRLF]
    chunks = list(text_files.iter_text_chunks([PERSUASION, MOBY_CRLF], 5000))
    assert len(chunks) > 4 and all(sum(p.length for p in c) >= 5000 for c in chunks[:-1])


def test_non_blank_lines_are_stripped_across_files_and_counted_per_pass(tmp_path):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_bytes(b"  one \r\n\n \t\ntwo\n")
    second.write_bytes(b"caf\xe9\n\nthree")
    lines = text_files.NonBlankLines([str(first), str(second)], "latin-1")
    assert lines.count == 0
    assert list(lines) == ["one", "two", "caf\u00e9", "three"] and lines.count == 4
    assert list(lines) == ["one", "two", "caf\u00e9", "three"] and lines.count == 4
    with pytest.raises(ValueError, match=r"b.txt:1: not valid utf-8"):
        list(text_files.NonBlankLines([str(first), str(second)]))


def test_decode_piece_names_file_and_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nalso fine\nbad \xff byte\n")
    piece = next(text_files.iter_text_pieces(str(path), 1 << 20))
    with pytest.raises(ValueError, match=r"bad.txt:3: not valid utf-8 .*at byte 4 of the line"):
        text_files.decode_piece(piece, piece.data, "utf-8")
    assert text_files.decode_piece(piece, piece.data, "latin-1") == "fine\nalso fine\nbad \u00ff byte\n".encode()
    good = b"caf\xc3\xa9\n"
    assert text_files.decode_piece(piece, good, "utf-8") is good


@pytest.mark.parametrize("range_bytes", [1, 97, 4000, 1 << 20])
def test_line_ranges_give_every_line_once(tmp_path, range_bytes):
    # As Beam's text sources split a file: a line belongs to the range its first byte is in.
    path = tmp_path / "lines.txt"
    data = open(MOBY_CRLF, "rb").read() + b"\n\n" + b"y" * 300 + b"\nlast line without newline"
    path.write_bytes(data)
    pieces = [text_files.read_line_range(str(path), start, start + range_bytes)
              for start in range(0, len(data), range_bytes)]
    pieces = [p for p in pieces if p is not None]
    assert b"".join(p.data for p in pieces) == data
    assert all(p.data.endswith(b"\n") for p in pieces[:-1]) and pieces[0].offset == 0
    assert [p.offset for p in pieces[1:]] == [p.offset + p.length for p in pieces[:-1]]
    if range_bytes == 97:
        assert len(pieces) > 20


def test_line_number_of_a_range_is_counted_for_errors(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"one\ntwo\nthree\nfour \xff\n")
    piece = text_files.read_line_range(str(path), 9, 100)  # "three" starts at 8: line 4 on.
    assert piece.first_line is None and piece.data == b"four \xff\n"
    with pytest.raises(ValueError, match=r"bad.txt:4: not valid utf-8 .*at byte 5 of the line"):
        text_files.decode_piece(piece, piece.data, "utf-8")


def test_split_sentences_one_a_line():
    from kbert.data import split_sentences

    assert split_sentences('It rained.  "Did it?" she asked.\nYes! (Twice.) Then   ') == [
        "It rained.", '"Did it?"', "she asked.", "Yes!", "(Twice.)", "Then"]
    assert split_sentences(" \n ") == []
