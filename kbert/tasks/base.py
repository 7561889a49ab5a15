"""`Task`: everything one use of the encoder needs, in one class the generic loops drive.

A task knows its data (reading splits, naming bad files and lines), its model
(the head it puts on an encoder, its losses), its evaluation (official metrics,
prediction files) and its serving signatures. The fine-tuning loop
(`kbert.training.run_finetuning`), `kbert-export` and `kbert-finetune` never
name a task: they look it up in `kbert.tasks.TASKS` and call these methods.
This is the shape of Model Garden's `official/core/base_task.py` and of t5x's
task registry, cut to what kbert's loops use.

A task's own hyperparameters are a dataclass (`config_class`, e.g.
`SquadConfig`) that gin binds as `SquadConfig.doc_stride = 128`; what a
fine-tuned model must remember of its task (task name, labels, those
hyperparameters) is `describe()`, saved as `task_config.json` and given back to
`from_description` to serve or evaluate the model later.

What export, the index, distillation and the server need to know of a task,
the task states (class attributes such as `metrics_in_percent`,
`distillation_target` and `serving_apis`), so that none of them lists task
names or tests model classes.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
import weakref
from typing import Any, ClassVar, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

from kbert.data.text_preprocessor import TextPreprocessor
from kbert.models.packed_rows import CLS_POSITIONS
from kbert.models.packed_rows import ENCODER_INPUTS
from kbert.models.packed_rows import PACKED_INPUTS
from kbert.tasks.serving import ServingModule

INPUT_NAMES = ENCODER_INPUTS
# What packed rows add (`kbert.data.packing`; tasks with `supports_packing`).
PACKED_INPUT_NAMES = (*PACKED_INPUTS, CLS_POSITIONS)
SPLITS = ("train", "dev", "test")
# Keys of task_config.json every task has; the others are the task's config fields.
COMMON_KEYS = ("task", "task_name", "model_type", "label_names", "text_pair",
               "max_seq_length", "do_lower_case", "dev_data")
# SQuAD settings that task_config.json held for every task before the task
# registry; other tasks ignore them so that those files still load.
LEGACY_KEYS = ("doc_stride", "max_query_length", "max_answer_length")


@dataclasses.dataclass(frozen=True)
class TaskData:
    """Where a task's data is: the runtime data flags of `kbert-finetune`.

    Args:
        task_name: str or None. Which data set of the task family (a GLUE task
            such as `sst-2`; a NER data set name).
        data_dir: str or None. A folder of split files (GLUE, CoNLL).
        train_file: str or None. One training file (SQuAD JSON).
        predict_file: str or None. One file to evaluate or predict (SQuAD JSON).

    Example:

    >>> TaskData(task_name="sst-2", data_dir="glue_data/SST-2")
    """

    task_name: str | None = None
    data_dir: str | None = None
    train_file: str | None = None
    predict_file: str | None = None


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What evaluating a model on a split gives.

    Args:
        metrics: dict. Metric name -> value, plus `num_examples`.
        files: dict. File name (in the model directory) -> text, such as
            SQuAD's `predictions.json`.
    """

    metrics: dict[str, Any]
    files: dict[str, str] = dataclasses.field(default_factory=dict)


