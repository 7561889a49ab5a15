"""ELECTRA vs BERT at the same training FLOPs, same corpus, same encoder: losses and SST-2.

    PYTHONPATH=. python benchmarks/electra_vs_bert.py [--work_dir=electra_bench] [--data_dir=../shared/data]

Both pre-train the same encoder (by default L=4, H=256, A=4, I=1024 with 128-wide embeddings
projected to 256: ELECTRA-Small's shape at a third of its depth) on WikiText-2 (valid + test,
from corpus/ under --data_dir, cut into sentences) with a vocabulary learned on it, static
no NSP, the same batch, learning rate schedule and precision, masked anew in every batch
(dynamic masking: BERT 80/10/10, ELECTRA google-research/electra's 85% [MASK] / 15% kept).
BERT trains with masked-LM; ELECTRA trains the encoder as the discriminator of a generator
1/4 as wide (`ElectraPretrainer`, lambda 50). ELECTRA's step costs more (the generator and the
per-token head), so BERT runs as many steps as give the same training FLOPs (6 x matmul
weights x tokens + attention + heads, counted for both networks; `--electra_steps` sets
ELECTRA's). Each encoder is then fine-tuned on SST-2 (a seeded subset of train, the full dev
set) with the same settings, and so is a randomly initialised encoder: the reference measured
in the same run. Prints the loss curves against FLOPs and the dev accuracies; writes
`results.json` under `--work_dir` and benchmarks/results/electra_vs_bert.json
(benchmarks/result_file.py).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks import result_file  # noqa: E402
from kbert.checkpoints import save_pretrained  # noqa: E402
from kbert.data import build_vocab  # noqa: E402
from kbert.data import MaskingConfig  # noqa: E402
from kbert.data import create_pretraining_data  # noqa: E402
from kbert.models import BertEncoder  # noqa: E402
from kbert.models import BertPretrainer  # noqa: E402
from kbert.models import ElectraPretrainer  # noqa: E402
from kbert.training import run_pretraining  # noqa: E402
from kbert.training.finetuning import run_finetuning  # noqa: E402

SEQ, PREDICTIONS = 128, 20


def wikitext_sentences(data_dir: str, output: str) -> str:
    """WikiText-2 valid + test as the data tool's input: a sentence per line, articles apart."""
    lines = []
    for split in ("valid", "test"):
        with open(os.path.join(data_dir, "corpus", "wikitext-2", f"{split}.txt"),
                  encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if re.fullmatch(r"= [^=].* =", line):  # an article title starts a document
                    lines.append("")
                elif line and not line.startswith("= ="):  # section headings are dropped
                    lines += re.split(r"(?<= \.) ", line)
    with open(output, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return output


def sst2_subset(data_dir: str, target: str, train_size: int, seed: int) -> str:
    """A seeded sample of SST-2 train and the whole dev set, in GLUE's layout."""
    source = os.path.join(data_dir, "glue", "SST-2")
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(source, "train.tsv"), encoding="utf-8") as f:
        header, *rows = f.read().rstrip("\n").split("\n")
    rows = random.Random(seed).sample(rows, min(train_size, len(rows)))
    with open(os.path.join(target, "train.tsv"), "w", encoding="utf-8") as f:
        f.write("\n".join([header] + rows) + "\n")
    with open(os.path.join(source, "dev.tsv"), encoding="utf-8") as f, \
            open(os.path.join(target, "dev.tsv"), "w", encoding="utf-8") as out:
        out.write(f.read())
    return target


def encoder_flops_per_token(L, H, I, E, V):
    """Forward + backward FLOPs per token of an encoder: 6 x matmul weights + attention."""
    matmul = L * (4 * H * H + 2 * H * I) + (E * H if E != H else 0)
    attention = L * 2 * 2 * SEQ * H  # QK^T and AV per token
    return 6 * matmul + 3 * attention


def step_flops(kind, args, vocabulary_size):
    """Training FLOPs of one step of `kind` ("bert" or "electra") at the benchmark's batch."""
    L, H, I, E = args.layers, args.hidden, args.intermediate, args.embedding
    tokens = args.batch * SEQ
    predictions = args.batch * PREDICTIONS * 0.98  # masking fills ~98% of the slots
    mlm_head = lambda hidden: 6 * predictions * (hidden * E + E * vocabulary_size)  # noqa: E731
    if kind == "bert":
        return tokens * encoder_flops_per_token(L, H, I, E, vocabulary_size) + mlm_head(H)
    G = round(H * args.generator_hidden_size)
    generator = tokens * encoder_flops_per_token(L, G, 4 * G, E, vocabulary_size) + mlm_head(G)
    discriminator = tokens * (encoder_flops_per_token(L, H, I, E, vocabulary_size) + 6 * (H * H + H))
    return generator + discriminator


def encoder(args, vocabulary_size, dropout=0.1):
    return BertEncoder(vocabulary_size=vocabulary_size, num_layers=args.layers,
                       num_heads=args.heads, hidden_dim=args.hidden,
                       intermediate_dim=args.intermediate, max_sequence_length=SEQ,
                       embedding_dim=args.embedding, dropout=dropout)


def pretrain(kind, steps, args, files, vocab_file, vocabulary_size):
    model_dir = os.path.join(args.work_dir, kind)
    build = (lambda: BertPretrainer(encoder(args, vocabulary_size), next_sentence=False)) \
        if kind == "bert" else (lambda: ElectraPretrainer(
            encoder(args, vocabulary_size), generator_hidden_size=args.generator_hidden_size))
    lines = []

    def log(line):
        lines.append(line)
        print(f"  {kind}: {line}", flush=True)

    masking = (MaskingConfig() if kind == "bert"
               else MaskingConfig(mask_token_rate=0.85, random_token_rate=0.0))
    start = time.time()
    summary = run_pretraining(
        files, model_dir, build, train_batch_size=args.batch, max_seq_length=SEQ,
        max_predictions_per_seq=PREDICTIONS, num_train_steps=steps,
        num_warmup_steps=max(1, steps // 10), learning_rate=args.learning_rate,
        save_checkpoints_steps=steps, log_every_steps=max(1, steps // 10),
        dtype_policy=args.dtype_policy, seed=args.seed, vocab_file=vocab_file,
        masking="dynamic", masking_config=masking,
        do_lower_case=True, print_fn=log)
    return model_dir, summary, lines, time.time() - start


def curve(model_dir, tag):
    """(step, value) of a TensorBoard scalar, the latest write of a step winning."""
    latest = {}
    for name in sorted(os.listdir(model_dir)):
        if name.startswith("events.out.tfevents"):
            for event in tf.compat.v1.train.summary_iterator(os.path.join(model_dir, name)):
                for value in event.summary.value:
                    if value.tag == tag:
                        latest[event.step] = float(tf.make_ndarray(value.tensor))
    return sorted(latest.items())


def finetune(name, pretrained_dir, args, sst2_dir):
    start = time.time()
    results = run_finetuning(
        "glue", pretrained_dir,
        os.path.join(args.work_dir,
                     f"sst2_{name}_{args.finetune_epochs:g}ep_{args.finetune_learning_rate:g}"),
        task_name="sst-2",
        data_dir=sst2_dir, train_batch_size=32, eval_batch_size=128,
        learning_rate=args.finetune_learning_rate, num_train_epochs=args.finetune_epochs,
        warmup_proportion=0.1, max_seq_length=64, seed=args.seed, verbose=0)
    return float(results["accuracy"]), time.time() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--electra_steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=1024)
    parser.add_argument("--embedding", type=int, default=128)
    parser.add_argument("--generator_hidden_size", type=float, default=0.25)
    parser.add_argument("--vocab_size", type=int, default=8000)
    parser.add_argument("--learning_rate", type=float, default=1e-3)
    parser.add_argument("--dtype_policy", default="mixed_bfloat16")
    parser.add_argument("--sst2_train", type=int, default=8000)
    parser.add_argument("--finetune_epochs", type=float, default=2.0)
    parser.add_argument("--finetune_learning_rate", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--reuse_pretrained", action="store_true",
                        help="keep the pre-trained runs already in --work_dir; fine-tune only")
    result_file.add_flags(parser, "electra_vs_bert")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    args.work_dir = result_file.work_dir(args, prefix="kbert-electra-vs-bert-")
    print(f"tensorflow {tf.__version__}, keras {keras.__version__}", flush=True)

    corpus = wikitext_sentences(args.data_dir, os.path.join(args.work_dir, "wikitext2.txt"))
    vocab_file = os.path.join(args.work_dir, "vocab.txt")
    vocabulary_size = build_vocab(corpus, vocab_file, vocab_size=args.vocab_size)["vocab_size"]
    files = [os.path.join(args.work_dir, f"train-{i}.tfrecord") for i in range(2)]
    made = create_pretraining_data(corpus, files, vocab_file, max_seq_length=SEQ,
                                   max_predictions_per_seq=PREDICTIONS, dupe_factor=3,
                                   next_sentence="none", random_seed=args.seed,
                                   masking="dynamic")
    counts = made["counts"]
    print(f"corpus: {counts['instances']} instances ({counts['tokens']} tokens), vocabulary "
          f"{vocabulary_size}", flush=True)

    flops = {kind: step_flops(kind, args, vocabulary_size) for kind in ("bert", "electra")}
    steps = {"electra": args.electra_steps,
             "bert": round(args.electra_steps * flops["electra"] / flops["bert"])}
    print(f"FLOPs per step: BERT {flops['bert'] / 1e12:.3f} T, ELECTRA {flops['electra'] / 1e12:.3f}"
          f" T ({flops['electra'] / flops['bert']:.2f}x); steps: BERT {steps['bert']}, ELECTRA "
          f"{steps['electra']} (both {steps['electra'] * flops['electra'] / 1e15:.2f} PFLOPs)",
          flush=True)

    runs = {}
    for kind in ("bert", "electra"):
        done = os.path.join(args.work_dir, kind, "summary.json")
        if args.reuse_pretrained and os.path.exists(done):
            # A finished run of the same settings: fine-tune again without pre-training again.
            model_dir, summary = os.path.dirname(done), json.load(open(done))
            seconds = summary["wall_seconds"]
        else:
            model_dir, summary, _, seconds = pretrain(kind, steps[kind], args, files,
                                                      vocab_file, vocabulary_size)
        runs[kind] = {"model_dir": model_dir, "summary": summary, "seconds": seconds,
                      "masked_lm_loss": curve(model_dir, "masked_lm_loss"),
                      "masked_lm_accuracy": curve(model_dir, "masked_lm_accuracy")}
        if kind == "electra":
            for tag in ("discriminator_loss", "discriminator_accuracy", "discriminator_auc"):
                runs[kind][tag] = curve(model_dir, tag)

    # The reference: the same encoder, never pre-trained.
    keras.utils.set_random_seed(args.seed)
    random_dir = os.path.join(args.work_dir, "random")
    save_pretrained(random_dir, encoder(args, vocabulary_size), vocab_file=vocab_file,
                    do_lower_case=True)
    sst2_dir = sst2_subset(args.data_dir, os.path.join(args.work_dir, "sst2_data"),
                           args.sst2_train, args.seed)
    accuracy = {}
    for name, directory in (("random", random_dir), ("bert", runs["bert"]["model_dir"]),
                            ("electra", runs["electra"]["model_dir"])):
        accuracy[name], seconds = finetune(name, directory, args, sst2_dir)
        print(f"SST-2 dev accuracy, {name} encoder: {accuracy[name]:.4f} ({seconds:.0f} s)",
              flush=True)

    print("\nloss against training FLOPs (fraction of the budget):")
    print(f"{'FLOPs':>6}  {'BERT MLM loss':>13}  {'ELECTRA gen. MLM loss':>21}  "
          f"{'ELECTRA disc. loss':>18}  {'disc. acc':>9}  {'disc. AUC':>9}")
    electra = {tag: dict(runs["electra"][tag]) for tag in
               ("masked_lm_loss", "discriminator_loss", "discriminator_accuracy",
                "discriminator_auc")}
    bert = dict(runs["bert"]["masked_lm_loss"])
    for step, value in runs["electra"]["masked_lm_loss"]:
        fraction = step / steps["electra"]
        bert_step = min(bert, key=lambda s: abs(s / steps["bert"] - fraction))
        print(f"{fraction:>6.0%}  {bert[bert_step]:>13.3f}  {value:>21.3f}  "
              f"{electra['discriminator_loss'][step]:>18.3f}  "
              f"{electra['discriminator_accuracy'][step]:>9.3f}  "
              f"{electra['discriminator_auc'][step]:>9.3f}")
    print(f"\nSST-2 dev accuracy ({args.sst2_train} training sentences): random init "
          f"{accuracy['random']:.4f}, BERT {accuracy['bert']:.4f}, ELECTRA {accuracy['electra']:.4f};"
          f" ELECTRA - BERT {accuracy['electra'] - accuracy['bert']:+.4f}, "
          f"BERT - random {accuracy['bert'] - accuracy['random']:+.4f}")
    print(f"pre-training wall time: BERT {runs['bert']['seconds']:.0f} s, ELECTRA "
          f"{runs['electra']['seconds']:.0f} s")
    with open(os.path.join(args.work_dir, "results.json"), "w") as f:
        json.dump({"args": vars(args), "flops_per_step": flops, "steps": steps,
                   "accuracy": accuracy,
                   "runs": {k: {n: v for n, v in r.items() if n != "model_dir"}
                            for k, r in runs.items()}}, f, indent=2)
    petaflops = steps["electra"] * flops["electra"] / 1e15
    result_file.write_result(
        args, name="electra_vs_bert", title="ELECTRA vs BERT at equal training FLOPs",
        area="pre-training", load_average_at_start=load,
        headline=f"At {petaflops:.2f} PFLOPs each, SST-2 dev: ELECTRA {accuracy['electra']:.1%}, "
                 f"BERT {accuracy['bert']:.1%}, never pre-trained {accuracy['random']:.1%}.",
        reference="BERT and a never-pre-trained encoder of the same shape, same run",
        aim="", met=None, selection="clean: fixed fine-tuning settings, last weights scored",
        figures={"sst2_dev_accuracy": accuracy, "steps": steps, "petaflops": round(petaflops, 3),
                 "final_mlm_loss": {"bert": runs["bert"]["masked_lm_loss"][-1][1],
                                    "electra_generator": runs["electra"]["masked_lm_loss"][-1][1]},
                 "pretraining_seconds": {k: round(r["seconds"]) for k, r in runs.items()}},
        method=__doc__.split("\n\n", 2)[2])


if __name__ == "__main__":
    main()
