"""What a preset model's `compile` was given, and kbert-finetune's optimizer for `"auto"`.

`PresetModel.compile` only records its arguments: the default optimizer's
schedule (warm-up, then linear decay to 0 at the last step) needs the
number of steps, which only `fit` knows. Everything else passes through to
the task model's own `compile`, whose `"auto"` loss and metrics are the task's.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import keras

from kbert.training.finetuning import auto_settings
from kbert.training.optimizer import create_optimizer

AUTO = auto_settings.AUTO
# kbert-finetune's `run_finetuning.weight_decay`.
WEIGHT_DECAY = 0.01


@dataclasses.dataclass(frozen=True)
class CompileSettings:
    """`PresetModel.compile`'s arguments; `"auto"` values are resolved when training starts.

    Args:
        optimizer: a Keras optimizer (or its name), or `"auto"`.
        loss: a Keras loss, or `"auto"`: the task model's.
        metrics: Keras metrics, or `"auto"`: the task model's.
        learning_rate: float or `"auto"`. The default optimizer's peak rate.
        options: dict. Other `keras.Model.compile` arguments (`jit_compile`, ...).
    """

    optimizer: Any = AUTO
    loss: Any = AUTO
    metrics: Any = AUTO
    learning_rate: float | str = AUTO
    options: dict = dataclasses.field(default_factory=dict)

    def check(self, where: str) -> None:
        """Refuses a learning rate that is not a positive number, or one beside an optimizer."""
        if self.learning_rate == AUTO:
            return
        rate = self.learning_rate
        if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not rate > 0:
            raise ValueError(f"{where}: learning_rate={rate!r}; it must be a number > 0 or "
                             "\"auto\".")
        if self.optimizer != AUTO:
            raise ValueError(f"{where}: learning_rate sets the default optimizer's rate; give it "
                             "to your optimizer instead, or drop optimizer.")

    def compile_arguments(self, task_arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The task model's `compile` arguments besides the optimizer.

        Args:
            task_arguments: mapping. The task's own (`Task.compile_arguments`).

        Returns:
            dict: `jit_compile=False` (batches have many lengths, which XLA would
            compile one by one), the task's arguments, the loss and metrics
            given, then the other options given.
        """
        arguments = {"jit_compile": False, **task_arguments}
        arguments.update({name: value for name, value in (("loss", self.loss),
                                                          ("metrics", self.metrics))
                          if value != AUTO})
        return {**arguments, **self.options}


def finetuning_optimizer(learning_rate: float | str, encoder_config: Mapping[str, Any],
                         num_train_steps: int, frozen_encoder: bool = False
                         ) -> keras.optimizers.Optimizer:
    """kbert-finetune's AdamW, warm-up and linear decay, for a run of `num_train_steps`.

    Args:
        learning_rate: float or `"auto"`: the rate of the encoder's width
            (`auto_settings.AUTO_LEARNING_RATES`; the frozen-encoder rate when
            only the head trains).
        encoder_config: mapping with `hidden_dim` (a `ModelDir.encoder_config`).
        num_train_steps: int. Steps until the rate has decayed to 0.
        frozen_encoder: bool. Only the head trains.

    Returns:
        The optimizer (call in the strategy scope the model was built in).

    Example:

    >>> finetuning_optimizer("auto", {"hidden_dim": 384}, num_train_steps=300)
    """
    rate = auto_settings.resolve_learning_rate(learning_rate, encoder_config, frozen_encoder)
    return create_optimizer(
        rate, num_train_steps=num_train_steps,
        num_warmup_steps=auto_settings.resolve_warmup_steps(AUTO, num_train_steps),
        weight_decay_rate=WEIGHT_DECAY)
