"""The data checks of pre-training: the run's settings against the sidecar or the first record."""

import hashlib

import pytest
import tensorflow as tf

from tests.training.pretraining_data import write_pretraining_data

from kbert.data import PackingConfig
from kbert.data import pretraining_dataset
from kbert.data import read_pretraining_metadata
from kbert.data.pretraining.checks import check_data_tokenizer
from kbert.data.pretraining.checks import check_data_vocabulary
from kbert.data.pretraining.checks import check_first_record
from kbert.data.pretraining.checks import check_pretraining_data
from kbert.data.pretraining.checks import check_recorded_lengths
from kbert.data.pretraining.checks import list_input_files
from kbert.data.pretraining.checks import named_data_error
from kbert.data.pretraining.checks import sentence_task_note
from kbert.data.tokenizers import TokenizerIdentity

# write_pretraining_data's records: input_ids of 16, masked_lm_positions of 3.
SIDECAR = {"max_seq_length": 16, "max_predictions_per_seq": 3, "masking": "static"}


def _data(tmp_path, name="a.tfrecord", sidecar=SIDECAR, **kwargs):
    return write_pretraining_data(str(tmp_path / name), num_examples=4, sidecar=sidecar, **kwargs)


def test_input_files_skip_sidecars_and_no_match_names_the_flag(tmp_path):
    data = _data(tmp_path)
    assert list_input_files(str(tmp_path / "*")) == [data]
    assert list_input_files([data, " "]) == [data]
    with pytest.raises(FileNotFoundError, match=r"--input_file='.*nothing-\*' matches no files; "
                                                r"pass TFRecord files or globs"):
        list_input_files(str(tmp_path / "nothing-*"))


def test_the_run_returns_files_and_sidecar_when_they_agree(tmp_path):
    data = _data(tmp_path)
    files, metadata = check_pretraining_data(data, 16, 3, "static")
    assert files == [data] and metadata["max_seq_length"] == 16
    assert metadata["sidecar"] == data + ".meta.json"


@pytest.mark.parametrize("key, lengths, recorded", [
    ("max_seq_length", (32, 3), 16), ("max_predictions_per_seq", (16, 5), 3)])
def test_the_runs_length_mismatch_names_the_binding_and_the_sidecar(tmp_path, key, lengths,
                                                                     recorded):
    data = _data(tmp_path)
    with pytest.raises(ValueError) as error:
        check_pretraining_data(data, *lengths, "static")
    value = lengths[0] if key == "max_seq_length" else lengths[1]
    assert str(error.value) == (
        f"run_pretraining.{key}={value} does not match {recorded} recorded in the data's "
        f"sidecar ({data}.meta.json); regenerate the data or pass "
        f"--gin_params='run_pretraining.{key} = {recorded}'.")


def test_unmasked_data_leaves_max_predictions_to_the_run(tmp_path):
    data = _data(tmp_path, sidecar={**SIDECAR, "masking": "dynamic"})
    check_recorded_lengths(read_pretraining_metadata(data), 16, 7, data_file=data)
    with pytest.raises(ValueError, match="masking='static', but .* records masking='dynamic'"):
        check_pretraining_data(data, 16, 7, "static")


def test_the_readers_length_mismatch_names_the_argument(tmp_path):
    data = _data(tmp_path)
    metadata = read_pretraining_metadata(data)
    check_recorded_lengths(metadata, 16)
    check_recorded_lengths(None, 99, 99)
    with pytest.raises(ValueError) as error:
        check_recorded_lengths(metadata, 32)
    assert str(error.value) == (
        f"reading with max_seq_length=32, but {data}.meta.json records max_seq_length=16; pass "
        "max_seq_length=16 (run_pretraining.max_seq_length) or regenerate the data with "
        "--max_seq_length.")
    with pytest.raises(ValueError, match=r"^packing rows of max_seq_length=32, but "):
        check_recorded_lengths(metadata, 32, packing=PackingConfig())


def test_the_run_checks_lengths_before_the_masking_mode_and_the_reader_after(tmp_path):
    data = _data(tmp_path)
    with pytest.raises(ValueError, match=r"^run_pretraining.max_seq_length=32 does not match"):
        check_pretraining_data(data, 32, 3, "sometimes")
    with pytest.raises(ValueError, match=r"^masking='sometimes'; use one of static, dynamic.$"):
        check_pretraining_data(data, 16, 3, "sometimes")
    with pytest.raises(ValueError, match=r"^masking='sometimes'; use one of static, dynamic.$"):
        pretraining_dataset(data, 2, 32, 3, masking="sometimes")


