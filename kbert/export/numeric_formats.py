"""The numeric formats `kbert-export --quantize` can write, and the switch of a model to one.

Apart from `quantization.py` (the export's quality check, which builds serving
modules) so that `serving_modules.py` can quantize a model without importing it.
"""

from __future__ import annotations

import logging

import keras

from kbert.layers.int8_dense import quantize_int8

QUANTIZE_FORMATS = ("int8", "bfloat16")

log = logging.getLogger("kbert.export")


def check_quantize(quantize: str | None, cpu_flags: set[str] | None = None) -> None:
    """Refuses a `--quantize` value this export cannot honour, saying what to do instead.

    Args:
        quantize: str or None. `int8`, `bfloat16`, or None (float32).
        cpu_flags: set of str or None. The CPU's feature flags; None reads
            `/proc/cpuinfo`.

    Raises:
        ValueError: an unknown format, or `bfloat16`.

    Example:

    >>> check_quantize("int8")
    """
    if quantize is None:
        return
    if quantize not in QUANTIZE_FORMATS:
        raise ValueError(f"--quantize={quantize!r}; choose one of {', '.join(QUANTIZE_FORMATS)} "
                         "or leave it out for float32.")
    if quantize == "bfloat16":
        flags = _cpu_flags() if cpu_flags is None else cpu_flags
        units = sorted(flags & {"avx512_bf16", "amx_bf16"})
        if not units:
            raise ValueError("--quantize=bfloat16: this CPU has no bfloat16 units (neither "
                             "avx512_bf16 nor amx_bf16 in /proc/cpuinfo), so bfloat16 would run "
                             "slower than float32 here. Use --quantize=int8 (its arithmetic runs on "
                             "any CPU).")
        # Measured on a CPU with avx512_bf16 (see BENCHMARKS.md, quantization: its
        # bfloat16 rows): TensorFlow's oneDNN bfloat16 rewrite, which stock TF
        # Serving's --mixed_precision=bfloat16 turns on, was no faster than float32:
        # it also moves LayerNorm, GELU and the residual adds to bfloat16, whose CPU
        # kernels are slow, and that eats the matmuls' gain.
        raise ValueError(f"--quantize=bfloat16: this CPU has {', '.join(units)}, but kbert-export "
                         "writes no bfloat16 SavedModel: TensorFlow's bfloat16 rewrite (stock TF "
                         "Serving's --mixed_precision=bfloat16, which takes a float32 export) ran "
                         "no faster than float32 on such a CPU (BENCHMARKS.md). Use "
                         "--quantize=int8.")


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def quantize_model(model: keras.Model, quantize: str) -> list[str]:
    """Switches `model` to the `quantize` format in place (`kbert.layers.quantize_int8`).

    int8 layers get the portable form of the integer matmul (core TensorFlow
    ops), never oneDNN's fused op: a SavedModel must answer the same on the
    CPUs it is served on, which need not be the one exporting it
    (`kbert.layers.int8_dense` says why and what it costs).

    Args:
        model: a built kbert model (a serving module's task model or sentence encoder).
        quantize: str. `int8`.

    Returns:
        list of str. The paths of the layers now in int8.

    Raises:
        ValueError: a format `check_quantize` refuses, or a model with no layer to quantize.

    Example:

    >>> quantize_model(module.model, "int8")[:1]
    ['bert_encoder/transformer_layer_0/feedforward_output_dense']
    """
    check_quantize(quantize)
    switched = quantize_int8(model, matmul="portable")
    if not switched:
        raise ValueError(f"--quantize={quantize}: no layer of {model.name} could be quantized "
                         "(it has no Dense/EinsumDense matmul at least 16 wide); export it in "
                         "float32.")
    log.info("int8: %d layers of %s hold int8 weights; their matmuls sum the int8 products "
             "exactly in core TensorFlow ops, so the SavedModel answers the same on any CPU and "
             "TensorFlow build (stock TF Serving included).", len(switched), model.name)
    return switched
