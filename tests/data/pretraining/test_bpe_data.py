"""Pre-training data made with a byte-level BPE `tokenizer.json` (ModernBERT's kind).

Its ids are Hugging Face `tokenizers`' of each stripped line; its sidecar records
the tokenizer; whole-word masking, static or dynamic (through packing), keeps a
word's pieces together, a word being a piece with a leading space ("Ġ") and the
pieces after it without one.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tokenizers

from kbert.data import MaskingConfig
from kbert.data import PackingConfig
from kbert.data import VocabInfo
from kbert.data import create_pretraining_data
from kbert.data import pretraining_dataset
from kbert.data import pretraining_feature_spec
from kbert.data import read_pretraining_metadata
from kbert.data.tokenization import BpeTokenizer
from kbert.data.tokenizers import tokenizer_sha256
from tests import forked_python
from tests.conftest import REPO
from tests.data.conftest import MOBY_CRLF
from tests.data.conftest import PERSUASION

EMMA = os.path.join(os.path.dirname(PERSUASION), "emma_chapter1.txt")
SEQ, PREDICTIONS = 64, 24


def _parsed(path, masked_lm=True):
    records = [r.numpy() for r in tf.data.TFRecordDataset(path)]
    spec = pretraining_feature_spec(SEQ, PREDICTIONS, next_sentence=False, masked_lm=masked_lm)
    return {k: v.numpy() for k, v in tf.io.parse_example(records, spec).items()}


def _words(ids, vocab):
    """Each word's positions in one instance: a piece and the pieces continuing it."""
    words = []
    for position, token in enumerate(ids):
        if token in (vocab.cls_id, vocab.sep_id):
            continue
        if words and token in vocab.continuation_ids and words[-1][-1] == position - 1:
            words[-1].append(position)
        else:
            words.append([position])
    return words


def test_lines_tokenize_as_tokenizers_and_the_sidecar_records_the_tokenizer(
        bpe_tokenizer_file, tmp_path):
    reference = tokenizers.Tokenizer.from_file(bpe_tokenizer_file)
    text = open(MOBY_CRLF, "rb").read()
    lines = BpeTokenizer(bpe_tokenizer_file).tokenize_text(text)
    stripped = [line.strip() for line in text.decode("utf-8").split("\n")]
    splits = lines.row_splits
    assert [lines.flat_ids[a:b].tolist() for a, b in zip(splits[:-1], splits[1:])] == [
        reference.encode(line, add_special_tokens=False).ids for line in stripped]
    assert lines.blank.tolist() == [not line for line in stripped]

    out = str(tmp_path / "train.tfrecord")
    create_pretraining_data(MOBY_CRLF, out, tokenizer_file=bpe_tokenizer_file, dupe_factor=1,
                            max_seq_length=SEQ, max_predictions_per_seq=PREDICTIONS,
                            next_sentence="none", masking="dynamic", num_workers=1)
    sidecar = read_pretraining_metadata(out)
    assert {key: sidecar[key] for key in ("tokenizer_kind", "vocab_file", "vocab_sha256",
                                          "vocab_size", "do_lower_case")} == {
        "tokenizer_kind": "byte-level BPE", "vocab_file": bpe_tokenizer_file,
        "vocab_sha256": tokenizer_sha256(bpe_tokenizer_file), "vocab_size": 704,
        "do_lower_case": None}
    assert (sidecar["flags"]["tokenizer_file"], sidecar["flags"]["vocab_file"]) == (
        bpe_tokenizer_file, None)
    # The first instance is [CLS], the first lines' ids, [SEP]: a document's start.
    first = _parsed(out, masked_lm=False)["input_ids"][0]
    ids = [i for i in first.tolist() if i]
    cls, sep = reference.token_to_id("[CLS]"), reference.token_to_id("[SEP]")
    assert ids[0] == cls and ids[-1] == sep and cls not in ids[1:-1]
    body = [i for line in stripped if line
            for i in reference.encode(line, add_special_tokens=False).ids]
    assert any(ids[1:-1] == body[k:k + len(ids) - 2] for k in range(len(body)))


def test_static_whole_word_masking_never_splits_a_word(bpe_tokenizer_file, tmp_path):
    out = str(tmp_path / "static.tfrecord")
    meta = create_pretraining_data(
        [PERSUASION, EMMA], out, tokenizer_file=bpe_tokenizer_file, dupe_factor=1,
        max_seq_length=SEQ, max_predictions_per_seq=PREDICTIONS, next_sentence="none",
        do_whole_word_mask=True, masked_lm_prob=0.15, num_workers=1)
    vocab = VocabInfo.from_file(bpe_tokenizer_file)
    data = _parsed(out)
    tokens, masked, budgets, whole = 0, 0, 0, 0
    for row in range(len(data["input_ids"])):
        length = int(data["input_mask"][row].sum())
        count = int(data["masked_lm_weights"][row].sum())
        positions = data["masked_lm_positions"][row, :count]
        original = data["input_ids"][row, :length].copy()
        original[positions] = data["masked_lm_ids"][row, :count]
        chosen = set(positions.tolist())
        for word in _words(original.tolist(), vocab):
            inside = chosen.intersection(word)
            assert not inside or len(inside) == len(word), (row, word, sorted(chosen))
            whole += bool(inside) and len(word) > 1
        # google-research/bert's budget: round(len * 0.15), at least 1; a word that would
        # pass it is skipped, so a row may mask a little less.
        budget = min(PREDICTIONS, max(1, round(length * 0.15)))
        assert budget - 4 <= count <= budget
        tokens, masked, budgets = tokens + length, masked + count, budgets + budget
    assert tokens >= 10_000 and tokens == meta["counts"]["tokens"]
    assert 0.97 * budgets <= masked <= budgets and 0.145 <= masked / tokens <= 0.16
    assert whole > 100  # Many words of several pieces were masked whole.


