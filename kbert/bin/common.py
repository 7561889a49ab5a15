"""What every kbert binary shares: gin flags, a quiet TensorFlow start-up and clean errors."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import types
from typing import Callable

from absl import app
from absl import flags
from absl import logging as absl_logging

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# What TensorFlow's C++ start-up writes to stderr on every CPU-only machine, before
# TF_CPP_MIN_LOG_LEVEL applies: notices, not problems. Anything else still shows.
_STARTUP_NOISE = re.compile("|".join((
    r"All log messages before absl::InitializeLog\(\) is called are written to STDERR",
    r"port\.cc:\d+\] oneDNN custom operations are on",
    r"cudart_stub\.cc:\d+\] Could not find cuda drivers",
    r"cpu_feature_guard\.cc:\d+\] This TensorFlow binary is optimized",
    r"^To enable the following instructions: .* rebuild TensorFlow",
    r"Unable to register cu(DNN|FFT|BLAS) factory",
    r"computation placer already registered",
)))
# cuInit fails wherever there is no NVIDIA driver; with a GPU it is a real error.
_NO_GPU_CUINIT = re.compile(r"cuda_platform\.cc:\d+\] failed call to cuInit")


def define_gin_flags() -> None:
    """Defines the repeatable `--gin_file` and `--gin_params` flags (Model Garden names)."""
    flags.DEFINE_multi_string(
        "gin_file", None, "Gin file(s) of model and training hyperparameters, by path or by "
        "name inside the repo's gin/ directory (e.g. gin/base.gin). Later files override earlier."
    )
    flags.DEFINE_multi_string(
        "gin_params", None, "Gin bindings applied after the files, e.g. "
        "--gin_params='BertEncoder.num_layers = 4'."
    )


def define_text_column_flags() -> None:
    """Defines `--text_column_names` and run_ner.py's singular `--text_column_name`."""
    flags.DEFINE_list("text_column_names", None, "Columns holding the text of your files: one, "
                      "or two for text pairs (default: text, or sentence1,sentence2 when "
                      "present; kbert-predict: those the model was trained with).")
    flags.DEFINE_string("text_column_name", None, "run_ner.py's name for the one input column "
                        "(token classification: tokens or text); same as --text_column_names "
                        "with one name.")


def text_column_names() -> tuple[str, ...] | None:
    """`--text_column_names`, or the singular `--text_column_name` (not both); None if neither.

    Example:

    >>> common.text_column_names()  # --text_column_names=subject,body
    ('subject', 'body')
    """
    names, name = flags.FLAGS.text_column_names, flags.FLAGS.text_column_name
    if names and name:
        raise ValueError(f"--text_column_names={','.join(names)} and --text_column_name={name}: "
                         "give one of them.")
    return tuple(names) if names else (name,) if name else None


def define_quantization_flags(with_export_dir: bool = False) -> None:
    """Defines `--quantize` and the flags of its quality check (kbert-export's names).

    Args:
        with_export_dir: bool. The binary exports only when `--export_dir` is given
            (kbert-finetune); the help says so.
    """
    export = "With --export_dir: e" if with_export_dir else "E"
    needs = "With --export_dir and --quantize" if with_export_dir else "With --quantize"
    flags.DEFINE_enum(
        "quantize", None, ["int8", "bfloat16"], f"{export}xport a cheaper numeric format: int8 "
        "(int8 weights and exact int8 arithmetic in core TensorFlow ops in the same raw-text "
        "SavedModel, which stock TF Serving runs on any CPU; for classification, regression, "
        "re-ranking and embedding models also an ONNX Runtime int8 model in "
        "assets.extra/onnxruntime/, which kbert-serve runs instead). "
        "Each is scored against float32 on the dev data first. bfloat16 is refused (see "
        "serving/README.md).")
    flags.DEFINE_string(
        "quantization_data_dir", None, f"{needs}: the dev data to score on (a kbert-finetune "
        "--data_dir folder, or SQuAD's dev JSON; text files for an embedding model). Default: "
        "the dev data recorded in task_config.json.")
    flags.DEFINE_float(
        "max_quantization_drop", 1.0, f"{needs}: largest allowed drop of the task's main metric "
        "on the dev data, in points (percent units).")
    flags.DEFINE_bool(
        "quantization_drop_is_error", True, f"{needs}: refuse to export when the drop passes "
        "--max_quantization_drop; --noquantization_drop_is_error only warns.")


def quantization_options() -> dict:
    """The `export_saved_model` arguments of the flags `define_quantization_flags` defined."""
    values = flags.FLAGS
    return dict(quantize=values.quantize, quantization_data_dir=values.quantization_data_dir,
                max_quantization_drop=values.max_quantization_drop,
                quantization_drop_is_error=values.quantization_drop_is_error)


