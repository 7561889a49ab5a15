"""XQuAD-ReQA: XQuAD-en as a sentence-retrieval data set in BEIR format.

ReQA (Ahmad et al., 2019) turns a QA set into retrieval: every question is
searched against every sentence of every context, and the gold sentence is
the one holding the answer. Sentences come from tensorflow-text's
`StateBasedSentenceBreaker` (1,352 of them in XQuAD-en's 240 contexts).
Questions of every third article (articles 2, 5, 8, ...; the held-out third of
benchmarks/finetuning_quality.py) are the `dev` split, the others `train`.

    PYTHONPATH=. python tools/make_xquad_reqa.py \\
        --xquad=../shared/data/squad/xquad.en.json --output_dir=data/xquad-reqa

Writes corpus.jsonl, queries.jsonl, qrels/train.tsv, qrels/dev.tsv (and a
README.md with the counts) atomically.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def sentences_with_offsets(contexts: list[str]) -> list[list[tuple[str, int, int]]]:
    """Each context's sentences with their character start and end."""
    import tensorflow as tf
    import tensorflow_text as tf_text

    breaker = tf_text.StateBasedSentenceBreaker()
    fragments, starts, ends = breaker.break_sentences_with_offsets(tf.constant(contexts))
    result = []
    for context, texts, begin, end in zip(contexts, fragments.to_list(), starts.to_list(), ends.to_list()):
        raw = context.encode("utf-8")
        # Offsets are bytes; characters are what SQuAD's answer_start counts.
        result.append([(text.decode("utf-8").strip(), len(raw[:b].decode("utf-8", "ignore")),
                        len(raw[:e].decode("utf-8", "ignore"))) for text, b, e in zip(texts, begin, end)])
    return result


def make_reqa(xquad: dict, held_out_every: int = 3) -> tuple[list, list, dict, dict]:
    """corpus rows, query rows, train qrels, dev qrels of the ReQA form of a SQuAD file."""
    paragraphs = [(a, p, paragraph) for a, article in enumerate(xquad["data"])
                  for p, paragraph in enumerate(article["paragraphs"])]
    split = sentences_with_offsets([paragraph["context"] for _, _, paragraph in paragraphs])
    corpus, queries, qrels = [], [], {"train": {}, "dev": {}}
    for (a, p, paragraph), sentences in zip(paragraphs, split):
        ids = [f"a{a}-p{p}-s{s}" for s in range(len(sentences))]
        corpus += [{"_id": i, "title": "", "text": text} for i, (text, _, _) in zip(ids, sentences)]
        for qa in paragraph["qas"]:
            start = qa["answers"][0]["answer_start"]
            gold = next((i for i, (_, b, e) in zip(ids, sentences) if b <= start < e), ids[-1])
            queries.append({"_id": qa["id"], "text": qa["question"]})
            name = "dev" if a % held_out_every == held_out_every - 1 else "train"
            qrels[name][qa["id"]] = {gold: 1}
    return corpus, queries, qrels["train"], qrels["dev"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--xquad", required=True, help="xquad.en.json (SQuAD v1.1 format).")
    parser.add_argument("--output_dir", required=True, help="BEIR folder to write.")
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from kbert.files import atomic_directory
    from kbert.retrieval.beir import format_qrels
    from kbert.retrieval.beir import write_jsonl

    with open(args.xquad, encoding="utf-8") as f:
        corpus, queries, train, dev = make_reqa(json.load(f))
    with atomic_directory(args.output_dir, overwrite=True) as out:
        os.makedirs(os.path.join(out, "qrels"))
        for name, text in (("corpus.jsonl", write_jsonl("", corpus)),
                           ("queries.jsonl", write_jsonl("", queries)),
                           ("qrels/train.tsv", format_qrels(train)), ("qrels/dev.tsv", format_qrels(dev)),
                           ("README.md", f"XQuAD-ReQA made by tools/make_xquad_reqa.py from {args.xquad}: "
                                         f"{len(corpus)} sentences, {len(train)} train and {len(dev)} dev "
                                         "questions (every third article). CC BY-SA 4.0, as XQuAD.\n")):
            with open(os.path.join(out, name), "w", encoding="utf-8") as f:
                f.write(text)
    print(f"wrote {args.output_dir}: {len(corpus)} sentences, {len(train)} train / {len(dev)} dev questions")


if __name__ == "__main__":
    main()