def test_without_a_sidecar_the_first_record_tells(tmp_path):
    data = _data(tmp_path, sidecar=None)
    assert check_pretraining_data(data, 16, 3, "static") == ([data], None)
    with pytest.raises(ValueError, match=(
            r"a.tfrecord: records have input_ids of length 16 but "
            r"run_pretraining.max_seq_length=32 \(the file has no .meta.json sidecar to say so\); "
            r"pass --gin_params='run_pretraining.max_seq_length = 16'")):
        check_pretraining_data(data, 32, 3, "static")
    with pytest.raises(ValueError, match=r"masked_lm_positions of length 3 but "
                                         r"run_pretraining.max_predictions_per_seq=5"):
        check_first_record(data, 16, 5)
    with pytest.raises(ValueError, match=r"a.tfrecord: run_pretraining.masking=\"dynamic\" "
                                         r"but the records are already masked"):
        check_first_record(data, 16, 3, masking="dynamic")
    empty = str(tmp_path / "empty.tfrecord")
    tf.io.TFRecordWriter(empty).close()
    with pytest.raises(ValueError, match=r"empty.tfrecord holds no records; regenerate it or "
                                         r"leave it out of --input_file."):
        check_first_record(empty, 16, 3)


def test_the_models_vocabulary_size_and_nsp_head_are_checked_against_the_sidecar():
    metadata = {"vocab_size": 99, "next_sentence": "none"}
    where = r"the data's sidecar \(d.tfrecord.meta.json\)"
    check_data_vocabulary(metadata, "d.tfrecord", 99, False)
    check_data_vocabulary(None, "d.tfrecord", 5, True)
    with pytest.raises(ValueError, match=r"BertEncoder.vocabulary_size=98 does not match "
                                         rf"vocab_size=99 recorded in {where}"):
        check_data_vocabulary(metadata, "d.tfrecord", 98, False)
    with pytest.raises(ValueError, match=r"ModernBertEncoder.vocabulary_size=98 does not match "
                                         rf"vocab_size=99 recorded in {where}; pass --gin_params="
                                         r"'ModernBertEncoder.vocabulary_size = 99'"):
        check_data_vocabulary(metadata, "d.tfrecord", 98, False, "ModernBertEncoder")
    with pytest.raises(ValueError, match=r"BertPretrainer.next_sentence=True needs "
                                         rf"next_sentence_labels, but {where} records "
                                         r"next_sentence='none'"):
        check_data_vocabulary(metadata, "d.tfrecord", 99, True)


def test_data_of_another_tokenizer_is_refused_by_its_hash_naming_both(tmp_path):
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("[PAD]\n[UNK]\n")
    same_size = tmp_path / "other.txt"
    same_size.write_text("[UNK]\n[PAD]\n")
    digest = hashlib.sha256(vocab_file.read_bytes()).hexdigest()
    metadata = {"vocab_size": 2, "vocab_sha256": digest, "vocab_file": str(vocab_file)}
    check_data_tokenizer(metadata, "d.tfrecord", TokenizerIdentity.of_file(str(vocab_file)),
                         "--vocab_file")
    check_data_tokenizer(None, "d.tfrecord", TokenizerIdentity.of_file(str(same_size)), "x")
    check_data_tokenizer(metadata, "d.tfrecord", None, "x")
    with pytest.raises(ValueError) as refused:
        check_data_tokenizer(metadata, "d.tfrecord", TokenizerIdentity.of_file(str(same_size)),
                             "--vocab_file", flag="--eval_input_file")
    other = hashlib.sha256(same_size.read_bytes()).hexdigest()
    assert str(refused.value) == (
        f"--eval_input_file: the data's sidecar (d.tfrecord.meta.json) says the data was made "
        f"with the WordPiece {vocab_file} (2 ids, sha256 {digest[:12]}...), but the model's "
        f"tokenizer is the WordPiece {same_size} (2 ids, sha256 {other[:12]}...), from "
        "--vocab_file: the same ids would mean other tokens. Make the data with "
        f"tools/create_pretraining_data.py --vocab_file={same_size}.")
    # A sidecar of another tool without a hash is compared by kind and size.
    check_data_tokenizer({"vocab_size": 2}, "d.tfrecord",
                         TokenizerIdentity.of_file(str(same_size)), "x")
    with pytest.raises(ValueError, match=r"made with the WordPiece tokenizer \(3 ids\), but "):
        check_data_tokenizer({"vocab_size": 3}, "d.tfrecord",
                             TokenizerIdentity.of_file(str(same_size)), "x")


