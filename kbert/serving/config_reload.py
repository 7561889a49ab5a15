"""Changing the served models without a restart: TF Serving's two ways.

`ModelService.HandleReloadConfigRequest` sends a whole new `ModelServerConfig`
(absolute `base_path`s, as TF Serving requires); `--model_config_file_poll_wait_seconds`
re-reads `--model_config_file` that often. Either way the new list replaces the
old one (`ModelManager.reconfigure`): new models load, removed ones unload,
changed policies and labels apply, unchanged models are not touched. A
config that is refused (a parse error, a label naming a version that is not
there) changes nothing and is reported: the reload request gets the error,
the poller logs it once per distinct error. As in TF Serving, a reload request's
config lasts until the file poller reads the file again, if it is on.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

import grpc
from tensorflow_serving.config import model_server_config_pb2

from kbert.serving.errors import ServingError
from kbert.serving.model_config import model_configs
from kbert.serving.model_config import read_model_config_file
from kbert.serving.model_manager import ModelManager

log = logging.getLogger("kbert.serving")


class ConfigReloader:
    """Applies new model configs to a `ModelManager`, from a request or from the config file.

    Args:
        manager: `ModelManager`.
        config_file: str or None. The `--model_config_file` to re-read.
        poll_wait_seconds: float. Seconds between reads of it
            (`--model_config_file_poll_wait_seconds`); 0 reads it only at start.
        on_change: callable or None. Called after each reload (the health
            checks follow what is served).

    Example:

    >>> reloader = ConfigReloader(manager, "models.config", poll_wait_seconds=30)
    >>> reloader.start()
    """

    def __init__(self, manager: ModelManager, config_file: str | None = None, poll_wait_seconds: float = 0.0,
                 on_change: Callable[[], None] | None = None):
        if poll_wait_seconds < 0:
            raise ValueError(f"--model_config_file_poll_wait_seconds={poll_wait_seconds}; it must be >= 0.")
        if poll_wait_seconds and not config_file:
            raise ValueError("--model_config_file_poll_wait_seconds re-reads --model_config_file; pass it too.")
        self.manager = manager
        self.config_file = config_file
        self.poll_wait_seconds = poll_wait_seconds
        self.on_change = on_change
        self._last_error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def reload(self, config: model_server_config_pb2.ModelServerConfig) -> None:
        """Serves the models of a `ReloadConfigRequest`'s config.

        Raises:
            ServingError: INVALID_ARGUMENT for a config that is not a valid model
                list, FAILED_PRECONDITION for one the manager refuses.
        """
        try:
            configs = model_configs(config, "the ReloadConfigRequest's config")
        except ValueError as e:
            raise ServingError(grpc.StatusCode.INVALID_ARGUMENT, str(e)) from None
        self._apply(configs)

    def reload_file(self) -> None:
        """Re-reads the config file and serves what it lists; logs (once) what stops it."""
        try:
            self._apply(read_model_config_file(self.config_file))
        except Exception as e:  # a bad file or file system must not stop the poller
            message = getattr(e, "message", None) or f"{type(e).__name__}: {e}"
            if message != self._last_error:
                log.error("kbert-serve: --model_config_file=%s not applied: %s", self.config_file, message)
            self._last_error = message
            return
        self._last_error = ""

    def _apply(self, configs) -> None:
        try:
            self.manager.reconfigure(configs)
        finally:
            if self.on_change is not None:
                self.on_change()

    def start(self) -> None:
        """Starts re-reading the config file in a background thread (if asked to)."""
        if self.poll_wait_seconds > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kbert-config-poller", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_wait_seconds):
            self.reload_file()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
