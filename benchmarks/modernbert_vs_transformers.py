"""kbert's ModernBERT against Hugging Face transformers' on one CPU: forward pass and pre-training step.

Set up once: torch and transformers go into a benchmark-only environment, never into kbert's
`.venv` (torch 2.13.0, whose CPU build pip finds here; a plain `pip install torch` brings CUDA's):

    make .venv-bench-torch/.installed
    # that is: python3 -m venv .venv-bench-torch &&
    #     .venv-bench-torch/bin/pip install torch==2.13.0 transformers==5.17.0 numpy

then, from kbert's environment:

    PYTHONPATH=. .venv/bin/python benchmarks/modernbert_vs_transformers.py --sizes=base \\
        --lengths=1024,8192 --rounds=3,1

Both sides build the model of `gin/modernbert_<size>.gin` (base: ModernBERT-base's 22 layers,
width 768, 12 heads, GeGLU 1,152, vocabulary 50,368, a global layer every third, window 128,
RoPE thetas 160,000 and 10,000), random weights, float32, no dropout. transformers'
`ModernBertConfig` is the `config.json` that `kbert-convert --to=hf` writes for that model
(`modernbert_arguments_to_config`), so the two are the same architecture; their parameter
counts are printed and must be equal (both tie the decoder to the token embedding and give it a
bias). The input is one row of `length` real tokens (batch 1, no padding) with 30% of its
positions predicted (the recipe's `MaskingConfig.masked_lm_prob`), the same ids and positions
on both sides, already in tensors: making and masking the data is not timed. Arms:

- `forward`: the encoder's sequence output in inference (kbert: `ModernBertEncoder` with
  `training=False` in a `tf.function`; transformers: `ModernBertModel` in eval mode under
  `torch.inference_mode()`).
- `train`: one full pre-training step, MLM head included. kbert: `ModernBertPretrainer` stepped
  by `make_train_loop`, the loop `kbert-pretrain` runs (XLA off), with `kbert.training.
  StableAdamW` at gin/modernbert_pretrain.gin's settings (lr 8e-4, betas 0.9/0.98, eps 1e-6,
  weight decay 1e-5, no clipping). transformers: `ModernBertForMaskedLM` (sdpa attention, its
  default on CPU; `sparse_prediction=True`, so the head runs on the labelled positions only,
  as kbert's does) forward with labels (-100 elsewhere), `loss.backward()`,
  `torch.optim.AdamW(fused=True)` at the same rate, betas and epsilon (Trainer's default
  optimizer on torch >= 2.8; torch has no StableAdamW, whose per-tensor RMS costs kbert one
  more reduction per tensor; its weight decay 1e-5 is scaled by the rate and reaches every
  tensor, which changes no time), `zero_grad()`.

kbert computes local layers in sliding-window blocks and global layers 512 queries at a time;
transformers' sdpa computes every layer over all pairs of tokens, the window being a mask. The
transformers side runs in a subprocess of the torch environment (`--torch_python`; it imports
no kbert) that answers one step per request; the parent times both sides the same way, with
the same number of intra-op threads (`--threads`: `torch.set_num_threads`, TF's intra-op
pool). One untimed warm-up step of each arm comes first: kbert's at every length (it traces
its functions anew for each), transformers' at the first length only (torch's eager mode
builds nothing per length; its optimizer state comes at its first step), which saves minutes
at 8,192 tokens. Then the sides alternate for `--rounds` rounds and each side's fastest step
counts (the machine may be shared). The loss of each side's first step is printed (about
ln(vocabulary) for both at random initialisation). Writes benchmarks/results/modernbert_vs_transformers.json
(benchmarks/result_file.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import select
import subprocess
import sys
import time
from typing import Callable

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import result_file  # noqa: E402  (standard library only)

NAME = "modernbert_vs_transformers"
ARMS = ("forward", "train")
TORCH_PYTHON = os.path.join(REPO, ".venv-bench-torch", "bin", "python")
SETUP = "make .venv-bench-torch/.installed"
REQUEST_TIMEOUT_S = 3600  # a step of ModernBERT-base at 8,192 tokens takes minutes on two cores


def masked_row(length: int, vocabulary_size: int, masked_fraction: float, seed: int = 0) -> dict:
    """The one input row both sides see: token ids, and the predicted positions and their labels.

    Args:
        length: int. Tokens in the row.
        vocabulary_size: int. Ids are drawn from [5, vocabulary_size).
        masked_fraction: float. Share of positions predicted (distinct, sorted).
        seed: int. Seed of the numpy generator.

    Returns:
        `{"token_ids": [length], "positions": [P], "labels": [P]}` int32 arrays.
    """
    rng = np.random.default_rng(seed)
    predictions = max(1, round(masked_fraction * length))
    return {"token_ids": rng.integers(5, vocabulary_size, length).astype("int32"),
            "positions": np.sort(rng.choice(length, predictions, replace=False)).astype("int32"),
            "labels": rng.integers(5, vocabulary_size, predictions).astype("int32")}


def peak_memory_mib() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


# === transformers' side: runs in the torch environment, imports no kbert ===

def serve_transformers(threads: int) -> None:
    """Answers JSON requests, one a line on stdin, with one JSON line each on stdout.

    `{"build": config, "recipe": {...}}` builds `ModernBertForMaskedLM` and its optimizer
    (`recipe`: `masked_fraction` and AdamW's `learning_rate`, `betas`, `epsilon`,
    `weight_decay`); `{"length": L, "arm": "forward"|"train"}` runs one step; `{"memory": true}`
    gives the peak memory. Every answer is a JSON object; an error is `{"error": text}`.
    """
    import torch
    import transformers

    torch.set_num_threads(threads)
    # Answers alone go to stdout: anything a library prints goes to stderr.
    answers, sys.stdout = sys.stdout, sys.stderr
    state = {}
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if "build" in request:
                answer = _build_transformers(state, request["build"], request["recipe"])
                answer["versions"] = {"torch": torch.__version__,
                                      "transformers": transformers.__version__}
                answer["threads"] = torch.get_num_threads()
            elif "arm" in request:
                answer = {"loss": _transformers_step(state, request["length"], request["arm"])}
            else:
                answer = {"peak_memory_mib": peak_memory_mib()}
        except Exception as error:  # the parent prints it and stops
            answer = {"error": f"{type(error).__name__}: {error}"}
        print(json.dumps(answer), file=answers, flush=True)


def _build_transformers(state: dict, config: dict, recipe: dict) -> dict:
    import torch
    from transformers import ModernBertConfig
    from transformers import ModernBertForMaskedLM

    torch.manual_seed(0)
    # The config.json `kbert-convert --to=hf` writes (its writer adds the tokenizer's special
    # ids: none here, and a padding id every vocabulary size holds).
    special = {"pad_token_id": 0, "bos_token_id": None, "eos_token_id": None,
               "cls_token_id": None, "sep_token_id": None}
    model = ModernBertForMaskedLM(ModernBertConfig.from_dict(
        {**config, **special, "sparse_prediction": True}, attn_implementation="sdpa"))
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe["learning_rate"],
                                  betas=tuple(recipe["betas"]), eps=recipe["epsilon"],
                                  weight_decay=recipe["weight_decay"], fused=True)
    state.update(model=model, optimizer=optimizer, rows={},
                 masked_fraction=recipe["masked_fraction"])
    return {"parameters": sum(p.numel() for p in model.parameters()),
            "attention": model.config._attn_implementation}


def _transformers_step(state: dict, length: int, arm: str) -> float | None:
    import torch

    model = state["model"]
    if length not in state["rows"]:
        row = masked_row(length, model.config.vocab_size, state["masked_fraction"])
        labels = torch.full((1, length), -100, dtype=torch.long)
        labels[0, row["positions"]] = torch.tensor(row["labels"], dtype=torch.long)
        state["rows"][length] = (torch.tensor(row["token_ids"][None], dtype=torch.long),
                                 torch.ones((1, length), dtype=torch.long), labels)
    token_ids, attention_mask, labels = state["rows"][length]
    if arm == "forward":
        model.eval()
        with torch.inference_mode():
            model.model(input_ids=token_ids, attention_mask=attention_mask)
        return None
    model.train()
    loss = model(input_ids=token_ids, attention_mask=attention_mask, labels=labels).loss
    loss.backward()
    state["optimizer"].step()
    state["optimizer"].zero_grad()
    return loss.item()


class TransformersProcess:
    """The transformers side as a subprocess of the torch environment, one request at a time."""

    def __init__(self, python: str, threads: int):
        if not os.path.exists(python):
            sys.exit(f"--torch_python={python} does not exist; make the benchmark's torch "
                     f"environment first (from the repository root):\n  {SETUP}")
        self.process = subprocess.Popen(
            [python, os.path.abspath(__file__), "--transformers_worker", f"--threads={threads}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)

    def ask(self, request: dict) -> dict:
        """Sends one request and returns its answer; exits naming the worker's error."""
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], REQUEST_TIMEOUT_S)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.close()
            sys.exit(f"the transformers worker gave no answer to {request} within "
                     f"{REQUEST_TIMEOUT_S} s (exit code {self.process.returncode}); "
                     "its error is above")
        answer = json.loads(line)
        if "error" in answer:
            self.close()
            sys.exit(f"the transformers worker failed on {request}: {answer['error']}")
        return answer

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=60)


