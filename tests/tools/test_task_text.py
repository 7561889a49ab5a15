"""tools/task_text.py: a task's training inputs as a pre-training corpus, never a label."""

import csv
import os

from tests.conftest import REPO
from tests.conftest import load_tool

DATA = os.path.join(REPO, "tests", "testdata", "finetune")


def _tool():
    return load_tool("task_text")


def _tsv(path):
    with open(path, encoding="utf-8-sig", newline="") as f:
        return list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def test_glue_sst2_writes_each_sentence_and_no_label(tmp_path, capsys):
    output = tmp_path / "tapt" / "sst2.txt"
    tool = _tool()
    # The command line, parsed and run in this process (a subprocess would start TF again).
    tool.FLAGS(["task_text.py", "--task=glue", "--task_name=SST-2",
                f"--data_dir={os.path.join(DATA, 'glue', 'SST-2')}", f"--output_file={output}"])
    try:
        tool.main(["task_text.py"])
    finally:
        tool.FLAGS.unparse_flags()
    stdout = capsys.readouterr().out
    rows = _tsv(os.path.join(DATA, "glue", "SST-2", "train.tsv"))[1:]
    text = output.read_text(encoding="utf-8")
    # One document per example: its sentence, a blank line between documents.
    assert text == "\n\n".join(" ".join(row[0].split()) for row in rows) + "\n"
    assert not any(line.strip() in ("0", "1") for line in text.splitlines())
    assert f"wrote {len(rows)} documents, {len(rows)} lines" in stdout
    assert os.listdir(output.parent) == ["sst2.txt"]


def test_glue_pair_task_writes_both_sentences_as_one_document():
    documents = _tool().task_documents("glue", "MRPC", os.path.join(DATA, "glue", "MRPC"),
                                       None, None)
    rows = _tsv(os.path.join(DATA, "glue", "MRPC", "train.tsv"))[1:]
    assert documents == [[" ".join(row[3].split()), " ".join(row[4].split())] for row in rows]


def test_conll_writes_the_words_of_each_sentence_and_no_tag():
    documents = _tool().task_documents("ner", None, os.path.join(DATA, "conll2003"), None, None)
    sentences, words, all_words, all_tags = [], [], set(), set()
    for line in open(os.path.join(DATA, "conll2003", "train.txt"), encoding="utf-8"):
        fields = line.split()
        if fields and fields[0] != "-DOCSTART-":
            words.append(fields[0])
            all_words.add(fields[0])
            all_tags.update(fields[1:])  # part of speech, chunk and entity tags
        elif words:
            sentences.append(" ".join(words))
            words = []
    if words:
        sentences.append(" ".join(words))
    assert documents == [[s] for s in dict.fromkeys(sentences)]
    written = {token for document in documents for line in document for token in line.split()}
    assert written == all_words and not written & (all_tags - all_words)
    assert "B-ORG" in all_tags and "B-ORG" not in written


def test_squad_writes_each_paragraph_once_then_its_questions():
    import json

    path = os.path.join(DATA, "squad", "xquad_en_sample.json")
    documents = _tool().task_documents("squad", None, None, path, None)
    paragraphs = [p for article in json.load(open(path, encoding="utf-8"))["data"]
                  for p in article["paragraphs"]]
    assert len(documents) == 2 * len(paragraphs)
    for paragraph, (sentences, questions) in zip(paragraphs, zip(documents[::2], documents[1::2])):
        assert " ".join(sentences) == " ".join(paragraph["context"].split())
        assert questions == [" ".join(qa["question"].split()) for qa in paragraph["qas"]]
