"""int8 in ONNX Runtime against kbert's int8 SavedModel and float32: the model alone, same run.

Issue 33 asks for >= 2x float32's throughput at batch 1 and 32 for <= 0.5
points of quality. kbert's int8 SavedModel (oneDNN quantized matmuls inside
TensorFlow) falls short (BENCHMARKS.md, quantization):
TensorFlow's oneDNN 3 int8 matmul reorders its weights on every call. This
benchmark measured what another runtime would give before kbert-serve grew
one (`kbert.export.onnxruntime_int8`, which shares its `Erfc` handler and
Gemm rewrite; `benchmarks/quantization.py` times what kbert-serve runs): the
same model's `serve_ids` signature (token ids in, the export's
outputs out; tokenization is not timed) in four arms, one process, rounds
alternating, best of --repeats:

    tf-float32   the float32 SavedModel `kbert-export` writes
    tf-int8      the `kbert-export --quantize=int8` SavedModel
    ort-float32  the float32 signature converted by tf2onnx, run by ONNX Runtime
                 (its default graph optimizations)
    ort-int8     that ONNX model quantized by ONNX Runtime's own dynamic
                 quantizer: int8 weights per output channel, uint8 activations
                 quantized per call (MatMulInteger, VNNI kernels)

Models: `minilm` (all-MiniLM-L6-v2 converted from its wheel, the embedding
export at 128 pieces), `base` (a random BERT-base-shaped encoder, 12 x 768,
with MiniLM's vocabulary), `sst2` (MiniLM fine-tuned on --sst2_train_size SST-2
training sentences, 1 epoch, length 64: benchmarks/quantization.py's model; its
arms' SST-2 dev accuracy over all 872 sentences, the quality the issue names).
Inputs are SST-2 dev sentences, each batch padded to its longest, as kbert-serve
pads. Embedding models report agreement: 100 x the mean cosine between an
arm's embedding and tf-float32's. Nothing is chosen on the dev set.

Needs, besides kbert's own environment (which has onnxruntime, onnx and
tf2onnx), sympy for ONNX Runtime's `quant_pre_process`:

    pip install --no-deps sympy==1.14.0 mpmath==1.4.1

    PYTHONPATH=. python benchmarks/onnxruntime_int8.py --models=minilm,base,sst2

Writes benchmarks/results/onnxruntime_int8.json (benchmarks/result_file.py).
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
from benchmarks.finetuning_quality import _minilm  # noqa: E402
from benchmarks.quantization import _base_dir  # noqa: E402
from benchmarks.quantization import _size_mb  # noqa: E402
from benchmarks.quantization import _sst2_dir  # noqa: E402
from kbert.export.onnxruntime_int8 import erfc_as_erf  # noqa: E402
from kbert.export.onnxruntime_int8 import gemm_to_matmul  # noqa: E402

ARMS = ("tf-float32", "tf-int8", "ort-float32", "ort-int8")
ID_NAMES = ("token_ids", "segment_ids", "padding_mask")


def _gemm_to_matmul(path: str, out_path: str) -> int:
    """`kbert.export.onnxruntime_int8.gemm_to_matmul` from file to file."""
    import onnx

    model = onnx.load(path)
    rewritten = gemm_to_matmul(model)
    onnx.save(model, out_path)
    return rewritten


def _drop_unused_inputs(path: str) -> None:
    """Removes graph inputs no node reads: tf2onnx makes every tensor the signature
    captures an input (a classifier's label names), even when `output` does not need it."""
    import onnx

    model = onnx.load(path)
    read = {name for node in model.graph.node for name in node.input}
    unused = [i for i in model.graph.input if i.name not in ID_NAMES and i.name not in read]
    for graph_input in unused:
        model.graph.input.remove(graph_input)
    extra = [i.name for i in model.graph.input if i.name not in ID_NAMES]
    if extra:
        raise SystemExit(f"{path}: the ONNX model needs inputs besides the token ids: {extra}")
    onnx.save(model, path)


def _onnx_models(signature, output: str, work: str) -> tuple[str, str, int]:
    """The float32 ONNX model of `signature`'s `output` and its dynamic int8 copy."""
    import tensorflow as tf
    import tf2onnx
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization import quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    spec = [tf.TensorSpec([None, None], tf.int32, name=n) for n in ID_NAMES]

    @tf.function(input_signature=spec)
    def main_output(token_ids, segment_ids, padding_mask):
        return {output: signature(token_ids=token_ids, segment_ids=segment_ids,
                                  padding_mask=padding_mask)[output]}

    float32 = os.path.join(work, "float32.onnx")
    tf2onnx.convert.from_function(main_output, input_signature=spec, opset=17,
                                  custom_op_handlers={"Erfc": (erfc_as_erf, [])}, output_path=float32)
    _drop_unused_inputs(float32)
    # ONNX Runtime's pre-processing folds the weights' reshapes into constants,
    # so the quantizer sees them as weights.
    folded = os.path.join(work, "folded.onnx")
    quant_pre_process(float32, folded, skip_symbolic_shape=True)
    matmuls = os.path.join(work, "matmuls.onnx")
    rewritten = _gemm_to_matmul(folded, matmuls)
    int8 = os.path.join(work, "int8.onnx")
    quantize_dynamic(matmuls, int8, weight_type=QuantType.QInt8, per_channel=True,
                     op_types_to_quantize=["MatMul"])
    return float32, int8, rewritten


def _batches(preprocessor, texts: list[str], batch_size: int) -> list[dict]:
    """Token id batches of `texts`, each padded to its longest, as kbert-serve pads."""
    import numpy as np
    import tensorflow as tf

    batches = []
    for start in range(0, len(texts), batch_size):
        ids = preprocessor(tf.constant(texts[start:start + batch_size]))
        length = int(np.asarray(ids["padding_mask"]).sum(axis=1).max())
        batches.append({n: np.asarray(ids[n])[:, :length].astype(np.int32) for n in ID_NAMES})
    return batches


def _tensorflow_arm(signature, output: str):
    """Token ids (numpy) -> `output` of a loaded SavedModel's `serve_ids`, as numpy."""
    import tensorflow as tf

    def run(ids: dict):
        return signature(**{n: tf.constant(v) for n, v in ids.items()})[output].numpy()
    return run


def _onnxruntime_arm(path: str):
    """Token ids (numpy) -> the ONNX model's output, run by ONNX Runtime on every core."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = os.cpu_count()
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def run(ids: dict):
        return session.run(None, {i.name: ids[i.name] for i in session.get_inputs()})[0]
    return run


def _arms(model_dir, name: str, work: str) -> tuple[dict, dict, list]:
    """The four arms of one model: runs (arm -> function), sizes in MiB, and the
    loaded SavedModels (their variables live as long as they do)."""
    import tensorflow as tf

    from kbert.export.saved_model import export_saved_model

    output = "logits" if model_dir.is_finetuned else "embedding"
    runs, sizes, loaded = {}, {}, []
    for arm, quantize in (("tf-float32", None), ("tf-int8", "int8")):
        path = export_saved_model(model_dir.path, os.path.join(work, arm),
                                  max_seq_length=None if model_dir.is_finetuned else 128,
                                  check=False, quantize=quantize, max_quantization_drop=100.0,
                                  quantization_drop_is_error=False)
        loaded.append(tf.saved_model.load(path))
        runs[arm] = _tensorflow_arm(loaded[-1].signatures["serve_ids"], output)
        sizes[arm] = _size_mb(path)
    start = time.time()
    onnx_paths = _onnx_models(loaded[0].signatures["serve_ids"], output, work)
    print(f"{name}: ONNX models in {time.time() - start:.0f} s ({onnx_paths[2]} Gemm rewritten "
          "as MatMul)", flush=True)
    for arm, path in zip(("ort-float32", "ort-int8"), onnx_paths[:2]):
        runs[arm] = _onnxruntime_arm(path)
        sizes[arm] = os.path.getsize(path) / 2**20
    return runs, sizes, loaded


def _best_seconds(runs: dict, batches: list[dict], repeats: int) -> dict:
    """Arm -> the fastest of `repeats` passes over `batches`, arms alternating each round."""
    best = {arm: float("inf") for arm in runs}
    for _ in range(repeats):
        for arm, run in runs.items():
            start = time.perf_counter()
            for batch in batches:
                run(batch)
            best[arm] = min(best[arm], time.perf_counter() - start)
    return best


def _quality(outputs: dict, labels, finetuned: bool) -> tuple[str, dict]:
    """SST-2 dev accuracy of each arm (a classifier), or its agreement with tf-float32:
    100 x the mean cosine of their embeddings."""
    from kbert.export.quantization import embedding_agreement

    if finetuned:
        return "sst2_dev_accuracy", {a: round(100 * float((o.argmax(-1) == labels).mean()), 2)
                                     for a, o in outputs.items()}
    return "agreement", {a: round(embedding_agreement(outputs["tf-float32"], o), 3)
                         for a, o in outputs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="minilm,base,sst2")
    parser.add_argument("--sst2_train_size", type=int, default=2000)
    parser.add_argument("--batch1_texts", type=int, default=256,
                        help="SST-2 dev sentences timed one at a time (batch 32 times all 872).")
    parser.add_argument("--repeats", type=int, default=3)
    result_file.add_flags(parser, "onnxruntime_int8")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    # Kept between invocations (default kbert-onnxruntime-int8 in the temporary directory).
    args.work_dir = args.work_dir or os.path.join(tempfile.gettempdir(), "kbert-onnxruntime-int8")
    lines = []
    import numpy as np
    import onnxruntime
    import tensorflow as tf

    from kbert.checkpoints import open_model_dir

    results_dir = os.path.join(args.work_dir, "onnxruntime")
    os.makedirs(results_dir, exist_ok=True)
    with open(os.path.join(args.data_dir, "glue", "SST-2", "dev.tsv"), encoding="utf-8") as f:
        rows = [line.split("\t") for line in f.read().splitlines()[1:]]
    texts, labels = [r[0] for r in rows], np.array([int(r[1]) for r in rows])
    minilm = _minilm(args.work_dir)
    sources = {"minilm": lambda: minilm, "base": lambda: _base_dir(args.work_dir, minilm),
               "sst2": lambda: _sst2_dir(args.work_dir, minilm, args.sst2_train_size,
                                         args.data_dir)}
    print(f"TensorFlow {tf.__version__}, ONNX Runtime {onnxruntime.__version__}; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}", flush=True)
    for name in [m for m in args.models.split(",") if m]:
        model_dir = open_model_dir(sources[name]())
        runs, sizes, _loaded = _arms(model_dir, name, os.path.join(results_dir, name))
        length = model_dir.task_config.max_seq_length if model_dir.is_finetuned else 128
        preprocessor = model_dir.preprocessor(length)
        line = {"model": name, "size_mib": {a: round(s, 1) for a, s in sizes.items()}}
        for batch_size in (1, 32):
            batches = _batches(preprocessor, texts[:args.batch1_texts] if batch_size == 1
                               else texts, batch_size)
            count = sum(len(b["token_ids"]) for b in batches)
            # One untimed pass warms each arm up; at batch 32 it covers all 872 sentences
            # and gives the quality figures.
            outputs = {a: np.concatenate([run(b) for b in batches]) for a, run in runs.items()}
            if batch_size == 32:
                metric, values = _quality(outputs, labels, model_dir.is_finetuned)
                line[metric] = values
            best = _best_seconds(runs, batches, args.repeats)
            rates = line[f"batch{batch_size}_examples_per_s"] = {
                a: round(count / t, 1) for a, t in best.items()}
            ratios = line[f"batch{batch_size}_vs_tf_float32"] = {
                a: round(best["tf-float32"] / t, 2) for a, t in best.items()}
            print(f"{name} batch {batch_size}: " + ", ".join(
                f"{a} {rates[a]} ex/s ({ratios[a]}x)" for a in runs), flush=True)
        line["load"] = round(os.getloadavg()[0], 1)
        print(json.dumps(line), flush=True)
        with open(os.path.join(results_dir, "results.jsonl"), "a") as f:
            f.write(json.dumps(line) + "\n")
        lines.append(line)
    ratios = {b: [line[f"batch{b}_vs_tf_float32"]["ort-int8"] for line in lines] for b in (1, 32)}
    result_file.write_result(
        args, name="onnxruntime_int8", title="ONNX Runtime int8, the model alone", area="serving",
        load_average_at_start=load,
        headline="ONNX Runtime int8 / TensorFlow float32, token ids in: " + ", ".join(
            f"{min(r):.2f}-{max(r):.2f}x at batch {b}" for b, r in ratios.items() if r) + ".",
        reference="the TensorFlow float32 SavedModel's serve_ids signature, same run",
        aim=">= 2x float32 at batch 1 and 32",
        met=all(min(r) >= 2 for r in ratios.values()) if lines else None,
        figures=lines, method=__doc__.split("\n\nNeeds")[0].split("\n\n", 1)[1])


if __name__ == "__main__":
    main()
