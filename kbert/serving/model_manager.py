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

The set of models can change while serving (`reconfigure`: TF Serving's
`HandleReloadConfigRequest` and `--model_config_file_poll_wait_seconds`): new
models load, removed ones unload, changed policies apply, and models whose
config is unchanged are not touched, so their requests never notice. Version
labels must name a version that is available, as TF Serving requires, unless
`allow_unavailable_labels` (`--allow_version_labels_for_unavailable_models`).
With `warmup_iterations`, a version replays its export's warm-up requests
(`kbert.serving.warmup`) before it is marked available.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from typing import Callable

import grpc
import tensorflow as tf

from kbert.serving.errors import ServingError
from kbert.serving.errors import not_found
from kbert.serving.errors import op_error_cause
from kbert.serving.model_config import ModelConfig
from kbert.serving.servable import Servable
from kbert.serving.warmup import replay_warmup

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
        warmup_iterations: int. Times each of a version's warm-up requests
            (`assets.extra/tf_serving_warmup_requests`) is replayed before it
            is marked available (`--enable_model_warmup`,
            `--num_request_iterations_for_warmup`); 0 replays none. Defaults to 0.
        allow_unavailable_labels: bool. Let a version label name a version that
            is not available (`--allow_version_labels_for_unavailable_models`;
            as in TF Serving, a label that already names another version still
            cannot move to one). Defaults to False.

    Example:

    >>> manager = ModelManager([ModelConfig("sst2", "export/sst2")], poll_wait_seconds=1)
    >>> manager.poll()
    >>> manager.start()
    >>> servable = manager.get("sst2")
    """

    def __init__(self, configs: list[ModelConfig], poll_wait_seconds: float = 1.0,
                 max_num_load_retries: int = 5, load_retry_interval_seconds: float = 60.0,
                 use_onnxruntime: bool = True, onnxruntime_threads: int = 0,
                 warmup_iterations: int = 0, allow_unavailable_labels: bool = False):
        # Replaced whole (never changed in place) by `reconfigure`, so readers see one or the other.
        self.configs = {config.name: config for config in configs}
        self.warmup_iterations = warmup_iterations
        self.allow_unavailable_labels = allow_unavailable_labels
        self.use_onnxruntime = use_onnxruntime
        self.onnxruntime_threads = onnxruntime_threads
        self.poll_wait_seconds = poll_wait_seconds
        self.max_num_load_retries = max_num_load_retries
        self.load_retry_interval_seconds = load_retry_interval_seconds
        self._lock = threading.Lock()
        self._loaded: dict[str, dict[int, Servable]] = {name: {} for name in self.configs}
        self._status: dict[str, dict[int, VersionStatus]] = {name: {} for name in self.configs}
        self._failed: dict[tuple[str, int], _Failure] = {}
        # Called after each timed poll (the server's gRPC health follows what is loaded).
        self.after_poll: Callable[[], None] | None = None
        # One poll or reconfiguration at a time (loads run under it; requests never take it).
        self._config_lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> None:
        """Brings every model in line with what is on disk (one pass)."""
        with self._config_lock:
            for config in self.configs.values():
                self._poll_quietly(config)

    def _poll_quietly(self, config: ModelConfig) -> None:
        try:
            self._poll_model(config)
        except Exception as e:  # a broken file system must not stop the poller
            log.error("kbert-serve: polling %s failed: %s", config.base_path, e)

    def reconfigure(self, configs: list[ModelConfig]) -> None:
        """Serves `configs` from now on: TF Serving's `ReloadConfig`.

        New models are loaded, removed ones unloaded, changed ones (policy,
        labels, base path) brought in line, each as the poller does (the old
        versions serve until the new ones do); models whose config is the same
        are not touched. Labels are checked first against what is on disk
        (nothing changes if one names a version that is not there), then against
        what loaded.

        Args:
            configs: list of `ModelConfig`, the whole new set.

        Raises:
            ServingError: FAILED_PRECONDITION naming the label or model at fault:
                before any change, a label naming a version not on disk; after
                the change, a new model with no loadable version or a label
                naming a version that did not load.

        Example:

        >>> manager.reconfigure(read_model_config_file("models.config"))
        """
        with self._config_lock:
            old = self.configs
            new = {config.name: config for config in configs}
            if list(old.values()) == configs:
                return
            problems = label_problems(configs, old, self._servable_versions(configs),
                                      self.allow_unavailable_labels,
                                      "on disk under its version policy")
            if problems:
                raise ServingError(grpc.StatusCode.FAILED_PRECONDITION, " ".join(problems))
            with self._lock:
                for name in new:
                    self._loaded.setdefault(name, {})
                    self._status.setdefault(name, {})
            self.configs = new
            for name in sorted(set(old) - set(new)):
                self._remove(name)
            changed = [config for config in configs if old.get(config.name) != config]
            for config in changed:
                self._poll_quietly(config)
            log.info("kbert-serve: model config reloaded: %s", ", ".join(
                f"{config.name} ({'new' if config.name not in old else 'changed'})" for config in changed)
                or "models removed only")
            problems = [f"Model {config.name} has no loadable version under {config.base_path}."
                        for config in changed if not self.loaded_versions(config.name)]
            problems += self.label_problems(old)
            if problems:
                raise ServingError(grpc.StatusCode.FAILED_PRECONDITION, " ".join(problems))

    def _remove(self, name: str) -> None:
        """Unloads a model that left the config (requests in flight finish on their servable)."""
        with self._lock:
            unloaded = sorted(self._loaded.pop(name, {}))
            self._status.pop(name, None)
        self._failed = {key: value for key, value in self._failed.items() if key[0] != name}
        log.info("kbert-serve: removed model %s (unloaded versions %s)", name, unloaded or "none")

    def _servable_versions(self, configs: list[ModelConfig]) -> dict[str, set[int]]:
        """Per model, the versions that are loaded or that its policy would load from disk."""
        found = {}
        for config in configs:
            on_disk = list(_version_dirs(config.base_path))
            found[config.name] = set(config.aspired(on_disk)) | set(self.loaded_versions(config.name))
        return found

    def label_problems(self, previous: dict[str, ModelConfig] | None = None) -> list[str]:
        """What is wrong with the version labels now: each names a version that is loaded.

        Args:
            previous: dict of name -> `ModelConfig` before a reload, or None
                (at start): a label that named another version there cannot
                move to an unavailable one even when those are allowed.

        Returns:
            list of str, one sentence per label at fault (empty when all are fine).
        """
        configs = list(self.configs.values())
        available = {config.name: set(self.loaded_versions(config.name)) for config in configs}
        return label_problems(configs, previous or {}, available, self.allow_unavailable_labels,
                              "available")

    def unavailable_models(self) -> list[str]:
        """The configured models with no version loaded (the health checks' answer)."""
        return [name for name in self.configs if not self.loaded_versions(name)]

    def _set_status(self, name, version, state, code="OK", message=""):
        with self._lock:
            self._status[name][version] = VersionStatus(version, state, code, message)

    def _poll_model(self, config: ModelConfig) -> None:
        on_disk = _version_dirs(config.base_path)
        aspired = config.aspired(list(on_disk))
        for version in aspired:
            servable = self._loaded[config.name].get(version)
            # A version of another base path (the config changed it) is replaced by this one.
            if servable is None or servable.path != on_disk[version]:
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
            warmed = replay_warmup(servable, self.warmup_iterations)
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
        warmup = f"; replayed {warmed} warm-up requests" if warmed else ""
        log.info("kbert-serve: loaded %s version %d from %s%s%s%s", config.name, version, path,
                 f" (attempt {attempt})" if attempt > 1 else "", runtimes, warmup)

    def start(self) -> None:
        """Starts polling in a background thread (if `poll_wait_seconds > 0`)."""
        if self.poll_wait_seconds > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kbert-model-poller", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_wait_seconds):
            self.poll()
            if self.after_poll is not None:
                self.after_poll()

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
        configs = self.configs  # one snapshot: a reload replaces the dict whole
        if name not in configs:
            raise not_found(f"Servable not found for request: Latest({name}); this server serves "
                            f"{', '.join(sorted(configs))}.")
        if label:
            if label not in configs[name].version_labels:
                raise not_found(f"Unrecognized servable version label: {label} for model {name}.")
            version = configs[name].version_labels[label]
        with self._lock:
            loaded = self._loaded.get(name, {})
            if version is None:
                if not loaded:
                    raise not_found(f"Servable not found for request: Latest({name}); no version of it "
                                    f"is loaded (is {configs[name].base_path} empty?).")
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
            known = dict(self._status.get(name, {}))
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


def label_problems(configs: list[ModelConfig], previous: dict[str, ModelConfig],
                   available: dict[str, set[int]], allow_unavailable: bool, where: str) -> list[str]:
    """TF Serving's rule for version labels: each names an available version.

    With `allow_unavailable` (`--allow_version_labels_for_unavailable_models`)
    a label may name any version, except one that already named another
    version (in `previous`): a label in use moves only to an available version.

    Args:
        configs: the models to check.
        previous: dict of name -> `ModelConfig` before (a reload), or {}.
        available: dict of name -> versions a label may name.
        allow_unavailable: bool.
        where: str. How the message calls those versions ("on disk", "available").

    Returns:
        list of str, one sentence per label at fault.

    Example:

    >>> label_problems([ModelConfig("ner", "/m/ner", version_labels={"stable": 3})], {},
    ...                {"ner": {1, 2}}, False, "available")
    ["Version label 'stable' of model ner names version 3, which is not available (those are: [1, 2]); ..."]
    """
    problems = []
    for config in configs:
        before = previous.get(config.name)
        for label, version in sorted(config.version_labels.items()):
            if version in available.get(config.name, set()):
                continue
            moved = before is not None and before.version_labels.get(label, version) != version
            if allow_unavailable and not moved:
                continue
            fix = ("a label in use moves only to an available version, even with "
                   "--allow_version_labels_for_unavailable_models" if moved else
                   "export that version, point the label at one of those, or pass "
                   "--allow_version_labels_for_unavailable_models")
            problems.append(f"Version label {label!r} of model {config.name} names version {version}, which is "
                            f"not {where} (those are: {sorted(available.get(config.name, ())) or 'none'}); {fix}.")
    return problems
