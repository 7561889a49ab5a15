"""Quality per pre-training budget: keras-hub's guide recipe against kbert's recipes and encoders.

    PYTHONPATH=. python benchmarks/pretraining_quality.py [--work_dir=pq] [--data_dir=../shared/data]

Three recipes pre-train the encoder size of keras-hub's guide "Pretraining a Transformer from
scratch with KerasHub" (3 layers, H=256, 4 heads, I=512, sequence 128) for the same wall-clock
training budget each (`--budget_minutes`, default 10; evaluation time excluded), on the same
text with the same vocabulary, and are scored on the same held-out masked-LM set:

  (a) keras-hub: the guide's recipe with keras-hub's classes and `fit`: `WordPieceTokenizer`
      on raw text, `MaskedLMMaskGenerator` at 25% (32 predictions), batch 128, AdamW 5e-4 at a
      constant rate (the guide has no schedule), dropout 0.1. The model is keras-hub's
      `BertBackbone` + `BertMaskedLM` of the guide's size (the guide hand-assembles the same
      layers; the BERT classes make the weights convertible into a kbert directory, so every
      encoder here has the same architecture and is fine-tuned by the same code).
  (b) kbert, the classic BERT recipe (gin/pretrain.gin): static 15% masks written by
      create_pretraining_data, NSP, AdamW with 1% warmup then linear decay, peak 1e-4 at
      batch 128 (pretrain.gin's peak for batch 256, kept rather than halved).
  (c) kbert, gin/pretrain_budget.gin: MLM only, dynamic 30% masks, batch 32, peak 1e-3, 6%
      warmup then linear decay (see the gin file for the argument).
  (d) `modernbert` (issue #31): (c)'s recipe and data with a ModernBERT encoder
      (gin/modernbert_base.gin's design at the guide's size: 3 layers (global, local,
      local), H=256, 4 heads, window 128, GeGLU 341 = two thirds of BERT's 512, so the
      feed-forward blocks hold about the same weights: 1,573,632 parameters in the blocks and
      final norm against BERT's 1,581,312 (-0.5%; embeddings, pooler and heads apart); no
      dropout, as ModernBERT). Not in the default --recipes.

Corpus: corpus/ under --data_dir (13 Gutenberg books cut into ~20 kB sections at paragraph
ends, and the 122 WikiText-2 valid/test articles), split by document with a seeded shuffle:
`--heldout_fraction` of the documents is held out. One WordPiece vocabulary
(`--vocab_size`, default 8,192) is learned on the training part: a vocabulary of this text
keeps the MLM head (the costliest layer at this size) 3.7x smaller than BERT's 30,522 and
every embedding row gets trained. The held-out part is written once by create_pretraining_data
with static 15% masks (NSP-style pairs, so (b) also reports NSP); every recipe is scored on it
with the weighted definition: masked_lm_loss/accuracy = sum(x * weight) / sum(weight) over
every real masked position of the whole set: kbert-pretrain's own held-out evaluation
(`eval_input_file`, `eval_history.jsonl`) for (b) and (c), a Keras callback computing the same
sums for (a), which is fed zero segment ids there (the guide's model has no segment input and
(a) never trained segment 1). kbert's unigram baseline (training-file frequencies) is printed.

Budget: (a) stops on time (a callback sums the seconds of training batches; evaluation is
timed apart). (b) and (c) need their step count up front (the schedule decays to zero at the
end): a short timed run calibrates the step time, and num_train_steps = budget / step time.
Each run is evaluated about `--evaluations` times; the actual training seconds are reported.
The never-pre-trained encoder is kbert-pretrain's 0-step directory.

Downstream: the same fine-tuning, hyperparameters fixed before any score was seen, from (a),
(b), (c) and a never-pre-trained encoder of the same shape: SST-2 (`--sst2_train` seeded
training sentences, the whole dev set, accuracy) and STS-B (`--stsb_train` seeded training
pairs, the whole dev set, Spearman), each with `--finetune_seeds` seeds (mean, std); AdamW
peak `--finetune_learning_rate` (1e-4), batch 32, `--finetune_epochs` (2), 10% warmup, sequence
64, the last weights scored (no best-epoch selection on dev). One `run_finetuning` call per
encoder and task trains every seed (`num_restarts`) and reports each seed's dev score. A
pre-trained encoder "beats random" on SST-2 when its mean exceeds random's by more than two
standard errors of the difference (sqrt(s1^2/n + s2^2/n), sample standard deviations).

Prints held-out MLM accuracy against training seconds for each run (every evaluation), the
time (c) needs to reach (a)'s final accuracy (from (c)'s evaluations, not extrapolated), the
downstream table; writes `results.json` under `--work_dir`. Smoke test:
`--budget_minutes=0.5 --sst2_train=500 --stsb_train=300 --finetune_epochs=1`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import statistics
import sys
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import gin  # noqa: E402
import keras  # noqa: E402
import keras_hub  # noqa: E402
import tensorflow as tf  # noqa: E402

from benchmarks import result_file  # noqa: E402
from kbert import configurables  # noqa: E402
from kbert.checkpoints import from_keras_hub  # noqa: E402
from kbert.checkpoints import save_pretrained  # noqa: E402
from kbert.data import build_vocab  # noqa: E402
from kbert.data import create_pretraining_data  # noqa: E402
from kbert.data import pretraining_dataset  # noqa: E402
from kbert.training.finetuning import run_finetuning  # noqa: E402

SEQ = 128
EVAL_PREDICTIONS = 20  # 15% of 128, as create_pretraining_data's default
# keras-hub's guide (keras-io guides/keras_hub/transformer_pretraining.py).
GUIDE = dict(batch=128, mask_rate=0.25, predictions=32, learning_rate=5e-4, layers=3,
             hidden=256, heads=4, intermediate=512, dropout=0.1)
SIZE_BINDINGS = [  # the guide's model as kbert gin bindings (vocabulary size added at run time)
    f"BertEncoder.num_layers = {GUIDE['layers']}", f"BertEncoder.num_heads = {GUIDE['heads']}",
    f"BertEncoder.hidden_dim = {GUIDE['hidden']}",
    f"BertEncoder.intermediate_dim = {GUIDE['intermediate']}",
    f"BertEncoder.max_sequence_length = {SEQ}", f"BertEncoder.dropout = {GUIDE['dropout']}"]
# (d): ModernBERT at the guide's size; GeGLU's two halves at 2/3 of BERT's intermediate width.
MODERNBERT_BINDINGS = [
    f"ModernBertEncoder.num_layers = {GUIDE['layers']}",
    f"ModernBertEncoder.num_heads = {GUIDE['heads']}",
    f"ModernBertEncoder.hidden_dim = {GUIDE['hidden']}",
    f"ModernBertEncoder.intermediate_dim = {2 * GUIDE['intermediate'] // 3}",
    f"ModernBertEncoder.max_sequence_length = {SEQ}"]


# ---------------------------------------------------------------------------- corpus and data

def _cpu_name() -> str:
    """The processor's model name (/proc/cpuinfo), or the platform's word for it."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name"))
    except (OSError, StopIteration):
        import platform
        return platform.processor() or "unknown"


