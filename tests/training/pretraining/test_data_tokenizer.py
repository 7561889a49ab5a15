"""kbert-pretrain refuses data made with another tokenizer than the model's, before anything is built.

Held-out data made with another vocabulary used to be found only at the first
evaluation ("reading --input_file failed: Graph execution error", the wrong
flag, the cause hidden), or, of the same size, never: the run reported another
loss. Each refusal here names the flag, both tokenizers and the fix, and leaves
no `--model_dir` behind.
"""

import os

import pytest

from kbert.data import create_pretraining_data
from kbert.models import BertEncoder
from kbert.models import BertPretrainer
from kbert.training import run_pretraining
from tests.conftest import V
from tests.conftest import tiny_encoder_kwargs
from tests.training.pretraining_data import RUN
from tests.training.pretraining_data import TESTDATA
from tests.training.pretraining_data import build_vocab

EMMA = os.path.join(TESTDATA, "emma_chapter1.txt")
PERSUASION = os.path.join(TESTDATA, "austen-persuasion-head.txt")


def _data(text, path, **tokenizer):
    create_pretraining_data(text, path, max_seq_length=RUN["max_seq_length"],
                            max_predictions_per_seq=RUN["max_predictions_per_seq"], dupe_factor=1,
                            next_sentence="none", num_workers=1, **tokenizer)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Training data of a 99-word vocabulary; held-out data of the same text made with
    it, with the same words in another order (same size) and with 60 of them."""
    root = tmp_path_factory.mktemp("tokenizers")
    words = build_vocab(V)[0]
    vocabularies = {"model": words, "same_size": words[:5] + words[5:][::-1], "smaller": words[:60]}
    paths = {}
    for name, tokens in vocabularies.items():
        paths[f"{name}.txt"] = str(root / f"{name}.txt")
        with open(paths[f"{name}.txt"], "w") as f:
            f.write("\n".join(tokens) + "\n")
        paths[name] = _data(PERSUASION if name == "model" else EMMA,
                            str(root / f"{name}.tfrecord"), vocab_file=paths[f"{name}.txt"])
    paths["heldout"] = _data(EMMA, str(root / "heldout.tfrecord"), vocab_file=paths["model.txt"])
    return paths


def _run(train, model_dir, **overrides):
    model = lambda: BertPretrainer(BertEncoder(**tiny_encoder_kwargs(num_layers=1)),  # noqa: E731
                                   next_sentence=False)
    return run_pretraining(train, str(model_dir), model, print_fn=lambda _: None,
                           **{**RUN, **overrides})


@pytest.mark.parametrize("heldout", ["same_size", "smaller"])
def test_heldout_data_of_another_vocabulary_is_refused_before_training(files, heldout, tmp_path):
    with pytest.raises(ValueError) as refused:
        _run(files["model"], tmp_path / "run", eval_input_file=files[heldout])
    size = {"same_size": V, "smaller": 60}[heldout]
    message = str(refused.value)
    assert message.startswith(
        f"--eval_input_file: the data's sidecar ({files[heldout]}.meta.json) says the data was "
        f"made with the WordPiece {files[heldout + '.txt']} ({size} ids, sha256 ")
    assert (f"but the model's tokenizer is the WordPiece {files['model.txt']} ({V} ids, sha256 "
            in message)
    assert message.endswith(
        f"from --input_file ({files['model']}.meta.json): the same ids would mean other tokens. "
        f"Make the data with tools/create_pretraining_data.py --vocab_file={files['model.txt']}.")
    assert not os.path.exists(tmp_path / "run")


def test_data_of_another_tokenizer_than_vocab_file_is_refused_for_each_flag(files, tmp_path):
    with pytest.raises(ValueError, match=r"^--input_file: .* made with the WordPiece .*model\.txt "
                                         r"\(99 ids, .* but the model's tokenizer is the "
                                         r"WordPiece .*same_size\.txt \(99 ids, .*from "
                                         r"--vocab_file: "):
        _run(files["model"], tmp_path / "run", vocab_file=files["same_size.txt"])
    with pytest.raises(ValueError, match=r"^--eval_input_file: .*same_size\.tfrecord\.meta\.json"
                                         r"\) says .* from --vocab_file: "):
        _run(files["model"], tmp_path / "run", vocab_file=files["model.txt"],
             eval_input_file=files["same_size"])
    assert not os.path.exists(tmp_path / "run")


def test_byte_level_bpe_data_for_a_wordpiece_model_names_both_kinds(files, tmp_path):
    bpe = os.path.join(TESTDATA, "bpe_tokenizer.json")
    data = _data(EMMA, str(tmp_path / "bpe.tfrecord"), tokenizer_file=bpe)
    with pytest.raises(ValueError, match=r"^--eval_input_file: .* made with the byte-level BPE "
                                         r".*bpe_tokenizer\.json \(1,135 ids, .*\), but the "
                                         r"model's tokenizer is the WordPiece .*model\.txt \(99 "
                                         r"ids, "):
        _run(files["model"], tmp_path / "run", eval_input_file=data)
    with pytest.raises(ValueError, match=r"--tokenizer_file=.*bpe_tokenizer\.json\.$"):
        _run(files["model"], tmp_path / "run", vocab_file=bpe)
    assert sorted(os.listdir(tmp_path)) == ["bpe.tfrecord", "bpe.tfrecord.meta.json"]
