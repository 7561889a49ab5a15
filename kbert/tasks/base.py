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

    Tasks that read users' own files (classification, token classification)
    take one file per split, as Hugging Face's `run_classification.py` and
    `run_ner.py` do: train = `train_file`, dev = `validation_file`, test =
    `test_file`, in any format `kbert.data.table_files` reads.

    Args:
        task_name: str or None. Which data set of the task family (a GLUE task
            such as `sst-2`; a NER data set name).
        data_dir: str or None. A folder of split files (GLUE, CoNLL).
        train_file: str or None. One training file (SQuAD JSON; a user's
            CSV, TSV, JSON lines or Parquet file).
        predict_file: str or None. One file to evaluate or predict (SQuAD JSON).
        validation_file: str or None. A user's dev file (`--validation_file`).
        test_file: str or None. A user's test file (`--test_file`): predicted
            with `--do_predict`; its labels, when it has them, are checked.
        text_column_names: tuple of str or None. The columns holding the
            inputs (`--text_column_names=a` or `a,b`; run_ner.py's singular
            `--text_column_name=tokens` arrives here as `("tokens",)`). None:
            the task's default (what it recorded, when rebuilt from a
            fine-tuned directory).
        label_column_name: str or None. The label column
            (`--label_column_name`); None: the task's default.

    Example:

    >>> TaskData(task_name="sst-2", data_dir="glue_data/SST-2")
    >>> TaskData(train_file="tickets.csv", validation_file="dev.csv",
    ...          text_column_names=("subject", "body"), label_column_name="queue")
    """

    task_name: str | None = None
    data_dir: str | None = None
    train_file: str | None = None
    predict_file: str | None = None
    validation_file: str | None = None
    test_file: str | None = None
    text_column_names: tuple[str, ...] | None = None
    label_column_name: str | None = None

    def __post_init__(self):
        if self.text_column_names is not None:
            object.__setattr__(self, "text_column_names", tuple(self.text_column_names))


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What evaluating a model on a split gives.

    Args:
        metrics: dict. Metric name -> value, plus `num_examples`.
        files: dict. File name (in the model directory) -> text, such as
            SQuAD's `predictions.json`.
        chosen: dict. Settings this evaluation chose on its examples, which a
            model selected on them keeps (a multi-label decision `threshold`):
            `run_finetuning` hands the kept evaluation's to `Task.keep_chosen`
            before it scores the reported split and saves the model, so that
            they are chosen on the selection split, never on the reported one.
            Empty for most tasks.
    """

    metrics: dict[str, Any]
    files: dict[str, str] = dataclasses.field(default_factory=dict)
    chosen: dict[str, Any] = dataclasses.field(default_factory=dict)


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
    # score by MSE), `sigmoid_logits` (independent per-label logits: the teacher's
    # temperature-scaled sigmoid probabilities as soft targets by binary
    # cross-entropy) or `embeddings` (a bi-encoder's sentence vectors, by MSE);
    # None: kbert-distill refuses the task's models.
    distillation_target: ClassVar[str | None] = None
    # The encoder APIs its export answers besides TF Serving's:
    # `kbert.tasks.serving.EMBEDDINGS_API` (OpenAI's `/v1/embeddings`) and
    # `RERANK_API` (TEI's `/rerank`). The export records them for kbert-serve;
    # `kbert-index` embeds with an `embeddings` model and re-ranks with a `rerank` one.
    serving_apis: ClassVar[tuple[str, ...]] = ()
    # What happens to an input longer than `max_seq_length` (`count_truncated` counts them;
    # the fine-tuning summary says "... pieces and <long_inputs>").
    long_inputs: ClassVar[str] = "were truncated"

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

    def has_split(self, data: TaskData, split: str) -> bool:
        """Whether `data` holds the split at all (a user's files: `--validation_file` given).

        `run_finetuning` reads only the splits a task has: without a dev split
        it chooses the kept model on examples held out of training
        (`run_finetuning.selection_fraction`, 0.1 when unset) and reports no
        dev figure. Every split is there unless a task says otherwise;
        `check_data` names the flags a split needs.

        Args:
            data: `TaskData`.
            split: str. `train`, `dev` or `test`.

        Returns:
            bool.
        """
        return True

    @abc.abstractmethod
    def read(self, data: TaskData, split: str) -> list:
        """Reads one split's examples, naming the file and line of any bad input.

        `run_finetuning` reads `train` first and calls `adapt` on it before it
        reads `dev` and `test`, so a task can check their labels against those
        of the training data.
        """

    def adapt(self, train_examples: list) -> None:
        """Learns what the training data says (label names, problem type, tag set).

        As Keras preprocessing layers' `adapt`: `run_finetuning` calls it on the
        training examples (before any selection split is held out) before
        `build_model`; what the task was given (its config) wins over what it
        would learn. After it, `describe()` records what was learned. Tasks
        whose labels are fixed (GLUE, CoNLL-2003) learn nothing.

        Args:
            train_examples: list. The training split as `read` gives it.

        Raises:
            ValueError: the training data contradicts itself or the config;
                the message names the file and line.
        """

    def examples_from_values(self, inputs: Any, labels: Sequence | None = None,
                             source: str | Sequence[str] = "values") -> list:
        """The task's examples from Python values, checked as its file reader checks rows.

        How Keras-style `fit(x=texts, y=labels)` and `kbert-predict` reach the
        same examples, batches and losses as `kbert-finetune`'s files.

        Args:
            inputs: the inputs: a sequence of str, or a tuple of two such
                sequences for text pairs; for token classification a sequence
                of str texts or of word lists.
            labels: sequence or None. One label per input, as users give them
                (str, int, float, a list for multi-label; a tag list per input
                for token classification); None for inputs to predict.
            source: str or sequence of str. Where the values come from, named in
                errors: one name (rows are then named `<source> item <n>`) or one
                name per input (`data.csv:14`).

        Returns:
            list of the task's examples.

        Raises:
            ValueError: the task reads no such values (this default), or a value
                is bad (named by its source).
        """
        raise ValueError(f"task {self.name!r} does not take examples from Python values; "
                         "use --task=classification or --task=token_classification.")

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

    def predict_records(self, model: keras.Model, examples: list, preprocessor: TextPreprocessor,
                        batch_size: int) -> list[dict[str, Any]]:
        """One answer per example, in order, as JSON-able dicts: what `kbert-predict` writes.

        Single-label classification: `label`, `score`, `probabilities` (label ->
        probability); multi-label: `labels` (those over the recorded threshold)
        and `probabilities`; regression: `prediction`; token classification:
        `entities`, each `{"start", "end", "label", "text", "score"}` with
        character offsets into the input text.

        Args:
            model: the task model.
            examples: list of the task's examples (`examples_from_values`).
            preprocessor: `TextPreprocessor`.
            batch_size: int.

        Returns:
            list of dict, one per example.

        Raises:
            ValueError: the task does not answer per input (this default).
        """
        raise ValueError(f"task {self.name!r} does not predict records for kbert-predict; it "
                         "answers --task=classification and --task=token_classification models.")

    def input_columns(self, text_column_names: Sequence[str] | None = None) -> tuple[str, ...]:
        """The columns of a user's file that hold the task's inputs, for `kbert-predict`.

        `kbert-predict` reads these columns of each row and hands their values
        to `examples_from_values`: one column's as a list, two as a tuple of
        two lists.

        Args:
            text_column_names: sequence of str or None. The columns asked for
                (`--text_column_names` / `--text_column_name`), checked against
                what the task takes; None: those it was trained with.

        Returns:
            tuple of str.

        Raises:
            ValueError: the task reads no user's files (this default), or the
                columns asked for do not fit it.
        """
        raise ValueError(f"task {self.name!r} reads no columns of a user's file; kbert-predict "
                         "answers --task=classification and --task=token_classification models.")

    def keep_chosen(self, chosen: Mapping[str, Any]) -> None:
        """Keeps what the kept model's selection evaluation chose (`Evaluation.chosen`).

        Called by `run_finetuning` once the kept model is chosen, before the
        reported split is scored and the model is saved; `describe()` records it
        from then on. Most tasks choose nothing.

        Args:
            chosen: mapping. The kept evaluation's `chosen`.
        """

    def count_truncated(self, examples: list, preprocessor: TextPreprocessor) -> int | None:
        """How many examples are longer than `preprocessor.max_seq_length` pieces.

        `run_finetuning` prints the counts in its summary with what happened to
        them (`long_inputs`: cut, or read as several rows), so that no text is
        cut silently. None: the task does not count (this default).

        Args:
            examples: list of the task's examples.
            preprocessor: `TextPreprocessor`.

        Returns:
            int or None.
        """
        return None

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