def _sentences(paragraph: str) -> list[str]:
    # A sentence ends at . ! ? (optionally closed by a quote) before a capital or a quote.
    return [s for s in re.split(r"(?<=[.!?][\"'])\s+|(?<=[.!?])\s+(?=[\"'A-Z])", paragraph) if s]


def corpus_documents(data_dir: str, section_chars: int = 20000) -> list[list[str]]:
    """Documents as lists of sentences: Gutenberg sections and WikiText-2 articles."""
    documents = []
    folder = os.path.join(data_dir, "corpus", "gutenberg")
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".txt"):
            continue
        raw = open(os.path.join(folder, name), "rb").read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:  # shakespeare-caesar.txt is Latin-1
            text = raw.decode("latin-1")
        paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.replace("\r", ""))]
        section, size = [], 0
        for paragraph in filter(None, paragraphs):
            section += _sentences(paragraph)
            size += len(paragraph)
            if size >= section_chars:  # a "document" ends at a paragraph end
                documents.append(section)
                section, size = [], 0
        if section:
            documents.append(section)
    for split in ("valid", "test"):
        article = None
        path = os.path.join(data_dir, "corpus", "wikitext-2", f"{split}.txt")
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if re.fullmatch(r"= [^=].* =", line):  # an article title starts a document
                    article = []
                    documents.append(article)
                elif line and not line.startswith("= =") and article is not None:
                    article += re.split(r"(?<= \.) ", line)
    return documents


