"""int8 exports against float32: model-alone speed at batch 1 and 32, size, SST-2 dev quality.

Models (each exported float32 and `--quantize=int8` by `export_saved_model`,
the code `kbert-export` runs):

    minilm  all-MiniLM-L6-v2 (`kbert-convert --source=minilm`; 6 x 384), the
            sentence-embedding export
    base    a random BERT-base-shaped encoder (12 x 768, 12 heads, 3072, the
            MiniLM vocabulary), the sentence-embedding export
    sst2    (with --sst2) all-MiniLM-L6-v2 fine-tuned on --sst2_train_size SST-2
            training sentences (1 epoch, length 64), the classifier export; its
            int8 export's own check gives the SST-2 dev accuracy drop (all 872)
    conll   (with --conll) all-MiniLM-L6-v2 fine-tuned for NER on the first
            --conll_train_size CoNLL-2003 training sentences (kbert's defaults,
            length 128, the kept epoch chosen on 10% of them), the token-classifier
            export; its int8 export's own check gives the CoNLL-2003 dev entity F1
            drop (all 3,250 sentences)

Speed is each export's `serving_default` as kbert-serve runs it (a
`kbert.serving.Servable`) on raw SST-2 dev sentences (tokenization included:
what a server runs per request), in one process: float32; int8 as kbert-serve
runs it by default (its ONNX Runtime int8 model, where the export has one);
and int8-tensorflow (the same export's TensorFlow int8 graph, `kbert-serve
--noonnxruntime`, what stock TF Serving runs), alternating, best of --repeats
timed rounds per batch size;
`--threads` caps TensorFlow's intra-op threads. On a shared machine the figures are
indicative: compare the ratios of one run. Sizes are the version directories.
An embedding export's check reports `embedding_agreement` (100 x the mean
cosine between the float32 and the int8 embedding of the same texts).

With --bfloat16 the float32 export is also timed under TensorFlow's oneDNN
bfloat16 rewrite (`auto_mixed_precision_onednn_bfloat16`, which stock TF Serving's
`--mixed_precision=bfloat16` turns on), with its agreement with float32
(100 x the mean cosine of the outputs): the bfloat16 option of issue 33 on a CPU
with bfloat16 units.

With --serve_clients (e.g. 1,8,32) each export is also served by `kbert-serve`
(a subprocess on loopback, `--enable_batching` with the repository's
serving/batching_parameters.txt and the default token budget), float32 then int8,
and driven over gRPC Predict by that many client threads, one SST-2 dev sentence
per request, for --serve_seconds each (benchmarks/serving_latency.py's client):
QPS, p50 and p99, and the int8/float32 QPS ratio of the same run.

    PYTHONPATH=. nice -n 10 python benchmarks/quantization.py --models=minilm,base [--bfloat16]
    PYTHONPATH=. nice -n 10 python benchmarks/quantization.py --models=minilm --sst2
    PYTHONPATH=. python benchmarks/quantization.py --models= --conll
    PYTHONPATH=. python benchmarks/quantization.py --models=minilm,base --serve_clients=1,8,32
    PYTHONPATH=. python benchmarks/quantization.py --models=minilm --sst2 --serve_only --serve_clients=1,8,32 --serve_intra_op_one

Each model's line is appended to <work_dir>/results.jsonl; the run's lines go to
benchmarks/results/quantization.json (benchmarks/result_file.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import result_file  # noqa: E402
from benchmarks.finetuning_quality import _conll_subset  # noqa: E402
from benchmarks.finetuning_quality import _glue_subset  # noqa: E402
from benchmarks.finetuning_quality import _minilm  # noqa: E402



def _base_dir(work: str, minilm_dir: str) -> str:
    """A random BERT-base-shaped pre-trained directory with MiniLM's tokenizer."""
    from kbert.checkpoints import open_model_dir
    from kbert.checkpoints import save_pretrained
    from kbert.models import BertEncoder

    path = os.path.join(work, "base")
    if not os.path.exists(os.path.join(path, "encoder.weights.h5")):
        import keras

        keras.utils.set_random_seed(0)
        minilm = open_model_dir(minilm_dir)
        encoder = BertEncoder(vocabulary_size=minilm.encoder_config["vocabulary_size"],
                              num_layers=12, num_heads=12, hidden_dim=768, intermediate_dim=3072,
                              max_sequence_length=512)
        save_pretrained(path, encoder, vocab_file=minilm.vocab_file, do_lower_case=True)
    return path