# === kbert's side ===

def build_kbert(size: str, max_length: int):
    """Returns `(pretrainer, optimizer, recipe, transformers_config)` of one size.

    The pre-trainer and optimizer are what `kbert-pretrain --gin_file=gin/modernbert_<size>.gin`
    builds (the paper's recipe); `recipe` holds the masking rate and the optimizer's settings
    for transformers' side; the config is the `config.json` `kbert-convert --to=hf` writes.
    """
    import dataclasses

    import gin
    import keras

    from kbert import configurables
    from kbert.models.modernbert.modernbert_config import modernbert_arguments_to_config
    from kbert.training import create_optimizer

    # RoPE has no table: the limit changes no weight.
    configurables.parse_gin([f"modernbert_{size}.gin"],
                            [f"ModernBertEncoder.max_sequence_length = {max_length}"])
    keras.utils.set_random_seed(0)
    pretrainer = configurables.pretrainer()
    setting = gin.query_parameter
    settings = dataclasses.asdict(configurables.OptimizerConfig())
    optimizer = create_optimizer(
        setting("run_pretraining.learning_rate"), setting("run_pretraining.num_train_steps"),
        setting("run_pretraining.num_warmup_steps"), setting("run_pretraining.optimizer"),
        weight_decay_rate=setting("run_pretraining.weight_decay_rate"),
        stable_decay=configurables.StableDecay(), **settings)
    optimizer.build(pretrainer.trainable_variables)
    recipe = {"masked_fraction": setting("MaskingConfig.masked_lm_prob"),
              "learning_rate": setting("run_pretraining.learning_rate"),
              "betas": [settings["beta_1"], settings["beta_2"]], "epsilon": settings["epsilon"],
              "weight_decay": setting("run_pretraining.weight_decay_rate")}
    config = modernbert_arguments_to_config(pretrainer.encoder.get_config(), pretrainer.get_config())
    gin.clear_config()
    return pretrainer, optimizer, recipe, config


