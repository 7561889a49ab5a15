"""open_model_dir: one door to pre-trained and fine-tuned directories, checked once when opened."""

import json
import os
import re
import shutil

import keras
import numpy as np
import pytest

from tests.conftest import tiny_inputs
from tests.finetune_testing import character_vocabulary
from tests.finetune_testing import make_tiny_pretrained
from kbert.checkpoints import FinetunedDir
from kbert.checkpoints import PretrainedDir
from kbert.checkpoints import TaskConfig
from kbert.checkpoints import load_encoder
from kbert.checkpoints import open_model_dir
from kbert.checkpoints import save_finetuned
from kbert.checkpoints.model_dir import model_dir_kind
from kbert.data.tokenizers import WordpieceTokenizer
from kbert.models import BertClassifier
from kbert.models import BertPretrainer

POSITIONS = 48
ROWS = len(character_vocabulary())


def _np(x):
    return keras.ops.convert_to_numpy(x)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return make_tiny_pretrained(tmp_path_factory.mktemp("model_dir") / "pretrained",
                                max_sequence_length=POSITIONS, do_lower_case=False)


@pytest.fixture(scope="module")
def finetuned(pretrained, tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("model_dir") / "finetuned")
    model = BertClassifier(load_encoder(pretrained), num_classes=2)
    save_finetuned(directory, model, TaskConfig("glue", "sst-2", "classifier", ["0", "1"],
                                                max_seq_length=32, do_lower_case=False),
                   os.path.join(pretrained, "vocab.txt"))
    return directory


def _copy(source, tmp_path, name="copy"):
    target = tmp_path / name
    shutil.copytree(source, target)
    return str(target)


def test_a_pretrained_directory_is_opened_with_its_parts(pretrained):
    directory = open_model_dir(pretrained)
    assert isinstance(directory, PretrainedDir) and not directory.is_finetuned
    assert directory.vocab_file == os.path.join(pretrained, "vocab.txt")
    assert directory.vocabulary == character_vocabulary()
    assert directory.do_lower_case is False  # as tokenizer_config.json records
    # One tokenizer, which every preprocessor of the directory packs with.
    assert isinstance(directory.tokenizer, WordpieceTokenizer)
    assert directory.tokenizer.file == directory.vocab_file
    assert directory.preprocessor(8).tokenizer is directory.tokenizer
    assert directory.encoder_config["vocabulary_size"] == ROWS
    assert directory.max_sequence_length == POSITIONS
    assert directory.sentence_config is None
    assert directory.pretrained_settings == {"sentence_config": None}
    inputs = tiny_inputs(seed=3)
    np.testing.assert_array_equal(
        _np(directory.encoder()(inputs, training=False)["sequence_output"]),
        _np(load_encoder(pretrained)(inputs, training=False)["sequence_output"]))
    assert directory.encoder(dropout=0.0).get_config()["dropout"] == 0.0
    everything = directory.encoder(output_all_layers=True)
    assert len(everything(inputs)["encoder_outputs"]) == directory.encoder_config["num_layers"]
    assert isinstance(directory.pretrainer(next_sentence=False), BertPretrainer)


def test_a_finetuned_directory_is_opened_with_its_task(finetuned):
    directory = open_model_dir(finetuned, flag="--model_dir")
    assert isinstance(directory, FinetunedDir) and directory.is_finetuned
    assert directory.where == f"--model_dir={finetuned}"
    assert (directory.task_config.task, directory.task_config.max_seq_length) == ("glue", 32)
    assert directory.do_lower_case is False  # the task's record
    assert directory.vocabulary == character_vocabulary()
    model = directory.model()
    inputs = tiny_inputs(seed=4)
    np.testing.assert_array_equal(_np(model.encoder(inputs)["pooled_output"]),
                                  _np(directory.encoder()(inputs)["pooled_output"]))
    assert model_dir_kind(finetuned) == "finetuned"


def test_model_dir_kind_tells_the_kinds_apart(pretrained, tmp_path):
    assert model_dir_kind(pretrained) == "pretrained"
    assert model_dir_kind(str(tmp_path)) is None


def test_do_lower_case_defaults_to_true_when_unrecorded_and_an_override_wins(pretrained,
                                                                            tmp_path):
    directory = _copy(pretrained, tmp_path)
    os.remove(os.path.join(directory, "tokenizer_config.json"))
    assert open_model_dir(directory).do_lower_case is True
    assert open_model_dir(directory, do_lower_case=False).do_lower_case is False
    assert open_model_dir(pretrained, do_lower_case=True).do_lower_case is True


