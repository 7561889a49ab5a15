"""A benchmark's result as data: `benchmarks/results/<name>.json`, written by its script.

Every script in `benchmarks/` ends by calling `write_result`, which rewrites its
result file atomically; `benchmarks/report.py` renders `BENCHMARKS.md` and
`docs/benchmarks/<name>.md` from these files, so a figure is stated once, in data,
with its machine, date, commit and command (docs/development.md: "Benchmarks").

A result file is one JSON object (schema 1). Keys every file has:

    benchmark    the script's name (`quantization` for benchmarks/quantization.py)
    title        what is measured, a few words
    area         the BENCHMARKS.md section: one of AREAS
    headline     the current figure, 25 words or fewer
    reference    what the figure is compared with, measured in the same run
    aim          the target the figure is held to ("" when there is none)
    met          true, false, or null (no aim, or not judged)
    selection    how a quality figure was chosen: "clean: ..." (nothing chosen on
                 the split reported) or "selected on dev: ..."; null for speed
    machine      {"cpu", "cores", ...}: what it ran on
    load         "quiet" or "loaded" (other jobs shared the machine)
    date         ISO date (and time) of the run
    commit       the commit the script ran at
    command      the exact command, data and scratch paths relative or left at
                 their defaults (no path of one machine)
    provenance   "rerun" (written by the script) or "recorded from BENCHMARKS.md
                 at <commit>" (a figure measured before result files existed)
    figures      the figures the script printed, by name

and optionally `method` (Markdown: what runs, how it is timed), `tables` (a list
of {"title", "columns", "rows"}), `notes` (Markdown) and `parts` (per-part
figures, as benchmarks/own_data.py writes them).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from typing import Any
from typing import Iterator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_DIR = os.path.join(REPO, "benchmarks", "results")
SCHEMA = 1
AREAS = ("pre-training", "pre-training data", "fine-tuning", "retrieval", "serving", "end to end")
REQUIRED = ("benchmark", "title", "area", "headline", "reference", "aim", "met", "selection",
            "machine", "load", "date", "commit", "command", "provenance", "figures")
# One run counts as quiet when the 1-minute load average before it was under one per
# two cores: the benchmark's own threads are not yet counted then.
QUIET_LOAD_PER_CORE = 0.5


def add_flags(parser: argparse.ArgumentParser, name: str) -> None:
    """Adds `--data_dir`, `--work_dir` and `--result_file`, the flags every benchmark takes.

    Args:
        parser: argparse.ArgumentParser. The script's parser.
        name: str. The benchmark's name; its result goes to `benchmarks/results/<name>.json`.
    """
    parser.add_argument("--data_dir", default=os.path.join(os.path.dirname(REPO), "shared", "data"),
                        help="The data folder (GLUE, CoNLL-2003, corpus, ...); default "
                        "../shared/data beside the repository, where the tests find it.")
    parser.add_argument("--work_dir", default=None,
                        help="Scratch folder for models, exports and data; default a new "
                        "temporary directory.")
    parser.add_argument("--result_file", default=os.path.join(RESULTS_DIR, f"{name}.json"),
                        help="Where the result goes (empty: not written).")


def work_dir(args: argparse.Namespace, prefix: str = "kbert-bench-") -> str:
    """Returns `--work_dir`, created, or a new temporary directory (the caller removes it)."""
    if args.work_dir:
        os.makedirs(args.work_dir, exist_ok=True)
        return args.work_dir
    return tempfile.mkdtemp(prefix=prefix)


@contextlib.contextmanager
def scratch_dir(args: argparse.Namespace, prefix: str = "kbert-bench-") -> Iterator[str]:
    """Yields `--work_dir` (created, kept), or a temporary directory removed afterwards."""
    if args.work_dir:
        os.makedirs(args.work_dir, exist_ok=True)
        yield args.work_dir
    else:
        with tempfile.TemporaryDirectory(prefix=prefix) as directory:
            yield directory


def machine() -> dict:
    """Returns the CPU model, core count, platform and the 1/5/15-minute load averages now."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(),
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()]}


def now() -> str:
    """The current UTC time, to the minute, as result files record it."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes")


def commit() -> str:
    """Returns the repository's short commit hash (with `+dirty` for uncommitted changes)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                              capture_output=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, text=True, capture_output=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def command(argv: list[str] | None = None) -> str:
    """Returns the command line as run, with this machine's absolute paths made relative."""
    argv = list(sys.argv if argv is None else argv)
    script = os.path.relpath(os.path.abspath(argv[0]), REPO) if argv else ""
    words = [_relative(word) for word in argv[1:]]
    return shlex.join(["python", script, *words])


