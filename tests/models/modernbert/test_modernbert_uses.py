"""Every use of the encoder takes a ModernBERT directory unchanged (issue 31, item 6).

One tiny ModernBERT pre-trained directory (byte-level BPE `tokenizer.json`,
8,192 positions) is fine-tuned for classification, NER and SQuAD, exported
(ops check), served by `kbert-serve` with the in-process answers, distilled,
indexed and read by `tools/extract_features.py`; served NER reads an
8,000-piece document as one window, and token classification fine-tunes on a
1,000-piece sentence as one row.
"""

import json
import os
import urllib.request

import keras
import numpy as np
import pytest
import tensorflow as tf

from kbert.checkpoints import load_finetuned
from kbert.checkpoints import open_model_dir
from kbert.checkpoints import save_pretrained
from kbert.data.words import split_words
from kbert.export import serving_module
from kbert.export.saved_model import export_saved_model
from kbert.index import build_index
from kbert.models import ModernBertEncoder
from kbert.serving.warmup import read_warmup_requests
from kbert.tasks.token_classification.serving import word_windows
from kbert import tasks
from kbert.tasks import SquadConfig
from kbert.tasks.token_classification.dataset import word_piece_counts
from kbert.training.distillation import loop as distillation
from kbert.training.distillation import run_distillation
from kbert.training.finetuning import run_finetuning
from tests.conftest import REPO
from tests.conftest import load_tool
from tests.finetune_testing import TESTDATA
from tests.serving_testlib import start_server

# Several minutes on a shared 2-core CPU (each fine-tuning or export traces a ModernBERT).
pytestmark = pytest.mark.slow

TOKENIZER_JSON = os.path.join(REPO, "tests", "testdata", "bpe_tokenizer.json")
SST2 = os.path.join(TESTDATA, "glue", "SST-2")
CONLL = os.path.join(TESTDATA, "conll2003")
SQUAD = os.path.join(TESTDATA, "squad", "xquad_en_sample.json")
FAST = dict(train_batch_size=4, eval_batch_size=8, learning_rate=3e-3, warmup_proportion=0.0,
            num_train_epochs=1.0, verbose=0)
N_WORDS = 2430  # 8,034 pieces with the test tokenizer


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """The tiny ModernBERT directory: 2 blocks (global, local), width 16, window 8.

    (Two blocks hold both attention kinds; each block more costs seconds in every
    trace below: fine-tuning, export, serving, distillation, indexing.)
    """
    keras.utils.set_random_seed(0)
    encoder = ModernBertEncoder(vocabulary_size=1135, num_layers=2, num_heads=2, hidden_dim=16,
                                intermediate_dim=24, max_sequence_length=8192,
                                local_attention_window=8)
    directory = str(tmp_path_factory.mktemp("modernbert") / "pretrained")
    save_pretrained(directory, encoder, vocab_file=TOKENIZER_JSON)
    return directory


@pytest.fixture(scope="module")
def finetuned(pretrained, tmp_path_factory):
    """SST-2, CoNLL NER and SQuAD fine-tuned for one epoch: name -> (model_dir, results)."""
    root = tmp_path_factory.mktemp("modernbert_finetuned")
    made = {}
    for name, task, arguments in (
            # No dev evaluation for SST-2 (it is the distillation teacher): a minute less.
            ("sst2", "glue", dict(task_name="sst-2", data_dir=SST2, max_seq_length=32,
                                  do_eval=False)),
            ("ner", "ner", dict(data_dir=CONLL, max_seq_length=32)),
            ("squad", "squad", dict(train_file=SQUAD, predict_file=SQUAD, max_seq_length=64,
                                    task_options=SquadConfig(doc_stride=32, max_query_length=16)))):
        model_dir = str(root / name)
        made[name] = model_dir, run_finetuning(task, pretrained, model_dir, **arguments, **FAST)
    return made


def test_classification_ner_and_squad_fine_tune(finetuned):
    sst2, ner, squad = (finetuned[name][1] for name in ("sst2", "ner", "squad"))
    assert sst2["train_steps"] == 3 and np.isfinite(sst2["train_loss"]).all()  # 12 sentences, batch 4
    assert ner["num_examples"] == 4 and {"precision", "recall", "f1"} <= set(ner)
    assert squad["num_examples"] == 6 and {"exact_match", "f1"} <= set(squad)
    model, record, _ = load_finetuned(finetuned["ner"][0])
    assert type(model.encoder) is ModernBertEncoder and record.task == "ner"


def _post(url, body, timeout=120):
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.load(reply)


