"""create_strategy: names, the default strategy, TPU failing fast with a pointer to --tpu."""

import pytest
import tensorflow as tf

from kbert.training import STRATEGIES
from kbert.training import create_strategy
from kbert.training import is_chief
from kbert.training.strategy import cpu_has_native_bfloat16


def test_default_strategy_is_tf_default_and_chief():
    strategy = create_strategy("default")
    assert strategy is tf.distribute.get_strategy()
    assert strategy.num_replicas_in_sync == 1 and is_chief(strategy)


def test_unknown_strategy_lists_the_valid_names():
    with pytest.raises(ValueError, match="Unknown --strategy='gpu'; choose one of default, "
                                         "one_device, mirrored, multi_worker_mirrored, tpu"):
        create_strategy("gpu")
    assert STRATEGIES == ("default", "one_device", "mirrored", "multi_worker_mirrored", "tpu")


def test_tpu_without_a_tpu_fails_fast_naming_the_flag():
    with pytest.raises(ValueError, match=r"--strategy=tpu could not reach .*Pass --tpu="):
        create_strategy("tpu")


def test_too_many_gpus_is_named():
    # One more than this machine shows, so the test holds with or without GPUs.
    visible = len(tf.config.list_logical_devices("GPU"))
    with pytest.raises(ValueError, match=rf"--num_gpus={visible + 1} but only {visible} GPU\(s\) "
                                         r"are visible; lower --num_gpus or check CUDA_VISIBLE_DEVICES"):
        create_strategy("mirrored", num_gpus=visible + 1)


def test_mirrored_over_logical_cpu_devices_in_a_fresh_process():
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    code = ("from kbert.training import create_strategy; "
            "s = create_strategy('mirrored', num_cpu_devices=2); "
            "print(s.num_replicas_in_sync, sorted(s.extended.worker_devices))")
    # mirrored prefers GPUs to logical CPUs: hidden here, so 2 replicas on any machine.
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PYTHONPATH": REPO,
                                              "CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == "2"
    assert "CPU:1" in result.stdout


def test_num_cpu_devices_after_initialisation_is_a_clear_error():
    import pytest

    tf.config.list_logical_devices("CPU")  # initialises the runtime
    with pytest.raises(ValueError, match="--num_cpu_devices must be set before"):
        create_strategy("mirrored", num_cpu_devices=3)


@pytest.mark.parametrize(
    "cpuinfo, expected",
    [
        ("processor : 0\nflags : fpu sse2 avx2 avx512f avx512_bf16 amx_tile\n\nprocessor : 1\n", True),
        ("flags\t\t: fpu sse2 avx2 fma amx_bf16 amx_int8\n", True),
        ("flags : fpu sse2 avx2 fma avx512f avx512bw\n", False),  # AVX-512 without BF16
        ("processor : 0\nFeatures : fp asimd sve bf16 i8mm\n", True),  # Arm
        ("processor : 0\nFeatures : fp asimd crc32\n", False),
        ("model name : something\n", None),
    ],
)
def test_cpu_has_native_bfloat16_reads_the_feature_flags(cpuinfo, expected):
    assert cpu_has_native_bfloat16(cpuinfo) is expected

