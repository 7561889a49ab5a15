"""What a pre-training run builds and restores: model, optimizer, input and checkpoint.

`build_state` builds the pre-trainer and its optimizer in the strategy's scope
and dtype policy, checks the model against the data's sidecar, opens the
input pipeline and the checkpoint holding them all (with the input's position
and the dropout RNG state, for exact resume). `restore_checkpoint` resumes
from the latest checkpoint in `model_dir`, or starts from `init_checkpoint`.
"""

from __future__ import annotations

import dataclasses
import gc
import os
from typing import Any
from typing import Callable

import keras
import tensorflow as tf

from kbert.checkpoints import load_pretrainer
from kbert.checkpoints.pretrained import ELECTRA_PRETRAINER_WEIGHTS
from kbert.checkpoints.pretrained import PRETRAINER_WEIGHTS
from kbert.checkpoints import load_pretrainer_weights
from kbert.checkpoints.model_dir import ModelDir
from kbert.checkpoints.model_dir import open_model_dir
from kbert.data import pretraining_dataset
from kbert.data.pretraining.checks import check_data_vocabulary
from kbert.data.pretraining.checks import sentence_task_note
from kbert.models import MaskedLMPretrainer
from kbert.models import encoder_sizes
from kbert.models.encoder import Encoder
from kbert.training.optimizer import create_optimizer
from kbert.training.pretraining.settings import PretrainingSettings
from kbert.training.pretraining.step import distributed_input
from kbert.training.strategy import cpu_has_native_bfloat16


@dataclasses.dataclass
class TrainingState:
    """What the run builds and steps: model, optimizer, step, input, checkpoint and loop."""

    pretrainer: keras.Model
    optimizer: keras.optimizers.Optimizer
    global_step: tf.Variable
    iterator: Any
    next_batch: Callable[[], Any] | None
    checkpoint: tf.train.Checkpoint | None
    manager: tf.train.CheckpointManager | None
    # The checkpoint in model_dir this run resumes from, or None.
    latest: str | None
    # Made by the driver's loop: the traced loops (one per number of micro-batches a
    # step takes, which batch-size warmup changes) and the TensorBoard writer.
    train_loops: dict[int, Callable[[tf.Tensor], Any]] = dataclasses.field(default_factory=dict)
    layouts: dict[int, list[tuple[str, tuple[int, ...]]]] = dataclasses.field(default_factory=dict)
    writer: tf.summary.SummaryWriter | None = None

    def release(self) -> None:
        """Frees the input pipeline and the traced loop; keeps the model, optimizer and writer."""
        # The input iterator and the traced loop reference each other, so only
        # the garbage collector frees them. Collect now, also after an error:
        # the traceback keeps the frames that hold this state, so nothing but
        # this state may hold them. An iterator left for the interpreter's exit
        # is destroyed there, and its tf.data threads, busy until then, can
        # hold up the exit for minutes.
        self.train_loops = {}
        self.next_batch = self.iterator = None
        self.checkpoint = self.manager = None
        gc.collect()


def build_state(settings: PretrainingSettings, files: list[str],
                metadata: dict[str, Any] | None) -> TrainingState:
    """Builds the model and optimizer, the input pipeline and the checkpoint holding them.

    Args:
        settings: the run's `PretrainingSettings` (validated, sidecar defaults applied).
        files: list of str. The data files (`check_pretraining_data`).
        metadata: dict or None. Their sidecar; the model is checked against it.

    Returns:
        The `TrainingState`, its `latest` the checkpoint in `model_dir` to
        resume from (None on a fresh run).
    """
    pretrainer, optimizer, global_step = _build_in_scope(settings)
    check_data_vocabulary(metadata, files[0], pretrainer.encoder.vocabulary_size,
                          pretrainer.next_sentence, type(pretrainer.encoder).__name__)
    note = sentence_task_note(metadata, files[0], pretrainer.next_sentence)
    if note and settings.chief:
        settings.print_fn(note)
    latest = tf.train.latest_checkpoint(settings.model_dir)
    iterator, next_batch = _make_input(settings, files, pretrainer.next_sentence, latest)
    # Keras keeps each Dropout's RNG in a SeedGenerator whose state variable is
    # not reachable through the model's checkpoint dependencies; save it apart.
    dropout_rng = [v.value for v in pretrainer.variables if "seed_generator_state" in v.path]
    # These object names are the checkpoint's layout: renaming one breaks resuming
    # from checkpoints already written.
    checkpoint = tf.train.Checkpoint(model=pretrainer, optimizer=optimizer, step=global_step,
                                     dropout_rng=dropout_rng)
    if isinstance(iterator, tf.__internal__.tracking.Trackable):
        checkpoint.data = iterator
    else:
        settings.print_fn("note: TPU input iterators cannot be checkpointed; a resumed run reads "
                          "the data in a new order (seed + step)")
    manager = tf.train.CheckpointManager(checkpoint, settings.write_dir,
                                         max_to_keep=settings.keep_checkpoint_max)
    return TrainingState(pretrainer, optimizer, global_step, iterator, next_batch, checkpoint,
                         manager, latest)