def kbert_steps(pretrainer, optimizer, masked_fraction: float, length: int
                ) -> dict[str, Callable[[], float | None]]:
    """kbert's `forward` and `train` step functions on the row of `length` tokens."""
    import tensorflow as tf

    from kbert.training.pretraining.step import make_train_loop

    row = masked_row(length, pretrainer.encoder.vocabulary_size, masked_fraction)
    features = {"token_ids": row["token_ids"][None],
                "segment_ids": np.zeros((1, length), "int32"),
                "padding_mask": np.ones((1, length), "int32"),
                "mask_positions": row["positions"][None]}
    batch = tuple(tf.nest.map_structure(tf.constant, part) for part in (
        features, {"mlm": row["labels"][None]}, {"mlm": np.ones((1, len(row["labels"])), "float32")}))
    train_loop, _ = make_train_loop(tf.distribute.get_strategy(), pretrainer, optimizer,
                                    tf.Variable(0, dtype=tf.int64), 1, False, lambda: batch)
    encoder = pretrainer.encoder
    forward = tf.function(lambda inputs: encoder(inputs, training=False)["sequence_output"])
    inputs = {key: batch[0][key] for key in ("token_ids", "segment_ids", "padding_mask")}
    one = tf.constant(1, tf.int32)

    def forward_step():
        forward(inputs).numpy()

    return {"forward": forward_step, "train": lambda: float(train_loop(one)[0][0])}