def write_documents(documents, path):
    """The data tool's input: a sentence per line, a blank line between documents."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n".join("\n".join(d) for d in documents) + "\n")
    return path


def write_guide_lines(documents, path, chars=600):
    """(a)'s input: the guide trains on lines of raw text (WikiText-103 paragraphs over 100
    characters) truncated to 128 tokens; here, runs of whole sentences of about 600 characters
    (~128 pieces) within a document, a line each."""
    lines = []
    for document in documents:
        line = ""
        for sentence in document:
            line = f"{line} {sentence}" if line else sentence
            if len(line) >= chars:
                lines.append(line)
                line = ""
        if len(line) > 100:  # the guide's filter
            lines.append(line)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return len(lines)


def prepare(args):
    """Corpus split, vocabulary, eval TFRecords and (b)'s and (c)'s training TFRecords."""
    work = args.work_dir
    done = os.path.join(work, "data_sizes.json")
    if args.reuse_data and os.path.exists(done):
        return json.load(open(done)), os.path.join(work, "vocab.txt")
    documents = corpus_documents(args.data_dir)
    order = list(range(len(documents)))
    random.Random(args.seed).shuffle(order)
    held = set(order[:max(1, round(args.heldout_fraction * len(documents)))])
    train_docs = [d for i, d in enumerate(documents) if i not in held]
    heldout_docs = [d for i, d in enumerate(documents) if i in held]
    train_txt = write_documents(train_docs, os.path.join(work, "train.txt"))
    heldout_txt = write_documents(heldout_docs, os.path.join(work, "heldout.txt"))
    guide_lines = write_guide_lines(train_docs, os.path.join(work, "train_lines.txt"))
    sizes = {"documents": len(documents), "train_documents": len(train_docs),
             "heldout_documents": len(heldout_docs),
             "train_bytes": os.path.getsize(train_txt),
             "heldout_bytes": os.path.getsize(heldout_txt), "guide_lines": guide_lines}
    vocab_file = os.path.join(work, "vocab.txt")
    vocabulary_size = build_vocab(train_txt, vocab_file, vocab_size=args.vocab_size)["vocab_size"]
    common = dict(max_seq_length=SEQ, random_seed=args.seed, do_lower_case=True)
    made = {
        "eval": create_pretraining_data(
            heldout_txt, os.path.join(work, "eval.tfrecord"), vocab_file, dupe_factor=1,
            max_predictions_per_seq=EVAL_PREDICTIONS, next_sentence="nsp", masking="static",
            **common),
        "classic": create_pretraining_data(
            train_txt, [os.path.join(work, f"classic-{i}.tfrecord") for i in range(2)],
            vocab_file, dupe_factor=args.dupe_factor, max_predictions_per_seq=EVAL_PREDICTIONS,
            next_sentence="nsp", masking="static", **common),
    }
    budget = gin_recipe(args.budget_gin)
    made["budget"] = create_pretraining_data(
        train_txt, [os.path.join(work, f"budget-{i}.tfrecord") for i in range(2)], vocab_file,
        dupe_factor=args.dupe_factor, max_predictions_per_seq=budget["max_predictions_per_seq"],
        next_sentence="nsp" if budget["next_sentence"] else "none", masking=budget["masking"],
        **common)
    for name, result in made.items():
        sizes[f"{name}_instances"] = result["counts"]["instances"]
        sizes[f"{name}_tokens"] = result["counts"]["tokens"]
    sizes["vocabulary_size"] = vocabulary_size
    with open(done, "w") as f:
        json.dump(sizes, f, indent=2)
    return sizes, vocab_file


# ---------------------------------------------------------------------------------- recipes

def gin_recipe(gin_file, extra=()):
    """The run_pretraining/MaskingConfig/BertPretrainer values a size config plus `gin_file`
    bind (the benchmark runs what the file says)."""
    configurables.parse_gin(["tiny.gin"] + ([gin_file] if gin_file else []),
                            SIZE_BINDINGS + list(extra))
    query = lambda name: gin.query_parameter(name)  # noqa: E731
    recipe = {name: query(f"run_pretraining.{name}") for name in (
        "train_batch_size", "learning_rate", "num_train_steps", "num_warmup_steps", "masking",
        "max_predictions_per_seq", "optimizer", "weight_decay_rate")}
    recipe["next_sentence"] = query("BertPretrainer.next_sentence")
    try:
        recipe["masked_lm_prob"] = query("MaskingConfig.masked_lm_prob")
    except ValueError:
        recipe["masked_lm_prob"] = 0.15
    return recipe


def kbert_pretrain(name, gin_files, bindings, data_glob, eval_file, args, vocabulary_size,
                   steps=None, warmup=None, model_dir=None, evaluate=True):
    """One kbert-pretrain run through gin, as the command line does it; returns the summary."""
    configurables.parse_gin(["tiny.gin"] + gin_files, SIZE_BINDINGS + [
        f"BertEncoder.vocabulary_size = {vocabulary_size}",
        f"ModernBertEncoder.vocabulary_size = {vocabulary_size}"] + bindings)
    if steps is not None:
        gin.bind_parameter("run_pretraining.num_train_steps", steps)
        gin.bind_parameter("run_pretraining.num_warmup_steps", warmup)
    steps = gin.query_parameter("run_pretraining.num_train_steps")
    model_dir = model_dir or os.path.join(args.work_dir, name)
    interval = max(1, steps // args.evaluations)
    extra = dict(eval_input_file=eval_file, eval_every_steps=interval) if evaluate else {}
    lines = []

    def log(line):
        lines.append(line)
        print(f"  {name}: {line}", flush=True)

    return configurables.run_pretraining(
        data_glob, model_dir, configurables.pretrainer, save_checkpoints_steps=interval,
        log_every_steps=interval, seed=args.seed, print_fn=log, **extra)


def calibrate(name, gin_files, bindings, data_glob, args, vocabulary_size):
    """Seconds per training step, from a short run's steady-state throughput."""
    model_dir = os.path.join(args.work_dir, f"calibrate_{name}")
    if tf.io.gfile.exists(model_dir):
        tf.io.gfile.rmtree(model_dir)
    summary = kbert_pretrain(name + " (calibration)", gin_files, bindings, data_glob, None, args,
                             vocabulary_size, steps=args.calibration_steps, warmup=1,
                             model_dir=model_dir, evaluate=False)
    batch = gin.query_parameter("run_pretraining.train_batch_size")
    tf.io.gfile.rmtree(model_dir)
    return batch / summary["examples_per_second"]