def _finetuned_dir(work: str, minilm_dir: str, name: str, write_data, metric: str,
                   **settings) -> str:
    """MiniLM fine-tuned into `work/name` (kept for later runs), on the data `write_data(dir)`
    writes; prints its dev `metric`. `settings` are `run_finetuning`'s task and run arguments."""
    from kbert.training.finetuning import run_finetuning

    path = os.path.join(work, name)
    if not os.path.exists(os.path.join(path, "task_model.keras")):
        data = os.path.join(work, f"{name}-data")
        write_data(data)
        start = time.time()
        results = run_finetuning(init_checkpoint=minilm_dir, model_dir=path, data_dir=data,
                                 do_train=True, do_eval=True, verbose=2, **settings)
        print(f"fine-tuned {path} in {time.time() - start:.0f} s: dev {metric} "
              f"{results[metric]:.4f}", flush=True)
    return path


def _sst2_dir(work: str, minilm_dir: str, train_size: int, data_dir: str) -> str:
    sst2 = os.path.join(data_dir, "glue", "SST-2")
    return _finetuned_dir(work, minilm_dir, f"sst2-{train_size}",
                          lambda data: _glue_subset(sst2, data, train_size, seed=0), "accuracy",
                          task="glue", task_name="sst-2", max_seq_length=64,
                          num_train_epochs=1.0)


def _conll_dir(work: str, minilm_dir: str, train_size: int, data_dir: str) -> str:
    # kbert's defaults (auto batch, rate and epochs), the kept epoch chosen on 10% of the
    # training sentences (benchmark finetuning_quality's clean figures), dev never used to choose.
    conll = os.path.join(data_dir, "ner", "conll2003")
    return _finetuned_dir(work, minilm_dir, f"conll-{train_size}",
                          lambda data: _conll_subset(conll, data, train_size), "f1",
                          task="ner", task_name="conll2003", max_seq_length=128,
                          selection_fraction=0.1)


def _size_mb(path: str) -> float:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path)
               for f in files) / 2**20


