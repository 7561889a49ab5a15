"""`python -m kbert.bin.X ...` and `python tools/X.py ...` for tests, without the imports each time.

A test of a binary runs it in a process of its own: its flags, exit status,
stdout and stderr, files and crashes are the binary's alone. But a fresh Python
spends about 5 seconds of a core importing TensorFlow, Keras, keras-hub and
kbert before the binary's first line, and the suite starts dozens of them.
Here each pytest process starts one `multiprocessing` fork server with those
modules imported (nothing else: no TensorFlow op has run in it, so it has no
TensorFlow threads to lose at `fork`), and every run is a fresh child forked
from it: a process of its own with its own pid, environment, working directory
and standard streams, that runs the module or script as `python` would
(`runpy`, as `-m` and `python FILE` do) and exits with its status.

Where a test needs what only a new interpreter shows (which modules an import
pulls in, interpreter start-up flags, the installed console script itself), it
calls `subprocess` directly.
"""

import atexit
import ctypes
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import traceback

# What the fork server imports once; a child imports anything else itself. Not
# the binaries (kbert.bin.*, tools/*): each defines its absl flags on import,
# and two of them may define the same name.
PRELOAD = ("numpy", "tensorflow", "keras", "keras_hub", "tensorflow_text", "gin",
           "kbert.data", "kbert.models", "kbert.tasks", "kbert.checkpoints", "kbert.training",
           "kbert.export", "kbert.index")

_context = None


def _fork_server():
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(list(PRELOAD))
    return _context


def run(args: list[str], *, cwd: str, env: dict, timeout: float,
        input: str | None = None) -> subprocess.CompletedProcess:  # pylint: disable=redefined-builtin
    """Runs `python *args` in a forked child and returns what `subprocess.run` would.

    Args:
        args: list[str]. What follows `python`: `["-m", "kbert.bin.finetune", "--task=glue"]`
            or `["tools/build_vocab.py", "--input_file=a.txt"]`.
        cwd: str. The child's working directory (and, for `-m`, its `sys.path[0]`).
        env: dict. The child's whole environment.
        timeout: float. Seconds before the child is killed and `subprocess.TimeoutExpired`
            is raised (with what it had printed).
        input: str, optional. Text on the child's standard input (empty otherwise).

    Returns:
        `subprocess.CompletedProcess` with `returncode` (negative: the signal that
        ended it), and `stdout` and `stderr` as text.

    Example:
        >>> result = run(["-m", "kbert.bin.pretrain", "--gin_file=gin/tiny.gin", "--dry_run"],
        ...              cwd=REPO, env=dict(os.environ), timeout=120)
        >>> result.returncode
        0
    """
    if args[0] == "-c":
        raise ValueError("forked_python runs a module or a script; for `python -c` (what a new "
                         "interpreter imports) call subprocess.run")
    if args[0] == "-m":
        kind, target, argv = "module", args[1], args[2:]
    else:
        kind, target, argv = "script", os.path.abspath(os.path.join(cwd, args[0])), args[1:]
    with tempfile.TemporaryDirectory(prefix="forked-python-") as streams:
        paths = {name: os.path.join(streams, name) for name in ("stdin", "stdout", "stderr")}
        for name, text in (("stdin", input or ""), ("stdout", ""), ("stderr", "")):
            with open(paths[name], "w", encoding="utf-8") as stream:
                stream.write(text)
        child = _fork_server().Process(target=_child_main,
                                       args=(kind, target, list(argv), cwd, dict(env), paths))
        child.start()
        child.join(timeout)
        timed_out = child.exitcode is None
        if timed_out:
            child.kill()
            child.join(30)
        stdout, stderr = (open(paths[name], encoding="utf-8", errors="replace").read()
                          for name in ("stdout", "stderr"))
        returncode = child.exitcode
        child.close()
    command = [sys.executable, *args]
    if timed_out:
        raise subprocess.TimeoutExpired(command, timeout, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(command, returncode, stdout, stderr)


def _child_main(kind, target, argv, cwd, env, paths):
    """In the forked child: become `python [-m] target *argv`, run it, exit with its status."""
    _die_with_the_fork_server()
    for fd, (name, flags) in enumerate((("stdin", os.O_RDONLY),
                                        ("stdout", os.O_WRONLY | os.O_TRUNC),
                                        ("stderr", os.O_WRONLY | os.O_TRUNC))):
        opened = os.open(paths[name], flags)
        os.dup2(opened, fd)
        os.close(opened)
    # The streams a fresh interpreter opens when they are not terminals.
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # pylint: disable=consider-using-with
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # pylint: disable=consider-using-with
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace",  # pylint: disable=consider-using-with
                      buffering=1, closefd=False)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [target, *argv]
    code = 0
    try:
        if kind == "module":
            sys.path.insert(0, cwd)
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(target))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exit_:  # as the interpreter reads it
        if exit_.code is None:
            code = 0
        elif isinstance(exit_.code, int):
            code = exit_.code
        else:
            print(exit_.code, file=sys.stderr)
            code = 1
    except BaseException:  # pylint: disable=broad-except
        traceback.print_exc()
        code = 1
    # Interpreter exit, less the final garbage collection (where TensorFlow 2.21
    # can block for good on tf.data iterators; see tests/conftest.py).
    atexit._run_exitfuncs()  # pylint: disable=protected-access
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def _die_with_the_fork_server():
    """SIGKILL this child if the fork server goes (its pytest process ended or was killed)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