def kbert_run(name, gin_files, bindings, data_glob, eval_file, args, vocabulary_size):
    """Calibrates, then trains for the budget; returns the run's record."""
    recipe = gin_recipe(gin_files[-1] if gin_files else None, bindings)
    step_seconds = calibrate(name, gin_files, bindings, data_glob, args, vocabulary_size)
    steps = max(args.evaluations, int(args.budget_minutes * 60 / step_seconds))
    warmup = max(1, round(steps * recipe["num_warmup_steps"] / recipe["num_train_steps"]))
    print(f"{name}: {step_seconds:.3f} s/step calibrated -> {steps} steps, {warmup} warmup",
          flush=True)
    model_dir = os.path.join(args.work_dir, name)
    start = time.time()
    summary = kbert_pretrain(name, gin_files, bindings, data_glob, eval_file, args,
                             vocabulary_size, steps=steps, warmup=warmup)
    wall = time.time() - start
    # run_pretraining's held-out evaluation: a line per evaluation, train_seconds excluding it.
    with open(os.path.join(model_dir, "eval_history.jsonl")) as f:
        history = [json.loads(line) for line in f if line.strip()]
    recipe.update(num_train_steps=steps, num_warmup_steps=warmup)
    return {"model_dir": model_dir, "recipe": recipe, "step_seconds": step_seconds,
            "summary": summary, "wall_seconds": wall, "history": history}


def weighted_mlm(mlm_logits, eval_file, zero_segments):
    """masked_lm_loss/accuracy over every real masked position of `eval_file`: sums of
    loss x weight and hit x weight over the whole set, divided by the sum of weights."""
    dataset = pretraining_dataset(eval_file, 64, max_seq_length=SEQ,
                                  max_predictions_per_seq=EVAL_PREDICTIONS, next_sentence=False,
                                  is_training=False)
    loss = hits = weight = 0.0
    for features, labels, weights in dataset:
        features = {k: features[k] for k in ("token_ids", "segment_ids", "padding_mask",
                                             "mask_positions")}
        if zero_segments:
            features["segment_ids"] = tf.zeros_like(features["segment_ids"])
        logits = tf.cast(mlm_logits(features), tf.float32)
        ids, w = labels["mlm"], tf.cast(weights["mlm"], tf.float32)
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(ids, logits)
        correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=ids.dtype), ids), tf.float32)
        loss += float(tf.reduce_sum(losses * w))
        hits += float(tf.reduce_sum(correct * w))
        weight += float(tf.reduce_sum(w))
    return {"masked_lm_loss": loss / weight, "masked_lm_accuracy": hits / weight,
            "perplexity": math.exp(loss / weight)}


class TimedEvaluation(keras.callbacks.Callback):
    """Stops `fit` after `budget` seconds of training batches and evaluates on the held-out
    TFRecords every `interval` training seconds; evaluation time is not counted."""

    def __init__(self, eval_file, budget, interval):
        super().__init__()
        self.eval_file, self.budget, self.interval = eval_file, budget, interval
        self.train_seconds, self.next_eval, self.step, self.history = 0.0, interval, 0, []
        self.predict = None

    def on_train_batch_begin(self, batch, logs=None):
        self.started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.train_seconds += time.perf_counter() - self.started
        self.step += 1
        done = self.train_seconds >= self.budget
        if self.train_seconds >= self.next_eval or done:
            self.evaluate()
            self.next_eval += self.interval
        if done:
            self.model.stop_training = True

    def evaluate(self):
        start = time.perf_counter()
        if self.predict is None:  # traced once: an eager call per batch is several times slower
            self.predict = tf.function(lambda f: self.model(f, training=False))
        metrics = weighted_mlm(self.predict, self.eval_file, zero_segments=True)
        self.history.append({"step": self.step, "train_seconds": self.train_seconds, **metrics})
        print(f"  keras_hub: step {self.step}, {self.train_seconds:.0f} s: held-out MLM accuracy "
              f"{metrics['masked_lm_accuracy']:.4f}, loss {metrics['masked_lm_loss']:.3f} "
              f"(evaluated in {time.perf_counter() - start:.0f} s)", flush=True)


