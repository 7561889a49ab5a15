"""Stopping a training run on Ctrl-C (SIGINT) or SIGTERM: a checkpoint, one line, exit 130 or 143.

A loop runs inside `StopSignals()`; the first SIGINT or SIGTERM only records
itself, the loop finishes the step it is in, saves a checkpoint and raises
`TrainingInterrupted`, whose message is the one line the binary prints and
whose `exit_code` is the shell's (128 + the signal). A second signal stops
at once, as without the handler. Python's default SIGINT raises
`KeyboardInterrupt` wherever the program is, and SIGTERM ends the process
without a word: either loses the steps since the last checkpoint.
"""

from __future__ import annotations

import signal
import threading

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class TrainingInterrupted(KeyboardInterrupt):
    """A run stopped by a signal, after saving what it had (a `KeyboardInterrupt`, as Ctrl-C is).

    Args:
        signal_number: int. The signal that stopped it.
        message: str. One line: where it stopped, what was saved, how to resume.

    Example:

    >>> try:
    ...     kbert.training.run_pretraining(...)
    ... except kbert.training.TrainingInterrupted as e:
    ...     print(e); sys.exit(e.exit_code)
    """

    def __init__(self, signal_number: int, message: str):
        super().__init__(message)
        self.signal_number = signal_number
        self.exit_code = 128 + signal_number


class StopSignals:
    """A context in which SIGINT and SIGTERM ask the loop to stop instead of stopping it.

    Handlers can only be set in the main thread; elsewhere the context does
    nothing and the signals keep their usual effect.

    Example:

    >>> with StopSignals() as stop:
    ...     while step < total:
    ...         step += train()
    ...         if stop.received is not None:
    ...             save(); raise TrainingInterrupted(stop.received, "...")
    """

    def __init__(self):
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for number in HANDLED_SIGNALS:
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc_info) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}

    @property
    def name(self) -> str:
        """The received signal's name (`SIGINT`), or "" before one."""
        return signal.Signals(self.received).name if self.received is not None else ""

    def _handle(self, number: int, frame) -> None:  # pylint: disable=unused-argument
        if self.received is None:
            self.received = number
            return
        # A second signal: what it does without this handler.
        self.__exit__()
        signal.raise_signal(number)