def continued_settings(settings: PretrainingSettings) -> PretrainingSettings:
    """A continued run's vocabulary and case: the `init_checkpoint` directory's.

    The directory's tokenizer file and `do_lower_case` are what the run writes
    into `model_dir` unless `vocab_file` / `do_lower_case` were given. (That
    the data was made with it, after `kbert-vocab extend` the extended one,
    `data_tokenizer.check_data_tokenizers` checked before.) Its pooling is
    carried on by `carried_sentence_config`.

    Args:
        settings: the run's `PretrainingSettings`, with `init_checkpoint`.

    Returns:
        The settings with the directory's vocabulary and case filled in.
    """
    directory = open_init_checkpoint(settings.init_checkpoint)
    vocab_file = directory.vocab_file
    if vocab_file is None:
        return settings
    return dataclasses.replace(
        settings, vocab_file=settings.vocab_file or vocab_file,
        do_lower_case=(directory.do_lower_case if settings.do_lower_case is None
                       else settings.do_lower_case))


def carried_sentence_config(settings: PretrainingSettings) -> dict | None:
    """The pooling a continued run carries on: `init_checkpoint`'s `sentence_config.json`.

    Args:
        settings: the run's `PretrainingSettings`.

    Returns:
        The directory's sentence config (a converted sentence-transformers
        model's pooling), or None without `init_checkpoint` or without one.
    """
    if not settings.init_checkpoint:
        return None
    return open_init_checkpoint(settings.init_checkpoint).sentence_config


def open_init_checkpoint(directory: str) -> ModelDir:
    """Opens `--init_checkpoint` through `kbert.checkpoints.open_model_dir`, checked once.

    Pre-training reads token ids, never text: a directory without a vocabulary
    opens too (its `vocab_file` is None); one it has must fit the encoder.

    Args:
        directory: str. `--init_checkpoint`: a pre-trained (or fine-tuned) directory.

    Returns:
        The opened `ModelDir`.

    Raises:
        FileNotFoundError: not a model directory, naming `--init_checkpoint`.
        ValueError: its configs are unreadable or its vocabulary does not fit.
    """
    return open_model_dir(directory, flag="--init_checkpoint", vocabulary_optional=True)


def build_pretrainer_in_scope(settings: PretrainingSettings) -> keras.Model:
    """Builds the gin-configured pre-trainer alone (no optimizer), as a training run builds it.

    Args:
        settings: the run's `PretrainingSettings`.

    Returns:
        The pre-trainer, built in the strategy's scope under the dtype policy.
    """
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(settings.dtype_policy)
    keras.utils.set_random_seed(settings.seed)
    try:
        with settings.strategy.scope():
            return settings.build_pretrainer()
    finally:
        keras.config.set_dtype_policy(previous_policy)


def pretrainer_with_heads(directory: str, next_sentence: bool,
                          strategy: tf.distribute.Strategy) -> keras.Model:
    """The architecture's masked-LM pre-trainer of a directory, refusing one without its head.

    Args:
        directory: str. A pre-trained directory (`kbert-pretrain` or `kbert-convert` output).
        next_sentence: bool. Whether the data has NSP labels; the NSP head is
            evaluated when the directory has one too.
        strategy: `tf.distribute.Strategy` to build it in.

    Returns:
        The pre-trainer with the directory's encoder and heads.

    Raises:
        ValueError: the directory has no masked-LM head weights, naming it.
    """
    open_init_checkpoint(directory)  # a clear error for a directory that is not a model's
    heads = os.path.join(directory, PRETRAINER_WEIGHTS)
    if not tf.io.gfile.exists(heads):
        raise ValueError(
            f"--init_checkpoint={directory} has no masked-LM head weights ({PRETRAINER_WEIGHTS}); "
            "evaluating pre-training needs them: convert the checkpoint with its heads "
            "(kbert-convert keeps them when the source has them) or use another directory.")
    with strategy.scope():
        if next_sentence:
            try:
                return load_pretrainer(directory, next_sentence=True)
            except ValueError:
                pass  # heads saved without the NSP head: evaluate the masked LM only
        return load_pretrainer(directory, next_sentence=False)