def keras_hub_run(args, vocab_file, vocabulary_size, eval_file):
    """(a): the guide's pipeline and training with keras-hub's classes, then a kbert directory."""
    keras.utils.set_random_seed(args.seed)
    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=vocab_file, sequence_length=SEQ, lowercase=True, strip_accents=True)
    masker = keras_hub.layers.MaskedLMMaskGenerator(
        vocabulary_size=tokenizer.vocabulary_size(), mask_selection_rate=GUIDE["mask_rate"],
        mask_selection_length=GUIDE["predictions"],
        mask_token_id=tokenizer.token_to_id("[MASK]"))

    def preprocess(lines):
        token_ids = tokenizer(lines)
        outputs = masker(token_ids)
        features = {"token_ids": outputs["token_ids"],
                    "segment_ids": tf.zeros_like(outputs["token_ids"]),
                    "padding_mask": token_ids != 0,
                    "mask_positions": outputs["mask_positions"]}
        return features, outputs["mask_ids"], outputs["mask_weights"]

    data = (tf.data.TextLineDataset(os.path.join(args.work_dir, "train_lines.txt"))
            .filter(lambda x: tf.strings.length(x) > 100).repeat()
            .shuffle(10000, seed=args.seed).batch(GUIDE["batch"])
            .map(preprocess, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=vocabulary_size, num_layers=GUIDE["layers"], num_heads=GUIDE["heads"],
        hidden_dim=GUIDE["hidden"], intermediate_dim=GUIDE["intermediate"],
        dropout=GUIDE["dropout"], max_sequence_length=SEQ)
    model = keras_hub.models.BertMaskedLM(backbone, preprocessor=None)
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=keras.optimizers.AdamW(GUIDE["learning_rate"]),
                  weighted_metrics=["sparse_categorical_accuracy"])
    budget = args.budget_minutes * 60
    callback = TimedEvaluation(eval_file, budget, budget / args.evaluations)
    start = time.time()
    # Steps are unbounded here: the callback stops training when the budget is spent.
    with warnings.catch_warnings():  # BertMaskedLM leaves the pooler out; Keras warns each step
        warnings.filterwarnings("ignore", message="Gradients do not exist for variables")
        model.fit(data, epochs=1, steps_per_epoch=10**7, callbacks=[callback], shuffle=False,
                  verbose=0)
    wall = time.time() - start
    model_dir = os.path.join(args.work_dir, "keras_hub")
    save_pretrained(model_dir, from_keras_hub(backbone), vocab_file=vocab_file,
                    do_lower_case=True)
    with open(os.path.join(model_dir, "eval_history.jsonl"), "w") as f:
        f.write("".join(json.dumps(line) + "\n" for line in callback.history))
    return {"model_dir": model_dir, "recipe": dict(GUIDE), "wall_seconds": wall,
            "history": callback.history}


def reused_run(name, args):
    """A finished pre-training run of an earlier invocation (--reuse_pretrained), or None."""
    model_dir = os.path.join(args.work_dir, name)
    history_file = os.path.join(model_dir, "eval_history.jsonl")
    if not (args.reuse_pretrained and os.path.exists(history_file)
            and os.path.exists(os.path.join(model_dir, "encoder.weights.h5"))):
        return None
    print(f"{name}: reusing the pre-trained run in {model_dir}", flush=True)
    return {"model_dir": model_dir, "reused": True,
            "history": [json.loads(line) for line in open(history_file) if line.strip()]}


def random_run(args, vocabulary_size):
    """A never-pre-trained encoder of the same shape: kbert-pretrain at num_train_steps = 0
    (the baseline anyone can make), with (b)'s settings."""
    model_dir = os.path.join(args.work_dir, "random")
    if tf.io.gfile.exists(model_dir):  # else it would "resume" an earlier invocation's
        tf.io.gfile.rmtree(model_dir)
    kbert_pretrain("random", [], classic_bindings(args),
                   os.path.join(args.work_dir, "classic-*.tfrecord"), None, args,
                   vocabulary_size, steps=0, warmup=0, model_dir=model_dir, evaluate=False)
    return {"model_dir": model_dir}


