"""Token classification files: the same sentences from every form and format, and bad rows named."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kbert.tasks import TaskData
from kbert.tasks import TokenClassificationConfig
from kbert.tasks import TokenClassificationTask
from kbert.tasks.token_classification.token_files import TokenReading
from kbert.tasks.token_classification.token_files import read_token_file

SENTENCES = [
    (["EU", "rejects", "German", "call", "."], ["B-ORG", "O", "B-MISC", "O", "O"]),
    (["Peter", "Blackburn", "visited", "Zürich", ",", "Switzerland", "."],
     ["B-PER", "I-PER", "O", "B-LOC", "O", "B-LOC", "O"]),
]
CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC
call NN I-NP O
. . O O

Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
visited VBD B-VP O
Zürich NNP B-NP B-LOC
, , O O
Switzerland NNP B-NP B-LOC
. . O O
"""
# The same sentences as spaCy writes them: text and [start, end, label] character spans.
SPANS = [
    {"text": "EU rejects German call.", "entities": [[0, 2, "ORG"], [11, 17, "MISC"]]},
    {"text": "Peter Blackburn visited Zürich, Switzerland.",
     "entities": [[0, 15, "PER"], [24, 30, "LOC"], [32, 43, "LOC"]]},
]
HF_NAMES = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows),
                    encoding="utf-8")
    return str(path)


def _pairs(sentences):
    return [(s.words, s.tags) for s in sentences]


def test_every_form_and_format_gives_the_same_sentences(tmp_path):
    (tmp_path / "train.conll").write_text(CONLL, encoding="utf-8")
    tokens = [{"id": i, "tokens": words, "ner_tags": tags}
              for i, (words, tags) in enumerate(SENTENCES)]
    csv = tmp_path / "train.csv"
    csv.write_text("id,tokens,ner_tags\n" + "".join(
        f"{i},\"{json.dumps(w, ensure_ascii=False).replace(chr(34), chr(34) * 2)}\","
        f"\"{json.dumps(t).replace(chr(34), chr(34) * 2)}\"\n"
        for i, (w, t) in enumerate(SENTENCES)), encoding="utf-8")
    pq.write_table(pa.table({"tokens": [w for w, _ in SENTENCES],
                             "ner_tags": [t for _, t in SENTENCES]}), tmp_path / "train.parquet")
    # doccano names the spans `label`; Hugging Face's datasets give class ids.
    doccano = [{"id": 7, "text": row["text"], "label": row["entities"]} for row in SPANS]
    ids = [{"tokens": w, "ner_tags": [HF_NAMES.index(tag) for tag in t]} for w, t in SENTENCES]
    files = {"conll": (str(tmp_path / "train.conll"), TokenReading()),
             "tokens": (_jsonl(tmp_path / "tokens.jsonl", tokens), TokenReading()),
             "spans": (_jsonl(tmp_path / "spans.jsonl", SPANS), TokenReading()),
             "doccano": (_jsonl(tmp_path / "doccano.jsonl", doccano), TokenReading()),
             "csv": (str(csv), TokenReading()),
             "parquet": (str(tmp_path / "train.parquet"), TokenReading()),
             "ids": (_jsonl(tmp_path / "ids.jsonl", ids), TokenReading(label_names=HF_NAMES))}
    read = {name: read_token_file(path, "train_file", reading)
            for name, (path, reading) in files.items()}
    for name, sentences in read.items():
        assert _pairs(sentences) == SENTENCES, name
    # Each row names its file and line (Parquet: its row).
    assert [s.source for s in read["conll"]] == [f"{files['conll'][0]}:3", f"{files['conll'][0]}:9"]
    assert read["spans"][1].source == f"{files['spans'][0]}:2"
    assert read["parquet"][1].source == f"{files['parquet'][0]} row 2"
    # A text keeps its characters: each word's offsets point into it.
    sentence = read["spans"][1]
    assert [sentence.text[a:b] for a, b in sentence.offsets] == sentence.words
    assert read["tokens"][1].text_and_offsets()[0] == " ".join(SENTENCES[1][0])


def test_columns_are_named_by_flags_and_forms_may_differ_between_files(tmp_path):
    rows = [{"words": w, "labels": t} for w, t in SENTENCES]
    reading = TokenReading(text_column="words", label_column="labels")
    assert _pairs(read_token_file(_jsonl(tmp_path / "a.jsonl", rows), "train_file", reading)) \
        == SENTENCES
    spans = [{"sentence": row["text"], "spans": row["entities"]} for row in SPANS]
    reading = TokenReading(text_column="sentence", label_column="spans")
    assert _pairs(read_token_file(_jsonl(tmp_path / "b.jsonl", spans), "train_file", reading)) \
        == SENTENCES
    # The task: a spans training file, a tokens validation file; the tags learned from training.
    task = TokenClassificationTask()
    data = TaskData(train_file=_jsonl(tmp_path / "train.jsonl", SPANS),
                    validation_file=_jsonl(tmp_path / "dev.jsonl",
                                           [{"tokens": w, "ner_tags": t} for w, t in SENTENCES]))
    train = task.read(data, "train")
    task.adapt(train)
    assert task.label_names == ["O", "B-LOC", "B-MISC", "B-ORG", "B-PER", "I-PER"]
    assert _pairs(task.read(data, "dev")) == SENTENCES
    assert task.describe()["text_column_names"] == ["text"]


