"""Keeps the right versions of every model loaded while the files change under it.

Like TF Serving's file-system source with the availability-preserving policy:
every `file_system_poll_wait_seconds` it lists each `base_path`, loads the
versions the policy asks for, and unloads others only once an asked-for version
is serving. A version that fails to load is recorded (state END with its error)
and not retried until its `saved_model.pb` changes; what served before keeps
serving. Requests hold a reference to the `Servable` they started on, so a
swap never disturbs requests in flight: they finish on the old version.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading

import tensorflow as tf

from kbert.serving.errors import not_found
from kbert.serving.model_config import ModelConfig
from kbert.serving.servable import Servable

log = logging.getLogger("kbert.serving")


@dataclasses.dataclass
class VersionStatus:
    """A version's state as `GetModelStatus` reports it."""

    version: int
    state: str  # AVAILABLE, LOADING, UNLOADING or END
    error_code: str = "OK"
    error_message: str = ""


def _version_dirs(base_path: str) -> dict[int, str]:
    if not tf.io.gfile.isdir(base_path):
        return {}
    found = {}
    for name in tf.io.gfile.listdir(base_path):
        name = name.rstrip("/")
        if name.isdigit():
            found[int(name)] = os.path.join(base_path, name)
    return found


def _stamp(path: str):
    try:
        stat = tf.io.gfile.stat(os.path.join(path, "saved_model.pb"))
        return stat.mtime_nsec, stat.length
    except tf.errors.OpError:
        return None


class ModelManager:
    """Loads, swaps and looks up servable versions.

    Args:
        configs: list of `ModelConfig`.
        poll_wait_seconds: float. Seconds between polls; 0 polls once at start
            (TF Serving's `--file_system_poll_wait_seconds`).

    Example:

    >>> manager = ModelManager([ModelConfig("sst2", "export/sst2")], poll_wait_seconds=1)
    >>> manager.poll()
    >>> manager.start()
    >>> servable = manager.get("sst2")
    """

    def __init__(self, configs: list[ModelConfig], poll_wait_seconds: float = 1.0):
        self.configs = {config.name: config for config in configs}
        self.poll_wait_seconds = poll_wait_seconds
        self._lock = threading.Lock()
        self._loaded: dict[str, dict[int, Servable]] = {name: {} for name in self.configs}
        self._status: dict[str, dict[int, VersionStatus]] = {name: {} for name in self.configs}
        self._failed: dict[tuple[str, int], object] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> None:
        """Brings every model in line with what is on disk (one pass)."""
        for config in self.configs.values():
            try:
                self._poll_model(config)
            except Exception as e:  # a broken file system must not stop the poller
                log.error("kbert-serve: polling %s failed: %s", config.base_path, e)

    def _set_status(self, name, version, state, code="OK", message=""):
        with self._lock:
            self._status[name][version] = VersionStatus(version, state, code, message)

    def _poll_model(self, config: ModelConfig) -> None:
        on_disk = _version_dirs(config.base_path)
        aspired = config.aspired(list(on_disk))
        for version in aspired:
            if version in self._loaded[config.name]:
                continue
            path = on_disk[version]
            stamp = _stamp(path)
            if (config.name, version) in self._failed and self._failed[(config.name, version)] == stamp:
                continue
            self._set_status(config.name, version, "LOADING")
            try:
                servable = Servable(config.name, version, path)
            except Exception as e:
                message = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                self._failed[(config.name, version)] = stamp
                self._set_status(config.name, version, "END", "UNKNOWN",
                                 f"Loading {path} failed: {message}")
                log.error("kbert-serve: refused %s version %d (%s): %s; still serving %s",
                          config.name, version, path, message,
                          sorted(self._loaded[config.name]) or "nothing")
                continue
            with self._lock:
                self._loaded[config.name][version] = servable
                self._status[config.name][version] = VersionStatus(version, "AVAILABLE")
            self._failed.pop((config.name, version), None)
            log.info("kbert-serve: loaded %s version %d from %s", config.name, version, path)
        with self._lock:
            loaded = self._loaded[config.name]
            serving_aspired = [v for v in loaded if v in aspired]
            for version in list(loaded):
                # Availability first: drop a version only when an aspired one serves.
                if version not in aspired and (serving_aspired or version not in on_disk):
                    del loaded[version]
                    self._status[config.name][version] = VersionStatus(version, "END")
                    log.info("kbert-serve: unloaded %s version %d", config.name, version)

    def start(self) -> None:
        """Starts polling in a background thread (if `poll_wait_seconds > 0`)."""
        if self.poll_wait_seconds > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kbert-model-poller", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_wait_seconds):
            self.poll()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def get(self, name: str, version: int | None = None, label: str | None = None) -> Servable:
        """Returns the servable for a request.

        Args:
            name: str. Model name.
            version: int or None. A specific version; None means the latest loaded.
            label: str or None. A version label from the model config.

        Raises:
            ServingError: NOT_FOUND for an unknown model, version or label.
        """
        if name not in self.configs:
            raise not_found(f"Servable not found for request: Latest({name}); this server serves "
                            f"{', '.join(sorted(self.configs))}.")
        if label:
            if label not in self.configs[name].version_labels:
                raise not_found(f"Unrecognized servable version label: {label} for model {name}.")
            version = self.configs[name].version_labels[label]
        with self._lock:
            loaded = self._loaded[name]
            if version is None:
                if not loaded:
                    raise not_found(f"Servable not found for request: Latest({name}); no version of it "
                                    f"is loaded (is {self.configs[name].base_path} empty?).")
                return loaded[max(loaded)]
            if version not in loaded:
                raise not_found(f"Servable not found for request: Specific({name}, {version}); loaded "
                                f"versions: {sorted(loaded) or 'none'}.")
            return loaded[version]

    def status(self, name: str, version: int | None = None) -> list[VersionStatus]:
        """The `GetModelStatus` answer: every version known, or one.

        Raises:
            ServingError: NOT_FOUND for an unknown model or version.
        """
        if name not in self.configs:
            raise not_found(f"Could not find any versions of model {name}.")
        with self._lock:
            known = dict(self._status[name])
        if version is not None:
            if version not in known:
                raise not_found(f"Could not find version {version} of model {name}.")
            return [known[version]]
        if not known:
            raise not_found(f"Could not find any versions of model {name}.")
        return [known[v] for v in sorted(known, reverse=True)]

    def loaded_versions(self, name: str) -> list[int]:
        with self._lock:
            return sorted(self._loaded.get(name, {}))