def test_sentence_pair_data_for_a_model_without_an_nsp_head_gets_a_warning():
    assert sentence_task_note({"next_sentence": "nsp"}, "d.tfrecord", True) is None
    assert sentence_task_note({"next_sentence": "none"}, "d.tfrecord", False) is None
    assert sentence_task_note(None, "d.tfrecord", False) is None
    note = sentence_task_note({"next_sentence": "nsp"}, "d.tfrecord", False)
    assert note == (
        "warning: the data's sidecar (d.tfrecord.meta.json) records next_sentence='nsp', but the "
        "model has no next-sentence head: its next_sentence_labels are ignored and it trains on "
        "the masked tokens alone, while half of its instances join a segment to a random one "
        "from another document. For masked-LM-only pre-training (ModernBERT, RoBERTa, ELECTRA) "
        "make the data with tools/create_pretraining_data.py --next_sentence=none.")
    assert "swap their two segments" in sentence_task_note({"next_sentence": "sop"}, "d", False)


def test_a_data_error_names_the_truncated_file_or_says_the_framing_is_fine(tmp_path):
    good = _data(tmp_path, "good.tfrecord", sidecar=None)
    bad = _data(tmp_path, "bad.tfrecord", sidecar=None)
    data = open(bad, "rb").read()
    open(bad, "wb").write(data[:len(data) - 10])
    error = tf.errors.DataLossError(None, None, "truncated record at 123")
    message = str(named_data_error([good, bad], error))
    assert message.startswith(f"{bad}: corrupt or truncated TFRecord at byte ")
    assert message.endswith("(TensorFlow: truncated record at 123)")
    assert str(named_data_error([good], error)) == (
        "reading --input_file failed: truncated record at 123; every file's TFRecord framing "
        "checks out, so a record's contents may be bad.")
    # Held-out data is named by its own flag.
    assert str(named_data_error([good], error, "--eval_input_file")).startswith(
        "reading --eval_input_file failed: ")


def test_two_sidecars_that_disagree_are_refused_before_any_length_check(tmp_path):
    _data(tmp_path, "a-0.tfrecord")
    _data(tmp_path, "a-1.tfrecord", sidecar={**SIDECAR, "max_seq_length": 32})
    with pytest.raises(ValueError, match=r"a-1.tfrecord.meta.json records max_seq_length=32 but "
                                         r".*a-0.tfrecord.meta.json records 16"):
        check_pretraining_data(str(tmp_path / "a-*.tfrecord"), 16, 3, "static")


def test_a_file_cut_short_is_refused_before_training(tmp_path):
    import json
    import os

    data = _data(tmp_path, sidecar={**SIDECAR, "num_instances_in_file": 4})
    size = os.path.getsize(data)
    assert check_pretraining_data(data, 16, 3, "static")[0] == [data]
    with open(data, "r+b") as f:  # A copy cut inside its last record.
        f.truncate(size - 10)
    # An older sidecar records the count only: the records are counted.
    with pytest.raises(ValueError, match=(
            r"a.tfrecord holds 3 whole records \(the file ends \d+ bytes into a record of \d+ "
            r"bytes\) but .*a.tfrecord.meta.json records num_instances_in_file=4: the file was "
            r"cut short or changed after it was written; copy it again or regenerate it.$")):
        check_pretraining_data(data, 16, 3, "static")
    # create_pretraining_data's sidecars record the size too.
    with open(data + ".meta.json", "w") as f:
        json.dump({**SIDECAR, "num_instances_in_file": 4, "bytes_in_file": size}, f)
    with pytest.raises(ValueError, match=rf"a.tfrecord is {size - 10} bytes but .*a.tfrecord."
                                         rf"meta.json records bytes_in_file={size}: the file was "
                                         r"cut short"):
        check_pretraining_data(data, 16, 3, "static")


def test_without_sidecars_every_files_first_record_is_checked(tmp_path):
    _data(tmp_path, "a-0.tfrecord", sidecar=None)
    _data(tmp_path, "a-1.tfrecord", sidecar=None, seq_length=24)
    with pytest.raises(ValueError, match=r"a-1.tfrecord: records have input_ids of length 24 but "
                                         r"run_pretraining.max_seq_length=16"):
        check_pretraining_data(str(tmp_path / "a-*.tfrecord"), 16, 3, "static")
