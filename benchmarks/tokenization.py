"""Benchmark: tokenization MB/s and WordPiece vocabulary learning seconds.

1. Tokenization of the shared Gutenberg corpus with the bert-base-uncased
   vocabulary: `kbert.data.BertTokenizer` (FastBertTokenizer + the original's
   normalization) inside a tf.data pipeline, vs Hugging Face `tokenizers`'
   BertWordPieceTokenizer `encode_batch` on the same lines.
2. Vocabulary learning (30522 tokens): `kbert.data.build_vocab` (HF
   WordPieceTrainer) on ~20 MB (Gutenberg + WikiText-2, repeated to 20 MB); and
   on a --tftext_mb slice of the same text, both `build_vocab` and
   tensorflow-text's `bert_vocab_from_dataset` (which is too slow for 20 MB
   here): the ratio compares the two tools on the same text, nothing is
   extrapolated. On a slice this small neither reaches 30,522 tokens; both
   counts are printed.

    python benchmarks/tokenization.py [--data_dir=../shared/data]

Writes benchmarks/results/tokenization.json (benchmarks/result_file.py).
"""

import argparse
import glob
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import tensorflow as tf  # noqa: E402

from benchmarks import result_file  # noqa: E402
from kbert.data import BertTokenizer  # noqa: E402
from kbert.data import build_vocab  # noqa: E402



def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vocab_file", default=None,
                        help="Default: vocab/bert-base-uncased-vocab.txt under --data_dir.")
    parser.add_argument("--tftext_mb", type=float, default=1.0)
    result_file.add_flags(parser, "tokenization")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    args.vocab_file = args.vocab_file or os.path.join(args.data_dir, "vocab",
                                                      "bert-base-uncased-vocab.txt")
    with result_file.scratch_dir(args) as tmp:
        measure(args, tmp, load)


