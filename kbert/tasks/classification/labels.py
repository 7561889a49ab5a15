"""What a column of labels makes: its problem type, label names, targets and class weights.

The problem type is inferred as Hugging Face's `run_classification.py` infers
it from a dataset's label column: a list -> `multi_label`, a float ->
`regression`, otherwise `single_label` (strings or integers). One float among
integers makes regression (pandas reads the column as floats); a label of
another kind in a column of that type is an error naming its row, so a typo
(`n/a` among scores) is refused instead of becoming a class. Label names are
the training labels sorted (integers by value, so `2` comes before `10`), or
the order the user gives.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, Sequence

import numpy as np

SINGLE_LABEL = "single_label"
MULTI_LABEL = "multi_label"
REGRESSION = "regression"
PROBLEM_TYPES = (SINGLE_LABEL, MULTI_LABEL, REGRESSION)
BALANCED = "balanced"


def check_problem_type(problem_type: str | None) -> None:
    """Refuses a `ClassificationConfig.problem_type` that is not one of `PROBLEM_TYPES`."""
    if problem_type is not None and problem_type not in PROBLEM_TYPES:
        raise ValueError(f"ClassificationConfig.problem_type={problem_type!r}; expected one of "
                         f"{PROBLEM_TYPES} (or None to infer it from the training labels).")


def infer_problem_type(labels: Sequence[Any]) -> str:
    """The problem type a column of labels makes, as Hugging Face infers it.

    Args:
        labels: sequence. The training labels as read.

    Returns:
        `multi_label` if any label is a list, else `regression` if any is a
        float, else `single_label`.

    Example:

    >>> infer_problem_type(["billing", "bug"]), infer_problem_type([1, 0.5])
    ('single_label', 'regression')
    """
    if any(isinstance(label, (list, tuple)) for label in labels):
        return MULTI_LABEL
    if any(isinstance(label, float) for label in labels):
        return REGRESSION
    return SINGLE_LABEL


def label_value(label: Any, problem_type: str, source: str) -> str | list[str] | float:
    """A label in the problem type's terms: a class name, a list of names, or a number.

    Args:
        label: the label as read.
        problem_type: str. One of `PROBLEM_TYPES`.
        source: str. Its row (`train.csv:14`), for the error.

    Returns:
        str (single-label), list of str (multi-label) or float (regression).

    Raises:
        ValueError: a label that does not fit the problem type, naming the row
            and how to force another type.

    Example:

    >>> label_value(3, "single_label", "a.csv:2"), label_value(["x", 1], "multi_label", "a.csv:2")
    ('3', ['x', '1'])
    """
    force = "set ClassificationConfig.problem_type to say otherwise"
    if problem_type == MULTI_LABEL:
        if not isinstance(label, (list, tuple)):
            raise ValueError(f"{source}: the multi-label cell {label!r:.60} is not a list; write "
                             'the labels as a list (["billing", "bug"], [] for none), or ' + force
                             + ".")
        return [_name(item, source) for item in label]
    if problem_type == REGRESSION:
        number = _number(label)
        if number is None:
            raise ValueError(f"{source}: {label!r:.60} is not a number, in a regression column "
                             f"(a float label made the problem regression); fix the cell, or "
                             f"{force}.")
        return number
    if isinstance(label, (list, tuple)):
        raise ValueError(f"{source}: the label {label!r:.60} is a list in a single-label column; "
                         f"{force} (multi_label).")
    return _name(label, source)


def sorted_names(values: Sequence[str | list[str]], raw: Sequence[Any]) -> list[str]:
    """The distinct class names of the labels, sorted: integers by value, then text.

    Args:
        values: sequence. `label_value`s (names, or lists of names).
        raw: sequence. The labels as read, in the same order (to tell integers).

    Returns:
        list of str.

    Example:

    >>> sorted_names(["10", "2", "b"], [10, 2, "b"])
    ['2', '10', 'b']
    """
    integers = set()
    for label in raw:
        for item in (label if isinstance(label, (list, tuple)) else [label]):
            if isinstance(item, (int, np.integer)) and not isinstance(item, bool):
                integers.add(str(item))
    names = {name for value in values for name in (value if isinstance(value, list) else [value])}
    return sorted(names, key=lambda name: (0, int(name), "") if name in integers
                  else (1, 0, name))


def class_weights(weights: str | Mapping[str, float] | None, problem_type: str,
                  label_names: Sequence[str], targets: np.ndarray) -> list[float] | None:
    """The weight of each class: as given, or `"balanced"` from the training targets.

    Single-label weights scale each example's loss by its class's weight, as
    Keras' `class_weight`; `"balanced"` is scikit-learn's `n / (classes *
    count)`. Multi-label weights scale each class's positive term of the
    binary cross-entropy (PyTorch's `pos_weight`); `"balanced"` is that
    class's negatives over its positives.

    Args:
        weights: `"balanced"`, a dict of label name -> weight (labels left
            out weigh 1), or None.
        problem_type: str.
        label_names: sequence of str.
        targets: the training targets: class ids `[n]`, or multi-hot `[n, classes]`.

    Returns:
        list of float in label order, or None when `weights` is None.

    Raises:
        ValueError: weights for regression, an unknown label, a weight that
            is not positive, or `"balanced"` with a class that has no
            training examples.
    """
    if weights is None:
        return None
    where = "ClassificationConfig.class_weights"
    if problem_type == REGRESSION:
        raise ValueError(f"{where} weighs classes; a regression problem has none: drop it.")
    if isinstance(weights, str):
        if weights != BALANCED:
            raise ValueError(f"{where}={weights!r}; expected 'balanced' or a dict of label -> "
                             "weight.")
        return _balanced(problem_type, label_names, targets)
    unknown = sorted(set(map(str, weights)) - set(label_names))
    if unknown:
        raise ValueError(f"{where} names {unknown}, which are not labels; the labels are "
                         f"{list(label_names)}.")
    given = {str(name): float(value) for name, value in weights.items()}
    bad = {name: value for name, value in given.items() if not value > 0}
    if bad:
        raise ValueError(f"{where}: weights must be positive; got {bad}.")
    return [given.get(name, 1.0) for name in label_names]


def _balanced(problem_type: str, label_names: Sequence[str], targets: np.ndarray) -> list[float]:
    if problem_type == MULTI_LABEL:
        positives = targets.sum(axis=0)
        counts, numerators = positives, len(targets) - positives
    else:
        counts = np.bincount(targets, minlength=len(label_names))
        numerators = np.full(len(label_names), len(targets) / len(label_names))
    empty = [name for name, count in zip(label_names, counts) if count == 0]
    if empty:
        raise ValueError(f"ClassificationConfig.class_weights='balanced': label(s) {empty} have "
                         "no training examples to balance; give the weights as a dict instead.")
    return [float(n / c) for n, c in zip(numerators, counts)]


def _name(label: Any, source: str) -> str:
    if isinstance(label, bool) or not isinstance(label, (str, int, float, np.integer,
                                                          np.floating)):
        raise ValueError(f"{source}: the label {label!r:.60} is a {type(label).__name__}; "
                         "expected a name or an integer.")
    if isinstance(label, str):
        if not label.strip():
            raise ValueError(f"{source}: a label is empty.")
        return label
    return str(label)


def _number(label: Any) -> float | None:
    if isinstance(label, bool):
        return None
    if isinstance(label, str):
        try:
            label = float(label)
        except ValueError:
            return None
    if isinstance(label, (int, float, np.integer, np.floating)) and math.isfinite(float(label)):
        return float(label)
    return None


@dataclasses.dataclass(frozen=True)
class LabelSpace:
    """A problem type and its class names: what turns labels into targets.

    Args:
        problem_type: str. One of `PROBLEM_TYPES`.
        label_names: tuple of str. Classes in logit order (empty for regression).

    Example:

    >>> space = LabelSpace("single_label", ("billing", "bug"))
    >>> space.target("bug", "a.csv:3")
    1
    """

    problem_type: str
    label_names: tuple[str, ...]

    def target(self, label: Any, source: str, origin: str = "the training file"
               ) -> int | float | np.ndarray:
        """The training target of one label: a class id, a multi-hot row or a number.

        Args:
            label: the label as read.
            source: str. Its row, for the error.
            origin: str. Where the label names came from, for the error.

        Raises:
            ValueError: the label does not fit, or names a class the model does not have.
        """
        value = label_value(label, self.problem_type, source)
        if self.problem_type == REGRESSION:
            return value
        index = {name: i for i, name in enumerate(self.label_names)}
        unknown = [name for name in (value if isinstance(value, list) else [value])
                   if name not in index]
        if unknown:
            raise ValueError(f"{source}: label {unknown[0]!r} is not among the labels of "
                             f"{origin} {list(self.label_names)}.")
        if self.problem_type == SINGLE_LABEL:
            return index[value]
        row = np.zeros(len(self.label_names), np.float32)
        row[[index[name] for name in value]] = 1.0
        return row