def classic_bindings(args):
    """(b): pretrain.gin's BERT recipe at the benchmark's batch and learning rate."""
    return ["BertPretrainer.next_sentence = True",
            f"run_pretraining.train_batch_size = {args.classic_batch}",
            f"run_pretraining.learning_rate = {args.classic_learning_rate}",
            "run_pretraining.masking = 'static'"]


# ------------------------------------------------------------------------------ fine-tuning

def glue_subset(data_dir, folder, target, train_size, seed):
    """A seeded sample of a GLUE task's train rows and its whole dev set, in GLUE's layout."""
    source = os.path.join(data_dir, "glue", folder)
    os.makedirs(target, exist_ok=True)
    with open(os.path.join(source, "train.tsv"), encoding="utf-8-sig") as f:
        header, *rows = f.read().rstrip("\n").split("\n")
    if train_size and train_size < len(rows):
        rows = random.Random(seed).sample(rows, train_size)
    with open(os.path.join(target, "train.tsv"), "w", encoding="utf-8") as f:
        f.write("\n".join([header] + rows) + "\n")
    with open(os.path.join(source, "dev.tsv"), encoding="utf-8-sig") as f, \
            open(os.path.join(target, "dev.tsv"), "w", encoding="utf-8") as out:
        out.write(f.read())
    return target, len(rows)


def finetune(name, pretrained_dir, task_name, data_dir, rows, metric, seeds, args):
    """Dev scores of one fine-tuning per seed. One `run_finetuning` call trains every seed
    (`num_restarts`: seeds seed, seed + 1, ...; each restart's final dev score is recorded),
    so the data is read and tokenized once per encoder and task; the dev set is scored once,
    at the end (eval_every_steps = the run's steps)."""
    total_steps = max(1, round(math.ceil(rows / 32) * args.finetune_epochs))
    results = run_finetuning(
        "glue", pretrained_dir, os.path.join(args.work_dir, "finetune", f"{task_name}_{name}"),
        task_name=task_name, data_dir=data_dir, train_batch_size=32, eval_batch_size=128,
        learning_rate=args.finetune_learning_rate, num_train_epochs=args.finetune_epochs,
        warmup_proportion=0.1, max_seq_length=64, seed=seeds[0], num_restarts=len(seeds),
        eval_every_steps=total_steps, keep_best_checkpoint=False, verbose=0)
    if len(seeds) == 1:
        return [float(results[metric])]
    assert [r["seed"] for r in results["restarts"]] == seeds
    return [float(r[metric]) for r in results["restarts"]]


def mean_std(values):
    return (statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0)


