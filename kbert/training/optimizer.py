"""The pre-training optimizers: BERT's AdamW, LAMB and ModernBERT's StableAdamW, with their schedules."""

from __future__ import annotations

import dataclasses

import keras

from kbert.training.fused_adamw import FusedAdamW
from kbert.training.stable_adamw import StableAdamW
from kbert.training.warmup_linear_decay import WarmupLinearDecay
from kbert.training.warmup_stable_decay import StableDecay
from kbert.training.warmup_stable_decay import WarmupStableDecay

OPTIMIZERS = ("adamw", "lamb", "stable_adamw")
# As in google-research/bert: LayerNorm scales/offsets and biases get no weight
# decay. Matched against the TF variable names, which carry the layer path
# (e.g. `transformer_layer_0/feedforward_layer_norm/gamma`).
NO_WEIGHT_DECAY = ("layer_norm", "bias")


@dataclasses.dataclass(frozen=True)
class OptimizerConfig:
    """`run_pretraining.optimizer_config`: the optimizer's moments, clipping and kind of decay.

    The optimizer itself, its peak rate and decay are `run_pretraining.optimizer`,
    `learning_rate` and `weight_decay_rate`; these are the rest of
    `create_optimizer`'s arguments. None (the default) keeps BERT's values.

    Args:
        beta_1: float. Decay of the first moment. Defaults to 0.9.
        beta_2: float. Decay of the second moment (RoBERTa and ModernBERT:
            0.98). Defaults to 0.999.
        epsilon: float. Defaults to 1e-6.
        global_clipnorm: float or None. Clip gradients to this global norm;
            None clips nothing (StableAdamW clips its updates instead).
            Defaults to 1.0.
        decoupled_weight_decay: bool. Decay by `weight_decay_rate` times the
            current rate over the peak rate (optimi's `decouple_lr`,
            ModernBERT's `decoupled_stableadamw`: 1e-5 per step at the peak)
            instead of times the current rate. Defaults to False.

    Example:

    >>> kbert.training.create_optimizer(8e-4, 100000, 3000, "stable_adamw",
    ...     weight_decay_rate=1e-5, **dataclasses.asdict(OptimizerConfig(beta_2=0.98,
    ...     global_clipnorm=None, decoupled_weight_decay=True)))
    """

    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-6
    global_clipnorm: float | None = 1.0
    decoupled_weight_decay: bool = False


