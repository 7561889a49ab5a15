"""GLUE readers on real rows (tests/testdata/finetune/glue) and every bad-input error."""

import os

import pytest

from tests.finetune_testing import TESTDATA
from kbert.tasks.glue_reader import get_glue_spec
from kbert.tasks.glue_reader import read_glue

GLUE = os.path.join(TESTDATA, "glue")


def test_sst2_single_sentences_with_header():
    examples = read_glue(os.path.join(GLUE, "SST-2"), "SST-2", "dev")
    assert len(examples) == 6
    assert examples[0].text_a == "it 's a charming and often affecting journey . "
    assert (examples[0].text_b, examples[0].label) == (None, 1)
    assert examples[1].label == 0


def test_sst2_test_file_has_index_and_no_label():
    examples = read_glue(os.path.join(GLUE, "SST-2"), "sst2", "test")
    assert [(e.guid, e.label) for e in examples] == [("test-0", None), ("test-1", None), ("test-2", None)]
    assert examples[0].text_a == "uneasy mishmash of styles and genres ."


def test_mrpc_pairs_read_through_the_byte_order_mark():
    examples = read_glue(os.path.join(GLUE, "MRPC"), "mrpc", "train")
    assert len(examples) == 8
    assert examples[0].text_a.startswith("Amrozi accused his brother")
    assert examples[0].text_b.startswith("Referring to him as only")
    assert [e.label for e in examples[:2]] == [1, 0]


def test_mrpc_test_file_is_read_by_column_name():
    # This test.tsv has an extra gold `Quality` column after `index`.
    examples = read_glue(os.path.join(GLUE, "MRPC"), "mrpc", "test")
    assert examples[0].guid == "test-0" and examples[0].label == 1
    assert examples[0].text_a.startswith("PCCW 's chief operating officer")


def test_stsb_scores_are_floats():
    examples = read_glue(os.path.join(GLUE, "STS-B"), "sts-b", "dev")
    assert [e.label for e in examples] == [5.0, 4.75, 5.0, 2.4]
    assert get_glue_spec("STS-B").is_regression


def test_cola_public_release_files_without_header():
    dev = read_glue(os.path.join(GLUE, "CoLA"), "cola", "dev")
    # in_domain_dev (3 rows) followed by out_of_domain_dev (2 rows), as GLUE's dev.tsv.
    assert len(dev) == 5
    assert dev[0].label == 0 and dev[-1].text_a.startswith("They claimed they had settled")
    train = read_glue(os.path.join(GLUE, "CoLA"), "cola", "train")
    assert [e.label for e in train] == [0, 0, 0, 1, 1, 1]
    assert train[0].text_a == "They drank the pub."


def test_wrong_number_of_columns_names_file_and_line(tmp_path):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\ngood film\t1\nbad film\n")
    with pytest.raises(ValueError, match=r"train.tsv:3: 1 tab-separated columns, expected 2"):
        read_glue(str(tmp_path), "sst-2", "train")


def test_unknown_label_names_file_line_and_labels(tmp_path):
    (tmp_path / "dev.tsv").write_text("sentence\tlabel\ngood film\t1\nbad film\tnegative\n")
    with pytest.raises(ValueError, match=r"dev.tsv:3: unknown label 'negative' for sst-2; "
                                         r"expected one of \['0', '1'\]"):
        read_glue(str(tmp_path), "sst-2", "dev")


def test_a_byte_that_is_not_utf8_names_file_line_and_column(tmp_path):
    (tmp_path / "train.tsv").write_bytes(b"sentence\tlabel\ngood film\t1\ncaf\xe9 scene\t0\n")
    with pytest.raises(ValueError, match=r"train.tsv:3: not UTF-8 text \(invalid continuation "
                                         r"byte 0xe9 at column 4\); convert the file to UTF-8"):
        read_glue(str(tmp_path), "sst-2", "train")


def test_empty_or_missing_data_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="no train data for mrpc.*expected train.tsv"):
        read_glue(str(tmp_path), "mrpc", "train")
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        read_glue(str(tmp_path / "missing"), "mrpc", "train")


def test_header_without_the_task_columns(tmp_path):
    (tmp_path / "train.tsv").write_text("sentence\tlabel\ngood film\t1\n")
    with pytest.raises(ValueError, match=r"no column '#1 String' for mrpc"):
        read_glue(str(tmp_path), "mrpc", "train")


def test_unknown_task_name():
    with pytest.raises(ValueError, match=r"--task_name='sst-5' is not a GLUE task"):
        get_glue_spec("sst-5")
