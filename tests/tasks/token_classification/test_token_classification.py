"""--task=token_classification end to end: a tag set of its own (CoNLL-2003's chunks in IOBES) with a
CRF, files of three forms, the export serving Keras' tags; bad files refused before anything is
written."""

import json
import os

import pytest
import tensorflow as tf

from tests.finetune_testing import TESTDATA
from tests.finetune_testing import make_tiny_pretrained
from kbert.checkpoints import load_finetuned
from kbert.data import TextPreprocessor
from kbert.data.words import word_spans
from kbert.layers.crf import first_forbidden
from kbert.tasks import TaskData
from kbert.tasks import TokenClassificationConfig
from kbert.tasks import TokenClassificationTask
from kbert.tasks.token_classification.conll import read_conll
from kbert.training.finetuning import run_finetuning

CONLL = os.path.join(TESTDATA, "conll2003")
FAST = dict(train_batch_size=4, eval_batch_size=8, learning_rate=3e-3, warmup_proportion=0.0,
            max_seq_length=64, verbose=0)


def iobes(tags):
    """IOB2 tags as IOBES: a one-word entity is S-, an entity's last word E-."""
    found = []
    for index, tag in enumerate(tags):
        following = tags[index + 1] if index + 1 < len(tags) else "O"
        if tag == "O":
            found.append(tag)
            continue
        goes_on = following == "I-" + tag[2:]
        found.append(("B-" if goes_on else "S-") + tag[2:] if tag[0] == "B"
                     else ("I-" if goes_on else "E-") + tag[2:])
    return found


def chunk_sentences(name):
    """The CoNLL-2003 sentences of one test file with their chunk tags (its third column), IOBES."""
    sentences, words, tags = [], [], []
    for line in open(os.path.join(CONLL, name), encoding="utf-8").read().split("\n") + [""]:
        columns = line.split()
        if columns and columns[0] != "-DOCSTART-":
            words.append(columns[0])
            tags.append(columns[2])
        elif not columns and words:
            sentences.append((words, iobes(tags)))
            words, tags = [], []
    return sentences


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("chunks")
    # Every file's sentences to train on: the small test files hold tags the others lack.
    dev = chunk_sentences("valid.txt")
    train = chunk_sentences("train.txt") + dev + chunk_sentences("test.txt")
    (root / "train.conll").write_text("\n\n".join(
        "\n".join(f"{w} {t}" for w, t in zip(words, tags)) for words, tags in train) + "\n")
    (root / "dev.jsonl").write_text("".join(
        json.dumps({"tokens": words, "ner_tags": tags}) + "\n" for words, tags in dev))
    # To predict: texts without labels.
    (root / "test.jsonl").write_text("".join(
        json.dumps({"id": i, "text": " ".join(words)}) + "\n" for i, (words, _) in enumerate(dev)))
    return {name: str(root / name) for name in ("train.conll", "dev.jsonl", "test.jsonl")}


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return make_tiny_pretrained(tmp_path_factory.mktemp("tiny") / "pretrained")


def test_a_crf_over_iobes_chunk_tags_trains_predicts_and_serves_its_tags(files, pretrained,
                                                                         tmp_path):
    # One run for all of it: each fine-tuning traces a model, seconds on a shared CPU.
    model_dir = str(tmp_path / "chunks")
    results = run_finetuning(
        "token_classification", pretrained, model_dir, train_file=files["train.conll"],
        validation_file=files["dev.jsonl"], test_file=files["test.jsonl"], do_predict=True,
        num_train_epochs=2, task_options=TokenClassificationConfig(
            use_crf=True, crf_learning_rate_multiplier=10.0), **FAST)
    assert results["train_loss"][-1] < results["train_loss"][0], results["train_loss"]
    assert set(results) >= {"precision", "recall", "f1", "per_type", "accuracy", "baseline"}
    assert set(results["per_type"]) <= {"NP", "VP", "PP", "ADVP", "ADJP", "SBAR", "PRT"}
    assert results["baseline"]["predicts"].startswith("each word's most frequent training tag")
    model, config, vocab_file = load_finetuned(model_dir)
    tags = sorted({t for name in ("train.txt", "valid.txt", "test.txt")
                   for _, tags in chunk_sentences(name) for t in tags},
                  key=lambda tag: (tag != "O", tag))
    assert (config.task, config.label_names, config.options["use_crf"]) == (
        "token_classification", tags, True)
    assert "text_column_names" not in config.options  # a CoNLL file has no columns
    # The CRF forbids what IOBES forbids: an entity left open at the end, too.
    assert model.crf_allowed_ends == [not t.startswith(("B-", "I-")) for t in tags]
    task = TokenClassificationTask.from_description(config.to_dict())
    dev = task.read(TaskData(validation_file=files["dev.jsonl"]), "dev")
    preprocessor = TextPreprocessor.from_vocab_file(vocab_file, config.do_lower_case, 64)
    predicted, _ = task.tag_words(model, dev, preprocessor, 8)
    assert all(first_forbidden(t, tags, "IOBES") is None for t in predicted)
    # predictions.tsv: the test file's texts split into words at whitespace and punctuation.
    lines = [line.split("\t") for line in open(os.path.join(model_dir, "predictions.tsv"))
             .read().splitlines() if line]
    texts = [" ".join(s.words) for s in dev]
    assert [word for word, _ in lines] == [text[a:b] for text in texts
                                           for a, b in word_spans(text, split_punctuation=True)]
    assert "1996-08-30" in texts[1] and ["1996", "-", "08"] == [w for w, _ in lines][12:15]
    # The served graph finds the same words in a text and tags a text of one window as Keras
    # does, Viterbi in the graph (test_crf.py exports and serves a CRF tagger through TF Serving).
    short = [text for text in texts if len(text) <= 62]  # a character is a piece
    short += ["EU rejects German call.", "Peter Blackburn (BRUSSELS)"]
    module = task.serving_module(model, preprocessor)
    served = module.signatures()["serving_default"](tf.constant(short))
    served_tags = [[t.decode() for t in row[:n]] for row, n in zip(served["tags"].numpy(),
                                                                   served["num_words"].numpy())]
    keras_tags, _ = task.tag_words(model, task.examples_from_values(short), preprocessor, 8)
    assert served_tags == keras_tags and len(served_tags[0]) == 6  # LONDON 1996 - 08 - 30