def _build_in_scope(settings: PretrainingSettings
                    ) -> tuple[keras.Model, keras.optimizers.Optimizer, tf.Variable]:
    """Builds the pre-trainer, optimizer and step counter in the strategy's scope and dtype."""
    strategy, dtype_policy = settings.strategy, settings.dtype_policy
    if (dtype_policy == "mixed_bfloat16" and settings.chief
            and not tf.config.list_logical_devices("GPU")
            and not isinstance(strategy, tf.distribute.TPUStrategy)
            and cpu_has_native_bfloat16() is False):
        settings.print_fn("note: this CPU has no bfloat16 matmul instructions (avx512_bf16, "
                          "amx_bf16); mixed_bfloat16 runs slower than float32 on it (see "
                          "BENCHMARKS.md, pretraining_throughput)")
    previous_policy = keras.config.dtype_policy()
    keras.config.set_dtype_policy(dtype_policy)
    keras.utils.set_random_seed(settings.seed)
    try:
        with strategy.scope():
            pretrainer = settings.build_pretrainer()
            # A 0-step run (the never-pre-trained baseline) never steps its
            # optimizer; it still needs a valid schedule to be built.
            steps = max(settings.num_train_steps, 1)
            optimizer = create_optimizer(
                settings.learning_rate, steps, min(settings.num_warmup_steps, steps),
                settings.optimizer, weight_decay_rate=settings.weight_decay_rate,
                dtype_policy=dtype_policy, stable_decay=settings.stable_decay,
                **dataclasses.asdict(settings.optimizer_settings))
            optimizer.build(pretrainer.trainable_variables)
            global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step",
                                      aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    finally:
        keras.config.set_dtype_policy(previous_policy)
    return pretrainer, optimizer, global_step


def _make_input(settings: PretrainingSettings, files: list[str], next_sentence: bool,
                latest: str | None) -> tuple[Any, Callable[[], Any]]:
    """Returns `(iterator, next_batch)` over the training data, as `distributed_input`."""
    data_seed = settings.seed
    if latest and isinstance(settings.strategy, tf.distribute.TPUStrategy):
        # TPU input iterators cannot be checkpointed: reshuffle instead of
        # replaying the data seen before the checkpoint.
        data_seed = settings.seed + int(
            tf.train.load_variable(latest, "step/.ATTRIBUTES/VARIABLE_VALUE"))

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        return pretraining_dataset(
            files, context.get_per_replica_batch_size(settings.micro_batch_size),
            settings.max_seq_length, settings.max_predictions_per_seq,
            next_sentence=next_sentence, is_training=True,
            shuffle_buffer_size=settings.shuffle_buffer_size, seed=data_seed,
            input_context=context, masking=settings.masking,
            masking_config=settings.masking_config, vocab_file=settings.vocab_file,
            packing=settings.packing, masking_rate=_masking_rate(settings, context))

    return distributed_input(settings.strategy, dataset_fn)