def _relative(word: str) -> str:
    """`--flag=/abs/path` -> `--flag=<relative path>`; a temporary path -> `<tmp>/...`."""
    flag, sep, value = word.partition("=") if word.startswith("--") else ("", "", word)
    if os.path.isabs(value):
        temp = os.path.realpath(tempfile.gettempdir())
        real = os.path.realpath(value)
        if real.startswith(temp + os.sep):
            value = "<tmp>/" + os.path.relpath(real, temp)
        else:
            value = os.path.relpath(real, REPO)
    return flag + sep + value


def load(load_average_at_start: float, cores: int | None = None) -> str:
    """Returns "quiet" when the load before the run was low, else "loaded"."""
    cores = cores or os.cpu_count() or 1
    return "quiet" if load_average_at_start < QUIET_LOAD_PER_CORE * cores else "loaded"


def write_result(args: argparse.Namespace, *, name: str, title: str, area: str, headline: str,
                 reference: str, aim: str, met: bool | None, figures: Any,
                 load_average_at_start: float, selection: str | None = None,
                 **extra: Any) -> str | None:
    """Writes `benchmarks/results/<name>.json` (or `--result_file`) atomically.

    Args:
        args: argparse.Namespace. The script's parsed flags (`add_flags` added `--result_file`).
        name, title, area, headline, reference, aim, met, selection: the schema's keys
            (module docstring).
        figures: dict or list. The figures the script printed.
        load_average_at_start: float. `os.getloadavg()[0]` before the run: quiet or loaded.
        **extra: `method`, `tables`, `notes`, `parts`, or further keys kept as they are.

    Returns:
        The path written, or None when `--result_file` is empty.

    Example:

    >>> result_file.add_flags(parser, "packing")
    >>> args = parser.parse_args()
    >>> load = os.getloadavg()[0]
    >>> ...  # the benchmark
    >>> result_file.write_result(
    ...     args, name="packing", title="Sequence packing", area="pre-training data",
    ...     headline="Packing at length 512: 3.2x real tokens per second.",
    ...     reference="the same batches padded, same run", aim=">= 1.5x", met=True,
    ...     figures={"speed_up": 3.2}, load_average_at_start=load)
    """
    if not getattr(args, "result_file", None):
        return None
    facts = machine()
    facts["load_average_at_start"] = round(load_average_at_start, 2)
    result = {"schema": SCHEMA, "benchmark": name, "title": title, "area": area,
              "headline": headline, "reference": reference, "aim": aim, "met": met,
              "selection": selection, "machine": facts,
              "load": load(load_average_at_start, facts["cores"]),
              "date": now(),
              "commit": commit(), "command": command(), "provenance": "rerun",
              "figures": figures, **extra}
    problems = validate(result)
    if problems:  # keep the run's figures beside the file, but never render them as they are
        save(result, args.result_file + ".invalid")
        raise ValueError(f"result of {name} kept in {args.result_file}.invalid, not written: "
                         + "; ".join(problems))
    save(result, args.result_file)
    print(f"result written to {os.path.relpath(args.result_file, REPO)}", flush=True)
    return args.result_file


def validate(result: dict) -> list[str]:
    """Returns what is wrong with a result (missing keys, a long headline, an unknown area)."""
    problems = [f"missing {key!r}" for key in REQUIRED if key not in result]
    words = len(str(result.get("headline", "")).split())
    if words > 25:
        problems.append(f"headline has {words} words (at most 25)")
    if "area" in result and result["area"] not in AREAS:
        problems.append(f"area {result['area']!r} is not one of {list(AREAS)}")
    if "load" in result and result["load"] not in ("quiet", "loaded"):
        problems.append(f"load {result['load']!r} is not 'quiet' or 'loaded'")
    return problems


def save(result: dict, path: str) -> None:
    """Writes `result` as indented JSON to `path` atomically (temporary sibling, then rename).

    Not `kbert.files.write_text`: that imports TensorFlow, and report.py and its test read and
    write result files with the standard library alone.
    """
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=directory, suffix=".incomplete")
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1, ensure_ascii=False)
            f.write("\n")
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)
