"""Keeps the right versions of every model loaded while the files change under it.

Like TF Serving's file-system source with the availability-preserving policy:
every `file_system_poll_wait_seconds` it lists each `base_path`, loads the
versions the policy asks for, and unloads others only once an asked-for version
is serving. A version that fails to load is recorded (state END with the
cause) and, as TF Serving does, tried again: at once when any file under its
directory changes (a copy that was still arriving, e.g. `saved_model.pb` before
`variables/`), and otherwise every `load_retry_interval_seconds`, up to
`max_num_load_retries` times; what served before keeps serving meanwhile.
Requests hold a reference to the `Servable` they started on, so a swap never
disturbs requests in flight: they finish on the old version.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time

import tensorflow as tf

from kbert.serving.errors import not_found
from kbert.serving.errors import op_error_cause
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


def _stamp(path: str) -> tuple:
    """Every file under a version directory with its size and modification time.

    Any change (a file arriving, growing or being rewritten) makes a failed
    version worth loading again.
    """
    found = []
    try:
        for directory, _, files in tf.io.gfile.walk(path):
            for name in files:
                file_path = os.path.join(directory, name)
                try:
                    stat = tf.io.gfile.stat(file_path)
                except tf.errors.OpError:  # removed while we looked: the next poll sees the change
                    continue
                found.append((os.path.relpath(file_path, path), stat.length, stat.mtime_nsec))
    except tf.errors.OpError:
        pass
    return tuple(sorted(found))


@dataclasses.dataclass
class _Failure:
    """The last failed load of one version."""

    stamp: tuple
    attempts: int  # loads tried in all
    timed_retries: int  # of them, retries on the timer since the files last changed
    retry_at: float  # time.monotonic() of the next retry on the timer


class ModelManager:
    """Loads, swaps and looks up servable versions.

    Args:
        configs: list of `ModelConfig`.
        poll_wait_seconds: float. Seconds between polls; 0 polls once at start
            (TF Serving's `--file_system_poll_wait_seconds`).
        max_num_load_retries: int. Retries of a failed version while its files
            stay the same (`--max_num_load_retries`). Defaults to 5.
        load_retry_interval_seconds: float. Seconds between those retries
            (`--load_retry_interval_micros` / 1e6). Defaults to 60. A change of
            any file under the version retries at the next poll regardless.
        use_onnxruntime: bool. Run a version's ONNX Runtime int8 model where it
            has one (`--onnxruntime`; `Servable`). Defaults to True.
        onnxruntime_threads: int. Threads one ONNX Runtime call may use
            (`--onnxruntime_intra_op_parallelism`); 0: ONNX Runtime's choice.

    Example:

    >>> manager = ModelManager([ModelConfig("sst2", "export/sst2")], poll_wait_seconds=1)
    >>> manager.poll()
    >>> manager.start()
    >>> servable = manager.get("sst2")
    """

    def __init__(self, configs: list[ModelConfig], poll_wait_seconds: float = 1.0,
                 max_num_load_retries: int = 5, load_retry_interval_seconds: float = 60.0,
                 use_onnxruntime: bool = True, onnxruntime_threads: int = 0):
        self.configs = {config.name: config for config in configs}
        self.use_onnxruntime = use_onnxruntime
        self.onnxruntime_threads = onnxruntime_threads
        self.poll_wait_seconds = poll_wait_seconds
        self.max_num_load_retries = max_num_load_retries
        self.load_retry_interval_seconds = load_retry_interval_seconds
        self._lock = threading.Lock()
        self._loaded: dict[str, dict[int, Servable]] = {name: {} for name in self.configs}
        self._status: dict[str, dict[int, VersionStatus]] = {name: {} for name in self.configs}
        self._failed: dict[tuple[str, int], _Failure] = {}
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
            if version not in self._loaded[config.name]:
                self._load(config, version, on_disk[version])
        with self._lock:
            loaded = self._loaded[config.name]
            serving_aspired = [v for v in loaded if v in aspired]
            for version in list(loaded):
                # Availability first: drop a version only when an aspired one serves.
                if version not in aspired and (serving_aspired or version not in on_disk):
                    del loaded[version]
                    self._status[config.name][version] = VersionStatus(version, "END")
                    log.info("kbert-serve: unloaded %s version %d", config.name, version)

    def _load(self, config: ModelConfig, version: int, path: str) -> None:
        """Loads one version unless it failed before and neither its files nor the retry timer say go."""
        key = (config.name, version)
        stamp = _stamp(path)
        failure = self._failed.get(key)
        attempt, timed_retries = (failure.attempts + 1 if failure else 1), 0
        if failure is not None and stamp == failure.stamp:
            if failure.timed_retries >= self.max_num_load_retries or time.monotonic() < failure.retry_at:
                return
            timed_retries = failure.timed_retries + 1
        self._set_status(config.name, version, "LOADING")
        try:
            servable = Servable(config.name, version, path, self.use_onnxruntime,
                                self.onnxruntime_threads)
        except Exception as e:
            cause = op_error_cause(str(e), max_lines=1) if str(e) else ""
            message = f"{type(e).__name__}: {cause}"
            self._failed[key] = _Failure(stamp, attempt, timed_retries,
                                         time.monotonic() + self.load_retry_interval_seconds)
            if timed_retries < self.max_num_load_retries:
                retry = (f"retrying in {self.load_retry_interval_seconds:g} s (--load_retry_interval_micros) "
                         "or as soon as a file under it changes")
            else:
                retry = (f"no more timed retries (--max_num_load_retries={self.max_num_load_retries}); "
                         "retrying when a file under it changes")
            self._set_status(config.name, version, "END", "UNKNOWN",
                             f"Loading {path} failed (attempt {attempt}; {retry}): {message}")
            log.error("kbert-serve: refused %s version %d (%s), attempt %d: %s; still serving %s",
                      config.name, version, path, attempt, message, sorted(self._loaded[config.name]) or "nothing")
            return
        with self._lock:
            self._loaded[config.name][version] = servable
            self._status[config.name][version] = VersionStatus(version, "AVAILABLE")
        self._failed.pop(key, None)
        runtimes = (f"; ONNX Runtime int8 runs {', '.join(sorted(servable.runtimes))}"
                    if servable.runtimes else "")
        log.info("kbert-serve: loaded %s version %d from %s%s%s", config.name, version, path,
                 f" (attempt {attempt})" if attempt > 1 else "", runtimes)

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
