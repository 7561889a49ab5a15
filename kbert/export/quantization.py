"""`kbert-export --quantize`: the cheaper numeric format and the quality check that guards it.

`int8` switches the model's matmul layers to int8 weights and exact int8
arithmetic in core TF ops (`kbert.layers.quantize_int8` says why), inside
the same raw-text SavedModel (what stock TF Serving runs). For the tasks whose
signatures run the model once per text (classification, regression,
re-ranking, embeddings), the export also writes the model as an ONNX Runtime
int8 graph (`kbert.export.onnxruntime_int8`), which kbert-serve runs instead.
Before a quantized version is published, the float32 model and each int8 one
are scored on the task's dev split (by default the
one the fine-tuned directory recorded in `task_config.json`'s `dev_data`) with
the task's main metric; a drop of more than `max_drop` points refuses the
export (or only warns). The figures go into `kbert_export.json` under
`quantization`.

An embedding model (a pre-trained directory) has no task metric: it is scored
by `embedding_agreement`, 100 x the mean cosine similarity between the float32
and the int8 embedding of the same texts (float32 scores 100), on the lines of
the files in `--quantization_data_dir` or, without it, on fixed pseudo-sentences
of vocabulary words.

`bfloat16` is refused: it could pay only on CPUs with bfloat16 units (AVX512-BF16
or AMX), and on one (an AMD EPYC with avx512_bf16) TensorFlow's bfloat16 rewrite,
the one stock TF Serving's `--mixed_precision=bfloat16` applies to a float32
export, ran no faster than float32 (`benchmarks/quantization.py --bfloat16`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import types
from typing import Any

import numpy as np
import tensorflow as tf

from kbert.checkpoints.model_dir import ModelDir
from kbert.export.serving_modules import serving_task
from kbert.tasks import TaskData
from kbert.tasks.base import encoder_inputs
from kbert.tasks.sentence_embedding import SentenceEmbeddingServingModule

DEFAULT_MAX_DROP = 1.0
# Largest change of any model output (a logit, a token vector's entry) allowed between a text
# run alone and inside a padded batch of 32, for a runtime that must answer both alike
# (ONNX Runtime int8 meets it on SST-2's dev set: see BENCHMARKS.md, int8_batch_independence).
MAX_BATCH_DIFFERENCE = 1e-4
EMBEDDING_METRIC = "embedding_agreement"
_BATCH_SIZE = 32
_AGREEMENT_TEXTS = 256

log = logging.getLogger("kbert.export")


@dataclasses.dataclass
class QuantizationReport:
    """What the export's quality check found.

    Args:
        format: str. `int8`.
        metric: str. The task's main metric (or `embedding_agreement`).
        float32: float. Its value for the float32 model.
        quantized: float. Its value for the quantized model.
        drop_points: float. `float32 - quantized`, in points (percent units).
        max_drop_points: float. The allowed drop (`--max_quantization_drop`).
        num_examples: int. Examples scored.
        data: str. Where they came from.
        quantized_layers: int. Layers switched to int8 (matmuls, for ONNX Runtime).
        runtime: str. What runs the quantized model: `tensorflow` (the
            SavedModel's int8 graph) or `onnxruntime` (kbert-serve's ONNX model).
        quantized_batch1: float or None. The metric with one example a call
            (ONNX Runtime; `quantized` is at 32 a call).
        batch_difference: float or None. `batch_difference`'s figure.
        max_batch_difference: float or None. Its limit (`MAX_BATCH_DIFFERENCE`).
    """

    format: str
    metric: str
    float32: float
    quantized: float
    drop_points: float
    max_drop_points: float
    num_examples: int
    data: str
    quantized_layers: int
    runtime: str = "tensorflow"
    quantized_batch1: float | None = None
    batch_difference: float | None = None
    max_batch_difference: float | None = None

    @property
    def ok(self) -> bool:
        return self.drop_points <= self.max_drop_points and self.batch_consistent

    @property
    def batch_consistent(self) -> bool:
        """Whether no output moved more than `max_batch_difference` between a text alone and
        in its padded batch (True where not checked)."""
        return self.batch_difference is None or self.batch_difference <= self.max_batch_difference

    def to_dict(self) -> dict[str, Any]:
        return dict(dataclasses.asdict(self), ok=self.ok)

    def message(self) -> str:
        """One line: the metric both ways, the drop and the verdict."""
        verdict = ("within" if self.ok else "OVER") + f" --max_quantization_drop={self.max_drop_points:g}"
        batches = ""
        if self.batch_difference is not None:
            batches = (f"; at batch 1 {self.quantized_batch1:.4f}, batch 32 {self.quantized:.4f}, "
                       f"largest output change alone vs in a padded batch {self.batch_difference:.3g} "
                       f"({'within' if self.batch_consistent else 'OVER'} {self.max_batch_difference:g})")
        return (f"{self.format} ({self.runtime}) check on {self.num_examples} examples of {self.data}: "
                f"{self.metric} float32 {self.float32:.4f}, {self.format} {self.quantized:.4f}, "
                f"drop {self.drop_points:+.2f} points ({verdict}){batches}; "
                f"{self.quantized_layers} layers in {self.format}.")


@dataclasses.dataclass
class QualityData:
    """The examples the check scores on, read before any model is loaded.

    Args:
        examples: list. The task's dev examples, or texts (embedding models).
        where: str. Where they came from, for the report.
    """

    examples: list
    where: str


def quality_data(model_dir: ModelDir, data_dir: str | None = None) -> QualityData:
    """Reads the data the quality check scores on, failing early with the flag to pass.

    Args:
        model_dir: `ModelDir` being exported.
        data_dir: str or None. `--quantization_data_dir`: the dev data (a
            `kbert-finetune --data_dir` folder, or a file for tasks that read one,
            such as SQuAD's dev JSON; text files for an embedding model). None:
            the dev data `task_config.json` recorded (fixed pseudo-sentences for
            an embedding model).

    Returns:
        `QualityData`.

    Example:

    >>> len(quality_data(open_model_dir("runs/sst2")).examples)
    872
    """
    if not model_dir.is_finetuned:
        return QualityData(*_agreement_texts(model_dir, data_dir))
    data = _dev_data(model_dir, data_dir)
    task = serving_task(model_dir)
    task.check_data(data, ["dev"])
    examples = task.read(data, "dev")
    where = data.data_dir or data.predict_file
    if not examples:
        raise ValueError(f"the dev split at {where} has no examples; pass "
                         "--quantization_data_dir with the task's dev data.")
    return QualityData(examples, where)


def check_quality(model_dir: ModelDir, data: QualityData, float_module, quantized_module,
                  quantize: str, max_drop: float, quantized_layers: int,
                  runtime: str = "tensorflow", float32: float | None = None,
                  batch_size: int = _BATCH_SIZE) -> QuantizationReport:
    """Scores the float32 and the quantized serving module on the same dev data.

    Args:
        model_dir: `ModelDir` the modules were built from.
        data: `QualityData` from `quality_data`.
        float_module: its float32 `ServingModule`.
        quantized_module: its quantized `ServingModule` (or, for ONNX Runtime,
            `onnxruntime_arm`'s stand-in).
        quantize: str. The format (`int8`).
        max_drop: float. Allowed drop of the main metric, in points.
        quantized_layers: int. How many layers were switched (reported).
        runtime: str. `tensorflow` or `onnxruntime` (reported).
        float32: float or None. The float32 model's score from an earlier check
            on the same data, so a task model is not scored twice.
        batch_size: int. Examples a model call. Defaults to 32.

    Returns:
        The `QuantizationReport` (the caller refuses or warns when not `ok`).

    Example:

    >>> report = check_quality(directory, data, module, int8_module, "int8", 1.0, 37)
    >>> report.drop_points
    0.11
    """
    if model_dir.is_finetuned:
        modules = [quantized_module] if float32 is not None else [float_module, quantized_module]
        metric, scores = _task_scores(model_dir, data.examples, modules, batch_size)
        before, after = (float32, scores[0]) if float32 is not None else scores
    else:
        metric, before, after = _embedding_scores(data.examples, float_module, quantized_module,
                                                  batch_size)
    return QuantizationReport(quantize, metric, float(before), float(after),
                              float(before - after), float(max_drop), len(data.examples),
                              data.where, quantized_layers, runtime)


def onnxruntime_arm(model_dir: ModelDir, float_module, model):
    """What the quality check scores for ONNX Runtime: `model` (`OnnxRuntimeModel`, the
    stand-in for the float module's Keras model) with the float module's preprocessor.

    A task's evaluation takes a model and a preprocessor; an embedding model is
    scored through a sentence-embedding module over the stand-in, as served.
    """
    if model_dir.is_finetuned:
        return types.SimpleNamespace(model=model, preprocessor=float_module.preprocessor)
    return SentenceEmbeddingServingModule(model, float_module.preprocessor)


def batch_difference(model_dir: ModelDir, data: QualityData, float_module, model) -> float:
    """Largest change of `model`'s output between a text alone and in its padded batch of 32.

    The batches are what the check scores (a task's evaluation batches; an
    embedding model's texts packed as its `serving_default` packs them). Each
    row is run again alone, cut to its own tokens, and compared on them.

    Args:
        model_dir: `ModelDir` being exported.
        data: `QualityData`.
        float_module: the float32 `ServingModule` (its preprocessor and halves).
        model: `OnnxRuntimeModel` (anything with `run(inputs) -> np.ndarray`).

    Returns:
        float. The largest absolute difference (0.0: bit-identical answers).

    Example:

    >>> batch_difference(directory, data, float_module, OnnxRuntimeModel(path))
    0.0
    """
    largest = 0.0
    for inputs in _encoder_batches(model_dir, data, float_module):
        together = model.run(inputs)
        for row, length in enumerate(inputs["padding_mask"].sum(-1)):
            alone = model.run({name: value[row:row + 1, :length] for name, value in inputs.items()})[0]
            mine = together[row] if together.ndim == 2 else together[row, :length]
            largest = max(largest, float(np.max(np.abs(mine - alone))))
    return largest


def _encoder_batches(model_dir: ModelDir, data: QualityData, float_module):
    """The check's batches of 32 as numpy encoder inputs."""
    if model_dir.is_finetuned:
        task = serving_task(model_dir)
        for batch in task.evaluation_dataset(data.examples, float_module.preprocessor, _BATCH_SIZE):
            yield {name: value.numpy() for name, value in encoder_inputs(batch).items()}
        return
    before, _ = float_module.split_signatures()["serving_default"]
    for i in range(0, len(data.examples), _BATCH_SIZE):
        inputs = before(text=tf.constant(data.examples[i:i + _BATCH_SIZE]))
        yield {name: inputs[name].numpy() for name in ("token_ids", "segment_ids", "padding_mask")}


def _task_scores(model_dir: ModelDir, examples: list, modules: list,
                 batch_size: int = _BATCH_SIZE) -> tuple[str, list[float]]:
    """The task's main metric, in points, of each module's model on `examples`."""
    task = serving_task(model_dir)
    scores = []
    for module in modules:
        evaluation = task.evaluate(module.model, examples, module.preprocessor, batch_size)
        scores.append(evaluation.metrics)
    metric = task.main_metric or next(iter(scores[0]))
    scale = 1.0 if task.metrics_in_percent else 100.0  # a fraction counts 100 points to 1.0
    return metric, [scale * score[metric] for score in scores]


def _dev_data(model_dir: ModelDir, data_dir: str | None) -> TaskData:
    """The dev data: `--quantization_data_dir`, else what fine-tuning recorded."""
    task_config = model_dir.task_config
    if data_dir is not None:
        if tf.io.gfile.exists(data_dir) and not tf.io.gfile.isdir(data_dir):
            # One file: SQuAD's dev JSON (`predict_file`) or a user's dev file
            # (`validation_file`); each task reads the one it takes.
            return TaskData(task_name=task_config.task_name, predict_file=data_dir,
                            validation_file=data_dir)
        return TaskData(task_name=task_config.task_name, data_dir=data_dir)
    recorded = task_config.dev_data
    if not recorded or not (recorded.get("data_dir") or recorded.get("predict_file")
                            or recorded.get("validation_file")):
        raise ValueError(f"{model_dir.path}/task_config.json records no dev data (fine-tuned "
                         "before kbert-finetune recorded it, or without --do_eval data); pass "
                         "--quantization_data_dir=<the task's dev data: a --data_dir folder, "
                         "SQuAD's dev JSON, or your --validation_file>.")
    return TaskData(task_name=recorded.get("task_name", task_config.task_name),
                    data_dir=recorded.get("data_dir"), predict_file=recorded.get("predict_file"),
                    validation_file=recorded.get("validation_file"))


def _embedding_scores(texts: list[str], float_module, quantized_module, batch_size: int = _BATCH_SIZE):
    embeddings = []
    for module in (float_module, quantized_module):
        run = module.signatures()["serving_default"]
        rows = [run(text=tf.constant(texts[i:i + batch_size]))["embedding"].numpy()
                for i in range(0, len(texts), batch_size)]
        embeddings.append(np.concatenate(rows))
    return EMBEDDING_METRIC, 100.0, embedding_agreement(*embeddings)


def embedding_agreement(reference: np.ndarray, other: np.ndarray) -> float:
    """100 x the mean cosine between matching rows: how closely `other` follows `reference`.

    Args:
        reference: float array `[n, ...]` (the float32 model's outputs); each row
            is flattened.
        other: float array of the same shape (a quantized model's outputs).

    Returns:
        float. 100 when every row points the same way.

    Example:

    >>> embedding_agreement(np.eye(2), np.eye(2))
    100.0
    """
    a = np.asarray(reference, np.float64).reshape(len(reference), -1)
    b = np.asarray(other, np.float64).reshape(a.shape)
    cosine = np.sum(a * b, -1) / np.maximum(np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1),
                                            1e-12)
    return 100.0 * float(np.mean(cosine))


def _agreement_texts(model_dir: ModelDir, data_dir: str | None) -> tuple[list[str], str]:
    if data_dir is not None:
        paths = ([data_dir] if not tf.io.gfile.isdir(data_dir) else
                 sorted(os.path.join(data_dir, name) for name in tf.io.gfile.listdir(data_dir)
                        if not tf.io.gfile.isdir(os.path.join(data_dir, name))))
        texts = []
        for path in paths:
            with tf.io.gfile.GFile(path) as f:
                texts.extend(line.strip() for line in f if line.strip())
        if not texts:
            raise ValueError(f"--quantization_data_dir={data_dir} holds no text lines to embed.")
        return texts[:1024], data_dir
    # Without data: pseudo-sentences of the vocabulary's whole words, fixed by
    # the seed; they measure numeric agreement, not quality.
    words = [w for w in _vocabulary_words(model_dir.vocab_file) if w.isalpha()]
    rng = random.Random(0)
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 40)))
             for _ in range(_AGREEMENT_TEXTS)]
    return texts, f"{_AGREEMENT_TEXTS} pseudo-sentences of {os.path.basename(model_dir.vocab_file)} words"


def _vocabulary_words(vocab_file: str) -> list[str]:
    with tf.io.gfile.GFile(vocab_file) as f:
        text = f.read()
    if vocab_file.endswith(".json"):
        vocab = json.loads(text).get("model", {}).get("vocab", {})
        return [w.lstrip("\u0120") for w in vocab]
    return text.split("\n")