def recorded(step: Callable[[], float | None], into: dict, key: str) -> Callable[[], None]:
    """`step` that keeps its first value (the first step's loss) in `into[key]`."""
    def run():
        value = step()
        into.setdefault(key, value)
    return run


def compare(args, size: str, lengths: list[int], rounds: list[int], worker: TransformersProcess,
            seconds_per_step) -> dict:
    """Builds both sides of one size and times each arm at each length; returns its figures."""
    pretrainer, optimizer, recipe, config = build_kbert(size, max(lengths))
    built = worker.ask({"build": config, "recipe": recipe})
    parameters = {"kbert": pretrainer.count_params(), "transformers": built["parameters"]}
    print(f"{size}: parameters kbert {parameters['kbert']:,}, transformers "
          f"{parameters['transformers']:,} (attention {built['attention']}; "
          f"transformers {built['versions']['transformers']}, torch {built['versions']['torch']}, "
          f"{built['threads']} threads)", flush=True)
    if parameters["kbert"] != parameters["transformers"]:
        sys.exit("the two models differ in parameters: not the same architecture")
    rows = []
    for index, (length, length_rounds) in enumerate(zip(lengths, rounds)):
        kbert_arms = kbert_steps(pretrainer, optimizer, recipe["masked_fraction"], length)
        for arm in args.arms.split(","):
            losses = {}
            steps = {"kbert": recorded(kbert_arms[arm], losses, "kbert"),
                     "transformers": recorded(
                         lambda: worker.ask({"length": length, "arm": arm})["loss"],
                         losses, "transformers")}
            # Warm-up: kbert traces its functions anew for each length; torch's eager mode
            # builds nothing per length (its optimizer state comes at its first step).
            steps["kbert"]()
            if index == 0:
                steps["transformers"]()
            best = seconds_per_step(steps, length_rounds, warmup=0)
            rows.append(row_of(size, length, arm, best, losses, config["vocab_size"], length_rounds))
    memory = {"kbert": peak_memory_mib(),
              "transformers": worker.ask({"memory": True})["peak_memory_mib"]}
    print(f"{size}: peak resident memory kbert {memory['kbert']:,.0f} MiB, transformers "
          f"{memory['transformers']:,.0f} MiB (whole processes)", flush=True)
    return {"size": size, "parameters": parameters, "versions": built["versions"],
            "peak_memory_mib": memory, "rows": rows}


def row_of(size, length, arm, best, losses, vocabulary_size, rounds) -> dict:
    """One printed and recorded row: seconds per step, tokens/s and kbert's speed-up."""
    ratio = best["transformers"] / best["kbert"]
    loss = ("" if losses.get("kbert") is None else
            f"  first loss {losses['kbert']:.3f} / {losses['transformers']:.3f} "
            f"(ln V {math.log(vocabulary_size):.3f})")
    print(f"{size:<6}{length:>7}  {arm:<8}{best['kbert']:>10.3f}{best['transformers']:>16.3f}"
          f"{length / best['kbert']:>13,.0f}{length / best['transformers']:>15,.0f}"
          f"{ratio:>9.2f}x{loss}", flush=True)
    row = {"size": size, "length": length, "arm": arm, "rounds": rounds,
           "kbert_s_per_step": round(best["kbert"], 3),
           "transformers_s_per_step": round(best["transformers"], 3),
           "kbert_tokens_per_s": round(length / best["kbert"], 1),
           "transformers_tokens_per_s": round(length / best["transformers"], 1),
           "kbert_over_transformers": round(ratio, 2)}
    if losses.get("kbert") is not None:
        row["first_loss"] = {name: round(value, 4) for name, value in losses.items()}
    return row