def _long_document():
    """About 8,000 pieces: CoNLL's training words, again and again."""
    lines = open(os.path.join(CONLL, "train.txt")).read().splitlines()
    words = [line.split()[0] for line in lines if line.strip() and not line.startswith("-DOCSTART-")]
    return " ".join((words * 200)[:N_WORDS])


def test_classification_of_your_own_file_reads_8000_pieces_whole(pretrained, tmp_path):
    """Issue 48, item 6: --task=classification at the encoder's limit, max_seq_length 8,192."""
    from kbert.data.text_datasets import count_truncated
    from kbert.checkpoints import open_model_dir
    from tests.tasks.classification.files import write_rows

    document = _long_document()
    rows = [{"text": document if i == 0 else f"short text {i}", "label": f"c{i % 2}"}
            for i in range(4)]
    train = write_rows(tmp_path / "long.jsonl", rows)
    results = run_finetuning("classification", pretrained, str(tmp_path / "run"),
                             train_file=train, do_eval=False, max_seq_length=8192, **FAST)
    assert "truncated" not in results and np.isfinite(results["train_loss"]).all()
    # The same document at BERT's usual 512 would be cut, and the run would say so.
    preprocessor = open_model_dir(pretrained).preprocessor(512)
    assert count_truncated(preprocessor, [row["text"] for row in rows]) == 1
    assert count_truncated(preprocessor.with_max_seq_length(8192), [document]) == 0


def test_exports_pass_the_ops_check_and_serve_the_in_process_answers(finetuned, tmp_path):
    """NER and SQuAD, whose serving reads BPE words and offsets and long windows.

    (Classification serves through the same encoder and tokenizer; each
    export here costs about a minute of tracing on a shared CPU.)
    """
    exports = {}
    for name in ("ner", "squad"):
        exports[name] = str(tmp_path / name)
        # The ops check (a fresh process) runs once: the tokenizer is the same in both.
        export_saved_model(finetuned[name][0], exports[name], check=name == "ner")
        # The warm-up text is one row of the fine-tuned length, not a window of the
        # encoder's 8,192 (which made every load of this SQuAD export take minutes).
        warmup = read_warmup_requests(os.path.join(exports[name], "1"))[0].predict_log.request
        words = len(tf.make_ndarray(next(iter(warmup.inputs.values())))[1].split())
        assert words == {"ner": 32, "squad": 64}[name]  # the fixture's max_seq_length
    config = "model_config_list {\n" + "".join(
        f'  config {{ name: "{name}" base_path: "{path}" model_platform: "tensorflow" }}\n'
        for name, path in exports.items()) + "}\n"
    (tmp_path / "models.config").write_text(config)
    document = _long_document()
    question = {"question": "Who rejects the call?", "context": document[:300]}
    # The served NER tags are checked against the Keras model below (the SavedModel
    # in this process would run the 8,000-piece document once more, for nothing more).
    squad_in_process = tf.saved_model.load(os.path.join(exports["squad"], "1"))
    expected_answer = squad_in_process.signatures["serving_default"](
        **{k: tf.constant([v]) for k, v in question.items()})["answer"][0].numpy().decode()

    with start_server([f"--model_config_file={tmp_path / 'models.config'}"]) as server:
        ner = _post(f"{server.rest_url}/v1/models/ner:predict", {"instances": [document]})
        squad = _post(f"{server.rest_url}/v1/models/squad:predict", {"instances": [question]})
    num_words = len(document.split())
    assert ner["predictions"][0]["num_words"] == num_words
    answer = squad["predictions"][0]["answer"]
    assert answer == expected_answer
    start, end = squad["predictions"][0]["start_char"], squad["predictions"][0]["end_char"]
    assert question["context"][start:end] == answer  # BPE offsets, in characters
    assert answer == answer.strip()  # trimmed offsets: no leading space of "Ġword"

    # The whole document is one window of the encoder's 8,192 positions, and the served
    # tags are the Keras model's for it, in one call.
    module = serving_module(open_model_dir(finetuned["ner"][0]))
    assert module.preprocessor.max_seq_length == 8192
    words = split_words(tf.constant([document]))
    windows = word_windows(module.preprocessor, words, module.window_stride)
    length = int(windows["token_ids"].row_lengths()[0])
    assert windows["token_ids"].nrows() == 1 and 7_900 < length <= 8_192
    token_ids = windows["token_ids"].to_tensor()
    logits = module.model({"token_ids": token_ids, "segment_ids": tf.zeros_like(token_ids),
                           "padding_mask": tf.ones_like(token_ids)}, training=False)
    first = tf.concat([[False], windows["first"], [False]], 0)
    tag_ids = tf.boolean_mask(tf.argmax(logits[0], -1), first).numpy()
    names = [name.decode() for name in module.label_names.numpy()]
    assert [names[i] for i in tag_ids] == ner["predictions"][0]["tags"][:num_words]


