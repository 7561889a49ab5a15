"""The one place kbert registers its classes and functions with gin.

The library stays plain typed Python (Keras classes are never decorated, so
loading a `.keras` file or a SavedModel never depends on gin state); binaries
import this module, parse gin files and call the registered versions. Bindings
read like `BertEncoder.num_layers = 4`, `BertPretrainer.next_sentence = False`,
`pretrainer.model = @ElectraPretrainer`, `run_pretraining.train_batch_size = 256`,
`MaskingConfig.masked_lm_prob = 0.3` and, for each task of `kbert.tasks.TASKS`,
its config class: `SquadConfig.doc_stride = 128`.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
from typing import Callable

import gin
import keras

from kbert import data
from kbert.data.pretraining.checks import list_input_files
from kbert import models
from kbert import tasks
from kbert import training
from kbert.training.distillation import loop as distillation
from kbert.training.finetuning import loop as finetuning

MODULE = "kbert"


def _gin_arguments(fn, exclude=()) -> list[str]:
    """The arguments `_configurable` lets gin bind."""
    target = fn.__init__ if inspect.isclass(fn) else fn
    return [name for name, parameter in inspect.signature(target).parameters.items()
            if name != "self" and parameter.kind is not inspect.Parameter.VAR_KEYWORD
            and name not in exclude]


def _configurable(fn, exclude=()):
    # Keras classes take **kwargs, which would let gin accept any misspelled
    # binding; allow only the named arguments (minus runtime ones in `exclude`).
    return gin.external_configurable(fn, module=MODULE, allowlist=_gin_arguments(fn, exclude))


# Every encoder architecture of `kbert.models.ARCHITECTURES`, its encoder and its
# pre-trainer bound by class name (`BertEncoder.num_layers = 4`;
# `BertPretrainer.encoder = @BertEncoder()`), and ELECTRA's pre-trainer, which
# takes any of them. `shared_embeddings` is a built encoder that
# ElectraPretrainer passes, never a hyperparameter.
ENCODERS = {name: _configurable(architecture.encoder, exclude=("shared_embeddings",))
            for name, architecture in models.ARCHITECTURES.items()}
PRETRAINERS = {cls: _configurable(cls) for cls in dict.fromkeys(
    [architecture.pretrainer for architecture in models.ARCHITECTURES.values()]
    + [models.ElectraPretrainer])}
BertEncoder = ENCODERS["bert"]
BertPretrainer = PRETRAINERS[models.BertPretrainer]
ElectraPretrainer = PRETRAINERS[models.ElectraPretrainer]
ModernBertPretrainer = PRETRAINERS[models.ModernBertPretrainer]


def build_pretrainer(model: Callable[[], keras.Model] = BertPretrainer) -> keras.Model:
    """Builds the pre-trainer the gin config names (`pretrainer.model = @ElectraPretrainer`).

    Args:
        model: a gin configurable building a pre-trainer: `@BertPretrainer`
            (the default) or `@ElectraPretrainer`.

    Returns:
        The pre-trainer, with its gin bindings applied.
    """
    return model()


pretrainer = gin.external_configurable(build_pretrainer, name="pretrainer", module=MODULE)
# Gin binds hyperparameters only; paths, task and strategy come from flags.
run_finetuning = _configurable(finetuning.run_finetuning, exclude=finetuning.RUNTIME_ARGUMENTS)
run_distillation = _configurable(distillation.run_distillation,
                                 exclude=distillation.RUNTIME_ARGUMENTS)
# Each task's own hyperparameters, bound by class name: `SquadConfig.doc_stride = 128`.
TASK_CONFIGS = {name: _configurable(task.config_class) for name, task in tasks.TASKS.items()}
# Bindings that moved into a task's config when tasks got their own folders.
MOVED_BINDINGS = {
    f"run_finetuning.{name}": f"SquadConfig.{name}"
    for name in ("doc_stride", "max_query_length", "max_answer_length", "n_best_size",
                 "version_2_with_negative", "null_score_diff_threshold")
}

# Hyperparameters only: data paths, model_dir, the strategy and the model
# builder are runtime arguments the binary passes (STYLE.md: gin binds
# hyperparameters, never runtime data).
RUN_PRETRAINING_RUNTIME_ARGS = ("input_file", "model_dir", "build_pretrainer", "strategy",
                                "init_checkpoint", "vocab_file", "do_lower_case", "print_fn",
                                "eval_input_file", "do_train")
run_pretraining = _configurable(training.run_pretraining, exclude=RUN_PRETRAINING_RUNTIME_ARGS)
# Dynamic masking and packing settings: `run_pretraining.masking_config = @MaskingConfig()`
# (gin/pretrain.gin) with `MaskingConfig.masked_lm_prob = 0.3`, and
# `run_pretraining.packing = @PackingConfig()` (or `run_finetuning.packing`) with
# `PackingConfig.max_instances_per_row = 3`.
MaskingConfig = _configurable(data.MaskingConfig)
PackingConfig = _configurable(data.PackingConfig)
# The warmup-stable-decay schedule: `run_pretraining.stable_decay = @StableDecay()` with
# `StableDecay.decay_fraction = 0.1` and `StableDecay.decay_shape = "1-sqrt"`.
StableDecay = _configurable(training.StableDecay)
# ModernBERT's recipe (gin/modernbert_pretrain.gin): `run_pretraining.optimizer_config =
# @OptimizerConfig()` with `OptimizerConfig.beta_2 = 0.98`; `run_pretraining.batch_size_warmup
# = @BatchSizeWarmup()` with `BatchSizeWarmup.min_batch_size = 768`; and mmBERT's
# `run_pretraining.masking_schedule = @MaskingSchedule()` (30% -> 15% -> 5%).
OptimizerConfig = _configurable(training.OptimizerConfig)
BatchSizeWarmup = _configurable(training.BatchSizeWarmup)
MaskingSchedule = _configurable(data.MaskingSchedule)

# The repo's gin/ directory (present in a source checkout or editable install).
GIN_DIR = os.path.normpath(os.path.join(os.path.dirname(__file__), os.pardir, "gin"))


def parse_gin(gin_files: list[str], gin_params: list[str] | None = None) -> None:
    """Parses gin files and bindings, with clear errors for bad names and paths.

    The repo's `gin/` directory and each gin file's own directory are put on the
    search path, so `include 'base.gin'` works from any working directory.

    Args:
        gin_files: list of str. Gin files, by path or by name inside `gin/`
            (e.g. `base.gin` or `gin/base.gin`).
        gin_params: list of str or None. Extra bindings such as
            `BertEncoder.num_layers = 4`, applied after the files.

    Raises:
        FileNotFoundError: a gin file was not found; the message lists the
            paths searched.
        ValueError: a binding names an unknown configurable or parameter.
    """
    gin.clear_config()
    resolved = _resolved_gin_files(gin_files)
    for directory in dict.fromkeys([GIN_DIR] + [os.path.dirname(f) for f in resolved]):
        gin.add_config_file_search_path(directory)
    try:
        with _quiet_resource_reader():
            gin.parse_config_files_and_bindings(resolved, gin_params or [], finalize_config=False)
    except (ValueError, KeyError, IOError) as e:
        raise ValueError(f"gin configuration error: {e}{_moved_binding_hint(str(e))}") from None


def vocabulary_size_from_data(input_file: str, vocab_file: str | None, gin_files: list[str],
                              gin_params: list[str] | None) -> int | None:
    """Binds the encoder's `vocabulary_size` to the data's vocabulary unless the user set it.

    The repo's gin files bind BERT's 30,522 so that a config builds on its
    own; a run on data made with another vocabulary takes that vocabulary's
    size from the data's sidecar (`vocab_size`), else from the lines of
    `--vocab_file`. A value the user binds (in `--gin_params` or in a gin file
    of their own) is kept, and the data checks compare it with the sidecar.

    Args:
        input_file: str. `--input_file` (comma-separated files or globs).
        vocab_file: str or None. `--vocab_file`.
        gin_files: list of str. `--gin_file` values.
        gin_params: list of str or None. `--gin_params` values.

    Returns:
        The size bound, or None when nothing was changed.

    Example:

    >>> configurables.parse_gin(["tiny.gin"])
    >>> configurables.vocabulary_size_from_data("data/*.tfrecord", None, ["tiny.gin"], [])
    8000
    """
    names = [architecture.encoder.__name__ for architecture in models.ARCHITECTURES.values()]
    bound = [name for name in names if _is_bound(f"{name}.vocabulary_size")]
    user_text = "\n".join(list(gin_params or []) + [
        open(path, encoding="utf-8").read() for path in _resolved_gin_files(gin_files)
        if os.path.dirname(path) != GIN_DIR])
    if not bound or "vocabulary_size" in user_text:
        return None
    size = _data_vocabulary_size(input_file, vocab_file)
    if size is None:
        return None
    with gin.unlock_config():
        for name in bound:
            gin.bind_parameter(f"{name}.vocabulary_size", size)
    return size


# Encoder arguments a continued run may choose for itself: regularization and
# the initialization of what the directory does not hold (fresh heads).
RUN_CHOSEN_ENCODER_ARGUMENTS = ("dropout", "initializer_range")


def encoder_from_directory(init_checkpoint: str) -> dict[str, object]:
    """Binds the encoder's architecture to a pre-trained directory's: sizes and numerics.

    `kbert-pretrain --gin_file=gin/continue_pretraining.gin --init_checkpoint=DIR`
    then continues DIR without a size gin file, with DIR's own activation and
    LayerNorm epsilon. A value the gin config binds already must agree with
    DIR's; every one that does not is named in one error. `dropout` and
    `initializer_range` (what fresh heads start from) come from DIR only
    when unbound, and so do the keys the encoder class names in
    `context_keys` (settings that change no weight: ModernBERT's
    `max_sequence_length` and RoPE thetas, which a context-extension phase
    raises, docs/pretraining.md).

    Args:
        init_checkpoint: str. `--init_checkpoint`, a pre-trained directory.

    Returns:
        dict of the encoder arguments bound from the directory.

    Raises:
        ValueError: bound values contradict the directory (each key with both
            values), or it is no pre-trained directory.

    Example:

    >>> configurables.parse_gin(["continue_pretraining.gin"])
    >>> configurables.encoder_from_directory("minilm/")["activation"]
    'gelu_exact'
    """
    from kbert.checkpoints.config_files import read_encoder_config
    from kbert.checkpoints.pretrained import BERT_CONFIG
    from kbert.models.registry import architecture_of
    import tensorflow as tf

    path = os.path.join(init_checkpoint, BERT_CONFIG)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"--init_checkpoint={init_checkpoint} has no {BERT_CONFIG}; "
                                "point it at a kbert-pretrain model_dir or kbert-convert output.")
    encoder_class, arguments = read_encoder_config(path)
    name = encoder_class.__name__
    allowed = _gin_arguments(encoder_class, exclude=("shared_embeddings",))
    defaults = {key: parameter.default
                for key, parameter in inspect.signature(encoder_class.__init__).parameters.items()
                if parameter.default is not inspect.Parameter.empty}
    wanted = {key: value for key, value in {**defaults, **arguments}.items()
              if key in allowed and key not in ("output_all_layers", "output_attention_scores",
                                                "name", "dtype")}
    differing = []
    for key, value in wanted.items():
        if _is_bound(f"{name}.{key}"):
            bound = gin.query_parameter(f"{name}.{key}")
            chosen = RUN_CHOSEN_ENCODER_ARGUMENTS + getattr(encoder_class, "context_keys", ())
            if bound != value and key not in chosen:
                differing.append(f"{key}: directory {value!r}, gin {bound!r}")
    if differing:
        raise ValueError(
            f"--init_checkpoint={init_checkpoint} is not the encoder the gin config binds; "
            + "; ".join(differing) + f". Drop those {name} bindings (gin/continue_pretraining.gin "
            "binds no size: the directory gives them) or use another checkpoint.")
    bound_here = {}
    with gin.unlock_config():
        for key, value in wanted.items():
            if not _is_bound(f"{name}.{key}"):
                gin.bind_parameter(f"{name}.{key}", value)
                bound_here[key] = value
        if not _is_bound("pretrainer.model"):
            pretrainer_class = architecture_of(encoder_class).pretrainer
            gin.parse_config(f"pretrainer.model = @{pretrainer_class.__name__}")
        model = gin.query_parameter("pretrainer.model").configurable.name
        if not _is_bound(f"{model}.encoder"):
            gin.parse_config(f"{model}.encoder = @{name}()")
    return bound_here


def _is_bound(parameter: str) -> bool:
    try:
        gin.query_parameter(parameter)
    except ValueError:
        return False
    return True


def _data_vocabulary_size(input_file: str, vocab_file: str | None) -> int | None:
    """The vocabulary size the data's sidecar records, else `vocab_file`'s (any tokenizer file)."""
    try:
        metadata = data.read_pretraining_metadata(list_input_files(input_file))
    except FileNotFoundError:
        return None  # run_pretraining names the flag
    if metadata and metadata.get("vocab_size"):
        return int(metadata["vocab_size"])
    if vocab_file and os.path.isfile(vocab_file):  # A vocab.txt or a tokenizer.json.
        return len(data.tokenizers.tokenizer_class(vocab_file).read_vocabulary(vocab_file))
    return None


def _resolved_gin_files(gin_files: list[str]) -> list[str]:
    """The absolute paths of gin files given by path or by name inside `gin/`."""
    search_dirs = [os.getcwd(), GIN_DIR]
    resolved = []
    for gin_file in gin_files:
        candidates = [gin_file] + [os.path.join(d, gin_file) for d in search_dirs]
        # `gin/base.gin` names the repo's file from any working directory; a path in
        # another directory (`myexp/base.gin`) is the user's own file, never replaced
        # by the repo's file of that name.
        if os.path.basename(os.path.dirname(os.path.normpath(gin_file))) == "gin":
            candidates += [os.path.join(GIN_DIR, os.path.basename(gin_file))]
        found = next((c for c in candidates if os.path.isfile(c)), None)
        if found is None:
            searched = ", ".join(dict.fromkeys(os.path.abspath(c) for c in candidates))
            raise FileNotFoundError(
                f"--gin_file={gin_file}: gin file {gin_file!r} not found; searched: {searched}")
        resolved.append(os.path.abspath(found))
    return resolved


def task_options(task: str):
    """The gin-bound config of a task: `SquadConfig()` with its bindings applied.

    Args:
        task: str. A key of `kbert.tasks.TASKS`.

    Returns:
        The task's config dataclass instance.
    """
    tasks.get_task(task)  # a clear error for an unknown name
    return TASK_CONFIGS[task]()


def _moved_binding_hint(message: str) -> str:
    for old, new in MOVED_BINDINGS.items():
        parameter = old.split(".")[1]
        if "run_finetuning" in message and repr(parameter) in message:
            return f"\n{old} is now {new}: bind `{new} = ...` instead."
    return ""


@contextlib.contextmanager
def _quiet_resource_reader():
    # gin first tries each `include` as a package resource and logs an ERROR
    # when that fails, before finding the file on the search path.
    logger = logging.getLogger()
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)
