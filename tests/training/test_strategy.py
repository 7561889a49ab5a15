"""create_strategy: names, the default strategy, TPU failing fast with a pointer to --tpu."""

import pytest
import tensorflow as tf

from kbert.training import STRATEGIES
from kbert.training import create_strategy
from kbert.training import is_chief


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
    with pytest.raises(ValueError, match=r"--num_gpus=8 but only 0 GPU\(s\) are visible"):
        create_strategy("mirrored", num_gpus=8)