def test_an_iob1_file_is_refused_with_a_constrained_crf(tmp_path):
    path = tmp_path / "train.conll"
    path.write_text("EU B-ORG\nrejects O\n\nPeter I-PER\nBlackburn I-PER\n")
    task = TokenClassificationTask(TokenClassificationConfig(use_crf=True))
    with pytest.raises(ValueError, match=r"train.conll:4: the sentence starts with 'I-PER', which "
                                         r"IOB2 tags do not allow \(an IOB1 file\?\); convert the "
                                         r"tags to IOB2, or set TokenClassificationConfig"
                                         r".crf_bio_constraints = False"):
        task.adapt(task.read(TaskData(train_file=str(path)), "train"))
    unconstrained = TokenClassificationTask(TokenClassificationConfig(
        use_crf=True, crf_bio_constraints=False))
    unconstrained.adapt(unconstrained.read(TaskData(train_file=str(path)), "train"))
    assert unconstrained.label_names == ["O", "B-ORG", "I-PER"]


BAD = {
    "span off the words": ('{"text": "I flew to Paris.", "entities": [[10, 14, "LOC"]]}\n',
                           r"train.jsonl:1: entity \[10, 14, 'LOC'\] 'Pari' does not fall on word "
                           r"boundaries"),
    "overlapping spans": ('{"text": "New York", "entities": [[0, 8, "LOC"]]}\n'
                          '{"text": "New York", "entities": [[0, 3, "LOC"], [0, 8, "ORG"]]}\n',
                          r"train.jsonl:2: entity .* overlaps entity"),
    "no ner_tags": ('{"tokens": ["EU"], "ner_tags": ["B-ORG"]}\n{"tokens": ["EU"]}\n',
                    r"train.jsonl:2: no 'ner_tags' field"),
    "lengths differ": ('{"tokens": ["EU", "rejects"], "ner_tags": ["B-ORG"]}\n',
                       r"train.jsonl:1: 2 words but 1 tags"),
    "a dev tag not in training": ('{"tokens": ["EU", "rejects"], "ner_tags": ["B-ORG", "O"]}\n',
                                  r"dev.jsonl:2: tag 'B-PER' is not in the tags \['O', 'B-ORG'\] "
                                  r"\(learned from the training data\)"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_files_are_refused_before_anything_is_written(case, pretrained, tmp_path):
    train, message = BAD[case]
    (tmp_path / "train.jsonl").write_text(train)
    (tmp_path / "dev.jsonl").write_text('{"tokens": ["EU"], "ner_tags": ["O"]}\n'
                                        '{"tokens": ["Peter"], "ner_tags": ["B-PER"]}\n')
    model_dir = tmp_path / "run"
    with pytest.raises(ValueError, match=message):
        run_finetuning("token_classification", pretrained, str(model_dir),
                       train_file=str(tmp_path / "train.jsonl"),
                       validation_file=str(tmp_path / "dev.jsonl"), **FAST)
    assert not model_dir.exists()


def test_ner_reads_conll_2003_as_before():
    sentences = read_conll(os.path.join(CONLL, "valid.txt"))
    task = TokenClassificationTask()
    task.adapt(sentences)
    # The tags learned from the file are CoNLL-2003's (those it holds), `O` first.
    assert task.label_names[0] == "O" and set(task.label_names) <= {
        "O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"}