def measure(args, tmp: str, load: float) -> None:
    """Runs both parts in `tmp` and writes the result."""
    files = sorted(glob.glob(os.path.join(args.data_dir, "corpus", "gutenberg", "*.txt")))
    lines = []
    for f in files:
        lines.extend(line.strip() for line in open(f, encoding="latin-1") if line.strip())
    mb = sum(len(line.encode("utf-8")) + 1 for line in lines) / 1e6
    text_file = os.path.join(tmp, "gutenberg.txt")
    open(text_file, "w", encoding="utf-8").write("\n".join(lines) + "\n")

    tokenizer = BertTokenizer(args.vocab_file, do_lower_case=True)
    ds = tf.data.TextLineDataset(text_file).batch(1024).map(tokenizer.tokenize, num_parallel_calls=tf.data.AUTOTUNE)
    for _ in ds.take(1):
        pass
    start = time.time()
    kbert_tokens = sum(int(t.flat_values.shape[0]) for t in ds)
    kbert_s = time.time() - start

    from tokenizers import BertWordPieceTokenizer

    hf = BertWordPieceTokenizer(args.vocab_file, lowercase=True)
    start = time.time()
    hf_tokens = 0
    for i in range(0, len(lines), 1024):
        hf_tokens += sum(len(e.ids) - 2 for e in hf.encode_batch(lines[i : i + 1024]))
    hf_s = time.time() - start
    print(f"tokenization, {mb:.2f} MB: kbert tf.data {mb / kbert_s:.2f} MB/s ({kbert_tokens} tokens), "
          f"HF tokenizers {mb / hf_s:.2f} MB/s ({hf_tokens} tokens), ratio {hf_s / kbert_s:.2f}", flush=True)

    # Vocabulary learning.
    corpus = files + sorted(glob.glob(os.path.join(args.data_dir, "corpus", "wikitext-2", "*.txt")))
    big = os.path.join(tmp, "big.txt")
    with open(big, "w", encoding="utf-8") as out:
        written = 0
        while written < 20e6:
            for f in corpus:
                text = open(f, encoding="latin-1").read().replace("\r\n", "\n")
                out.write(text + "\n\n")
                written += len(text.encode("utf-8"))
    big_mb = os.path.getsize(big) / 1e6
    start = time.time()
    result = build_vocab(big, os.path.join(tmp, "vocab.txt"), vocab_size=30522)
    kbert_vocab_s = time.time() - start
    print(f"vocab learning: kbert build_vocab {big_mb:.1f} MB -> {result['vocab_size']} tokens in {kbert_vocab_s:.1f} s", flush=True)

    # The Hugging Face trainer alone, as build_vocab called it before it made
    # the output deterministic: what the alphabet pass and the fixed ## ids cost.
    from tokenizers import Tokenizer
    from tokenizers import models
    from tokenizers import normalizers
    from tokenizers import pre_tokenizers
    from tokenizers import trainers

    def big_lines():
        with open(big, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield line.strip()

    plain = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    plain.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    plain.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    start = time.time()
    plain.train_from_iterator(big_lines(), trainer=trainers.WordPieceTrainer(
        vocab_size=30522, min_frequency=2, show_progress=False, continuing_subword_prefix="##",
        special_tokens=["[PAD]", *(f"[unused{i}]" for i in range(99)), "[UNK]", "[CLS]", "[SEP]", "[MASK]"]))
    plain_s = time.time() - start
    print(f"vocab learning: HF WordPieceTrainer alone (not deterministic) {big_mb:.1f} MB in {plain_s:.1f} s; "
          f"build_vocab / trainer alone {kbert_vocab_s / plain_s:.2f}x", flush=True)

    from tensorflow_text.tools.wordpiece_vocab import bert_vocab_from_dataset as bvd

    slice_lines, size = [], 0
    for line in open(big, encoding="utf-8"):
        slice_lines.append(line.strip())
        size += len(line.encode("utf-8"))
        if size >= args.tftext_mb * 1e6:
            break
    slice_file = os.path.join(tmp, "slice.txt")
    with open(slice_file, "w", encoding="utf-8") as f:
        f.write("\n".join(slice_lines) + "\n")
    start = time.time()
    sliced = build_vocab(slice_file, os.path.join(tmp, "slice_vocab.txt"), vocab_size=30522)
    kbert_slice_s = time.time() - start
    dataset = tf.data.Dataset.from_tensor_slices(slice_lines).batch(1000)
    start = time.time()
    vocab = bvd.bert_vocab_from_dataset(
        dataset, vocab_size=30522, reserved_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
        bert_tokenizer_params={"lower_case": True})
    tftext_s = time.time() - start
    print(f"vocab learning, the same {size / 1e6:.1f} MB slice: tensorflow-text "
          f"bert_vocab_from_dataset -> {len(vocab)} tokens in {tftext_s:.1f} s; kbert build_vocab "
          f"-> {sliced['vocab_size']} tokens in {kbert_slice_s:.1f} s; tensorflow-text / kbert "
          f"{tftext_s / kbert_slice_s:.1f}x the time")
    result_file.write_result(
        args, name="tokenization", title="Tokenization and vocabulary learning",
        area="pre-training data", load_average_at_start=load,
        headline=f"WordPiece tokenization {hf_s / kbert_s:.2f}x Hugging Face tokenizers "
                 f"({mb / kbert_s:.2f} vs {mb / hf_s:.2f} MB/s); deterministic 30k vocabulary from "
                 f"{big_mb:.0f} MB in {kbert_vocab_s:.1f} s.",
        reference="HF tokenizers encode_batch; the HF WordPiece trainer alone; tensorflow-text "
                  "bert_vocab_from_dataset on the same slice",
        aim="a 30k vocabulary from 20 MB in under 30 s", met=kbert_vocab_s < 30 * big_mb / 20,
        figures={"tokenize_mb_per_s": {"kbert": round(mb / kbert_s, 2), "hf_tokenizers": round(mb / hf_s, 2),
                                       "ratio": round(hf_s / kbert_s, 2)},
                 "tokens": {"kbert": kbert_tokens, "hf_tokenizers": hf_tokens},
                 "vocab_seconds": {"megabytes": round(big_mb, 1), "build_vocab": round(kbert_vocab_s, 1),
                                   "hf_trainer_alone": round(plain_s, 1)},
                 "vocab_slice": {"megabytes": round(size / 1e6, 2), "build_vocab_s": round(kbert_slice_s, 1),
                                 "build_vocab_tokens": sliced["vocab_size"],
                                 "tensorflow_text_s": round(tftext_s, 1), "tensorflow_text_tokens": len(vocab),
                                 "ratio": round(tftext_s / kbert_slice_s, 1)}},
        method=__doc__.split("\n\n    python")[0].split("\n\n", 1)[1])


if __name__ == "__main__":
    main()