# ------------------------------------------------------------------------------------ main

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget_minutes", type=float, default=10.0,
                        help="training wall-clock per recipe, evaluation excluded")
    parser.add_argument("--evaluations", type=int, default=8,
                        help="held-out evaluations per run")
    parser.add_argument("--heldout_fraction", type=float, default=0.05)
    parser.add_argument("--vocab_size", type=int, default=8192)
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--classic_batch", type=int, default=GUIDE["batch"])
    parser.add_argument("--classic_learning_rate", type=float, default=1e-4)
    parser.add_argument("--budget_gin", default=os.path.join(REPO, "gin", "pretrain_budget.gin"))
    parser.add_argument("--calibration_steps", type=int, default=12,
                        help="steps of the timing run (the first, traced, is not timed)")
    parser.add_argument("--sst2_train", type=int, default=4000)
    parser.add_argument("--stsb_train", type=int, default=2000)
    parser.add_argument("--finetune_seeds", type=int, default=3)
    parser.add_argument("--finetune_epochs", type=float, default=2.0)
    parser.add_argument("--finetune_learning_rate", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--reuse_data", action="store_true",
                        help="keep the corpus split, vocabulary and TFRecords of --work_dir")
    parser.add_argument("--reuse_pretrained", action="store_true",
                        help="keep the finished pre-training runs of --work_dir; fine-tune only")
    parser.add_argument("--recipes", default="keras_hub,classic,budget",
                        help="pre-training runs to do (comma-separated)")
    result_file.add_flags(parser, "pretraining_quality")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    args.work_dir = result_file.work_dir(args, prefix="kbert-pretraining-quality-")
    began = time.time()
    print(f"tensorflow {tf.__version__}, keras {keras.__version__}, keras-hub "
          f"{keras_hub.__version__}; CPU: {_cpu_name()}, {os.cpu_count()} cores", flush=True)

    sizes, vocab_file = prepare(args)
    vocabulary_size = sizes["vocabulary_size"]
    print(f"corpus: {sizes['train_documents']} training documents ({sizes['train_bytes']/1e6:.2f}"
          f" MB), {sizes['heldout_documents']} held out ({sizes['heldout_bytes']/1e6:.2f} MB; "
          f"{sizes['eval_instances']} eval instances, static 15% masks); vocabulary "
          f"{vocabulary_size}; classic {sizes['classic_instances']} instances, budget "
          f"{sizes['budget_instances']} (dupe_factor {args.dupe_factor}); "
          f"({time.time() - began:.0f} s)", flush=True)
    eval_file = os.path.join(args.work_dir, "eval.tfrecord")
    recipes = args.recipes.split(",")
    runs = {}
    if "keras_hub" in recipes:
        runs["keras_hub"] = reused_run("keras_hub", args) or keras_hub_run(
            args, vocab_file, vocabulary_size, eval_file)
        runs["keras_hub"].setdefault("load_average", os.getloadavg())
    if "classic" in recipes:
        runs["classic"] = reused_run("classic", args) or kbert_run(
            "classic", [], classic_bindings(args),
            os.path.join(args.work_dir, "classic-*.tfrecord"), eval_file, args, vocabulary_size)
        runs["classic"].setdefault("load_average", os.getloadavg())
    if "budget" in recipes:
        runs["budget"] = reused_run("budget", args) or kbert_run(
            "budget", [args.budget_gin], [], os.path.join(args.work_dir, "budget-*.tfrecord"),
            eval_file, args, vocabulary_size)
        runs["budget"].setdefault("load_average", os.getloadavg())
    if "modernbert" in recipes:
        runs["modernbert"] = reused_run("modernbert", args) or kbert_run(
            "modernbert", ["modernbert_base.gin", args.budget_gin], MODERNBERT_BINDINGS,
            os.path.join(args.work_dir, "budget-*.tfrecord"), eval_file, args, vocabulary_size)
        runs["modernbert"].setdefault("load_average", os.getloadavg())
    runs["random"] = random_run(args, vocabulary_size)
    pretrained_seconds = time.time() - began
    # Another process's load skews a wall-clock budget: say what the machine carried.
    for name, run in runs.items():
        if "load_average" in run:
            print(f"  {name:>9}  load average at the end of its run (1, 5, 15 min): "
                  f"{', '.join(f'{x:.2f}' for x in run['load_average'])}")

    print("\nheld-out MLM accuracy (loss) against training seconds:")
    for name, run in runs.items():
        for entry in run.get("history", []):
            print(f"  {name:>9}  step {entry['step']:>6}  {entry['train_seconds']:>7.0f} s  "
                  f"accuracy {entry['masked_lm_accuracy']:.4f}  loss "
                  f"{entry['masked_lm_loss']:.3f}")
        last = (run.get("history") or [{}])[-1]
        if "unigram_masked_lm_accuracy" in last:  # kbert's baseline from its training files
            print(f"  {name:>9}  unigram baseline (training-file frequencies): accuracy "
                  f"{last['unigram_masked_lm_accuracy']:.4f}  loss "
                  f"{last['unigram_masked_lm_loss']:.3f}")
    reach = None
    if "keras_hub" in runs and "budget" in runs:
        target = runs["keras_hub"]["history"][-1]
        hit = next((e for e in runs["budget"]["history"]
                    if e["masked_lm_accuracy"] >= target["masked_lm_accuracy"]), None)
        reach = {"target_accuracy": target["masked_lm_accuracy"],
                 "keras_hub_seconds": target["train_seconds"],
                 "budget_seconds": hit["train_seconds"] if hit else None}
        print(f"(c) budget recipe reaches (a)'s final held-out accuracy "
              f"{target['masked_lm_accuracy']:.4f} ({target['train_seconds']:.0f} s): " +
              (f"after {hit['train_seconds']:.0f} s = "
               f"{hit['train_seconds'] / target['train_seconds']:.2f}x (a)'s time (aim: at most "
               "0.5x)" if hit else "not reached"), flush=True)

    if args.finetune_seeds == 0:  # pre-training only (e.g. tuning a recipe)
        with open(os.path.join(args.work_dir, "results.json"), "w") as f:
            json.dump({"args": vars(args), "corpus": sizes, "reach": reach,
                       "runs": {k: {n: v for n, v in r.items() if n != "model_dir"}
                                for k, r in runs.items()}}, f, indent=2)
        return
    sst2_dir, sst2_rows = glue_subset(args.data_dir, "SST-2", os.path.join(args.work_dir, "data", "sst2"),
                                      args.sst2_train, args.seed)
    stsb_dir, stsb_rows = glue_subset(args.data_dir, "STS-B", os.path.join(args.work_dir, "data", "stsb"),
                                      args.stsb_train, args.seed)
    seeds = [args.seed + i for i in range(args.finetune_seeds)]
    scores = {}
    for name, run in runs.items():
        start = time.time()
        scores[name] = {
            "sst2": finetune(name, run["model_dir"], "sst-2", sst2_dir, sst2_rows, "accuracy",
                             seeds, args),
            "stsb": finetune(name, run["model_dir"], "sts-b", stsb_dir, stsb_rows, "spearman",
                             seeds, args)}
        print(f"  {name}: SST-2 {scores[name]['sst2']}, STS-B Spearman {scores[name]['stsb']} "
              f"({time.time() - start:.0f} s)", flush=True)

    print(f"\ndownstream, {len(seeds)} fine-tuning seeds (mean +- std): SST-2 dev accuracy "
          f"({sst2_rows} training sentences), STS-B dev Spearman ({stsb_rows} training pairs)")
    n = len(seeds)
    random_mean, random_std = mean_std(scores["random"]["sst2"])
    table = {}
    for name in runs:
        sst2, stsb = mean_std(scores[name]["sst2"]), mean_std(scores[name]["stsb"])
        row = {"sst2_mean": sst2[0], "sst2_std": sst2[1], "stsb_mean": stsb[0],
               "stsb_std": stsb[1]}
        verdict = ""
        if name != "random":
            standard_error = math.sqrt(sst2[1] ** 2 / n + random_std ** 2 / n)
            row["sst2_minus_random"] = sst2[0] - random_mean
            row["beats_random"] = (sst2[0] - random_mean) > 2 * standard_error
            beats = "beats" if row["beats_random"] else "does not beat"
            verdict = (f"  SST-2 - random {sst2[0] - random_mean:+.4f} (2 SE "
                       f"{2 * standard_error:.4f}): {beats} random")
        history = runs[name].get("history")
        heldout = f"held-out MLM acc {history[-1]['masked_lm_accuracy']:.4f}" if history else \
            "held-out MLM acc      -"
        print(f"  {name:>9}: {heldout}  SST-2 {sst2[0]:.4f} +- {sst2[1]:.4f}  STS-B "
              f"{stsb[0]:.4f} +- {stsb[1]:.4f}{verdict}")
        table[name] = row
    total = time.time() - began
    print(f"\nwall time: {pretrained_seconds / 60:.1f} min to the end of pre-training, "
          f"{total / 60:.1f} min in all")
    with open(os.path.join(args.work_dir, "results.json"), "w") as f:
        json.dump({"args": vars(args), "corpus": sizes, "reach": reach, "downstream": table,
                   "scores": scores, "seeds": seeds, "wall_seconds": total,
                   "runs": {k: {n: v for n, v in r.items() if n != "model_dir"}
                            for k, r in runs.items()}}, f, indent=2)
    write(args, runs, reach, table, load)