class Task(abc.ABC):
    """One use of the encoder: its data, head, losses, metrics and serving signatures.

    Subclasses set the class attributes, implement the abstract methods, and are
    registered with one line in `kbert/tasks/__init__.py` (`TASKS`).

    Args:
        config: the task's `config_class` instance (its hyperparameters).
            Defaults to `config_class()`.
        task_name: str or None. The data set within the task family.

    Example:

    >>> task = kbert.tasks.get_task("glue")(task_name="sst-2")
    >>> model = task.build_model(kbert.checkpoints.load_encoder("minilm/"))
    """

    name: ClassVar[str]
    config_class: ClassVar[type]
    # Whether `kbert-finetune` can train it (an export-only task cannot).
    trainable: ClassVar[bool] = True
    # When evaluation and prediction read the same file (SQuAD's --predict_file),
    # evaluation's files are the predictions and prediction is not run again.
    evaluation_writes_predictions: ClassVar[bool] = False
    # Config fields that only shape evaluation (SQuAD's n-best size): when a
    # fine-tuned model is evaluated again, the run's values of these win over
    # the saved ones.
    evaluation_fields: ClassVar[tuple[str, ...]] = ()
    # The dev metric (a key of `evaluate`'s metrics, higher is better) that picks
    # the best step, restart and configuration during fine-tuning; None: the
    # model is evaluated only once training ends.
    main_metric: ClassVar[str | None] = None
    # Whether `dataset(..., packing=PackingConfig(...))` packs training rows
    # (several examples per row; `run_finetuning.packing`).
    supports_packing: ClassVar[bool] = False
    # Whether `evaluate`'s metrics are percentages (SQuAD's official scorer) rather
    # than fractions; `kbert-export --quantize` counts a drop in points either way.
    metrics_in_percent: ClassVar[bool] = False
    # What a student learns from its teacher in `kbert-distill`: `logits` (the
    # model's output: class or tag logits by temperature-scaled KL, a one-output
    # score by MSE) or `embeddings` (a bi-encoder's sentence vectors, by MSE);
    # None: kbert-distill refuses the task's models.
    distillation_target: ClassVar[str | None] = None
    # The encoder APIs its export answers besides TF Serving's:
    # `kbert.tasks.serving.EMBEDDINGS_API` (OpenAI's `/v1/embeddings`) and
    # `RERANK_API` (TEI's `/rerank`). The export records them for kbert-serve;
    # `kbert-index` embeds with an `embeddings` model and re-ranks with a `rerank` one.
    serving_apis: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: Any = None, task_name: str | None = None):
        self.config = self.config_class() if config is None else config
        self.task_name = task_name

    # -- What a fine-tuned model remembers of its task ----------------------------------

    @property
    @abc.abstractmethod
    def model_type(self) -> str:
        """The kind of model (`classifier`, `span_labeler`, ...), recorded for tools."""

    @property
    def label_names(self) -> list[str]:
        """Class or tag names in logit order; empty when the task has none."""
        return []

    @property
    def text_pair(self) -> bool:
        """Whether inputs are sentence pairs."""
        return False

    def describe(self) -> dict[str, Any]:
        """What `task_config.json` records: identity, labels and the task's config.

        Returns:
            A JSON-able dict: `task`, `task_name`, `model_type`, `label_names`,
            `text_pair` and the fields of `config`.
        """
        return {"task": self.name, "task_name": self.task_name, "model_type": self.model_type,
                "label_names": list(self.label_names), "text_pair": self.text_pair,
                **dataclasses.asdict(self.config)}

    @classmethod
    def from_description(cls, description: Mapping[str, Any]) -> "Task":
        """Rebuilds the task of a fine-tuned model from what `describe` recorded.

        Args:
            description: mapping. A saved `task_config.json`: `COMMON_KEYS` and
                the task's config fields, flat.

        Returns:
            The task, ready to evaluate, predict and build serving signatures.
        """
        return cls(cls.config_from_description(description), task_name=description.get("task_name"))

    @classmethod
    def config_from_description(cls, description: Mapping[str, Any]) -> Any:
        """Builds `config_class` from a saved description, refusing keys it does not know.

        Args:
            description: mapping. A saved `task_config.json`; keys other than
                `COMMON_KEYS` are config fields (`LEGACY_KEYS` may be ignored).

        Returns:
            The config dataclass.
        """
        options = {key: value for key, value in description.items() if key not in COMMON_KEYS}
        names = {field.name for field in dataclasses.fields(cls.config_class)}
        unknown = sorted(set(options) - names - set(LEGACY_KEYS))
        if unknown:
            raise ValueError(f"task {cls.name!r}: unknown setting(s) {unknown}; "
                             f"{cls.config_class.__name__} has {sorted(names)}.")
        return cls.config_class(**{key: value for key, value in options.items() if key in names})

    # -- Data ---------------------------------------------------------------------------

    def check_data(self, data: TaskData, splits: Sequence[str]) -> None:
        """Raises a clear error for missing data flags before anything is read.

        Args:
            data: `TaskData`.
            splits: the splits that will be read (`train`, `dev`, `test`).
        """

    @abc.abstractmethod
    def read(self, data: TaskData, split: str) -> list:
        """Reads one split's examples, naming the file and line of any bad input."""

    @abc.abstractmethod
    def dataset(self, examples: list, preprocessor: TextPreprocessor, batch_size: int,
                is_training: bool, seed: int | None = None) -> tf.data.Dataset:
        """Batches of flat dicts: the encoder inputs plus the task's fields.

        Training datasets shuffle with `seed` and repeat forever; others keep an
        index per element so that outputs can be put back in order. Tasks
        with `supports_packing` also take `packing=PackingConfig(...)`.
        """

    def evaluation_dataset(self, examples: list, preprocessor: TextPreprocessor,
                           batch_size: int) -> tf.data.Dataset:
        """`dataset(..., is_training=False)`, reused while the same arguments come back.

        Why: fine-tuning evaluates the same dev examples at every interval, and
        building the dataset traces its tokenizing map functions again (seconds
        each time, whatever the data's size); an unshuffled dataset can be
        iterated any number of times. One dataset is kept: the last one asked for.

        Args:
            examples: list of the task's examples.
            preprocessor: `TextPreprocessor`. Compared by identity.
            batch_size: int.

        Returns:
            `tf.data.Dataset`, as `dataset` gives it.

        Example:

        >>> batches = task.evaluation_dataset(dev_examples, preprocessor, 64)
        """
        cached = getattr(self, "_evaluation_dataset", None)
        if (cached is None or cached[1] is not preprocessor or cached[2] != batch_size
                or cached[0] != examples):
            dataset = self.dataset(examples, preprocessor, batch_size, False)
            # A copy: a list changed in place after this call is not the one cached.
            cached = (list(examples), preprocessor, batch_size, dataset)
            self._evaluation_dataset = cached
        return cached[3]

    @abc.abstractmethod
    def training_batch(self, batch: dict) -> tuple:
        """`(inputs, labels[, sample_weights])` for `model.fit` from one batch."""

    def unlabelled_examples(self, lines: Sequence[str], source: str) -> list:
        """Examples without labels from text lines, for distillation's transfer set.

        Args:
            lines: sequence of str. One input per line in the task's form.
            source: str. The file, named in errors.

        Returns:
            list of the task's examples (labels are placeholders; never used).
        """
        raise ValueError(f"{source}: task {self.name!r} reads no unlabelled transfer file; "
                         "drop --transfer_file to distill on its training split.")

    def selection_group(self, example) -> Any:
        """What must stay on one side when a selection split is held out of training.

        `run_finetuning.selection_fraction` holds out whole groups, so nothing
        selected on shares its text with what was trained on. Each example is
        its own group unless a task says otherwise (SQuAD: its paragraph).

        Args:
            example: one of the task's training examples.

        Returns:
            A hashable group key, or None for "this example alone".
        """
        return None

    def input_texts(self, examples: list) -> list[list[str]]:
        """The examples' text inputs as documents of sentences, never their labels.

        What task-adaptive pre-training reads (`tools/task_text.py` writes it
        in the pre-training data tool's corpus format): the text a model sees
        when it is fine-tuned on the task, and nothing it is asked to predict.

        Args:
            examples: list of the task's examples (`read`).

        Returns:
            list of documents, each a list of str (a sentence or a short text
            each), in the examples' order.

        Raises:
            ValueError: the task has no text inputs.
        """
        raise ValueError(f"task {self.name!r} has no text inputs to pre-train on.")

    def training_rows(self, examples: list, preprocessor: TextPreprocessor) -> list:
        """The rows one training epoch goes over; `dataset` batches them.

        Most tasks train on their examples as read; SQuAD trains on the
        context windows of its questions.
        """
        return examples

    # -- Model --------------------------------------------------------------------------

    @abc.abstractmethod
    def build_model(self, encoder: keras.Model) -> keras.Model:
        """Puts the task's head on `encoder`; the model's `compile` defaults its losses."""

    def use_pretrained_settings(self, settings: Mapping[str, Any]) -> None:
        """Adopts what the pre-trained directory records about using its encoder.

        Called before `build_model` when a task starts from a pre-trained
        directory; most tasks ignore it. The similarity and retrieval tasks
        take the pooling a sentence-transformers model was trained with
        (`sentence_config`) unless their config sets one.

        Args:
            settings: mapping. `kbert.checkpoints.pretrained.pretrained_settings`.
        """

    def compile_arguments(self) -> dict[str, Any]:
        """Extra `compile` arguments the task needs (e.g. SQuAD's loss weights)."""
        return {}

    # -- Evaluation and prediction ------------------------------------------------------

    @abc.abstractmethod
    def evaluate(self, model: keras.Model, examples: list, preprocessor: TextPreprocessor,
                 batch_size: int) -> Evaluation:
        """Metrics of `model` on gold `examples` (the official scorer's semantics)."""

    @abc.abstractmethod
    def predict(self, model: keras.Model, examples: list, preprocessor: TextPreprocessor,
                batch_size: int) -> dict[str, str]:
        """Prediction files for `examples`: file name -> text (e.g. `predictions.tsv`)."""

    def inference_model(self, model: keras.Model, batch: Mapping[str, tf.Tensor]
                        ) -> tuple[keras.Model, dict[str, tf.Tensor]]:
        """What serving one input runs: the part of `model` and its inputs from a batch.

        `kbert-distill` times teacher and student with it. The whole model on the
        encoder inputs, unless a task says otherwise (a bi-encoder: its query
        tower on the first texts, one vector per text, as served).

        Args:
            model: the task model (`build_model`'s).
            batch: one of `dataset`'s batches.

        Returns:
            `(model, inputs)`: a Keras model and the inputs dict to call it on.
        """
        return model, encoder_inputs(batch)

    # -- Serving ------------------------------------------------------------------------

    @abc.abstractmethod
    def serving_module(self, model: keras.Model, preprocessor: TextPreprocessor) -> ServingModule:
        """The `tf.Module` whose functions become the SavedModel's signatures."""