def test_distill_index_and_extract_features(pretrained, finetuned, tmp_path, monkeypatch):
    # Timing teacher against student (kbert-distill's speed-up table; its own test is in
    # tests/training/distillation/test_distillation.py) would trace both models once more, for
    # nothing this test checks: it is recorded, not run.
    timed = []
    monkeypatch.setattr(distillation, "measure_speedup", lambda teacher, student, *args: timed.append(
        (type(teacher.encoder), type(student.encoder))) or {})
    # No dev evaluation: it would trace teacher and student once more (minutes here).
    results = run_distillation(finetuned["sst2"][0], str(tmp_path / "student"), data_dir=SST2,
                               student_layers=[0], do_eval=False, **FAST)
    student, _, _ = load_finetuned(str(tmp_path / "student"))
    assert type(student.encoder) is ModernBertEncoder and student.encoder.num_layers == 1
    assert results["student_parameters"] < results["teacher_parameters"]
    assert timed == [(ModernBertEncoder, ModernBertEncoder)]
    with pytest.raises(ValueError, match="teacher block 1 has .* start with teacher block 0"):
        run_distillation(finetuned["sst2"][0], str(tmp_path / "bad"), data_dir=SST2,
                         student_layers=[1], do_eval=False, **FAST)

    corpus = tmp_path / "corpus.jsonl"
    with open(corpus, "w") as f:
        f.writelines(json.dumps({"_id": f"d{i}", "text": text}) + "\n"
                     for i, text in enumerate(["A gorgeous, witty film.", "Dull and  tedious 😀",
                                                   "EU rejects German call"]))
    summary = build_index([str(corpus)], str(tmp_path / "index"), model_dir=pretrained,
                          check=False, progress=lambda line: None)
    assert summary.added == summary.count == 3

    tool = load_tool("extract_features")
    (tmp_path / "input.txt").write_text("Hello world ||| [MASK] it\n")
    output = tmp_path / "features.jsonl"
    assert tool.extract(str(tmp_path / "input.txt"), str(output), pretrained, layers="-1",
                        max_seq_length=16, batch_size=2, log=open(os.devnull, "w")) == 1
    record = json.loads(output.read_text())
    directory = open_model_dir(pretrained)
    inputs = directory.preprocessor(16)(tf.constant(["Hello world"]), tf.constant(["[MASK] it"]))
    tokens = [directory.vocabulary[i] for i in inputs["token_ids"][0].numpy()]
    assert [feature["token"] for feature in record["features"]] == tokens
    assert tokens[0] == "[CLS]" and "[MASK]" in tokens and tokens[-1] == "[SEP]"
    # Layer -1 is the last block's output, before ModernBERT's final norm (HF's hidden_states).
    last = directory.encoder(output_all_layers=True)(inputs)["encoder_outputs"][-1][0].numpy()
    np.testing.assert_allclose([f["layers"][0]["values"] for f in record["features"]], last,
                               atol=1e-5)


def test_token_classification_reads_a_sentence_past_bert_s_512_whole(pretrained, tmp_path):
    """max_seq_length up to the encoder's 8,192: a 1,000-piece sentence is one row (BERT's 512
    would read it as rows of whole words)."""
    words = _long_document().split()[:300]
    long = {"tokens": words, "ner_tags": ["B-LOC" if w.istitle() else "O" for w in words]}
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(row) + "\n" for row in [long] + [
        {"tokens": ["EU", "rejects", "German", "call"], "ner_tags": ["B-ORG", "O", "B-MISC", "O"]}]))
    model_dir = str(tmp_path / "tagger")
    results = run_finetuning("token_classification", pretrained, model_dir, train_file=str(train),
                             do_eval=False, **{**FAST, "max_seq_length": 1024})
    assert results["train_steps"] == 1 and np.isfinite(results["train_loss"]).all()
    model, record, _ = load_finetuned(model_dir)
    assert record.max_seq_length == 1024 and record.label_names == ["O", "B-LOC", "B-MISC", "B-ORG"]
    task = tasks.TokenClassificationTask.from_description(record.to_dict())
    sentences = task.examples_from_values([long["tokens"]], [long["ner_tags"]])
    preprocessor = open_model_dir(model_dir).preprocessor(1024)
    assert 512 < word_piece_counts(preprocessor, [words])[0].sum() <= 1022
    assert len(task.training_rows(sentences, preprocessor)) == 1
    assert len(task.training_rows(sentences, preprocessor.with_max_seq_length(512))) == 2
    (entities,) = (r["entities"] for r in task.predict_records(model, sentences, preprocessor, 4))
    assert all(" ".join(words)[e["start"]:e["end"]] == e["text"] for e in entities)