def _masking_rate(settings: PretrainingSettings, context: tf.distribute.InputContext
                  ) -> Callable[[tf.Tensor], tf.Tensor] | None:
    """`masking_schedule`'s rate of a pipeline's n-th batch: the rate of the step it feeds.

    Each step takes, from each input pipeline, one batch per replica it
    serves for each of its micro-batches (`batch_schedule`), so the batch
    number gives the step exactly, batch-size warmup included.
    """
    schedule = settings.masking_schedule
    if schedule is None:
        return None
    batches = settings.batch_schedule
    replicas = max(1, context.num_replicas_in_sync // context.num_input_pipelines)

    def masking_rate(batch_number: tf.Tensor) -> tf.Tensor:
        step = batches.step_of_micro_batch(tf.cast(batch_number, tf.int64) // replicas)
        return schedule.rate_at(step, settings.num_train_steps)

    return masking_rate


def restore_checkpoint(settings: PretrainingSettings, state: TrainingState) -> int:
    """Restores the latest checkpoint (exact resume) or `init_checkpoint`; returns the step.

    Args:
        settings: the run's `PretrainingSettings`.
        state: the `TrainingState` of `build_state`.

    Returns:
        int: the step restored (0 on a fresh run).
    """
    if state.latest:
        state.checkpoint.restore(state.latest).assert_existing_objects_matched()
        settings.print_fn(f"resuming from {state.latest} (step {int(state.global_step.numpy())})")
    elif settings.init_checkpoint:
        loaded = load_init_checkpoint(state.pretrainer, settings.init_checkpoint)
        settings.print_fn(f"initialised from {settings.init_checkpoint} ({loaded})")
    return int(state.global_step.numpy())


def load_init_checkpoint(pretrainer: keras.Model, directory: str) -> str:
    """Loads a pre-trained directory's encoder (and matching heads) into a built pre-trainer.

    Args:
        pretrainer: the run's pre-trainer, built with the directory's sizes and numerics.
        directory: str. `--init_checkpoint`.

    Returns:
        str: what was loaded, for the progress line; says when the masked-LM
        head starts fresh because the directory has none.

    Raises:
        ValueError: another architecture, or sizes or numerics that differ
            (every differing key in one message).
    """
    source = open_init_checkpoint(directory).encoder()
    encoder = pretrainer.encoder
    if type(source) is not type(encoder):
        raise ValueError(f"--init_checkpoint={directory} holds a {type(source).__name__} but the "
                         f"gin config builds a {type(encoder).__name__}; use another checkpoint.")
    differing = init_checkpoint_differences(source, encoder)
    if differing:
        name = type(encoder).__name__
        raise ValueError(
            f"--init_checkpoint={directory} is not the encoder the gin config builds; "
            + "; ".join(f"{key}: directory {a!r}, gin {b!r}" for key, a, b in differing)
            + f". Set {name}." + f", {name}.".join(
                f"{_binding_name(key)} = {a!r}" for key, a, _ in differing)
            + " (kbert-pretrain --init_checkpoint binds them from the directory) or use "
            "another checkpoint.")
    encoder.set_weights(source.get_weights())
    if load_pretrainer_weights(pretrainer, directory):
        return "encoder and pre-training heads"
    has_other_heads = any(tf.io.gfile.exists(os.path.join(directory, name))
                          for name in (PRETRAINER_WEIGHTS, ELECTRA_PRETRAINER_WEIGHTS))
    if isinstance(pretrainer, MaskedLMPretrainer) and not has_other_heads:
        return (f"encoder only: {directory} has no masked-LM head ({PRETRAINER_WEIGHTS}), so the "
                "head starts fresh (a random transform, the output tied to the loaded token "
                "embedding, zero bias); the first steps' loss is high until it is learned: warm "
                "up from zero (gin/continue_pretraining.gin)")
    # A BERT directory starting an ELECTRA run (or the other way round) gives
    # its encoder; the heads of another kind of pre-trainer cannot be used.
    return "encoder (no pre-training heads of this kind there)"


# What a continued encoder must share with its directory besides the sizes:
# the numerics its weights were trained with.
NUMERIC_KEYS = ("activation", "layer_norm_epsilon")


def init_checkpoint_differences(source: Encoder, encoder: Encoder) -> list[tuple[str, Any, Any]]:
    """The sizes and numerics in which a built encoder differs from a directory's.

    Args:
        source: the directory's encoder (`load_encoder`).
        encoder: the encoder the run built.

    Returns:
        list of `(key, directory's value, built value)`; empty when they agree.
    """
    sizes, built = encoder_sizes(source), encoder_sizes(encoder)
    if "embedding_width" in sizes and (sizes["embedding_width"], built["embedding_width"]) == (
            sizes.get("hidden_dim"), built.get("hidden_dim")):
        # Both follow their hidden_dim (no factorized embedding): one difference, not two.
        del sizes["embedding_width"]
    differing = [(key, sizes[key], built[key]) for key in sizes if sizes[key] != built[key]]
    for key in NUMERIC_KEYS:
        a, b = getattr(source, key, None), getattr(encoder, key, None)
        if a != b:
            differing.append((key, a, b))
    return differing


def _binding_name(key: str) -> str:
    return "embedding_dim" if key == "embedding_width" else key