def encoder_inputs(batch: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """The three encoder inputs of a batch dict that also holds task fields."""
    return {name: batch[name] for name in INPUT_NAMES}


def traced_once_per_model(make_function):
    """Decorator: `make_function(model)` is called once per model and its result reused.

    Why: evaluating during fine-tuning calls the same model's traced function
    at every interval, and a new `tf.function` traces the whole model again
    (seconds). The cache holds models weakly, and `make_function` gets a
    `weakref.proxy` of the model, so that a cached function never keeps its
    model (and the model's variables) alive.

    Args:
        make_function: callable. `make_function(model) -> tf.function`.

    Returns:
        callable. `get(model)`: the function made for `model`.

    Example:

    >>> @traced_once_per_model
    ... def logits_function(model):
    ...     return tf.function(lambda inputs: model(inputs, training=False))
    """
    cache = weakref.WeakKeyDictionary()

    @functools.wraps(make_function)
    def get(model: keras.Model):
        function = cache.get(model)
        if function is None:
            function = cache[model] = make_function(weakref.proxy(model))
        return function

    return get


@traced_once_per_model
def inference_function(model: keras.Model):
    """`model` in inference mode as one traced function for batches of any shape.

    Traced once per model (`traced_once_per_model`): calls on the same model
    give the same function.

    Args:
        model: a Keras model taking the three encoder inputs.

    Returns:
        A `tf.function` from an inputs dict to the model's outputs.
    """
    signature = {name: tf.TensorSpec([None, None], tf.int32) for name in INPUT_NAMES}

    @tf.function(input_signature=[signature])
    def forward(inputs):
        return model(inputs, training=False)

    return forward


def outputs_in_order(model: keras.Model, dataset: tf.data.Dataset,
                     index_key: str = "example_index") -> np.ndarray:
    """Runs `model` over a bucketed dataset; returns its outputs in example order.

    Args:
        model: a model with one output tensor per example (e.g. logits).
        dataset: batches holding the encoder inputs and `index_key`.
        index_key: str. The field giving each row's example index.

    Returns:
        `[num_examples, ...]` numpy array.
    """
    forward = inference_function(model)
    rows = {}
    for batch in dataset:
        outputs = forward(encoder_inputs(batch)).numpy()
        for row, index in enumerate(batch[index_key].numpy()):
            rows[int(index)] = outputs[row]
    return np.stack([rows[i] for i in range(len(rows))])
