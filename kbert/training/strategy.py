"""Builds a `tf.distribute.Strategy` from the `--strategy` name of the binaries."""

from __future__ import annotations

import json
import os

import tensorflow as tf

STRATEGIES = ("default", "one_device", "mirrored", "multi_worker_mirrored", "tpu")


def create_strategy(
    name: str = "default",
    tpu: str | None = None,
    num_gpus: int | None = None,
    num_cpu_devices: int | None = None,
) -> tf.distribute.Strategy:
    """Returns the distribution strategy named by `name`.

    Args:
        name: str. One of `default` (no distribution), `one_device` (the first
            GPU, else the CPU), `mirrored` (all local GPUs, or the first
            `num_gpus`), `multi_worker_mirrored` (one or more machines,
            described by the `TF_CONFIG` environment variable as TF reads it) or
            `tpu`.
        tpu: str or None. TPU name or `grpc://` address for
            `tf.distribute.cluster_resolver.TPUClusterResolver`; `""` or None
            means the local TPU VM.
        num_gpus: int or None. GPUs for `mirrored` / `one_device`; None means
            all visible ones.
        num_cpu_devices: int or None. Split the CPU into this many logical
            devices, which `mirrored` replicates over when there is no GPU (to
            try data parallelism on a laptop or in tests). Must be called before
            TensorFlow initialises its devices.

    Returns:
        A `tf.distribute.Strategy`.

    Raises:
        ValueError: unknown name, or no TPU reachable (the message names
            `--tpu`).

    Example:

    >>> strategy = kbert.training.create_strategy("mirrored")
    >>> strategy.num_replicas_in_sync
    """
    if name not in STRATEGIES:
        raise ValueError(f"Unknown --strategy={name!r}; choose one of {', '.join(STRATEGIES)}.")
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "tpu":
        return _tpu_strategy(tpu)
    if name == "multi_worker_mirrored":
        # Must come before anything initialises the TF runtime (such as
        # listing devices): collective ops are configured at startup.
        if "TF_CONFIG" in os.environ:
            try:
                json.loads(os.environ["TF_CONFIG"])
            except json.JSONDecodeError as e:
                raise ValueError(
                    f"TF_CONFIG is not valid JSON ({e}): {os.environ['TF_CONFIG']!r}") from None
        return tf.distribute.MultiWorkerMirroredStrategy()
    cpus = _split_cpu(num_cpu_devices) if num_cpu_devices else []
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    if num_gpus is not None:
        if num_gpus > len(gpus):
            raise ValueError(
                f"--num_gpus={num_gpus} but only {len(gpus)} GPU(s) are visible; "
                "lower --num_gpus or check CUDA_VISIBLE_DEVICES."
            )
        gpus = gpus[:num_gpus]
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy(gpus[0] if gpus else "/cpu:0")
    return tf.distribute.MirroredStrategy(gpus or cpus or None)


def _split_cpu(count: int) -> list[str]:
    """Configures `count` logical CPU devices and returns their names."""
    if count < 1:
        raise ValueError(f"--num_cpu_devices={count} must be at least 1.")
    (cpu,) = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError:
        raise ValueError(
            "--num_cpu_devices must be set before TensorFlow initialises its devices.") from None
    return [device.name for device in tf.config.list_logical_devices("CPU")]


def _tpu_strategy(tpu: str | None) -> tf.distribute.Strategy:
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, OSError, tf.errors.OpError) as e:
        # OSError: a TPU name is looked up through the GCE metadata server.
        reason = (str(e).splitlines() or [type(e).__name__])[0].rstrip(".")
        where = f"--tpu={tpu!r}" if tpu else "the local TPU (no --tpu given)"
        raise ValueError(
            f"--strategy=tpu could not reach {where}: {reason}. "
            "Pass --tpu=<TPU name or grpc://host:8470>, or pick another --strategy."
        ) from None
    return tf.distribute.TPUStrategy(resolver)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes summaries and final files (worker 0 / chief)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


# CPU feature flags of /proc/cpuinfo that give bfloat16 matmuls in hardware:
# x86 AVX512-BF16 and AMX-BF16, Arm's BF16 extension.
_BFLOAT16_CPU_FLAGS = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def cpu_has_native_bfloat16(cpuinfo: str | None = None) -> bool | None:
    """Whether the CPU multiplies bfloat16 in hardware, from its feature flags.

    Without such instructions oneDNN converts bfloat16 to float32 for every
    matmul, so `mixed_bfloat16` trains slower than float32 on the CPU, while
    CPUs with AVX512-BF16 or AMX gain (see BENCHMARKS.md, pretraining_throughput).

    Args:
        cpuinfo: str or None. Text of `/proc/cpuinfo`; None reads it.

    Returns:
        True or False, or None where the flags cannot be read (not Linux).

    Example:

    >>> cpu_has_native_bfloat16("flags : fpu sse avx2 avx512_bf16")
    True
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return None
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    if not flags:
        return None
    return bool(flags & _BFLOAT16_CPU_FLAGS)
