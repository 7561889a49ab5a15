"""Start `kbert-serve` in a subprocess and wait until it serves: the one way tests, benchmarks and the demo do it.

`start_server` picks free loopback ports (unless given), starts the binary
with its stderr in a log file, reads its stdout on a thread until the ready
line (`kbert-serve: serving ...`) and returns a `ServerProcess`. Every wait
is bounded: no ready line within `timeout_s`, or an exit before it, stops the
process and raises `ServerStartError` with the end of the server's log.

This module imports nothing but the standard library (not even the rest of
`kbert.serving`), so a driver such as `tools/demo.py` can use it without
loading TensorFlow.
"""

from __future__ import annotations

import collections
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable
from typing import Mapping
from typing import Sequence

READY_PREFIX = "kbert-serve: serving"
# The binary as a module of this interpreter; callers may pass a console script instead.
SERVE_COMMAND = (sys.executable, "-m", "kbert.bin.serve")
LOG_TAIL_CHARS = 3000


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick for port 0).

    Returns:
        The port number. Another process may take it before it is used; tests
        and benchmarks accept that small race.
    """
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(args: Sequence[str], grpc_port: int, rest_port: int,
                   command: Sequence[str] | None = None) -> list[str]:
    """The command line `start_server` runs: the binary, the two ports, then `args`.

    Args:
        args: list of str. Further `kbert-serve` flags (models, limits, ...).
        grpc_port: int. `--port`.
        rest_port: int. `--rest_api_port` (0 turns REST off).
        command: list of str or None. The binary; None runs
            `python -m kbert.bin.serve` with this interpreter.

    Returns:
        The argument list.
    """
    return [*(command or SERVE_COMMAND), f"--port={grpc_port}", f"--rest_api_port={rest_port}", *args]


class ServerStartError(RuntimeError):
    """`kbert-serve` exited, or did not print its ready line in time.

    Attributes:
        returncode: int or None. The exit status; None when it timed out (the
            process was then stopped).
        log_path: str. The server's log (its stderr).
        tail: str. The end of that log, then any stdout lines it printed.
    """

    def __init__(self, message: str, returncode: int | None, log_path: str, tail: str):
        super().__init__(message)
        self.returncode = returncode
        self.log_path = log_path
        self.tail = tail


class _StdoutReader(threading.Thread):
    """Reads the server's stdout to its end, so the pipe never fills and blocks the server."""

    def __init__(self, stream):
        super().__init__(name="kbert-serve-stdout", daemon=True)
        self.stream = stream
        self.ready_line = ""
        self.before = collections.deque(maxlen=100)  # lines before the ready line
        self.after = collections.deque(maxlen=1000)  # lines after it
        self.settled = threading.Event()  # the ready line came, or the output ended

    def run(self) -> None:
        try:
            for line in self.stream:
                if self.ready_line:
                    self.after.append(line)
                elif line.startswith(READY_PREFIX):
                    self.ready_line = line.strip()
                    self.settled.set()
                else:
                    self.before.append(line)
        finally:
            self.settled.set()


