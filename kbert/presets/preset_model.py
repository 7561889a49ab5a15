"""`PresetModel`: keras-hub's front door on kbert's model directories, raw text in.

keras-hub users write `TextClassifier.from_preset(preset, num_classes=2)`,
then `fit(x=texts, y=labels)`, `predict(texts)` and `save_to_preset(path)`:
the preprocessor is attached, batching and padding happen inside. This base
class gives kbert's models that door. The Keras model that trains is the
very model kbert's binaries train (`task_model`: a task's `build_model`, or
a pre-trainer), compiled with the same optimizer and trained on the same
`tf.data` pipeline, so user code and `kbert-finetune` are one implementation
(docs/finetuning.md, "Keras task models").
"""

from __future__ import annotations

import math
import os
import random
import re
import warnings
from typing import Any, ClassVar

import keras
import tensorflow as tf

from kbert.checkpoints.model_dir import ModelDir
from kbert.checkpoints.model_dir import model_dir_kind
from kbert.checkpoints.model_dir import open_model_dir
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.presets.compile_settings import AUTO
from kbert.presets.compile_settings import CompileSettings
from kbert.presets.compile_settings import finetuning_optimizer
from kbert.presets.raw_inputs import dataset_values
from kbert.presets.raw_inputs import label_values
from kbert.presets.raw_inputs import text_values
from kbert.training.optimizer import build_optimizer_state

# Keras' `fit` batch when none is given.
DEFAULT_BATCH_SIZE = 32