@pytest.mark.parametrize("rows, message", [
    ([{"text": "I flew to Paris.", "entities": [[10, 14, "LOC"]]}],
     r"bad.jsonl:1: entity \[10, 14, 'LOC'\] 'Pari' does not fall on word boundaries: it ends "
     r"inside the word 'Paris' \(characters 10-15\)"),
    ([{"text": "New York City", "entities": [[0, 8, "LOC"], [4, 13, "LOC"]]}],
     r"bad.jsonl:1: entity \[4, 13, 'LOC'\] 'York City' overlaps entity \[0, 8, 'LOC'\] "
     r"'New York'"),
    ([{"text": "Paris", "entities": [[0, 9, "LOC"]]}],
     r"bad.jsonl:1: entity \[0, 9, 'LOC'\] is not inside the text's 5 characters"),
    ([{"tokens": ["EU", "rejects"], "ner_tags": ["B-ORG"]}],
     r"bad.jsonl:1: 2 words but 1 tags; give one tag per word"),
    ([{"tokens": ["EU"], "ner_tags": ["B-ORG"]}, {"tokens": ["EU"]}],
     r"bad.jsonl:2: no 'ner_tags' field \(or it is empty\); the row has \['tokens'\]"),
    ([{"words": ["EU"], "ner_tags": ["B-ORG"]}],
     r"--train_file=.*bad.jsonl: no 'tokens' column .* and no 'text' column .*; the columns are "
     r"\['words', 'ner_tags'\]. Name yours with --text_column_name"),
    ([{"tokens": ["EU"], "tags": ["B-ORG"]}],
     r"--train_file=.*bad.jsonl: no label column beside 'tokens': expected 'ner_tags'; the "
     r"columns are \['tokens', 'tags'\]"),
    ([{"tokens": ["EU", "rejects"], "ner_tags": [3, 0]}],
     r"bad.jsonl:1: the tags are class ids \(\[3, 0\]\); set "
     r"TokenClassificationConfig.label_names"),
    ([{"text": "EU rejects it.", "tags": ["B-ORG", "O", "O"]}],
     r"bad.jsonl:1: the text splits into 4 words \(at whitespace and punctuation\) but 3 tags"),
])
def test_bad_rows_are_refused_naming_file_and_line(tmp_path, rows, message):
    path = _jsonl(tmp_path / "bad.jsonl", rows)
    columns = TokenReading(label_column="tags") if "tags" in rows[0] and "text" in rows[0] else \
        TokenReading()
    with pytest.raises(ValueError, match=message):
        read_token_file(path, "train_file", columns)


def test_a_tag_the_training_file_lacks_is_refused_in_validation_and_test(tmp_path):
    task = TokenClassificationTask()
    data = TaskData(train_file=_jsonl(tmp_path / "train.jsonl", SPANS[:1]),
                    validation_file=_jsonl(tmp_path / "dev.jsonl", SPANS),
                    test_file=_jsonl(tmp_path / "test.jsonl", [{"text": "EU calls."}]))
    task.adapt(task.read(data, "train"))
    with pytest.raises(ValueError, match=r"dev.jsonl:2: tag 'B-PER' is not in the tags "
                                         r"\['O', 'B-MISC', 'B-ORG'\]"):
        task.read(data, "dev")
    # A test file without labels is read to predict.
    assert [s.tags for s in task.read(data, "test")] == [None]


def test_given_tag_names_order_the_logits_and_refuse_others(tmp_path):
    config = TokenClassificationConfig(label_names=HF_NAMES)
    task = TokenClassificationTask(config)
    data = TaskData(train_file=_jsonl(tmp_path / "train.jsonl", SPANS))
    task.adapt(task.read(data, "train"))
    assert task.label_names == HF_NAMES
    restored = TokenClassificationTask.from_description(task.describe())
    assert restored.label_names == HF_NAMES and restored.config == task.config
    narrow = TokenClassificationTask(TokenClassificationConfig(label_names=["O", "B-ORG"]))
    with pytest.raises(ValueError, match=r"train.jsonl:1: tag 'B-MISC' is not in the tags "
                                         r"\['O', 'B-ORG'\] \(TokenClassificationConfig"):
        narrow.adapt(narrow.read(data, "train"))
