"""A small grid search over fine-tuning's learning rate, batch size and epochs, in a time budget.

The BERT paper (Devlin et al., 2019, Appendix A.3) fine-tunes with batch
sizes 16 and 32, learning rates 5e-5, 4e-5, 3e-5, 2e-5 and 2, 3 or 4 epochs,
and keeps the best on dev; google-research/bert's README does the same for its
24 small BERTs with rates 3e-4, 1e-4, 5e-5, 3e-5. `search` runs such a grid
with any `train` function (`run_finetuning` passes its own), stops starting
new trials when the next one would overrun the budget, and returns a table
and the best trial. `gin_file_text` writes a configuration as gin bindings that
`kbert-finetune --gin_file=...` reads back.

Reference: Devlin et al., 2019. "BERT: Pre-training of Deep Bidirectional
Transformers for Language Understanding", Appendix A.3.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from typing import Any, Callable, Mapping, Sequence

logger = logging.getLogger(__name__)

# google-research/bert README ("BERT Miniatures"): the grid of the 24 small BERTs.
SMALL_ENCODER_RATES = (3e-4, 1e-4, 5e-5, 3e-5)
# The BERT paper's grid, for BERT-base and larger.
BERT_BASE_RATES = (5e-5, 4e-5, 3e-5, 2e-5)
BERT_BASE_HIDDEN_DIM = 768


@dataclasses.dataclass(frozen=True)
class HparamGrid:
    """The grid of a search: every combination is one trial, learning rates varied first.

    Args:
        learning_rates: tuple of float or None. None: `SMALL_ENCODER_RATES`
            for encoders narrower than BERT-base, else `BERT_BASE_RATES`.
        train_batch_sizes: tuple of int. Defaults to the paper's (16, 32).
        num_train_epochs: tuple of float. Defaults to the paper's (2, 3, 4).
        time_budget_minutes: float. No trial starts that would end past this
            (estimated from the trials run so far); the first always runs.
            Defaults to 60.

    Example:

    >>> HparamGrid(learning_rates=(1e-4, 5e-5), train_batch_sizes=(32,), num_train_epochs=(3,))
    """

    learning_rates: tuple[float, ...] | None = None
    train_batch_sizes: tuple[int, ...] = (16, 32)
    num_train_epochs: tuple[float, ...] = (2.0, 3.0, 4.0)
    time_budget_minutes: float = 60.0

    def check(self) -> None:
        """Raises a clear error naming the flag for an empty or invalid list."""
        for flag, values, low in (("--search_learning_rates", self.learning_rates, 0),
                                  ("--search_batch_sizes", self.train_batch_sizes, 0),
                                  ("--search_epochs", self.num_train_epochs, 0)):
            if values is not None and (not values or any(v <= low for v in values)):
                raise ValueError(f"{flag}={','.join(map(str, values))}; give one or more "
                                 "values > 0, separated by commas.")
        if not self.time_budget_minutes > 0:
            raise ValueError(f"--search_time_budget_minutes={self.time_budget_minutes}; it must "
                             "be > 0.")

    def points(self, hidden_dim: int) -> list["Point"]:
        """The trials in the order they run: for each epochs, batch size: every rate.

        Args:
            hidden_dim: int. The encoder's width; picks the default rates.

        Returns:
            list of `Point`.
        """
        rates = self.learning_rates or (
            SMALL_ENCODER_RATES if hidden_dim < BERT_BASE_HIDDEN_DIM else BERT_BASE_RATES)
        return [Point(float(rate), int(batch), float(epochs)) for epochs, batch, rate
                in itertools.product(self.num_train_epochs, self.train_batch_sizes, rates)]


@dataclasses.dataclass(frozen=True)
class Point:
    """One configuration of the grid."""

    learning_rate: float
    train_batch_size: int
    num_train_epochs: float


@dataclasses.dataclass
class Outcome:
    """What `train` reports of one trial: the dev value, the best step, and what it trained.

    Args:
        value: float. The main dev metric of the kept model.
        best_step: int. The step of the kept model.
        payload: anything the caller keeps for the best trial (the model).
    """

    value: float
    best_step: int
    payload: Any = None


@dataclasses.dataclass
class Trial:
    """One row of the search table; `value` is None for a trial the budget skipped."""

    point: Point
    value: float | None = None
    best_step: int | None = None
    minutes: float | None = None

    def as_dict(self, metric: str) -> dict[str, Any]:
        row = dataclasses.asdict(self.point)
        row.update({metric: self.value, "best_step": self.best_step, "minutes": self.minutes,
                    "status": "skipped (time budget)" if self.value is None else "done"})
        return row


def search(points: Sequence[Point], train: Callable[[Point], Outcome],
           time_budget_minutes: float,
           clock: Callable[[], float] = time.monotonic) -> tuple[Outcome, list[Trial]]:
    """Runs `train` on each point while the budget allows; keeps the best (first maximum).

    The time of a trial is estimated as its epochs times the mean time per
    epoch of the trials run so far.

    Args:
        points: sequence of `Point`, in the order to run.
        train: callable. `train(point) -> Outcome`.
        time_budget_minutes: float.
        clock: callable giving seconds. Defaults to `time.monotonic`.

    Returns:
        `(best outcome, trials)`; `trials` lists every point, the skipped ones
        with `value=None`.

    Example:

    >>> best, trials = search(HparamGrid().points(384), train, time_budget_minutes=30)
    """
    start = clock()
    trials = [Trial(point) for point in points]
    best: tuple[Outcome, Trial] | None = None
    seconds_per_epoch: list[float] = []
    for trial in trials:
        elapsed = clock() - start
        if seconds_per_epoch:
            per_epoch = sum(seconds_per_epoch) / len(seconds_per_epoch)
            estimate = trial.point.num_train_epochs * per_epoch
            if elapsed + estimate > 60 * time_budget_minutes:
                logger.info("search: skipping %s (about %.1f min; %.1f of %.1f min left).",
                            trial.point, estimate / 60, time_budget_minutes - elapsed / 60,
                            time_budget_minutes)
                continue
        began = clock()
        outcome = train(trial.point)
        seconds = clock() - began
        seconds_per_epoch.append(seconds / trial.point.num_train_epochs)
        trial.value, trial.best_step = outcome.value, outcome.best_step
        trial.minutes = round(seconds / 60, 2)
        logger.info("search: %s -> %.4f at step %d (%.1f min)", trial.point, outcome.value,
                    outcome.best_step, seconds / 60)
        if best is None or outcome.value > best[0].value:
            best = (outcome, trial)
        else:
            outcome.payload = None  # let the model go
    return best[0], trials


def format_table(rows: Sequence[Mapping[str, Any]], metric: str) -> str:
    """The search table as aligned text, the best row marked with `*`.

    Args:
        rows: sequence of `Trial.as_dict(metric)` dicts (as `eval_results.json`
            records them under `hparam_search`).
        metric: str. The main metric's name, a column title.

    Returns:
        str, one line per trial after a header.
    """
    done = [row for row in rows if row[metric] is not None]
    best = max(done, key=lambda row: row[metric]) if done else None
    lines = [f"  {'learning_rate':>13} {'batch':>5} {'epochs':>6} {metric:>12} {'best_step':>9} "
             f"{'minutes':>7}"]
    for row in rows:
        value = "skipped" if row[metric] is None else f"{row[metric]:.4f}"
        step = "-" if row["best_step"] is None else str(row["best_step"])
        minutes = "-" if row["minutes"] is None else f"{row['minutes']:.1f}"
        lines.append(f"{'*' if row is best else ' '} {row['learning_rate']:>13g} "
                     f"{row['train_batch_size']:>5d} {row['num_train_epochs']:>6g} {value:>12} "
                     f"{step:>9} {minutes:>7}")
    return "\n".join(lines)


class GinReference(str):
    """A gin reference such as `@PackingConfig()`, written into a gin file as is.

    Example:

    >>> print(gin_file_text({"run_finetuning.packing": GinReference("@PackingConfig()")}, ""))
    run_finetuning.packing = @PackingConfig()
    """

    def __repr__(self) -> str:
        return str(self)


def gin_file_text(bindings: Mapping[str, Any], header: str) -> str:
    """Gin bindings of Python literals, one a line, after a comment header.

    Args:
        bindings: mapping. Binding name (`run_finetuning.learning_rate`) -> value
            (a number, str, bool or None: gin reads Python literals; a
            `GinReference` is written as is).
        header: str. Comment lines (without `#`) put on top.

    Returns:
        str: the file's text.

    Example:

    >>> print(gin_file_text({"run_finetuning.learning_rate": 1e-4}, "best of the grid"))
    # best of the grid
    run_finetuning.learning_rate = 0.0001
    """
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    lines += [f"{name} = {value!r}" for name, value in bindings.items()]
    return "\n".join(lines) + "\n"