class PresetModel(keras.Model):
    """A kbert model directory's Keras model with its preprocessor attached: raw text in.

    The base of `kbert.TextClassifier`, `TokenClassifier`, `TextEmbedder` and
    `MaskedLM`; made by their `from_preset`, never directly. `fit`,
    `evaluate` and `predict` take raw text (see
    `kbert.presets.raw_inputs`) and run the wrapped `task_model` on batches
    that the subclass's pipeline tokenizes, packs and pads inside `tf.data`.

    `compile()` keeps keras-hub's defaults-first convention: with the
    default optimizer (`"auto"`) each `fit` trains as one `kbert-finetune`
    run does, with AdamW (weight decay 0.01, not on LayerNorm and biases,
    gradients clipped to norm 1) at the encoder's size-aware rate
    (`kbert.training.finetuning.auto_settings`), warmed up over 10% of the
    steps (at least 20) and decayed linearly to 0 at the fit's last step;
    losses and metrics are the task model's own. Any of them can be given
    instead; an optimizer of your own keeps its state from one `fit` to the
    next.

    Models built inside `with strategy.scope():` train under that
    `tf.distribute` strategy (an optimizer of your own is made in that scope
    too, as Keras asks); the batch size must then divide evenly over its
    replicas. Callbacks see `task_model`, the Keras model that trains.

    Args:
        task_model: `keras.Model` or None. The model that trains and
            predicts (None until `fit` has learnt what the head needs).
        preprocessor: `kbert.data.TextPreprocessor`. The directory's
            tokenizer at the model's `max_seq_length`.
        model_dir: `kbert.checkpoints.ModelDir`. The directory it came from.
        **kwargs: passed to `keras.Model` (`name`).
    """

    # The length of a model opened from a pre-trained directory, when not
    # given (kbert-finetune's `max_seq_length`), capped at the encoder's positions.
    default_max_seq_length: ClassVar[int] = 128
    # Whether `fit` and `evaluate` need labels (`y`, or `(text, label)` elements).
    takes_labels: ClassVar[bool] = True
    # Whether an input may be a list of words instead of a text (token classification).
    takes_word_lists: ClassVar[bool] = False

    def __init__(self, task_model: keras.Model | None, preprocessor: TextPreprocessor,
                 model_dir: ModelDir, **kwargs):
        kwargs.setdefault("name", _snake_case(type(self).__name__))
        super().__init__(**kwargs)
        self.task_model = task_model
        self.preprocessor = preprocessor
        self.model_dir = model_dir
        self._strategy = tf.distribute.get_strategy()
        self._compile_settings = CompileSettings()
        self.built = True

    # -- The directory door --------------------------------------------------------------

    @classmethod
    def from_preset(cls, preset: str, **kwargs) -> "PresetModel":
        """Opens a kbert model directory (see the subclass)."""
        raise NotImplementedError(f"{cls.__name__}.from_preset")

    def save_to_preset(self, preset_dir: str) -> None:
        """Writes an ordinary kbert model directory that `from_preset` reads back (see the subclass)."""
        raise NotImplementedError(f"{type(self).__name__}.save_to_preset")

    @classmethod
    def _open_preset(cls, preset: str) -> ModelDir:
        """Opens `preset` through `kbert.checkpoints.open_model_dir`, naming what else it is."""
        if not isinstance(preset, (str, os.PathLike)):
            raise TypeError(f"{cls.__name__}.from_preset takes a model directory's path, got "
                            f"{type(preset).__name__}.")
        path = os.fspath(preset)
        if tf.io.gfile.isdir(path) and model_dir_kind(path) is None and _is_export(path):
            raise ValueError(
                f"{path} is a kbert-export SavedModel, which serves but does not train; "
                f"{cls.__name__}.from_preset opens the model directory it was exported from (a "
                "kbert-finetune, kbert-pretrain or kbert-convert output).")
        if not tf.io.gfile.exists(path) and re.fullmatch(r"[a-z0-9_]+", path):
            raise FileNotFoundError(
                f"{path} is not a directory. kbert presets are directories on disk; to use a "
                "keras-hub or Hugging Face model, convert it first (kbert-convert, see "
                "docs/convert.md) and pass the output directory.")
        return open_model_dir(path)

    @classmethod
    def _max_seq_length(cls, directory: ModelDir, max_seq_length: int | None,
                        recorded: int | None = None) -> int:
        """The length asked for, else the recorded one, else the class default capped at the positions."""
        if max_seq_length is not None:
            return max_seq_length
        if recorded is not None:
            return int(recorded)
        return min(cls._default_length(directory), directory.max_sequence_length)

    @classmethod
    def _default_length(cls, directory: ModelDir) -> int:
        """The length of a model opened from a pre-trained directory, when none is given."""
        return cls.default_max_seq_length

    @property
    def backbone(self) -> keras.Model:
        """The encoder (keras-hub's name for it): `kbert.models.Encoder` of any architecture."""
        return self._model("backbone").encoder

    @property
    def max_seq_length(self) -> int:
        """The longest packed input, in pieces with the special tokens; longer texts are cut."""
        return self.preprocessor.max_seq_length

    def call(self, inputs, training=None):
        """Runs `task_model` on encoder inputs (`token_ids`, `segment_ids`, `padding_mask`)."""
        return self._model("call")(inputs, training=training)

    def get_config(self):
        # What `model.save("x.keras")` asks for: a preset model is saved as a kbert
        # directory, the format every kbert tool reads.
        raise NotImplementedError(
            f"{type(self).__name__} saves as a kbert directory: call save_to_preset(directory) "
            "and open it with from_preset (its `task_model` alone saves as a .keras file).")

    # -- Training and inference on raw text ------------------------------------------------

    def compile(self, optimizer: Any = AUTO, loss: Any = AUTO, metrics: Any = AUTO, *,
                learning_rate: float | str = AUTO, **kwargs) -> None:
        """Configures training; `"auto"` takes what `kbert-finetune` would.

        Args:
            optimizer: a Keras optimizer, or `"auto"`: AdamW with
                `kbert-finetune`'s warm-up and linear decay over each `fit`.
            loss: a Keras loss, or `"auto"`: the task model's own.
            metrics: Keras metrics, or `"auto"`: the task model's own.
            learning_rate: float or `"auto"`. The default optimizer's peak rate;
                `"auto"` takes it from the encoder's width
                (`kbert.training.finetuning.auto_settings.AUTO_LEARNING_RATES`).
            **kwargs: passed to `keras.Model.compile` of `task_model`, such as
                `jit_compile` (default False: batches have many lengths).

        Example:

        >>> classifier.compile(learning_rate=5e-5)
        >>> classifier.compile(optimizer=keras.optimizers.Adam(1e-5))
        """
        self._compile_settings = CompileSettings(optimizer, loss, metrics, learning_rate, kwargs)
        self._compile_settings.check(f"{type(self).__name__}.compile")
        if optimizer != AUTO and self.task_model is not None:
            self._compile_task_model()

    def fit(self, x: Any = None, y: Any = None, batch_size: int | None = None, epochs: int = 1,
            verbose: str | int = "auto", callbacks: list | None = None,
            validation_split: float = 0.0, validation_data: Any = None, initial_epoch: int = 0,
            steps_per_epoch: int | None = None, validation_freq: int = 1) -> keras.callbacks.History:
        """Trains on raw text, as `keras.Model.fit` does on tensors.

        Each epoch is one pass over the examples in shuffled, length-bucketed
        batches of `batch_size`, tokenized inside `tf.data` (the task's own
        pipeline: the one `kbert-finetune` trains on).

        Args:
            x: texts (a list, array, tensor or Series of str; a tuple of two
                such for text pairs), or a finite `tf.data.Dataset` of
                `(text, label)` (batched or not; then `y` is None).
            y: labels, one per text (see the subclass).
            batch_size: int or None. Examples per step (all replicas
                together). Defaults to 32.
            epochs: int. Passes over the data. Defaults to 1.
            verbose: Keras' verbosity. Defaults to "auto".
            callbacks: Keras callbacks (they see `task_model`).
            validation_split: float. The last fraction of the examples is
                held out and scored after each epoch, as in Keras.
            validation_data: `(texts, labels)` or a `tf.data.Dataset` like `x`.
            initial_epoch: int. As in Keras.
            steps_per_epoch: int or None. Steps of an epoch; None: one pass.
            validation_freq: int. As in Keras.

        Returns:
            The `keras.callbacks.History` of the run.
        """
        where = f"{type(self).__name__}.fit"
        examples = self._examples_of(x, y, where, self.takes_labels)
        held_out = None
        if validation_data is not None:
            held_out = self._examples_of(*_unpack(validation_data), f"{where} validation_data",
                                         self.takes_labels)
        elif validation_split:
            if not 0.0 < validation_split < 1.0:
                raise ValueError(f"{where}: validation_split={validation_split}; it must be in "
                                 "(0, 1).")
            cut = int(len(examples) * (1.0 - validation_split))
            examples, held_out = examples[:cut], examples[cut:]
        if not examples:
            raise ValueError(f"{where}: no examples to train on.")
        self._prepare(examples)
        batch_size = self._batch_size(batch_size, where)
        rows = self._training_rows(examples)
        steps = steps_per_epoch or math.ceil(len(rows) / batch_size)
        # Seeded by `keras.utils.set_random_seed`, as Keras' own shuffling is.
        dataset = self._training_dataset(rows, batch_size, random.randrange(2**31))
        if self._compile_settings.optimizer == AUTO or not self.task_model.compiled:
            self._compile_task_model(num_train_steps=steps * max(1, epochs - initial_epoch))
        validation = (None if held_out is None
                      else self._evaluation_dataset(held_out, batch_size))
        with warnings.catch_warnings():
            # The token and span heads do not use the pooler; Keras warns each step.
            warnings.filterwarnings("ignore", message="Gradients do not exist for variables")
            _quiet_end_of_data()
            return self.task_model.fit(
                dataset, epochs=epochs, steps_per_epoch=steps, verbose=verbose,
                callbacks=callbacks, validation_data=validation, initial_epoch=initial_epoch,
                validation_freq=validation_freq, shuffle=False)

    def evaluate(self, x: Any = None, y: Any = None, batch_size: int | None = None,
                 verbose: str | int = "auto", callbacks: list | None = None,
                 return_dict: bool = False):
        """The loss and metrics of the model on raw text, as `keras.Model.evaluate` gives them.

        Args:
            x: texts or a `tf.data.Dataset`, as for `fit`.
            y: labels, as for `fit`.
            batch_size: int or None. Defaults to 32.
            verbose: Keras' verbosity.
            callbacks: Keras callbacks.
            return_dict: bool. A dict of metric name -> value instead of a list.

        Returns:
            The loss and metrics (a float, a list or a dict, as in Keras).
        """
        where = f"{type(self).__name__}.evaluate"
        examples = self._examples_of(x, y, where, self.takes_labels)
        model = self._model(where)
        if not model.compiled:
            self._compile_task_model()
        dataset = self._evaluation_dataset(examples, self._batch_size(batch_size, where))
        with warnings.catch_warnings():
            _quiet_end_of_data()
            return model.evaluate(dataset, verbose=verbose, callbacks=callbacks,
                                  return_dict=return_dict)

    def predict(self, x: Any, batch_size: int | None = None, verbose: str | int = "auto"):
        """The model's outputs on raw text, in input order (see the subclass for their shape).

        Args:
            x: texts (a tuple of two lists for pairs) or a `tf.data.Dataset` of texts.
            batch_size: int or None. Defaults to 32.
            verbose: accepted for Keras' signature; prediction prints nothing.

        Returns:
            numpy outputs, one row per text.
        """
        where = f"{type(self).__name__}.predict"
        examples = self._examples_of(x, None, where, labelled=False)
        self._model(where)
        return self._predict(examples, self._batch_size(batch_size, where))

    # -- What a subclass provides ------------------------------------------------------------

    def _examples(self, texts, labels: list | None, where: str) -> list:
        """Raw texts (and labels) -> the examples its pipeline reads."""
        raise NotImplementedError

    def _prepare(self, examples: list) -> None:
        """Builds what training needs before the first step (e.g. a head sized by the labels)."""

    def _training_rows(self, examples: list) -> list:
        """The rows one epoch goes over."""
        return examples

    def _training_dataset(self, rows: list, batch_size: int, seed: int) -> tf.data.Dataset:
        """Shuffled training batches, repeated forever, as `task_model.fit` takes them."""
        raise NotImplementedError

    def _evaluation_dataset(self, examples: list, batch_size: int) -> tf.data.Dataset:
        """One pass of batches, as `task_model.evaluate` takes them."""
        raise NotImplementedError

    def _predict(self, examples: list, batch_size: int):
        """The outputs of `task_model` on the examples, in order."""
        raise NotImplementedError

    def _compile_arguments(self) -> dict[str, Any]:
        """Extra `compile` arguments of the model (a task's `compile_arguments`)."""
        return {}

    def _frozen_encoder(self) -> bool:
        """Whether only the head trains (the default rate is then the frozen one)."""
        return False

    # -- Shared machinery ----------------------------------------------------------------------

    def _model(self, where: str) -> keras.Model:
        if self.task_model is None:
            raise ValueError(f"{where}: the model has no head yet; fit it first (the head is "
                             f"sized by the labels), or give {type(self).__name__}.from_preset "
                             "what sizes it (e.g. num_classes or label_names).")
        return self.task_model

    def _examples_of(self, x: Any, y: Any, where: str, labelled: bool) -> list:
        """The examples of `x` (and `y`), from any form `raw_inputs` reads."""
        if isinstance(x, tf.data.Dataset):
            if y is not None:
                raise ValueError(f"{where}: y is given with a tf.data.Dataset x; the dataset's "
                                 "elements carry the labels: (text, label).")
            texts, labels = dataset_values(x, f"{where}: x", labelled)
        else:
            if x is None:
                raise ValueError(f"{where}: x is missing; pass texts.")
            texts = text_values(x, f"{where}: x", self.takes_word_lists)
            count = len(texts[0]) if isinstance(texts, tuple) else len(texts)
            if labelled and y is None:
                raise ValueError(f"{where}: y is missing; pass one label per text.")
            if not labelled and y is not None:
                raise ValueError(f"{where}: y is given but {type(self).__name__} takes no labels "
                                 "here.")
            labels = label_values(y, count, f"{where}: y") if y is not None else None
        return self._examples(texts, labels, where)

    def _batch_size(self, batch_size: int | None, where: str) -> int:
        if batch_size is None:
            batch_size = DEFAULT_BATCH_SIZE
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ValueError(f"{where}: batch_size={batch_size!r}; it must be an integer >= 1.")
        replicas = self._strategy.num_replicas_in_sync
        if batch_size % replicas:
            raise ValueError(f"{where}: batch_size={batch_size} is not divisible by the "
                             f"{replicas} replicas of the distribution strategy; use a multiple "
                             f"of {replicas} so that every replica gets the same shape.")
        return batch_size

    def _compile_task_model(self, num_train_steps: int | None = None) -> None:
        """Compiles `task_model` as `compile` said; with steps, the default optimizer's schedule."""
        model = self._model("compile")
        settings = self._compile_settings
        with self._strategy.scope():  # an optimizer belongs to the strategy it is made in
            optimizer = settings.optimizer
            if optimizer == AUTO and num_train_steps:
                optimizer = finetuning_optimizer(settings.learning_rate,
                                                 self.model_dir.encoder_config, num_train_steps,
                                                 self._frozen_encoder())
            model.compile(optimizer=optimizer,
                          **settings.compile_arguments(self._compile_arguments()))
            if num_train_steps:
                build_optimizer_state(model)


def _quiet_end_of_data() -> None:
    """Silences Keras' warning at the end of a dataset of unknown length.

    Length-bucketed batches (`kbert.data.batch_by_length`) have no known
    count, so Keras meets the end of every evaluation pass unannounced and
    warns that the input "ran out of data"; for one pass that is the end,
    not a fault.
    """
    warnings.filterwarnings("ignore", message="Your input ran out of data")


def _unpack(validation_data: Any) -> tuple[Any, Any]:
    """`validation_data` as `(x, y)`: a dataset alone, or a pair of texts and labels."""
    if isinstance(validation_data, tf.data.Dataset):
        return validation_data, None
    if isinstance(validation_data, (tuple, list)) and len(validation_data) == 2:
        return validation_data[0], validation_data[1]
    raise ValueError("validation_data: expected (texts, labels) or a tf.data.Dataset.")


def _is_export(path: str) -> bool:
    """Whether `path` is a SavedModel or a folder of SavedModel versions."""
    if tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        return True
    return any(name.rstrip("/").isdigit()
               and tf.io.gfile.exists(os.path.join(path, name.rstrip("/"), "saved_model.pb"))
               for name in tf.io.gfile.listdir(path))


def _snake_case(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()
