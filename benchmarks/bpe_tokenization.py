"""Benchmark: byte-level BPE (ModernBERT's kind) tokenization MB/s, kbert's graph vs `tokenizers`.

`kbert.data.ByteLevelBpeTokenizer` in a `tf.function` (as in tf.data and in a
SavedModel) against the Hugging Face `tokenizers` library's `encode_batch`
(Rust, its own threads) with the same `tokenizer.json`, on the paragraphs of
tests/testdata/austen-persuasion-head.txt (best of --repeats); the ids are
checked equal first.

    python benchmarks/bpe_tokenization.py [--tokenizer_json=PATH]

Writes benchmarks/results/bpe_tokenization.json (benchmarks/result_file.py).
"""

import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tensorflow as tf  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from kbert.data import ByteLevelBpeTokenizer  # noqa: E402
from benchmarks import result_file  # noqa: E402
from kbert.data import read_tokenizer_json  # noqa: E402

TESTDATA = os.path.join(ROOT, "tests", "testdata")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokenizer_json", default=os.path.join(TESTDATA, "bpe_tokenizer.json"))
    parser.add_argument("--repeats", type=int, default=5)
    result_file.add_flags(parser, "bpe_tokenization")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with open(os.path.join(TESTDATA, "austen-persuasion-head.txt"), encoding="utf-8") as f:
        paragraphs = [p for p in f.read().split("\n\n") if p.strip()]
    paragraphs = (paragraphs * 4)[:256]
    megabytes = sum(len(p.encode("utf-8")) for p in paragraphs) / 1e6
    reference = Tokenizer.from_file(args.tokenizer_json)
    tokenizer = ByteLevelBpeTokenizer(read_tokenizer_json(args.tokenizer_json))
    graph = tf.function(tokenizer.tokenize, input_signature=[tf.TensorSpec([None], tf.string)])
    texts = tf.constant(paragraphs)
    ids = graph(texts).to_list()
    assert ids == [e.ids for e in reference.encode_batch(paragraphs, add_special_tokens=False)]
    print(f"{len(paragraphs)} paragraphs, {megabytes * 1e3:.0f} kB, {sum(map(len, ids))} tokens")
    rates = {}
    for name, run in (("kbert ByteLevelBpeTokenizer (tf.function)", lambda: graph(texts)),
                      ("tokenizers encode_batch", lambda: reference.encode_batch(
                          paragraphs, add_special_tokens=False))):
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
        rates[name.split()[0]] = megabytes / best
        print(f"{name}: {best * 1e3:.1f} ms, {megabytes / best:.2f} MB/s")
    ratio = rates["kbert"] / rates["tokenizers"]
    result_file.write_result(
        args, name="bpe_tokenization", title="Byte-level BPE tokenization vs tokenizers",
        area="pre-training data", load_average_at_start=load,
        headline=f"Byte-level BPE (ModernBERT's kind) in a tf.function: {rates['kbert']:.2f} MB/s, "
                 f"{ratio:.2f}x Hugging Face tokenizers ({rates['tokenizers']:.2f} MB/s), same ids.",
        reference="Hugging Face tokenizers' encode_batch with the same tokenizer.json, same run",
        aim="", met=None,
        figures={"mb_per_s": {k: round(v, 3) for k, v in rates.items()}, "ratio": round(ratio, 3),
                 "paragraphs": len(paragraphs), "tokens": sum(map(len, ids))},
        method="The paragraphs of tests/testdata/austen-persuasion-head.txt (four times over, at most 256), "
               "tokenized by `kbert.data.ByteLevelBpeTokenizer` in a `tf.function` (as in tf.data "
               "and a SavedModel) and by `tokenizers`' `encode_batch` (Rust, its own threads); "
               "the ids are checked equal first; best of --repeats.")


if __name__ == "__main__":
    main()