def _speeds(paths: dict, texts: list[str], batch_sizes: list[int], repeats: int,
            bfloat16: bool = False) -> tuple[dict, float | None]:
    """examples/s of each arm's serving_default as kbert-serve runs it, rounds alternating.

    Arms are `kbert.serving.Servable`s, the object kbert-serve answers with:
    `float32`; `int8` (the int8 export as kbert-serve runs it by default: its
    ONNX Runtime model where it has one); `int8-tensorflow` (the same export with
    `--noonnxruntime`: the SavedModel's TensorFlow int8 graph, what stock TF
    Serving runs), timed only when the export has an ONNX Runtime model.

    With `bfloat16`, another arm is the float32 export loaded again and first
    called with TensorFlow's `auto_mixed_precision_onednn_bfloat16` Grappler
    rewrite on (what stock TF Serving's `--mixed_precision=bfloat16` turns on):
    a function is optimized once, when first called, so the other arms, called
    before, keep their graphs (checked: float32's answers are unchanged).
    Returns the speeds and the bfloat16 run's agreement with float32 (100 x the
    mean cosine of their outputs on the first 256 texts), or None.
    """
    import numpy as np
    import tensorflow as tf

    from kbert.export.quantization import embedding_agreement
    from kbert.serving.servable import Servable

    def arm(servable):
        return lambda text: servable.run("serving_default", {"text": text})

    int8 = Servable("int8", 1, paths["int8"])
    runs = {"float32": arm(Servable("float32", 1, paths["float32"])), "int8": arm(int8)}
    if int8.runtimes:
        runs["int8-tensorflow"] = arm(Servable("int8", 1, paths["int8"], use_onnxruntime=False))
    agreement = None
    if bfloat16:
        probe = np.array(texts[:256], object)
        before = {name: _main_output(run(probe)) for name, run in runs.items()}  # optimized now
        rewrite = "auto_mixed_precision_onednn_bfloat16"
        tf.config.optimizer.set_experimental_options({rewrite: True})
        mixed_signature = tf.saved_model.load(paths["float32"]).signatures["serving_default"]
        runs["bfloat16"] = lambda text: mixed_signature(text=tf.constant(text))
        mixed = _main_output(runs["bfloat16"](probe))
        tf.config.optimizer.set_experimental_options({rewrite: False})
        if not np.array_equal(_main_output(runs["float32"](probe)), before["float32"]):
            raise SystemExit("the bfloat16 rewrite changed the float32 run: its figures would be wrong")
        agreement = embedding_agreement(before["float32"], mixed)
    best = {(name, b): 0.0 for name in runs for b in batch_sizes}
    for b in batch_sizes:
        batches = [np.array(texts[i:i + b], object) for i in range(0, len(texts) - b + 1, b)]
        batches = batches[:max(1, 64 // b)]  # 64 examples per round (2 batches of 32)
        for run in runs.values():
            run(batches[0])  # warm up this shape's kernels
        for _ in range(repeats):
            for name, run in runs.items():
                start = time.perf_counter()
                for batch in batches:
                    run(batch)
                rate = sum(len(x) for x in batches) / (time.perf_counter() - start)
                best[name, b] = max(best[name, b], rate)
    return best, agreement


def _main_output(outputs: dict):
    """The signature's float output with the most values (embeddings, logits), as numpy."""
    import numpy as np

    floats = [np.asarray(v) for v in outputs.values()]
    return max([v for v in floats if v.dtype.kind == "f"], key=np.size)


def _served(paths: dict, texts: list[str], clients: list[int], seconds: float,
            work: str, intra_op_one: bool = False) -> dict:
    """QPS, p50 and p99 of each export through kbert-serve at each client count.

    With `intra_op_one`, the int8 export is also served with
    `--onnxruntime_intra_op_parallelism=1` (arm `int8-intra1`).
    """
    from benchmarks.serving_latency import drive
    from benchmarks.serving_latency import start_server

    batching_file = os.path.join(REPO, "serving", "batching_parameters.txt")
    arms = {fmt: (version_dir, ()) for fmt, version_dir in paths.items()}
    if intra_op_one:
        arms["int8-intra1"] = (paths["int8"], ("--onnxruntime_intra_op_parallelism=1",))
    figures = {}
    for fmt, (version_dir, extra_args) in arms.items():
        server = start_server(os.path.dirname(version_dir), batching_file,
                              os.path.join(work, f"serve-{fmt}.log"), extra_args)
        try:
            for count in clients:
                r = drive(server.grpc_address, texts, count, seconds)
                figures[fmt, count] = r
                print(f"  served {fmt:7s} clients {count:3d}: {r['qps']:8.1f} qps  p50 "
                      f"{r['p50']:8.2f} ms  p99 {r['p99']:8.2f} ms  ({r['requests']} requests, "
                      f"{r['errors']} errors)", flush=True)
        finally:
            server.stop()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="minilm,base")
    parser.add_argument("--sst2", action="store_true", help="Also fine-tune MiniLM on SST-2 and "
                        "export it in int8 (its check scores all 872 dev sentences).")
    parser.add_argument("--sst2_train_size", type=int, default=2000)
    parser.add_argument("--conll", action="store_true", help="Also fine-tune MiniLM for CoNLL-2003 "
                        "NER and export it in int8 (its check scores all 3,250 dev sentences).")
    parser.add_argument("--conll_train_size", type=int, default=1500)
    parser.add_argument("--batch_sizes", default="1,32")
    parser.add_argument("--bfloat16", action="store_true", help="Also time the float32 export under "
                        "TF's oneDNN bfloat16 rewrite (stock TF Serving's --mixed_precision=bfloat16); "
                        "pays only on CPUs with avx512_bf16 or amx_bf16.")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (0: TF's choice)")
    parser.add_argument("--serve_clients", default="", help="e.g. 1,8,32: also serve each export "
                        "through kbert-serve at these client counts (empty: not served)")
    parser.add_argument("--serve_seconds", type=float, default=8.0)
    parser.add_argument("--serve_intra_op_one", action="store_true", help="Also serve the int8 "
                        "export with --onnxruntime_intra_op_parallelism=1 (arm int8-intra1).")
    parser.add_argument("--serve_only", action="store_true", help="Skip the model-alone timing "
                        "(serve the exports only).")
    result_file.add_flags(parser, "quantization")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    # Kept between invocations (default kbert-quantization in the temporary directory): the
    # converted and fine-tuned models are reused.
    args.work_dir = args.work_dir or os.path.join(tempfile.gettempdir(), "kbert-quantization")
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    from kbert.export.saved_model import export_saved_model

    os.makedirs(args.work_dir, exist_ok=True)
    with open(os.path.join(args.data_dir, "glue", "SST-2", "dev.tsv"), encoding="utf-8") as f:
        texts = [line.split("\t")[0] for line in f.read().splitlines()[1:]]
    minilm = _minilm(args.work_dir)
    sources = {"minilm": lambda: minilm, "base": lambda: _base_dir(args.work_dir, minilm)}
    wanted = [m for m in args.models.split(",") if m]
    if args.sst2:
        sources["sst2"] = lambda: _sst2_dir(args.work_dir, minilm, args.sst2_train_size,
                                            args.data_dir)
        wanted.append("sst2")
    if args.conll:
        sources["conll"] = lambda: _conll_dir(args.work_dir, minilm, args.conll_train_size,
                                              args.data_dir)
        wanted.append("conll")
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    print(f"TensorFlow {tf.__version__}; {os.cpu_count()} CPUs; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    lines = []
    for name in wanted:
        model_dir = sources[name]()
        exports = os.path.join(args.work_dir, "exports", name)
        paths = {}
        for fmt in ("float32", "int8"):
            target = os.path.join(exports, fmt)
            start = time.time()
            quantize = None if fmt == "float32" else "int8"
            length = None if name in ("sst2", "conll") else 128
            paths[fmt] = export_saved_model(model_dir, target, max_seq_length=length, check=False,
                                            quantize=quantize,
                                            max_quantization_drop=1.0,
                                            quantization_drop_is_error=False)
            print(f"{name} {fmt}: exported in {time.time() - start:.0f} s, "
                  f"{_size_mb(paths[fmt]):.1f} MiB", flush=True)
        with open(os.path.join(paths["int8"], "assets.extra", "kbert_export.json")) as f:
            check = json.load(f)["quantization"]
        speeds, bfloat16_agreement = (({}, None) if args.serve_only else
                                      _speeds(paths, texts, batch_sizes, args.repeats, args.bfloat16))
        line = {"model": name, "load": round(os.getloadavg()[0], 1),
                "size_mib": {fmt: round(_size_mb(p), 1) for fmt, p in paths.items()},
                "check": {k: check[k] for k in ("metric", "float32", "quantized", "drop_points",
                                                "num_examples", "quantized_layers")}}
        if "onnxruntime" in check:
            onnx = check["onnxruntime"]
            line["check_onnxruntime"] = {k: onnx[k] for k in ("metric", "quantized", "drop_points",
                                                              "quantized_layers")}
        for b in [] if args.serve_only else batch_sizes:
            f32 = speeds["float32", b]
            figures = {"float32": round(f32, 1)}
            for arm in ("int8", "int8-tensorflow"):
                if (arm, b) in speeds:
                    figures[arm] = round(speeds[arm, b], 1)
                    figures[f"{arm}_ratio"] = round(speeds[arm, b] / f32, 2)
            line[f"batch{b}_examples_per_s"] = figures
        if args.bfloat16 and not args.serve_only:
            line["bfloat16_rewrite"] = {"agreement": round(bfloat16_agreement, 4), **{
                f"batch{b}_examples_per_s": round(speeds["bfloat16", b], 1) for b in batch_sizes}, **{
                f"batch{b}_ratio": round(speeds["bfloat16", b] / speeds["float32", b], 2)
                for b in batch_sizes}}
        line["size_ratio"] = round(line["size_mib"]["int8"] / line["size_mib"]["float32"], 3)
        if args.serve_clients:
            clients = [int(c) for c in args.serve_clients.split(",")]
            served = _served(paths, texts, clients, args.serve_seconds,
                             os.path.join(args.work_dir, "exports", name), args.serve_intra_op_one)
            arms = [fmt for fmt in ("float32", "int8", "int8-intra1") if (fmt, clients[0]) in served]
            line["served"] = {
                str(count): {**{fmt: {k: round(served[fmt, count][k], 2)
                                      for k in ("qps", "p50", "p99", "errors")}
                                for fmt in arms},
                             **{f"{fmt}_qps_ratio": round(served[fmt, count]["qps"]
                                                          / served["float32", count]["qps"], 2)
                                for fmt in arms if fmt != "float32"}}
                for count in clients}
        print(json.dumps(line), flush=True)
        with open(os.path.join(args.work_dir, "results.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")
        lines.append(line)
    write(args, lines, batch_sizes, load)


def write(args, lines: list[dict], batch_sizes: list[int], load: float) -> None:
    """The result file: int8 / float32 as kbert-serve runs it, per batch size, and quality drops."""
    ratios = {b: [line[f"batch{b}_examples_per_s"]["int8_ratio"] for line in lines
                  if "int8_ratio" in line.get(f"batch{b}_examples_per_s", {})] for b in batch_sizes}
    drops = {line["model"]: line.get("check_onnxruntime", line["check"])["drop_points"]
             for line in lines if line["check"]["metric"] != "embedding_agreement"}
    parts = [f"batch {b} {min(r):.2f}-{max(r):.2f}x" for b, r in ratios.items() if r]
    parts += [f"{model} drop {drop:.2f} points" for model, drop in drops.items()]
    result_file.write_result(
        args, name="quantization", title="int8 export", area="serving",
        load_average_at_start=load,
        headline="int8 / float32 as kbert-serve runs it, tokenization included: "
                 + "; ".join(parts) + ".",
        reference="the float32 export of the same model, alternating in the same run",
        aim=">= 2x float32 at batch 1 and 32 for <= 0.5 points",
        met=(all(min(r) >= 2 for r in ratios.values() if r) and all(d <= 0.5 for d in drops.values()))
        if any(ratios.values()) else None,
        figures=lines, method=__doc__.split("\n\n    PYTHONPATH")[0])


if __name__ == "__main__":
    main()