def test_dynamic_whole_word_masking_through_packing(bpe_tokenizer_file, tmp_path):
    out = str(tmp_path / "dynamic.tfrecord")
    create_pretraining_data([PERSUASION, EMMA], out, tokenizer_file=bpe_tokenizer_file,
                            dupe_factor=1, max_seq_length=SEQ, max_predictions_per_seq=PREDICTIONS,
                            next_sentence="none", masking="dynamic", num_workers=1)
    vocab = VocabInfo.from_file(bpe_tokenizer_file)
    config = MaskingConfig(masked_lm_prob=0.3, do_whole_word_mask=True)
    packing = PackingConfig(max_instances_per_row=4, window_size=64)
    dataset = pretraining_dataset(out, 16, SEQ, PREDICTIONS, next_sentence=False,
                                  is_training=False, masking="dynamic", masking_config=config,
                                  packing=packing, seed=3)
    tokens = masked = budget = instances = 0
    for features, labels, weights in dataset.as_numpy_iterator():
        for row in range(len(features["token_ids"])):
            count = int(weights["mlm"][row].sum())
            positions = features["mask_positions"][row, :count]
            original = features["token_ids"][row].copy()
            original[positions] = labels["mlm"][row, :count]
            chosen = set(positions.tolist())
            instance_ids = features["instance_ids"][row]
            for instance in np.unique(instance_ids[instance_ids > 0]):
                where = np.flatnonzero(instance_ids == instance)
                ids = original[where].tolist()
                for word in _words(ids, vocab):
                    inside = chosen.intersection(where[word].tolist())
                    assert not inside or len(inside) == len(word), (row, instance, word)
                budget += min(PREDICTIONS, max(1, round(len(ids) * 0.3)))
                tokens, instances = tokens + len(ids), instances + 1
            masked += count
    assert tokens >= 10_000 and instances > 200
    # 30% of the tokens ([CLS] and [SEP] counted, as the original), less the words skipped
    # because they would pass a row's budget.
    assert 0.96 * budget <= masked <= budget
    assert 0.28 <= masked / tokens <= 0.30


def test_the_tool_takes_a_tokenizer_file_and_refuses_what_does_not_apply(
        bpe_tokenizer_file, tmp_path):
    tool = os.path.join(REPO, "tools", "create_pretraining_data.py")
    out = str(tmp_path / "tool.tfrecord")
    common = [tool, f"--input_file={MOBY_CRLF}", f"--output_file={out}", "--dupe_factor=1",
              f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PREDICTIONS}",
              "--next_sentence=none", "--num_workers=1"]
    env = {**os.environ, "PYTHONPATH": REPO}
    refused = forked_python.run(common + [f"--tokenizer_file={bpe_tokenizer_file}",
                                          "--do_lower_case"], cwd=REPO, env=env, timeout=120)
    assert refused.returncode == 1 and refused.stderr.strip().splitlines()[-1] == (
        "create_pretraining_data: error: --do_lower_case applies to WordPiece; "
        f"{bpe_tokenizer_file} is a byte-level BPE, which has no lower casing: drop it.")
    both = forked_python.run(common + [f"--tokenizer_file={bpe_tokenizer_file}",
                                       f"--vocab_file={bpe_tokenizer_file}"],
                             cwd=REPO, env=env, timeout=120)
    assert both.returncode == 1 and both.stderr.strip().splitlines()[-1].endswith(
        "pass one of --vocab_file (a WordPiece vocab.txt) and --tokenizer_file (a vocab.txt or "
        "a byte-level BPE tokenizer.json, e.g. from kbert-vocab build --tokenizer=bpe); got both.")
    assert os.listdir(tmp_path) == []
    made = forked_python.run(common + [f"--tokenizer_file={bpe_tokenizer_file}", "--verbose"],
                             cwd=REPO, env=env, timeout=120)
    assert made.returncode == 0, made.stderr[-2000:]
    assert "tokens: [CLS] " in made.stdout and " Ġ" in made.stdout
    same = str(tmp_path / "same.tfrecord")
    create_pretraining_data(MOBY_CRLF, same, tokenizer_file=bpe_tokenizer_file, dupe_factor=1,
                            max_seq_length=SEQ, max_predictions_per_seq=PREDICTIONS,
                            next_sentence="none", num_workers=1)
    assert open(out, "rb").read() == open(same, "rb").read()
    assert json.load(open(out + ".meta.json"))["tokenizer_kind"] == "byte-level BPE"


def test_a_tokenizer_without_mask_is_refused(tmp_path):
    config = json.load(open(os.path.join(os.path.dirname(PERSUASION), "bpe_tokenizer.json"),
                            encoding="utf-8"))
    config["added_tokens"] = [t for t in config["added_tokens"] if t["content"] != "[MASK]"]
    mask_id = 1130  # The fixture's [MASK]: its id becomes an unused one's.
    for token in config["added_tokens"]:
        if token["id"] > mask_id:
            token["id"] -= 1
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match=r"tokenizer.json' has no \[MASK\] \(or <mask>\) token; "
                                         r"masked-LM pre-training needs one"):
        create_pretraining_data(PERSUASION, str(tmp_path / "x.tfrecord"),
                                tokenizer_file=str(path), num_workers=1)
    assert sorted(os.listdir(tmp_path)) == ["tokenizer.json"]
