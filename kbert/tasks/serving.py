"""What every task's serving module shares: the module holding model and preprocessor.

A task's `serving_module(model, preprocessor)` returns a `ServingModule`
subclass whose `tf.function`s become the SavedModel's signatures
(`kbert.export.export_saved_model` saves it). Every module has
`serving_default` (raw text in, answers out) and `serve_ids` (`token_ids`,
`segment_ids`, `padding_mask`, int32 `[batch, length]`, for callers that
tokenize themselves). Signatures that cut long texts into windows run the
model on them a bounded number of tokens at a time (`run_windows`), so a
request's memory does not grow with the length of its text beyond the text
itself.

A module whose signatures run the model once on the packed inputs also gives
each of them as two model-free halves (`split_signatures`): `before` (the
signature's inputs -> the three encoder inputs) and `after` (the model's
output and `padding_mask` -> the signature's outputs). `kbert-export
--quantize=int8` saves them beside an ONNX Runtime copy of the model
(`kbert.export.onnxruntime_int8`), and kbert-serve runs `before`, the ONNX
model, then `after`.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from kbert.data.text_preprocessor import TextPreprocessor

# Tokens (windows x max_seq_length) given to the model in one call by
# `run_windows`. It bounds the encoder's activations, whose attention scores
# alone are windows x heads x length^2 floats (a 1 MB text cut into 128-piece
# windows would need about 3 GB of them at once with 12 heads). CPU time is the
# same at 2048, 4096 and 8192 (BENCHMARKS.md, serving memory); 4096 keeps a
# 32-text batch of 128-piece texts in one call and adds about 140 MB (NER,
# 128) or 240 MB (SQuAD, 384) to a MiniLM-sized server's peak.
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


def text_spec(name: str) -> tf.TensorSpec:
    """A `[batch]` string input named `name`."""
    return tf.TensorSpec([None], tf.string, name=name)


def ids_inputs(token_ids: tf.Tensor, segment_ids: tf.Tensor, padding_mask: tf.Tensor) -> dict:
    """The encoder inputs dict of the `serve_ids` signature's arguments."""
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


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

    Subclasses define their `tf.function`s in `__init__` and return them from
    `signatures()`.

    Args:
        model: the Keras model to serve.
        preprocessor: `kbert.data.TextPreprocessor` with the training settings.
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

    def signatures(self) -> dict:
        """Signature name -> `tf.function`."""
        raise NotImplementedError

    def split_signatures(self) -> dict:
        """The signatures that are `after(model(before(inputs)))`, as their two halves.

        For a runtime that runs the model outside TensorFlow (kbert-serve's
        ONNX Runtime int8 path): `before` takes the signature's inputs and
        returns the three encoder inputs (`token_ids`, `segment_ids`,
        `padding_mask`); `after` takes the model's output (`outputs`, float32)
        and that `padding_mask` and returns the signature's outputs. None by
        default: signatures that run the model over windows in a loop (NER,
        QA) cannot be split.

        Returns:
            dict. Signature name -> `(before, after)` `tf.function`s.

        Example:

        >>> before, after = module.split_signatures()["serving_default"]
        >>> after(outputs=module.model(before(text=texts)), padding_mask=...)
        """
        return {}

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
