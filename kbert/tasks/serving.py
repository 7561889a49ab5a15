"""What every task's serving module shares: the module holding model and preprocessor.

A task's `serving_module(model, preprocessor)` returns a `ServingModule`
subclass that declares each of its signatures once, as a `Signature` record
(`declared_signatures()`); the base class makes the `tf.function`s that become
the SavedModel's signatures (`signatures()`, saved by
`kbert.export.export_saved_model`). Every module has `serving_default` (raw
text in, answers out) and `serve_ids` (`token_ids`, `segment_ids`,
`padding_mask`, int32 `[batch, length]`, for callers that tokenize
themselves). Signatures that cut long texts into windows run the model on them
a bounded number of tokens at a time (`run_windows`), so a request's memory
does not grow with the length of its text beyond the text itself.

A signature that runs the model once on the packed inputs is declared as its
two model-free halves: `before` (the signature's inputs -> the three encoder
inputs) and `after` (the model's output and `padding_mask` -> the signature's
outputs). `signatures()` joins them around the model; `split_signatures()`
gives them apart: `kbert-export --quantize=int8` saves them beside an ONNX
Runtime copy of the model (`kbert.export.onnxruntime_int8`), and kbert-serve
runs `before`, the ONNX model, then `after`. A signature that runs the model
itself (over windows in a loop, another tower, the encoder's layers) is
declared as one `body` and cannot be split.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Callable

import keras
import tensorflow as tf

from kbert.data.text_preprocessor import TextPreprocessor

# Tokens (windows x max_seq_length) given to the model in one call by
# `run_windows`. It bounds the encoder's activations, whose attention scores
# alone are windows x heads x length^2 floats (a 1 MB text cut into 128-piece
# windows would need about 3 GB of them at once with 12 heads). CPU time is the
# same from 2048 to 8192 while memory grows with it (see BENCHMARKS.md,
# serving_memory); 4096 keeps a 32-text batch of 128-piece texts in one call.
TOKENS_PER_CALL = 4096

IDS_SIGNATURE = [
    tf.TensorSpec([None, None], tf.int32, name="token_ids"),
    tf.TensorSpec([None, None], tf.int32, name="segment_ids"),
    tf.TensorSpec([None, None], tf.int32, name="padding_mask"),
]
# The inputs of a split signature's `after` half: the model's output and the
# padding mask `before` made.
AFTER_SIGNATURE = [
    tf.TensorSpec([None, None], tf.float32, name="outputs"),
    tf.TensorSpec([None, None], tf.int32, name="padding_mask"),
]
# The encoder APIs an export can answer besides TF Serving's (`Task.serving_apis`,
# recorded in the export's `kbert_export.json`, read by `kbert.serving.encoder_apis`):
# OpenAI's `/v1/embeddings` and TEI's `/rerank`.
EMBEDDINGS_API = "embeddings"
RERANK_API = "rerank"


@dataclasses.dataclass(frozen=True)
class Signature:
    """One serving signature, declared once: its inputs and how it answers them.

    Either `before` and `after`, the model-free halves around one run of the
    model on packed inputs (`after(model(before(*inputs)), padding_mask)`),
    which `ServingModule.signatures()` joins and `split_signatures()` gives
    apart; or `body`, a function that runs the model itself (over windows in a
    loop, another tower, the encoder's layers) and cannot be split.

    Args:
        inputs: sequence of `tf.TensorSpec`. The signature's inputs, named as
            the arguments of `before` (or `body`).
        before: callable or None. The inputs -> the encoder inputs dict
            (`token_ids`, `segment_ids`, `padding_mask`).
        after: callable or None. `(outputs, padding_mask) -> dict` of answers,
            given the model's output (float32 `[batch, outputs]` when split).
        body: callable or None. The inputs -> dict of answers.
        windowed: bool. `body` reads long texts in windows (`run_windows`)
            instead of cutting them at `max_seq_length`. Defaults to False.
        takes_ids: bool. The inputs are the encoder inputs themselves
            (`serve_ids`): split, `before` refuses token ids outside the
            vocabulary, as TensorFlow's embedding lookup does. Defaults to False.

    Example:

    >>> Signature([text_spec("text")], before=module.pack, after=module.finish)
    >>> Signature([text_spec("text")], body=module.tag_words, windowed=True)
    """

    inputs: tuple[tf.TensorSpec, ...]
    before: Callable[..., dict] | None = None
    after: Callable[[tf.Tensor, tf.Tensor], dict] | None = None
    body: Callable[..., dict] | None = None
    windowed: bool = False
    takes_ids: bool = False

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        halves = self.before is not None and self.after is not None
        alone = self.body is not None and self.before is None and self.after is None
        if not (halves and self.body is None or alone):
            raise ValueError("a Signature is either before and after, or a body; got "
                             f"before={self.before}, after={self.after}, body={self.body}.")

    @property
    def splits(self) -> bool:
        """Whether it is declared as `before` and `after` halves."""
        return self.body is None


def text_spec(name: str) -> tf.TensorSpec:
    """A `[batch]` string input named `name`."""
    return tf.TensorSpec([None], tf.string, name=name)


def ids_inputs(token_ids: tf.Tensor, segment_ids: tf.Tensor, padding_mask: tf.Tensor) -> dict:
    """The encoder inputs dict of the `serve_ids` signature's arguments."""
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def ids_signature(after: Callable[[tf.Tensor, tf.Tensor], dict]) -> Signature:
    """`serve_ids`: the caller's encoder inputs through the model once, then `after`.

    Args:
        after: `(outputs, padding_mask) -> dict`, as the text signature's.

    Returns:
        `Signature` on `IDS_SIGNATURE`.
    """
    return Signature(IDS_SIGNATURE, before=ids_inputs, after=after, takes_ids=True)


def label_table(label_names: list[str], num_outputs: int) -> tf.Tensor:
    """Label names as a string tensor; `"0", "1", ...` when the model has none recorded."""
    return tf.constant(list(label_names) or [str(i) for i in range(num_outputs)])


def window_preprocessor(model: keras.Model, preprocessor: TextPreprocessor) -> TextPreprocessor:
    """The preprocessor whose `max_seq_length` is the window served NER and QA read long texts in.

    The fine-tuning length, except for an encoder that declares `long_windows`
    (ModernBERT: rotary positions, pre-trained on every length up to its
    `max_sequence_length`), which reads windows of its whole
    `max_sequence_length`: an 8,000-piece document is then one window, so
    every word sees all of it.

    Args:
        model: the task model; its `encoder` is asked.
        preprocessor: `TextPreprocessor` at the fine-tuning length.

    Returns:
        `preprocessor`, or it at the encoder's `max_sequence_length`.

    Example:

    >>> window_preprocessor(tagger, preprocessor).max_seq_length
    8192
    """
    encoder = getattr(model, "encoder", None)
    if not getattr(encoder, "long_windows", False):
        return preprocessor
    return preprocessor.with_max_seq_length(max(preprocessor.max_seq_length,
                                                int(encoder.max_sequence_length)))


def rows_between(rows: tf.RaggedTensor, begin: tf.Tensor, end: tf.Tensor) -> tf.RaggedTensor:
    """Rows `begin:end` of a ragged `[n, (m)]` tensor, for bounds known only at run time."""
    splits = rows.row_splits
    values = rows.values[splits[begin]:splits[end]]
    return tf.RaggedTensor.from_row_splits(values, splits[begin:end + 1] - splits[begin],
                                           validate=False)


class ServingModule(tf.Module):
    """Holds the model and preprocessor so the SavedModel tracks their variables and tables.

    Subclasses declare each signature once in `declared_signatures()`;
    `signatures()` and `split_signatures()` are made from those records.

    Args:
        model: the Keras model to serve.
        preprocessor: `kbert.data.TextPreprocessor` with the training settings.

    Example:

    >>> class ScoreModule(ServingModule):
    ...     def declared_signatures(self):
    ...         return {"serving_default": Signature([text_spec("text")], before=self.pack,
    ...                                              after=lambda outputs, mask: {"score": outputs[:, 0]}),
    ...                 "serve_ids": ids_signature(lambda outputs, mask: {"score": outputs[:, 0]})}
    """

    def __init__(self, model: keras.Model, preprocessor: TextPreprocessor):
        super().__init__(name="kbert_serving")
        self.preprocessor = preprocessor
        self.hold_models(model=model)

    def hold_models(self, **models: keras.Model | None) -> None:
        """Sets each model as an attribute; the SavedModel tracks their variables only.

        The signatures capture variables, not layers, so the module tracks the
        variables of every model it holds, by path (`model_variables`), and not
        the models' Keras object graphs: TensorFlow walks every tracked object at
        each save and load, and a Keras model's hundreds of layers, lists and
        dicts took a quarter of a small model's export.

        Args:
            **models: attribute name -> Keras model (or None).
        """
        held = {**getattr(self, "_held_models", {}), **models}
        for name, model in models.items():
            object.__setattr__(self, name, model)  # untracked, as documented above
        object.__setattr__(self, "_held_models", held)
        variables = {}
        for model in held.values():
            for variable in model.variables if model is not None else ():
                name = variable.path
                while name in variables and variables[name] is not variable:
                    name += "_"  # two variables of one path in different models
                variables[name] = variable
        self.model_variables = variables

    def run(self, inputs: dict):
        """The model in inference mode."""
        return self.model(inputs, training=False)

    def run_windows(self, token_ids: tf.RaggedTensor, segment_ids: tf.RaggedTensor, keep,
                    specs: list[tf.TensorSpec]) -> list[tf.Tensor]:
        """Runs the model over many windows, `TOKENS_PER_CALL` tokens at a time.

        Each call pads only its own windows, to their longest. A `tf.while_loop`
        with one iteration in flight keeps a single call's activations alive,
        and `keep` reduces each call's outputs to what the signature needs
        before the next call runs.

        Args:
            token_ids: ragged int32 `[windows, (length)]`, packed windows.
            segment_ids: ragged int32, the same row lengths as `token_ids`.
            keep: function `(outputs, inputs, begin, end) -> list of tensors`
                given the model's outputs on windows `begin:end` and their
                dense `inputs`; its tensors are concatenated over calls along
                their first axis.
            specs: list of `tf.TensorSpec`. Dtype and shape (first axis `None`)
                of each tensor `keep` returns.

        Returns:
            List of the concatenated tensors, one per spec.

        Example:

        >>> tags, = module.run_windows(token_ids, segment_ids,
        ...     lambda outputs, inputs, begin, end: [tf.argmax(outputs, -1)],
        ...     [tf.TensorSpec([None, None], tf.int64)])
        """
        per_call = max(1, TOKENS_PER_CALL // self.preprocessor.max_seq_length)
        num_windows = tf.cast(token_ids.nrows(), tf.int32)
        num_calls = (num_windows + per_call - 1) // per_call

        def body(call, arrays):
            begin = call * per_call
            end = tf.minimum(begin + per_call, num_windows)
            inputs = self.preprocessor.to_dense(rows_between(token_ids, begin, end),
                                                rows_between(segment_ids, begin, end))
            kept = keep(self.run(inputs), inputs, begin, end)
            return call + 1, [array.write(call, value) for array, value in zip(arrays, kept)]

        arrays = [tf.TensorArray(spec.dtype, size=num_calls, infer_shape=False,
                                 element_shape=spec.shape) for spec in specs]
        _, arrays = tf.while_loop(lambda call, _: call < num_calls, body, [tf.constant(0), arrays],
                                  parallel_iterations=1)
        return [array.concat() for array in arrays]

    def declared_signatures(self) -> dict[str, Signature]:
        """Signature name -> `Signature`, each declared once.

        A record listed under two names (a shared tower's `serving_default`
        and `query`) becomes one function. Called once, after the subclass's
        `__init__`.
        """
        raise NotImplementedError

    def _declared(self) -> dict[str, Signature]:
        declared = getattr(self, "_signature_records", None)
        if declared is None:
            declared = dict(self.declared_signatures())
            object.__setattr__(self, "_signature_records", declared)  # untracked: plain records
        return declared

    def signatures(self) -> dict:
        """Signature name -> `tf.function`, made once from `declared_signatures()`.

        A split record runs `after(model(before(inputs)), padding_mask)` as one
        traced function; a `body` is traced as it is.

        Returns:
            dict. Signature name -> `tf.function` (the same objects on every call).

        Example:

        >>> module.signatures()["serving_default"](text=tf.constant(["a film"]))
        """
        functions = getattr(self, "signature_functions", None)
        if functions is None:
            made = {}
            for name, record in self._declared().items():
                if id(record) not in made:
                    made[id(record)] = self._signature_function(name, record)
            # Tracked, as the module's attributes: the SavedModel keeps them as functions too.
            self.signature_functions = {name: made[id(record)]
                                        for name, record in self._declared().items()}
            functions = self.signature_functions
        return dict(functions)

    def _signature_function(self, name: str, record: Signature) -> tf.function:
        if not record.splits:
            return tf.function(record.body, autograph=False, input_signature=record.inputs)
        before, after = record.before, record.after

        @functools.wraps(before)  # the signature's argument names are `before`'s
        def joined(*args, **kwargs):
            inputs = before(*args, **kwargs)
            return after(self.run(inputs), inputs["padding_mask"])

        joined.__name__ = joined.__qualname__ = f"serve_{name}"
        return tf.function(joined, autograph=False, input_signature=record.inputs)

    def split_signatures(self) -> dict:
        """The signatures that are `after(model(before(inputs)))`, as their two halves.

        For a runtime that runs the model outside TensorFlow (kbert-serve's
        ONNX Runtime int8 path): `before` takes the signature's inputs and
        returns the three encoder inputs (`token_ids`, `segment_ids`,
        `padding_mask`); `after` takes the model's output (`outputs`, float32)
        and that `padding_mask` and returns the signature's outputs. Only the
        records declared as halves split: a module whose signatures run the
        model over windows in a loop (NER, QA) has none.

        Returns:
            dict. Signature name -> `(before, after)` `tf.function`s (a half
            several signatures share is one function).

        Example:

        >>> before, after = module.split_signatures()["serving_default"]
        >>> after(outputs=module.model(before(text=texts)), padding_mask=...)
        """
        split = getattr(self, "_split_functions", None)
        if split is None:
            befores, afters, split = {}, {}, {}
            for name, record in self._declared().items():
                if not record.splits:
                    continue
                key = ("ids",) if record.takes_ids else (record.before, record.inputs)
                if key not in befores:
                    befores[key] = (self.checked_ids_function() if record.takes_ids else
                                    tf.function(record.before, autograph=False,
                                                input_signature=record.inputs))
                if record.after not in afters:
                    afters[record.after] = self.after_function(record.after)
                split[name] = (befores[key], afters[record.after])
            object.__setattr__(self, "_split_functions", split)  # untracked: saved when attached
        return dict(split)

    @property
    def truncation_length(self) -> int | None:
        """The most tokens its text signatures give the model per example, or None.

        `max_seq_length` (texts are cut to it), or None when a signature reads
        long texts in windows. The export records it for kbert-serve's token
        budget (`kbert.serving.token_counts`).
        """
        if any(record.windowed for record in self._declared().values()):
            return None
        return self.preprocessor.max_seq_length

    def after_function(self, finish) -> tf.function:
        """A split signature's `after` half: `finish(outputs, padding_mask)` traced on
        `AFTER_SIGNATURE`."""
        return tf.function(lambda outputs, padding_mask: finish(outputs, padding_mask),
                           autograph=False, input_signature=AFTER_SIGNATURE)

    def checked_ids_function(self) -> tf.function:
        """`serve_ids`' `before` half: its inputs, refused (InvalidArgument) unless every
        token id is in the vocabulary, as TensorFlow's embedding lookup refuses them (an
        ONNX Gather would read a negative id from the end of the table)."""
        size = self.preprocessor.vocabulary_size

        def check(token_ids, segment_ids, padding_mask):
            in_range = tf.reduce_all((token_ids >= 0) & (token_ids < size))
            with tf.control_dependencies([tf.debugging.Assert(
                    in_range, [f"token_ids must be in [0, {size}); got values from",
                               tf.reduce_min(token_ids), "to", tf.reduce_max(token_ids)])]):
                return {"token_ids": tf.identity(token_ids), "segment_ids": segment_ids,
                        "padding_mask": padding_mask}

        return tf.function(check, autograph=False, input_signature=IDS_SIGNATURE)