def write(args, runs: dict, reach: dict | None, table: dict, load: float) -> None:
    """The result file: time to the guide's accuracy, held-out accuracy and SST-2 per recipe."""
    ratio = (reach["budget_seconds"] / reach["keras_hub_seconds"]
             if reach and reach["budget_seconds"] else None)
    final = {name: run["history"][-1]["masked_lm_accuracy"]
             for name, run in runs.items() if run.get("history")}
    if ratio is not None:
        headline = (f"kbert's budget recipe reaches the keras-hub guide recipe's held-out MLM "
                    f"accuracy in {ratio:.2f}x its time ({args.budget_minutes:g}-minute budgets).")
    else:
        headline = ("Held-out MLM accuracy after " f"{args.budget_minutes:g} minutes: "
                    + ", ".join(f"{name} {value:.4f}" for name, value in final.items()) + ".")
    beats = {name: row.get("beats_random") for name, row in table.items() if name != "random"}
    result_file.write_result(
        args, name="pretraining_quality", title="Pre-training quality per wall-clock budget",
        area="pre-training", load_average_at_start=load, headline=headline,
        reference="keras-hub pre-training guide's recipe, same model size, data and budget; a "
                  "never-pre-trained encoder downstream",
        aim="<= 0.5x the guide recipe's time to its final held-out accuracy; each encoder beats "
            "random by 2 SE on SST-2",
        met=(ratio is not None and ratio <= 0.5 and all(beats.values())) if reach else None,
        selection="clean: recipes and fine-tuning fixed in advance, last weights scored",
        figures={"time_to_guide_accuracy_ratio": ratio, "held_out_mlm_accuracy": final,
                 "downstream": table, "beats_random": beats},
        method=__doc__.split("\n\n", 2)[2])


if __name__ == "__main__":
    main()