class ServerProcess:
    """A running `kbert-serve` started by `start_server`; stop it with `stop()` or `with`.

    Attributes:
        process: `subprocess.Popen`. The server process.
        grpc_port: int. Its gRPC port (`--port`).
        rest_port: int. Its REST port (`--rest_api_port`; 0 when REST is off).
        log_path: str. The file its stderr goes to (kept after `stop()`).
        ready_line: str. Its ready line, `kbert-serve: serving <models> on ...`.
    """

    def __init__(self, process: subprocess.Popen, grpc_port: int, rest_port: int, log_path: str,
                 reader: _StdoutReader):
        self.process = process
        self.grpc_port = grpc_port
        self.rest_port = rest_port
        self.log_path = log_path
        self._reader = reader

    @property
    def ready_line(self) -> str:
        return self._reader.ready_line

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def stdout_tail(self) -> str:
        """What the server printed after its ready line (complete once `stop()` returned)."""
        return "".join(self._reader.after)

    def log_text(self) -> str:
        """The whole log (the server's stderr) so far."""
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def log_tail(self, max_chars: int = LOG_TAIL_CHARS) -> str:
        """The last `max_chars` characters of the log, then any stdout lines from before the ready line."""
        tail = self.log_text()[-max_chars:]
        printed = "".join(self._reader.before)
        return tail + (f"\n(stdout)\n{printed}" if printed else "")

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM, as an operator would; SIGKILL if it has not exited in `timeout_s`.

        Args:
            timeout_s: float. Seconds to wait for each of the exit and the end
                of its output. Defaults to 30.

        Returns:
            The exit status (negative: the signal that ended it).
        """
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=timeout_s)
        self._reader.join(timeout=timeout_s)  # the rest of stdout, up to its end
        return self.process.returncode

    def __enter__(self) -> "ServerProcess":
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


def start_server(
    args: Sequence[str],
    timeout_s: float = 120.0,
    *,
    command: Sequence[str] | None = None,
    grpc_port: int | None = None,
    rest_port: int | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    log_path: str | None = None,
    preexec_fn: Callable[[], None] | None = None,
) -> ServerProcess:
    """Starts `kbert-serve` and returns once it prints its ready line.

    Args:
        args: list of str. `kbert-serve` flags other than the two ports
            (`--model_name=sst2`, `--model_base_path=...`, `--index_dir=...`).
        timeout_s: float. Seconds to wait for the ready line. Defaults to 120.
        command: list of str or None. The binary (e.g. the `kbert-serve`
            console script); None runs `python -m kbert.bin.serve` with this
            interpreter.
        grpc_port: int or None. `--port`; None picks a free one (`free_port`).
        rest_port: int or None. `--rest_api_port`; None picks a free one; 0
            turns REST off.
        env: dict or None. Variables set on top of this process's environment
            (`PYTHONPATH`, `TF_CPP_MIN_LOG_LEVEL`).
        cwd: str or None. The server's working directory.
        log_path: str or None. Where its stderr goes; None makes a
            `kbert-serve-*.log` in the temporary directory. Kept afterwards.
        preexec_fn: callable or None. Run in the child before the binary
            (e.g. an address-space limit with `resource.setrlimit`).

    Returns:
        The running `ServerProcess`.

    Raises:
        ServerStartError: it exited before the ready line, or none came in
            `timeout_s` (it is then stopped); the message ends with the end of
            its log.

    Example:

    >>> with start_server(["--model_name=sst2", "--model_base_path=export/sst2"]) as server:
    ...     urllib.request.urlopen(f"{server.rest_url}/v1/models/sst2", timeout=10)
    """
    grpc_port = free_port() if grpc_port is None else grpc_port
    rest_port = free_port() if rest_port is None else rest_port
    if log_path is None:
        handle, log_path = tempfile.mkstemp(prefix="kbert-serve-", suffix=".log")
        os.close(handle)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            server_command(args, grpc_port, rest_port, command), stdout=subprocess.PIPE, stderr=log,
            text=True, encoding="utf-8", errors="replace", cwd=cwd,
            env=dict(os.environ, **(env or {})), preexec_fn=preexec_fn)
    reader = _StdoutReader(process.stdout)
    reader.start()
    server = ServerProcess(process, grpc_port, rest_port, log_path, reader)
    deadline = time.monotonic() + timeout_s
    # Poll the exit as well as the output: a child that inherited stdout could hold it open.
    while not reader.settled.wait(timeout=0.2):
        if process.poll() is not None:
            reader.settled.wait(timeout=5.0)  # the output it printed before exiting
            break
        if time.monotonic() > deadline:
            break
    if reader.ready_line:
        return server
    if reader.settled.is_set():
        # Its output ended without the ready line: it is exiting; its status follows shortly.
        try:
            process.wait(timeout=10.0)
        except subprocess.TimeoutExpired:
            pass
    returncode = process.poll()
    if returncode is None:
        what = (f"kbert-serve did not print its ready line in {timeout_s:g} s"
                if not reader.settled.is_set() else "kbert-serve closed its output before it was ready")
        server.stop()
        what += "; stopped it"
    else:
        what = f"kbert-serve exited with status {returncode} before it was ready"
        reader.join(timeout=5.0)
    tail = server.log_tail()
    raise ServerStartError(f"{what}. The end of its log ({log_path}):\n{tail}", returncode, log_path, tail)