def headline(results: list[dict]) -> str:
    """The result's headline: kbert's speed-up per arm, over all sizes and lengths."""
    parts = []
    for arm, words in (("train", "pre-training step"), ("forward", "forward pass")):
        ratios = [r["kbert_over_transformers"] for size in results for r in size["rows"]
                  if r["arm"] == arm]
        if ratios:
            span = f"{min(ratios):.2f}x" if min(ratios) == max(ratios) else \
                f"{min(ratios):.2f}-{max(ratios):.2f}x"
            parts.append(f"{words} {span}")
    lengths = sorted({r["length"] for size in results for r in size["rows"]})
    sizes = ", ".join(size["size"] for size in results)
    return (f"kbert's ModernBERT ({sizes}, {'/'.join(f'{n:,}' for n in lengths)} tokens) runs "
            f"the {' and the '.join(parts)} transformers' speed.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="base",
                        help="ModernBERT sizes, each a gin/modernbert_<size>.gin: tiny, base, large.")
    parser.add_argument("--lengths", default="1024,8192", help="Tokens in the one row.")
    parser.add_argument("--rounds", default="3,1",
                        help="Timed rounds after the warm-up, one number for all lengths or "
                        "one per length.")
    parser.add_argument("--arms", default="forward,train", help="forward, train or both.")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="Intra-op threads of both sides (torch.set_num_threads, TF's "
                        "intra-op pool); default the CPU count, TF's own default.")
    parser.add_argument("--torch_python", default=TORCH_PYTHON,
                        help=f"Python of the torch environment; made by: {SETUP}")
    parser.add_argument("--transformers_worker", action="store_true",
                        help="Internal: be the transformers side (stdin/stdout requests).")
    result_file.add_flags(parser, NAME)
    args = parser.parse_args()
    if args.transformers_worker:
        serve_transformers(args.threads)
        return
    lengths = [int(v) for v in args.lengths.split(",")]
    rounds = [int(v) for v in args.rounds.split(",")]
    rounds = rounds * len(lengths) if len(rounds) == 1 else rounds
    if len(rounds) != len(lengths) or not set(args.arms.split(",")) <= set(ARMS):
        parser.error(f"--rounds={args.rounds} needs one number or one per length "
                     f"({args.lengths}); --arms={args.arms} takes {', '.join(ARMS)}")
    load, start = os.getloadavg()[0], time.monotonic()

    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    from benchmarks.pretraining_throughput import seconds_per_step

    print(f"tensorflow {tf.__version__}; batch 1, float32, XLA off, {args.threads} threads; "
          f"cores {os.cpu_count()}, load average {load:.2f}")
    worker = TransformersProcess(args.torch_python, args.threads)
    if result_file.load(load) == "loaded":
        print("the machine is loaded: under contention torch's OpenMP threads wait for each "
              "other far longer than TF's, so these figures say little about a quiet machine")
    print(f"{'size':<6}{'length':>7}  {'arm':<8}{'kbert s':>10}{'transformers s':>16}"
          f"{'kbert tok/s':>13}{'transf. tok/s':>15}{'kbert/tr':>10}", flush=True)
    try:
        results = [compare(args, size, lengths, rounds, worker, seconds_per_step)
                   for size in args.sizes.split(",")]
    finally:
        worker.close()
    print(f"load average at the end {os.getloadavg()[0]:.2f}; "
          f"{(time.monotonic() - start) / 60:.1f} minutes in all")
    versions = results[0]["versions"]
    result_file.write_result(
        args, name=NAME, title="ModernBERT against transformers' on CPU",
        area="pre-training", load_average_at_start=load, headline=headline(results),
        reference=f"Hugging Face transformers {versions['transformers']} ModernBertForMaskedLM, "
                  f"torch {versions['torch'].split('+')[0]} CPU, same run",
        aim="", met=None, figures=[row for size in results for row in size["rows"]],
        notes="\n".join(
            f"- {size['size']}: parameters kbert {size['parameters']['kbert']:,}, transformers "
            f"{size['parameters']['transformers']:,}; peak resident memory of each whole "
            f"process kbert {size['peak_memory_mib']['kbert']:,.0f} MiB, transformers "
            f"{size['peak_memory_mib']['transformers']:,.0f} MiB." for size in results),
        method=__doc__[__doc__.index("Both sides build"):])


if __name__ == "__main__":
    main()