def test_vocabulary_size_differing_from_the_embedding_rows_names_file_and_counts(pretrained,
                                                                                 tmp_path):
    directory = _copy(pretrained, tmp_path)
    with open(os.path.join(directory, "vocab.txt"), "a") as f:
        f.write("extra\n")
    vocab = re.escape(os.path.join(directory, "vocab.txt"))
    with pytest.raises(ValueError, match=rf"{vocab} has {ROWS + 1} tokens but the encoder of "
                                         rf"--init_checkpoint=.*copy has {ROWS} embedding rows"):
        open_model_dir(directory, flag="--init_checkpoint")


def test_missing_files_name_the_path_and_the_file(pretrained, finetuned, tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--model_dir=.*nothing is not a directory"):
        open_model_dir(str(tmp_path / "nothing"), flag="--model_dir")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError,
                       match=r"--init_checkpoint=.*empty is neither a fine-tuned directory "
                             r"\(task_config.json\) nor a kbert pre-trained one: "
                             r"bert_config.json is missing"):
        open_model_dir(str(empty), flag="--init_checkpoint")
    no_weights = _copy(pretrained, tmp_path, "no_weights")
    os.remove(os.path.join(no_weights, "encoder.weights.h5"))
    with pytest.raises(FileNotFoundError, match=r"no_weights is neither .*: encoder.weights.h5 "
                                                r"is missing"):
        open_model_dir(no_weights)
    no_model = _copy(finetuned, tmp_path, "no_model")
    os.remove(os.path.join(no_model, "task_model.keras"))
    with pytest.raises(FileNotFoundError, match=r"no_model has task_config.json but "
                                                r"task_model.keras is missing"):
        open_model_dir(no_model)


def test_a_missing_vocabulary_is_named_and_can_be_given(pretrained, tmp_path):
    directory = _copy(pretrained, tmp_path)
    os.remove(os.path.join(directory, "vocab.txt"))
    with pytest.raises(FileNotFoundError, match=r"--init_checkpoint=.*copy has no vocab.txt or "
                                                r"tokenizer.json; pass --vocab_file"):
        open_model_dir(directory, flag="--init_checkpoint", vocab_flag="--vocab_file")
    with pytest.raises(FileNotFoundError, match=r"copy has no vocab.txt or tokenizer.json; copy "
                                                r"the vocab.txt \(or tokenizer.json\)"):
        open_model_dir(directory)
    given = open_model_dir(directory, vocab_file=os.path.join(pretrained, "vocab.txt"))
    assert given.vocabulary == character_vocabulary()


def test_a_vocabulary_override_must_equal_the_directory_s_own(pretrained, tmp_path):
    other = tmp_path / "other_vocab.txt"
    lines = character_vocabulary()
    other.write_text("\n".join(lines[:5] + lines[6:] + [lines[5]]) + "\n")  # reordered
    with pytest.raises(ValueError, match=r"--vocab_file=.*other_vocab.txt differs from the "
                                         r"vocabulary .*vocab.txt of --init_checkpoint="):
        open_model_dir(pretrained, flag="--init_checkpoint", vocab_file=str(other),
                       vocab_flag="--vocab_file")
    same = tmp_path / "same_vocab.txt"
    same.write_text("\n".join(lines) + "\n")
    assert open_model_dir(pretrained, vocab_file=str(same)).vocab_file == str(same)


def test_the_preprocessor_checks_the_length_against_the_positions(pretrained):
    directory = open_model_dir(pretrained)
    preprocessor = directory.preprocessor(POSITIONS)
    assert (preprocessor.max_seq_length, preprocessor.do_lower_case) == (POSITIONS, False)
    assert preprocessor.vocabulary_size == ROWS
    with pytest.raises(ValueError, match=rf"max_seq_length={POSITIONS + 1} is larger than the "
                                         rf"encoder's {POSITIONS} positions"):
        directory.preprocessor(POSITIONS + 1)


def test_tokenizer_settings_of_a_finetuned_directory_must_agree(finetuned, tmp_path):
    directory = _copy(finetuned, tmp_path)
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"do_lower_case": True}, f)
    with pytest.raises(ValueError, match=r"tokenizer_config.json records do_lower_case=True but "
                                         r".*task_config.json records False"):
        open_model_dir(directory)
