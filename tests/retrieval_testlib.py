"""A tiny BEIR data set of real sentences and a tiny pre-trained encoder, for the retrieval tests.

Sentences come from the opening of Jane Austen's Emma (tests/testdata, public
domain); queries are each sentence's first six words, judged against it.
The encoder uses the 3003-line cut of bert-base-uncased's vocabulary, so
tokenization is real.
"""

from __future__ import annotations

import json
import os
import re

from tests.serving_testlib import REPO
from tests.serving_testlib import VOCAB
from tests.serving_testlib import tiny_encoder_kwargs
from tests.serving_testlib import vocab_size

EMMA = os.path.join(REPO, "tests", "testdata", "emma_chapter1.txt")


def sentences(count: int = 40) -> list[str]:
    """The first `count` sentences of over 30 characters, whitespace collapsed."""
    text = " ".join(open(EMMA, encoding="utf-8").read().split())
    found = [s for s in re.split(r"(?<=[.!?])\s+", text) if len(s) > 30]
    return found[:count]


def write_beir(directory: str, count: int = 40, train: int = 28) -> str:
    """corpus.jsonl, queries.jsonl, qrels/train.tsv (first `train`) and qrels/dev.tsv (the rest)."""
    texts = sentences(count)
    os.makedirs(os.path.join(directory, "qrels"), exist_ok=True)
    with open(os.path.join(directory, "corpus.jsonl"), "w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"_id": f"d{i}", "title": "", "text": text}) + "\n")
    with open(os.path.join(directory, "queries.jsonl"), "w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"_id": f"q{i}", "text": " ".join(text.split()[:6])}) + "\n")
    for split, rows in (("train", range(train)), ("dev", range(train, len(texts)))):
        with open(os.path.join(directory, "qrels", f"{split}.tsv"), "w") as f:
            f.write("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in rows))
    return directory


def make_pretrained(directory: str, seed: int = 3, hidden_dim: int | None = None) -> str:
    """A tiny pre-trained directory over the serving vocabulary."""
    import keras

    from kbert.checkpoints import save_pretrained
    from kbert.models import BertEncoder

    keras.utils.set_random_seed(seed)
    overrides = {"hidden_dim": hidden_dim} if hidden_dim else {}
    encoder = BertEncoder(**tiny_encoder_kwargs(vocabulary_size=vocab_size(), max_sequence_length=48,
                                                **overrides))
    save_pretrained(directory, encoder, vocab_file=VOCAB, do_lower_case=True)
    return directory