def quantization_line(version_dir: str) -> str:
    """The one line a binary prints about a quantized export: metric, drop and limit.

    Args:
        version_dir: str. The exported version (its `assets.extra` export record).

    Returns:
        str, e.g. "int8: accuracy float32 78.2110, int8 78.2110, drop +0.00 points (limit 1)
        on 872 examples of /data/SST-2" (the metric in points).
    """
    from kbert.export.saved_model import EXPORT_INFO
    from kbert.files import read_json

    found = read_json(os.path.join(version_dir, "assets.extra", EXPORT_INFO))["quantization"]
    line = (f"{found['format']}: {found['metric']} float32 {found['float32']:.4f}, "
            f"{found['format']} {found['quantized']:.4f}, drop {found['drop_points']:+.2f} points "
            f"(limit {found['max_drop_points']:g}) on {found['num_examples']} examples of "
            f"{found['data']}")
    onnx = found.get("onnxruntime")
    if not onnx:
        return line
    batches = ""
    if onnx.get("batch_difference") is not None:
        batches = (f" (batch 1 {onnx['quantized_batch1']:.4f}; answers alone vs in a padded batch "
                   f"differ by at most {onnx['batch_difference']:.3g}, limit {onnx['max_batch_difference']:g})")
    if onnx.get("written", True):
        return line + (f"; ONNX Runtime {onnx['format']} (what kbert-serve runs) {onnx['quantized']:.4f}"
                       f"{batches}, drop {onnx['drop_points']:+.2f} points")
    return line + (f"; ONNX Runtime {onnx['format']} {onnx['quantized']:.4f}{batches}, drop "
                   f"{onnx['drop_points']:+.2f} points: over the limit, not written (kbert-serve "
                   "runs TensorFlow int8)")


def start_tensorflow_quietly() -> None:
    """Imports TensorFlow and finds its devices, keeping its start-up notices off stderr.

    TensorFlow's C++ libraries print oneDNN, CUDA-stub and (on machines without
    an NVIDIA driver) `cuInit` lines when they load, whatever
    `TF_CPP_MIN_LOG_LEVEL` says. They go to file descriptor 2, so Python cannot
    filter them: stderr is redirected to a temporary file while TensorFlow
    starts, and every line that is not such a notice is written back. The
    Python-side INFO lines of `tf.saved_model` and checkpoints are turned down
    to warnings. Every binary does this when it imports this module (before any
    other kbert module loads TensorFlow); the library never touches stderr.
    """
    with _captured_stderr() as captured:
        import tensorflow as tf

        tf.config.list_physical_devices()
    has_gpu = os.path.exists("/dev/nvidiactl")
    for line in captured():
        if _STARTUP_NOISE.search(line) or (_NO_GPU_CUINIT.search(line) and not has_gpu):
            continue
        sys.stderr.write(line)
    logging.getLogger("tensorflow").setLevel(logging.WARNING)


@contextlib.contextmanager
def _captured_stderr():
    sys.stderr.flush()
    saved = os.dup(2)
    lines: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield lambda: lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            lines.extend(capture.read().decode("utf-8", "replace").splitlines(keepends=True))


start_tensorflow_quietly()


def run(main: Callable[[list[str]], None]) -> None:
    """Runs an absl `main`, turning user errors and interruptions into one line, not a traceback.

    Ctrl-C ends with exit status 130; a training loop stopped by a signal
    (`kbert.training.TrainingInterrupted`, a `KeyboardInterrupt` saying what it
    saved) with 128 + the signal: 130 for SIGINT, 143 for SIGTERM.

    `--help` lists the binary's flags however it was started (see `_help_describes`).

    Args:
        main: the binary's `main(argv)`.
    """
    _help_describes(sys.modules[main.__module__])

    def guarded(argv):
        if not flags.FLAGS["verbosity"].present:
            # TensorFlow's SavedModel and checkpoint code logs INFO lines through
            # absl; kbert's own progress goes to stdout or its "kbert" loggers.
            absl_logging.set_verbosity(absl_logging.WARNING)
        try:
            main(argv)
        except (ValueError, FileNotFoundError, PermissionError) as e:
            program = os.path.basename(sys.argv[0])
            # gin re-raises errors of configurables with "In call to configurable ..."
            # appended; the user's line is the first part.
            message = str(e).split("\n  In call to configurable")[0]
            print(f"{program}: error: {message}", file=sys.stderr)
            sys.exit(2)
        except KeyboardInterrupt as e:
            program = os.path.basename(sys.argv[0])
            print(f"{program}: {str(e) or 'interrupted by SIGINT'}", file=sys.stderr)
            sys.exit(getattr(e, "exit_code", 130))

    app.run(guarded)


def _help_describes(binary: types.ModuleType) -> None:
    """Makes `--help` (and `--helpshort`) print `binary`'s docstring and flags.

    absl's `--help` prints the docstring of `__main__` and the key flags of the
    module it names `sys.argv[0]`: the flags defined in `__main__`. That is the
    binary under `python -m kbert.bin.serve`, but an installed console script
    (`kbert-serve`) is a generated `__main__` that imports `kbert.bin.serve`,
    so its `--help` printed a bare usage line and no flag. Here the flags the
    binary defines or adopts (`flags.adopt_module_key_flags`: kbert-vocab's
    `build` flags, defined once in `kbert.bin.vocab_build`), and the shared
    ones it defined through this module (gin, quantization), become key flags of `sys.argv[0]` (absl's
    `declare_key_flag` would make them this module's), and an undocumented
    `__main__` gets the binary's docstring. `--helpfull` still adds absl's and
    TensorFlow's flags.

    Args:
        binary: the module of the binary's `main` (`kbert.bin.serve`, or
            `__main__` under `python -m`).
    """
    launcher = sys.modules["__main__"]
    if launcher is not binary and not launcher.__doc__:
        launcher.__doc__ = binary.__doc__
    values = flags.FLAGS
    for module in (binary.__name__, __name__):
        for flag in values.get_key_flags_for_module(module):
            values.register_key_flag_for_module(sys.argv[0], flag)


def warned(results: dict) -> str:
    """The closing line's tail when a run's results carry warnings ("" when none).

    Args:
        results: dict. A run's results (`warnings`: list of str, when any).

    Returns:
        str: " (N warnings above: the model may not have learned)" or "".
    """
    count = len(results.get("warnings", []))
    if not count:
        return ""
    return f" ({count} warning{'s' if count > 1 else ''} above: the model may not have learned)"
