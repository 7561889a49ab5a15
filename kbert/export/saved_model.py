"""Exports kbert models as TF Serving SavedModels: `<export_dir>/<version>/`.

A version is written into a temporary directory beside its final place, checked
(`ops_check`), then renamed, so a server polling `export_dir` never sees half a
model. Besides the SavedModel, `assets.extra/` keeps `vocab.txt` (or a
byte-level BPE model's `tokenizer.json`) and
`kbert_export.json` (what the model is, its settings and signatures) for people
and tools; TF Serving ignores it. Its `serving` record is what kbert-serve
reads (`serving_record`): the encoder APIs the version answers and the length
its texts are cut to.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile
from typing import Callable

import tensorflow as tf

from kbert.checkpoints.finetuned import TaskConfig
from kbert.checkpoints.model_dir import open_model_dir
from kbert.checkpoints.pretrained import tokenizer_file_name
from kbert.export.ops_check import check_ops
from kbert.export.numeric_formats import check_quantize
from kbert.export.onnxruntime_int8 import MODEL_FILE as ONNX_MODEL_FILE
from kbert.export.onnxruntime_int8 import OnnxRuntimeModel
from kbert.export.onnxruntime_int8 import attach_split_functions
from kbert.export.onnxruntime_int8 import convert_int8
from kbert.export.onnxruntime_int8 import write_onnxruntime_files
from kbert.export.quantization import DEFAULT_MAX_DROP
from kbert.export.quantization import MAX_BATCH_DIFFERENCE
from kbert.export.quantization import batch_difference
from kbert.export.quantization import check_quality
from kbert.export.quantization import onnxruntime_arm
from kbert.export.quantization import quality_data
from kbert.export.serving_modules import encoder_serving_module
from kbert.export.serving_modules import serving_module
from kbert.export.serving_modules import serving_task
from kbert.export.serving_modules import task_model_serving_module
from kbert.export.tokenizer_function import TOKENIZE_FUNCTION
from kbert.export.tokenizer_function import tokenizer_function
from kbert.export.warmup_requests import write_warmup_requests
from kbert.files import atomic_directory
from kbert.layers.int8_dense import int8_layers
from kbert.tasks import Task
from kbert.tasks import encoder_task
from kbert.tasks import get_task

EXPORT_INFO = "kbert_export.json"
# `kbert_export.json`'s key of the record kbert-serve reads (`serving_record`).
SERVING_RECORD = "serving"

# Words of the long warm-up text of a module without a preprocessor (its length unknown).
DEFAULT_WARMUP_WORDS = 128

log = logging.getLogger("kbert.export")


def versions(export_dir: str) -> list[int]:
    """Returns the numeric version subdirectories of `export_dir`, sorted."""
    if not tf.io.gfile.isdir(export_dir):
        return []
    found = []
    for name in tf.io.gfile.listdir(export_dir):
        name = name.rstrip("/")
        if name.isdigit():
            found.append(int(name))
    return sorted(found)


def publish_version(module, export_dir: str, version: int | None, info: dict, vocab_file: str,
                    check: bool, write_extra: Callable[[str], None] | None = None) -> str:
    """Saves a serving module as `<export_dir>/<version>/`, published by one rename.

    What `kbert-export` and `kbert-index` share: the SavedModel with the
    module's signatures, `assets.extra/` (`vocab.txt`, `kbert_export.json`
    from `info`, and whatever `write_extra` adds), the ops check, then the
    rename; a failure anywhere leaves nothing.

    Args:
        module: a `ServingModule` (or any `tf.Module` with `signatures()`).
        export_dir: str. The model base path.
        version: int or None. Defaults to one more than the highest there.
        info: dict. Written to `assets.extra/kbert_export.json`.
        vocab_file: str. Copied to `assets.extra/vocab.txt`.
        check: bool. Run the fresh-process ops check.
        write_extra: callable or None. Called with the `assets.extra`
            directory to write more files before publishing.

    Returns:
        The path of the published version.
    """
    return _publish(module, export_dir, version, info, vocab_file, check, write_extra)


def _publish(module, export_dir: str, version: int | None, info: dict, vocab_file: str,
             check: bool, write_extra: Callable[[str], None] | None = None) -> str:
    if version is None:
        version = (versions(export_dir) or [0])[-1] + 1
    if version < 0:
        raise ValueError(f"--version={version}; versions are non-negative integers.")
    final = os.path.join(export_dir, str(version))
    if tf.io.gfile.exists(final):
        raise ValueError(f"{final} already exists; pass another --version or leave it out "
                         f"to use the next one ({(versions(export_dir) or [0])[-1] + 1}).")
    remote = "://" in export_dir
    # The staging name starts with "." and is not a number, so servers ignore it while it fills.
    with atomic_directory(final, hidden=True) as staging:
        # SavedModels are written locally, then copied; the rename still publishes at once.
        local = tempfile.mkdtemp(prefix="kbert-export-") if remote else staging
        try:
            _write_version(module, local, info, vocab_file, check, write_extra)
            if remote:
                _copy_tree(local, staging)
        finally:
            if remote:
                shutil.rmtree(local, ignore_errors=True)
    return final


def _write_version(module, directory: str, info: dict, vocab_file: str, check: bool,
                   write_extra: Callable[[str], None] | None = None) -> None:
    """Saves the SavedModel and its `assets.extra/`, then checks its ops."""
    signatures = module.signatures()
    preprocessor = getattr(module, "preprocessor", None)
    if preprocessor is not None:
        # Tracked as the module's attribute: saved as a function of the root, not a signature.
        setattr(module, TOKENIZE_FUNCTION, tokenizer_function(preprocessor))
    # Serving computes no gradients: without this, TF traces and stores the
    # gradient function of every custom-gradient op (LayerNorm's, GELU's), about a
    # tenth of the time an export takes. (Loading such a SavedModel logs that a
    # gradient "will likely fail"; kbert-serve drops that line, kbert.serving.servable.)
    options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
    tf.saved_model.save(module, directory, signatures=signatures, options=options)
    extra = os.path.join(directory, "assets.extra")
    os.makedirs(extra, exist_ok=True)
    write_warmup_requests(extra, signatures, _warmup_words(info, preprocessor))
    tf.io.gfile.copy(vocab_file, os.path.join(extra, tokenizer_file_name(vocab_file)),
                     overwrite=True)
    info = dict(info, signatures=sorted(signatures))
    with open(os.path.join(extra, EXPORT_INFO), "w", encoding="utf-8") as f:
        f.write(json.dumps(info, indent=2, sort_keys=True) + "\n")
    if write_extra is not None:
        write_extra(extra)
    if check:
        report = check_ops(directory)
        if not report.ok:
            raise ValueError(report.message())
        log.info("ops check: %s", report.message())


def _copy_tree(source: str, destination: str) -> None:
    for directory, _, files in tf.io.gfile.walk(source):
        target = os.path.join(destination, os.path.relpath(directory, source))
        tf.io.gfile.makedirs(target)
        for name in files:
            tf.io.gfile.copy(os.path.join(directory, name), os.path.join(target, name), overwrite=True)


def _warmup_words(info: dict, preprocessor) -> int:
    """Words of the long warm-up text: one row of the length the model was fine-tuned at.

    Served NER and QA read long texts in windows of the encoder's whole
    `max_sequence_length` (`kbert.tasks.serving.window_preprocessor`); a warm-up
    text that long (8,192 words for ModernBERT) runs many such windows at every
    load, minutes on a CPU, where one row of the trained length exercises the same graph.
    """
    trained = info.get("task_config", {}).get("max_seq_length")
    if trained:
        return trained
    return preprocessor.max_seq_length if preprocessor is not None else DEFAULT_WARMUP_WORDS


def export_task_model(model, task_config: TaskConfig, vocab_file: str, export_dir: str,
                      version: int | None = None, check: bool = True) -> str:
    """Exports a fine-tuned task model with raw-text signatures.

    `kbert-finetune --export_dir` calls this with the model it just trained.

    Args:
        model: the fine-tuned task model (`BertClassifier`, `BertTokenClassifier`,
            `BertSpanLabeler`, ...).
        task_config: its `TaskConfig`; the task (`kbert.tasks.TASKS[task_config.task]`)
            gives the serving signatures.
        vocab_file: str. Its `vocab.txt`.
        export_dir: str. `<base>/<model_name>`; the version goes below it.
        version: int or None. Defaults to one more than the highest there.
        check: bool. Run the fresh-process ops check before publishing.

    Returns:
        The path of the published version.

    Example:

    >>> export_task_model(classifier, task_config, "runs/sst2/vocab.txt", "export/sst2")
    'export/sst2/1'
    """
    module = task_model_serving_module(model, task_config, vocab_file)
    return _publish(module, export_dir, version, _task_info(task_config, module), vocab_file, check)


def export_embedding_model(encoder, vocab_file: str, do_lower_case: bool, export_dir: str,
                           max_seq_length: int = 128, version: int | None = None,
                           check: bool = True, sentence_config: dict | None = None,
                           feature_layers: str | None = None) -> str:
    """Exports a pre-trained encoder as a sentence-embedding model.

    Args:
        encoder: `BertEncoder`.
        vocab_file: str. Its `vocab.txt`.
        do_lower_case: bool. Tokenizer setting.
        export_dir: str. `<base>/<model_name>`.
        max_seq_length: int. Longest input in pieces. Defaults to 128.
        version: int or None. Defaults to the next integer.
        check: bool. Run the fresh-process ops check before publishing.
        sentence_config: dict or None. The pooling the directory records
            (`sentence_config.json`); None pools by mean and L2-normalises.
        feature_layers: str or None. Blocks of the `features` signature, such as
            `"-1,-2,-3,-4"` (the default, None: the last four).

    Returns:
        The path of the published version.
    """
    module = encoder_serving_module(encoder, vocab_file, do_lower_case, max_seq_length,
                                    sentence_config, feature_layers)
    info = _embedding_info(encoder_task(sentence_config, feature_layers), module)
    return _publish(module, export_dir, version, info, vocab_file, check)


def export_saved_model(model_dir: str, export_dir: str, version: int | None = None,
                       max_seq_length: int | None = None, check: bool = True,
                       feature_layers: str | None = None, quantize: str | None = None,
                       quantization_data_dir: str | None = None,
                       max_quantization_drop: float = DEFAULT_MAX_DROP,
                       quantization_drop_is_error: bool = True) -> str:
    """Exports a fine-tuned or pre-trained model directory; what `kbert-export` runs.

    A fine-tuned directory (with `task_config.json`) exports its task; a
    pre-trained directory (`bert_config.json` + `encoder.weights.h5`) exports
    an embedding model.

    Args:
        model_dir: str. A `kbert-finetune` model_dir, or a pre-trained directory.
        export_dir: str. `<base>/<model_name>`.
        version: int or None. Defaults to the next integer.
        max_seq_length: int or None. Embedding models only (fine-tuned models
            use their recorded length). Defaults to 128.
        check: bool. Run the fresh-process ops check before publishing.
        feature_layers: str or None. Embedding models only: the blocks of the
            `features` signature (`"-1,-2,-3,-4"`; None: the last four).
        quantize: str or None. `int8`: export the model with int8 matmuls
            (`kbert.export.quantization`) and, for models whose signatures run
            it once per text, an ONNX Runtime int8 copy of it for kbert-serve
            (`kbert.export.onnxruntime_int8`), each scored against float32 on
            the dev data first; None: float32.
        quantization_data_dir: str or None. The dev data to score on (a
            `kbert-finetune --data_dir` folder, or SQuAD's dev JSON; text files
            for an embedding model). None: what `task_config.json` recorded.
        max_quantization_drop: float. Largest allowed drop of the task's main
            metric, in points. Defaults to 1.
        quantization_drop_is_error: bool. Refuse (True) or only warn (False)
            when the drop is larger.

    Returns:
        The path of the published version.

    Raises:
        ValueError: with `quantize`, a drop of the SavedModel's int8 graph over
            `max_quantization_drop` while `quantization_drop_is_error` (an ONNX
            Runtime model over it is left out, with a warning, and recorded as
            not `written`).

    Example:

    >>> export_saved_model("runs/sst2", "export/sst2-int8", quantize="int8")
    'export/sst2-int8/1'
    """
    check_quantize(quantize)
    directory = open_model_dir(model_dir, flag="--model_dir")
    # Read before any model is loaded, so missing data fails at once.
    data = quality_data(directory, quantization_data_dir) if quantize is not None else None
    module = serving_module(directory, max_seq_length, feature_layers)
    info = (_task_info(directory.task_config, module) if directory.is_finetuned
            else _embedding_info(serving_task(directory), module))
    if quantize is None:
        return _publish(module, export_dir, version, info, directory.vocab_file, check)
    float_module = module
    module = serving_module(directory, max_seq_length, feature_layers, quantize=quantize)
    report = check_quality(directory, data, float_module, module, quantize,
                           max_quantization_drop, len(int8_layers(module.model)))
    if not report.ok and quantization_drop_is_error:
        raise ValueError(f"{report.message()} Not exported: pass a larger "
                         "--max_quantization_drop, --noquantization_drop_is_error to export "
                         "anyway, or export float32 (no --quantize).")
    (log.info if report.ok else log.warning)("%s", report.message())
    info["quantization"] = report.to_dict()
    with tempfile.TemporaryDirectory(prefix="kbert-onnxruntime-") as work:
        onnx_path = os.path.join(work, ONNX_MODEL_FILE)
        onnx_report = _onnxruntime_int8(directory, data, float_module, report, onnx_path)
        del float_module
        write_extra = None
        if onnx_report is not None:
            # Over the limit, the ONNX Runtime model is left out rather than the export
            # refused: the SavedModel's TensorFlow int8 graph passed, and kbert-serve runs it.
            written = onnx_report.ok or not quantization_drop_is_error
            info["quantization"]["onnxruntime"] = dict(onnx_report.to_dict(), written=written)
            if not written:
                log.warning("%s Not written: kbert-serve will run the SavedModel's TensorFlow "
                            "int8 graph (pass a larger --max_quantization_drop to write it).",
                            onnx_report.message())
            else:
                (log.info if onnx_report.ok else log.warning)("%s", onnx_report.message())
                entries = attach_split_functions(module)

                def write_extra(extra_dir: str) -> None:
                    write_onnxruntime_files(extra_dir, onnx_path, entries,
                                            onnx_report.quantized_layers)

        return _publish(module, export_dir, version, info, directory.vocab_file, check,
                        write_extra)


def _onnxruntime_int8(directory, data, float_module, report, path: str):
    """Converts and scores the ONNX Runtime int8 model of a module whose signatures split.

    Args:
        directory: `ModelDir` being exported.
        data: `QualityData` the TensorFlow int8 check scored.
        float_module: the float32 `ServingModule`.
        report: that check's `QuantizationReport` (its float32 score is reused).
        path: str. Where to write the `.onnx` model.

    Returns:
        `QuantizationReport` of the ONNX Runtime model, or None for a module whose
        signatures run the model over windows (NER, QA: they stay TensorFlow int8).
    """
    if not float_module.split_signatures():
        return None
    matmuls = convert_int8(float_module.model, path)
    model = OnnxRuntimeModel(path)
    arm = onnxruntime_arm(directory, float_module, model)
    scored = [check_quality(directory, data, float_module, arm, report.format, report.max_drop_points,
                            matmuls, runtime="onnxruntime", float32=report.float32, batch_size=size)
              for size in (32, 1)]  # kbert-serve runs a text alone or batched with others
    return dataclasses.replace(scored[0], quantized_batch1=scored[1].quantized,
                               batch_difference=batch_difference(directory, data, float_module, model),
                               max_batch_difference=MAX_BATCH_DIFFERENCE)


def serving_record(task: Task | type[Task], module) -> dict:
    """What kbert-serve reads of a version (`kbert_export.json`'s `serving`).

    Args:
        task: the `Task` (or its class) the module serves.
        module: its `ServingModule`.

    Returns:
        dict: `encoder_apis` (the task's `serving_apis`: `embeddings` answers
        OpenAI's `/v1/embeddings`, `rerank` TEI's `/rerank`) and
        `truncation_length` (the module's: the most tokens a text is given to
        the model, or None when it reads long texts in windows).

    Example:

    >>> serving_record(task, module)
    {'encoder_apis': ['embeddings'], 'truncation_length': 128}
    """
    return {"encoder_apis": list(task.serving_apis), "truncation_length": module.truncation_length}


def _task_info(task_config: TaskConfig, module) -> dict:
    """`kbert_export.json` of a fine-tuned model (besides its signatures)."""
    return {"model_type": task_config.model_type, "task_config": task_config.to_dict(),
            SERVING_RECORD: serving_record(get_task(task_config.task), module)}


def _embedding_info(task: Task, module) -> dict:
    """`kbert_export.json` of a pre-trained encoder's export: its length, tokenizer, pooling and
    features."""
    # `module.model` is the `BertSentenceEncoder` the task built with its pooling.
    return {"model_type": task.model_type, "max_seq_length": module.preprocessor.max_seq_length,
            "do_lower_case": module.preprocessor.do_lower_case, "pooling": module.model.pooling,
            "normalize": module.model.normalize,
            "feature_layers": [int(i) for i in module.feature_layers],
            SERVING_RECORD: serving_record(task, module)}
