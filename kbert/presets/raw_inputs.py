"""What users hand `fit`, `evaluate` and `predict`, as plain Python values the tasks read.

A preset model takes raw text as keras-hub's tasks do: a list, tuple, numpy
array, tensor or pandas Series of strings, a tuple of two such for text pairs,
or a finite `tf.data.Dataset` of `(text, label)` elements (batched or not).
This module turns each into a list of `str` (or a pair of lists) and a list of
labels, and refuses anything else with the position and type of the first bad
value, so that the tasks' `examples_from_values` see one form only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

# Texts: a list of str, or for pairs a tuple of two lists of the same length.
Texts = list[str] | tuple[list[str], list[str]]


def text_values(x: Any, where: str, words: bool = False) -> Texts:
    """Raw texts as lists of `str`: one list, or a tuple of two for text pairs.

    Args:
        x: a sequence (list, tuple, numpy array, tensor, pandas Series) of
            str (bytes are decoded as UTF-8), or a tuple of two such
            sequences of one length (text pairs).
        where: str. How errors name the argument, such as
            `"TextClassifier.fit: x"`.
        words: bool. Token classification: an input may also be a list of
            words (a sequence of str), and there are no pairs.

    Returns:
        list of str (or of word lists), or `(list of str, list of str)`.

    Raises:
        TypeError: `x` is one string, a dict (token ids), or holds a value
            that is not a string (its index, type and value are named).
        ValueError: the two sides of a pair differ in length.

    Example:

    >>> text_values(np.array(["a film", "a play"]), "x")
    ['a film', 'a play']
    >>> text_values((["a film"], ["a play"]), "x")
    (['a film'], ['a play'])
    """
    if isinstance(x, (str, bytes)):
        raise TypeError(f"{where} is one string; pass a list of strings (e.g. [{x!r:.40}]).")
    if isinstance(x, dict):
        raise TypeError(f"{where} is a dict (of token ids?); this model takes raw text: a list "
                        "of strings, or a tuple of two lists for text pairs. To run it on "
                        "token ids, call its `task_model`.")
    if (not words and isinstance(x, tuple) and len(x) == 2
            and all(_is_sequence(side) for side in x)):
        first, second = (_strings(side, f"{where}[{i}]") for i, side in enumerate(x))
        if len(first) != len(second):
            raise ValueError(f"{where} is a pair of text lists of different lengths "
                             f"({len(first)} and {len(second)}); each text needs its pair.")
        return first, second
    return _strings(x, where, words)


def label_values(y: Any, count: int, where: str) -> list:
    """Labels as plain Python values (str, int, float or lists of them), one per text.

    Args:
        y: a sequence (list, numpy array, tensor, pandas Series) of labels:
            class names or ids, scores, or lists of them (multi-label, tags).
        count: int. How many texts they label.
        where: str. How errors name the argument.

    Returns:
        list, in order.

    Raises:
        ValueError: `y` has another length than the texts.

    Example:

    >>> label_values(np.array([1, 0]), 2, "y")
    [1, 0]
    """
    if isinstance(y, (str, bytes)) or not _is_sequence(y):
        raise TypeError(f"{where} is {type(y).__name__}; pass one label per text (a list or "
                        "array).")
    values = [_python_value(value) for value in _as_list(y)]
    if len(values) != count:
        raise ValueError(f"{where} has {len(values)} labels for {count} texts; pass one label "
                         "per text.")
    return values


def dataset_values(dataset: tf.data.Dataset, where: str, labelled: bool
                   ) -> tuple[Texts, list | None]:
    """The texts (and labels) of a finite `tf.data.Dataset`, read once, in order.

    Elements follow Keras' convention: `x` or `(x,)` unlabelled, `(x, y)`
    labelled, where `x` is a string (or a pair `(text, text_pair)`; word
    lists are given as Python lists, not in a dataset); batched datasets are
    read element by element.

    Args:
        dataset: `tf.data.Dataset`. Finite.
        where: str. How errors name it.
        labelled: bool. Whether elements must carry labels (`fit`, `evaluate`).

    Returns:
        `(texts, labels)`: as `text_values` and `label_values` give them;
        labels None when `labelled` is False and the elements have none.

    Raises:
        ValueError: the dataset is infinite, or labels are missing or extra.

    Example:

    >>> dataset_values(tf.data.Dataset.from_tensor_slices((["a film"], [1])), "x", True)
    (['a film'], [1])
    """
    if dataset.cardinality() == tf.data.INFINITE_CARDINALITY:
        raise ValueError(f"{where} is an infinite tf.data.Dataset (repeat()?); pass a finite "
                         "one: it is read once into examples, and fit's epochs repeat it.")
    spec = dataset.element_spec
    parts = spec if isinstance(spec, tuple) else (spec,)
    if len(parts) > 2:
        raise ValueError(f"{where}: elements have {len(parts)} parts; expected text or "
                         "(text, label) (sample weights are not taken).")
    has_labels = len(parts) == 2
    if labelled and not has_labels:
        raise ValueError(f"{where}: elements have no labels; expected (text, label) pairs "
                         "(or pass y).")
    if _is_batched(parts[0]):
        dataset = dataset.unbatch()
    texts_a, texts_b, labels = [], [], []
    pair = isinstance(parts[0], tuple)
    for element in dataset.as_numpy_iterator():
        element = element if isinstance(spec, tuple) else (element,)
        x = element[0]
        if pair:
            texts_a.append(x[0])
            texts_b.append(x[1])
        else:
            texts_a.append(x)
        if has_labels:
            labels.append(element[1])
    texts = ((_strings(texts_a, f"{where} texts"), _strings(texts_b, f"{where} text pairs"))
             if pair else _strings(texts_a, f"{where} texts"))
    values = [_python_value(label) for label in labels] if has_labels else None
    return texts, values


def _is_sequence(value: Any) -> bool:
    return (isinstance(value, (list, tuple, np.ndarray, tf.Tensor))
            or (hasattr(value, "tolist") and hasattr(value, "__len__")))


def _as_list(value: Any) -> list:
    if isinstance(value, tf.Tensor):
        value = value.numpy()
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return [value.item()]
    return value.tolist() if hasattr(value, "tolist") else list(value)


def _strings(values: Any, where: str, words: bool = False) -> list:
    if not _is_sequence(values):
        raise TypeError(f"{where} is {type(values).__name__}; pass a list of strings (or a tuple "
                        "of two lists for text pairs).")
    texts = []
    for index, value in enumerate(_as_list(values)):
        if words and not isinstance(value, (str, bytes)) and _is_sequence(value):
            texts.append(_strings(value, f"{where}[{index}]"))  # a list of words
            continue
        if isinstance(value, bytes):
            value = value.decode("utf-8", "ignore")  # as TextPreprocessor.clean drops bad bytes
        if not isinstance(value, str):
            what = "a string or a list of words" if words else "a string"
            raise TypeError(f"{where}[{index}] is {type(value).__name__} ({value!r:.60}), not "
                            f"{what}; this model takes raw text. To run it on token ids, call "
                            "its `task_model`.")
        texts.append(value)
    return texts


def _python_value(value: Any) -> Any:
    """A label as Python gives it: numpy scalars and arrays unwrapped, bytes decoded."""
    if isinstance(value, tf.Tensor):
        value = value.numpy()
    if isinstance(value, np.ndarray):
        value = value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list):
        return [_python_value(item) for item in value]
    return value


def _is_batched(spec: Any) -> bool:
    first = spec[0] if isinstance(spec, tuple) else spec
    return getattr(first, "shape", tf.TensorShape([])).rank not in (0, None)
