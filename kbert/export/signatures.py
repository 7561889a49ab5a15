"""The serving signatures of every kbert model: raw text in, answers out.

Each model type gets a `tf.Module` holding the Keras model, the in-graph
`TextPreprocessor` and two or more `tf.function`s, which become the
SavedModel's signatures:

| model type         | `serving_default` inputs -> outputs                                 |
|--------------------|----------------------------------------------------------------------|
| classifier         | `text` (+ `text_pair`) -> `logits`, `probabilities`, `label`         |
| regressor          | `text` (+ `text_pair`) -> `score`                                    |
| token_classifier   | `text` -> `words`, `tags` (`[batch, max_words]`, "" padded), `num_words` |
| span_labeler       | `question`, `context` -> `answer`, `start_char`, `end_char`, `score` |
| embedding          | `text` -> `embedding` (mean over tokens, L2-normalised)              |

and every model has `serve_ids` (`token_ids`, `segment_ids`, `padding_mask`,
int32 `[batch, length]`) for callers that tokenize themselves, returning the
same outputs where they make sense per token (`logits`/`tags` per position for
tagging, `start_logits`/`end_logits` for span QA).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from kbert.export.span_search import best_spans
from kbert.export.text_preprocessing import TextPreprocessor

MODEL_TYPES = ("classifier", "regressor", "token_classifier", "span_labeler", "embedding")

_IDS_SIGNATURE = [
    tf.TensorSpec([None, None], tf.int32, name="token_ids"),
    tf.TensorSpec([None, None], tf.int32, name="segment_ids"),
    tf.TensorSpec([None, None], tf.int32, name="padding_mask"),
]


def _text(name: str) -> tf.TensorSpec:
    return tf.TensorSpec([None], tf.string, name=name)


def _ids(token_ids, segment_ids, padding_mask) -> dict:
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


class _ServingModule(tf.Module):
    """Holds the model and preprocessor so the SavedModel tracks their variables and tables."""

    def __init__(self, model: keras.Model, preprocessor: TextPreprocessor):
        super().__init__(name="kbert_serving")
        self.model = model
        self.preprocessor = preprocessor

    def _run(self, inputs: dict):
        return self.model(inputs, training=False)

    def signatures(self) -> dict:
        raise NotImplementedError


class _ClassifierModule(_ServingModule):
    def __init__(self, model, preprocessor, label_names: list[str], text_pair: bool, regression: bool):
        super().__init__(model, preprocessor)
        self.regression = regression
        self.text_pair = text_pair
        names = list(label_names) or [str(i) for i in range(model.output_shape[-1])]
        self.label_names = tf.constant(names)
        if text_pair:
            self.serve_text = tf.function(self._serve_pair, autograph=False, input_signature=[_text("text"), _text("text_pair")])
        else:
            self.serve_text = tf.function(self._serve_single, autograph=False, input_signature=[_text("text")])
        self.serve_ids = tf.function(self._serve_ids, autograph=False, input_signature=_IDS_SIGNATURE)

    def _outputs(self, inputs):
        logits = tf.cast(self._run(inputs), tf.float32)
        if self.regression:
            return {"score": logits[:, 0]}
        return {
            "logits": logits,
            "probabilities": tf.nn.softmax(logits, axis=-1),
            "label": tf.gather(self.label_names, tf.argmax(logits, axis=-1, output_type=tf.int32)),
        }

    def _serve_single(self, text):
        return self._outputs(self.preprocessor.pack([self.preprocessor.tokenize(text)]))

    def _serve_pair(self, text, text_pair):
        tokenize = self.preprocessor.tokenize
        return self._outputs(self.preprocessor.pack([tokenize(text), tokenize(text_pair)]))

    def _serve_ids(self, token_ids, segment_ids, padding_mask):
        return self._outputs(_ids(token_ids, segment_ids, padding_mask))

    def signatures(self):
        return {"serving_default": self.serve_text, "serve_ids": self.serve_ids}


class _TokenClassifierModule(_ServingModule):
    def __init__(self, model, preprocessor, label_names: list[str]):
        super().__init__(model, preprocessor)
        names = list(label_names) or [str(i) for i in range(model.output_shape[-1])]
        self.label_names = tf.constant(names)
        self.serve_text = tf.function(self._serve_text, autograph=False, input_signature=[_text("text")])
        self.serve_ids = tf.function(self._serve_ids, autograph=False, input_signature=_IDS_SIGNATURE)

    def _serve_text(self, text):
        inputs, positions, words = self.preprocessor.words(text)
        logits = tf.cast(self._run(inputs), tf.float32)
        rows = tf.cast(positions.value_rowids(), tf.int32)
        word_logits = tf.gather_nd(logits, tf.stack([rows, tf.cast(positions.flat_values, tf.int32)], 1))
        tags = tf.gather(self.label_names, tf.argmax(word_logits, axis=-1, output_type=tf.int32))
        tags = positions.with_flat_values(tags)
        return {
            "words": words.to_tensor(default_value=""),
            "tags": tags.to_tensor(default_value=""),
            "num_words": tf.cast(positions.row_lengths(axis=1), tf.int32),
        }

    def _serve_ids(self, token_ids, segment_ids, padding_mask):
        logits = tf.cast(self._run(_ids(token_ids, segment_ids, padding_mask)), tf.float32)
        return {"logits": logits,
                "tags": tf.gather(self.label_names, tf.argmax(logits, axis=-1, output_type=tf.int32))}

    def signatures(self):
        return {"serving_default": self.serve_text, "serve_ids": self.serve_ids}


class _SpanLabelerModule(_ServingModule):
    def __init__(self, model, preprocessor, max_query_length: int, doc_stride: int, max_answer_length: int):
        super().__init__(model, preprocessor)
        if max_query_length > preprocessor.max_seq_length - 4:
            raise ValueError(
                f"max_query_length={max_query_length} leaves no room for context in "
                f"max_seq_length={preprocessor.max_seq_length}; it must be at most "
                f"{preprocessor.max_seq_length - 4}.")
        self.max_query_length = int(max_query_length)
        self.doc_stride = int(doc_stride)
        self.max_answer_length = int(max_answer_length)
        self.serve_text = tf.function(self._serve_text, autograph=False, input_signature=[_text("question"), _text("context")])
        self.serve_ids = tf.function(self._serve_ids, autograph=False, input_signature=_IDS_SIGNATURE)

    def _serve_text(self, question, context):
        windows = self.preprocessor.question_context_windows(
            question, context, self.max_query_length, self.doc_stride)
        outputs = self._run(windows["inputs"])
        return best_spans(outputs["start_logits"], outputs["end_logits"], windows, self.max_answer_length)

    def _serve_ids(self, token_ids, segment_ids, padding_mask):
        outputs = self._run(_ids(token_ids, segment_ids, padding_mask))
        return {"start_logits": tf.cast(outputs["start_logits"], tf.float32),
                "end_logits": tf.cast(outputs["end_logits"], tf.float32)}

    def signatures(self):
        return {"serving_default": self.serve_text, "serve_ids": self.serve_ids}


class _EmbeddingModule(_ServingModule):
    def __init__(self, encoder, preprocessor):
        super().__init__(encoder, preprocessor)
        self.serve_text = tf.function(self._serve_text, autograph=False, input_signature=[_text("text")])
        self.serve_ids = tf.function(self._serve_ids, autograph=False, input_signature=_IDS_SIGNATURE)

    def _embed(self, inputs):
        sequence = tf.cast(self._run(inputs)["sequence_output"], tf.float32)
        mask = tf.cast(inputs["padding_mask"], tf.float32)[:, :, tf.newaxis]
        mean = tf.reduce_sum(sequence * mask, axis=1) / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)
        return {"embedding": tf.math.l2_normalize(mean, axis=-1)}

    def _serve_text(self, text):
        return self._embed(self.preprocessor.pack([self.preprocessor.tokenize(text)]))

    def _serve_ids(self, token_ids, segment_ids, padding_mask):
        return self._embed(_ids(token_ids, segment_ids, padding_mask))

    def signatures(self):
        return {"serving_default": self.serve_text, "serve_ids": self.serve_ids}


def build_serving_module(model: keras.Model, model_type: str, vocab: list[str], do_lower_case: bool,
                         max_seq_length: int, label_names: list[str] | None = None,
                         text_pair: bool = False, max_query_length: int = 64, doc_stride: int = 128,
                         max_answer_length: int = 30) -> _ServingModule:
    """Wraps a kbert model in the `tf.Module` whose functions become its signatures.

    Args:
        model: the task model (`BertClassifier`, `BertTokenClassifier`,
            `BertSpanLabeler`) or, for `embedding`, a `BertEncoder`.
        model_type: str. One of `MODEL_TYPES`.
        vocab: list of str. The WordPiece vocabulary in id order.
        do_lower_case: bool. Tokenizer setting used in training.
        max_seq_length: int. Longest packed sequence.
        label_names: list of str or None. Class or tag names in logit order.
        text_pair: bool. Classification/regression on sentence pairs.
        max_query_length: int. Span QA: question pieces kept.
        doc_stride: int. Span QA: distance between context windows.
        max_answer_length: int. Span QA: longest answer in pieces.

    Returns:
        The module; `module.signatures()` maps signature names to functions.

    Example:

    >>> module = build_serving_module(classifier, "classifier", vocab, True, 128, ["neg", "pos"])
    >>> module.signatures()["serving_default"](tf.constant(["a gorgeous film"]))["label"]
    """
    encoder = model if model_type == "embedding" else model.encoder
    positions = getattr(encoder, "max_sequence_length", None)
    if positions is not None and max_seq_length > positions:
        raise ValueError(f"max_seq_length={max_seq_length} exceeds the encoder's "
                         f"max_sequence_length={positions}; export with a value <= {positions}.")
    preprocessor = TextPreprocessor(vocab, do_lower_case, max_seq_length)
    label_names = list(label_names or [])
    if model_type in ("classifier", "regressor"):
        return _ClassifierModule(model, preprocessor, label_names, text_pair, model_type == "regressor")
    if model_type == "token_classifier":
        return _TokenClassifierModule(model, preprocessor, label_names)
    if model_type == "span_labeler":
        return _SpanLabelerModule(model, preprocessor, max_query_length, doc_stride, max_answer_length)
    if model_type == "embedding":
        return _EmbeddingModule(model, preprocessor)
    raise ValueError(f"model_type={model_type!r}; expected one of {MODEL_TYPES}.")