def create_optimizer(
    learning_rate: float,
    num_train_steps: int,
    num_warmup_steps: int = 0,
    optimizer: str = "adamw",
    weight_decay_rate: float = 0.01,
    epsilon: float = 1e-6,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    global_clipnorm: float | None = 1.0,
    dtype_policy: str | None = None,
    stable_decay: StableDecay | None = None,
    decoupled_weight_decay: bool = False,
) -> keras.optimizers.Optimizer:
    """Returns BERT's pre-training optimizer with linear warmup and linear decay.

    `adamw` is `keras.optimizers.AdamW` (as `kbert.training.FusedAdamW`, the
    same update computed by TF's fused kernel) with the original's settings: weight
    decay 0.01 except on LayerNorm and bias variables, epsilon 1e-6, gradients
    clipped to global norm 1.0. (Keras's AdamW corrects the moments' bias,
    which google-research/bert's `AdamWeightDecayOptimizer` does not; it only
    changes the first few hundred steps, which warmup covers.) `lamb` is
    `keras.optimizers.Lamb` (You et al., 2020) with the same decay exclusions,
    for large batches. `stable_adamw` is `kbert.training.StableAdamW`
    (ModernBERT's: AdamW whose step shrinks per tensor when the update's RMS
    passes 1; pass `global_clipnorm=None`, it replaces gradient clipping).

    Args:
        learning_rate: float. Peak learning rate, reached after warmup.
        num_train_steps: int. Steps until the rate has decayed to 0.
        num_warmup_steps: int. Steps of linear warmup. Defaults to 0.
        optimizer: str. `"adamw"`, `"lamb"` or `"stable_adamw"`. Defaults to
            `"adamw"`.
        weight_decay_rate: float. Decoupled weight decay. Defaults to 0.01.
        epsilon: float. Defaults to 1e-6.
        beta_1: float. Defaults to 0.9.
        beta_2: float. Defaults to 0.999.
        global_clipnorm: float or None. Clip gradients to this global norm.
            Defaults to 1.0.
        dtype_policy: str or None. With `"mixed_float16"` the optimizer is
            wrapped in `keras.optimizers.LossScaleOptimizer` (dynamic loss
            scaling); other policies need none. Defaults to None.
        stable_decay: `StableDecay` or None. Warmup, then the peak rate held
            until a decay over the last `decay_fraction` of the steps
            (`WarmupStableDecay`). Defaults to None: BERT's linear decay
            from step 0 (`WarmupLinearDecay`).
        decoupled_weight_decay: bool. Each step decays by
            `weight_decay_rate * rate / learning_rate` (the schedule's rate over
            its peak) rather than by `weight_decay_rate * rate`: optimi's fully
            decoupled decay, ModernBERT's 1e-5. Defaults to False.

    Returns:
        A `keras.optimizers.Optimizer`.

    Example:

    >>> with strategy.scope():
    ...     model = kbert.models.BertPretrainer(encoder)
    ...     model.compile(optimizer=kbert.training.create_optimizer(
    ...         1e-4, num_train_steps=100000, num_warmup_steps=10000))
    """
    name = optimizer.lower()
    if name not in OPTIMIZERS:
        raise ValueError(
            f"Unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)} "
            "(gin: run_pretraining.optimizer)."
        )
    if num_warmup_steps > num_train_steps:
        raise ValueError(
            f"num_warmup_steps={num_warmup_steps} exceeds num_train_steps={num_train_steps}; "
            "warmup is usually about 1% to 10% of training."
        )
    if stable_decay is None:
        schedule = WarmupLinearDecay(learning_rate, num_train_steps, num_warmup_steps)
    else:
        schedule = WarmupStableDecay(learning_rate, num_train_steps, num_warmup_steps,
                                     stable_decay.decay_fraction, stable_decay.decay_shape)
    # Keras decays by weight_decay * rate; the fully decoupled decay
    # weight_decay_rate * rate / peak is that with weight_decay_rate / peak.
    weight_decay = (weight_decay_rate / learning_rate if decoupled_weight_decay and learning_rate
                    else weight_decay_rate)
    kwargs = dict(
        learning_rate=schedule,
        weight_decay=weight_decay or None,
        beta_1=beta_1,
        beta_2=beta_2,
        epsilon=epsilon,
        global_clipnorm=global_clipnorm,
    )
    if name == "adamw":
        result = FusedAdamW(**kwargs)
    elif name == "stable_adamw":
        result = StableAdamW(**kwargs)
    else:
        result = keras.optimizers.Lamb(**kwargs)
    if weight_decay_rate:
        result.exclude_from_weight_decay(var_names=list(NO_WEIGHT_DECAY))
    if dtype_policy == "mixed_float16":
        result = keras.optimizers.LossScaleOptimizer(result)
    return result


def build_optimizer_state(model: keras.Model) -> None:
    """Creates the optimizer's variables of a compiled model before `fit` traces a step.

    Without a distribution strategy Keras defers building the optimizer to the
    first trace of the train step, and a `tf.function` that creates variables
    is traced twice (once creating them, once more without): every `fit` then
    pays a second trace of the whole forward and backward pass. Keras builds
    first itself when a strategy is set (`Trainer._symbolic_build`); this does
    the same for every case. Call it inside the strategy scope the model was
    compiled in.

    Args:
        model: a compiled Keras model (or `Distiller`) whose variables exist.

    Example:

    >>> model.compile(optimizer=create_optimizer(3e-5, num_train_steps=1000))
    >>> build_optimizer_state(model)
    >>> model.fit(dataset, epochs=3)
    """
    if model.optimizer is not None and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
