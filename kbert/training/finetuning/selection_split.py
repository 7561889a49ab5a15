"""A selection split carved from the training data: the examples the kept model is chosen on.

With `selection_fraction`, `run_finetuning` and `run_distillation` hold out a
seeded share of the training examples and choose the kept step (and restart,
and grid point) on it instead of on dev; dev is then scored once, on the kept
model, so its figure is clean.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kbert.tasks import Task

# The share of the training examples held out to choose the kept model on when
# a run evaluates but its task has no dev split (`Task.has_split`: a user's
# files without `--validation_file`) and `selection_fraction` is unset.
DEFAULT_SELECTION_FRACTION = 0.1


def check_selection_fraction(function: str, fraction: float, do_train: bool) -> None:
    """Refuses a `selection_fraction` outside [0, 1), or one without training to carve from.

    Args:
        function: str. The gin configurable named in the message (`run_finetuning`).
        fraction: float. The bound value.
        do_train: bool. Whether the run trains.

    Raises:
        ValueError: naming the binding and the fix.

    Example:

    >>> check_selection_fraction("run_distillation", 0.1, do_train=True)
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"{function}.selection_fraction={fraction}; it must be in [0, 1) (0 "
                         "selects on the dev split).")
    if fraction and not do_train:
        raise ValueError(f"{function}.selection_fraction carves a selection split from the "
                         "training data: pass --do_train, or leave it 0.")


def carve_selection_split(task: Task, train_examples: list, fraction: float,
                          seed: int) -> tuple[list, list]:
    """Holds out a seeded `fraction` of the training examples to select the kept model on.

    Examples of one `task.selection_group` (SQuAD: a paragraph) go to the same
    side, so nothing is selected on whose text was trained on.

    Args:
        task: the `Task` (its training examples must be a list, and its
            `evaluate` must take the same kind of examples: all but
            retrieval and rerank, whose splits are query sets).
        train_examples: list. The training split as `task.read` gives it.
        fraction: float in (0, 1). The share held out.
        seed: int. The draw's seed (`run_finetuning.seed`).

    Returns:
        `(train, selection)`: the examples trained on and those held out, each
        in their original order.

    Raises:
        ValueError: the task's splits are not lists, or a side would be empty.

    Example:

    >>> train, selection = carve_selection_split(task, examples["train"], 0.1, 12345)
    """
    if not isinstance(train_examples, list):
        raise ValueError(f"run_finetuning.selection_fraction: --task={task.name}'s training data "
                         "is a query set, not a list of examples; select on dev (leave it 0).")
    groups: dict[Any, list[int]] = {}
    for index, example in enumerate(train_examples):
        group = task.selection_group(example)
        groups.setdefault(("example", index) if group is None else ("group", group),
                          []).append(index)
    keys = list(groups)
    order = np.random.default_rng(seed).permutation(len(keys))
    held_groups = max(1, round(fraction * len(keys)))
    held = sorted(i for k in order[:held_groups] for i in groups[keys[k]])
    if held_groups >= len(keys):
        raise ValueError(f"run_finetuning.selection_fraction={fraction} leaves no training "
                         f"examples out of {len(train_examples)}.")
    held_set = set(held)
    return ([e for i, e in enumerate(train_examples) if i not in held_set],
            [train_examples[i] for i in held])
