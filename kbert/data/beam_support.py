"""What kbert's Apache Beam pipelines share: options, running, error messages.

`tools/create_pretraining_data.py` and `tools/build_vocab.py` run on Apache Beam
when given `--runner` (the DirectRunner here; Dataflow, Flink or Spark at scale);
every other command-line option after kbert's own flags goes to Beam as a
pipeline option (`--direct_num_workers`, `--temp_location`, `--project`, ...).

Apache Beam is an optional dependency (the `beam` extra: `pip install -e '.[beam]'` in a
checkout of kbert): this module
imports it only inside functions, and the pipeline modules
(`kbert.data.pretraining.beam_pipeline`, `kbert.data.vocab.beam`) are imported
only when a runner is asked for, so `kbert.data` imports without it.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

# Beam's DirectRunner runs the pipeline in the calling process with this mode
# (its default), so its workers are that process.
IN_PROCESS_MODES = ("in_memory", "multi_threading")
_KBERT_ERROR = re.compile(r"(?:ValueError|FileNotFoundError): (.+?)(?: \[while running '[^']*'\])?$")


def check_beam_installed(runner: str) -> None:
    """Raises ValueError naming the extra to install when Apache Beam is missing.

    Args:
        runner: str. The `--runner` asked for (named in the message).
    """
    try:
        import apache_beam  # noqa: F401  pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
        raise ValueError(
            f"--runner={runner} needs Apache Beam: pip install -e '.[beam]' in the kbert checkout "
            "(or pip install 'apache-beam>=2.77,<3'), or leave --runner out to run on this "
            "machine's cores."
        ) from None


def pipeline_options(runner: str, pipeline_args: Sequence[str]) -> Any:
    """Beam's `PipelineOptions` for `--runner=runner` plus Beam's own options.

    Args:
        runner: str. `"DirectRunner"`, `"DataflowRunner"`, `"FlinkRunner"`,
            `"SparkRunner"`, ...
        pipeline_args: list of str. Beam options as on a command line, e.g.
            `["--direct_num_workers=2", "--direct_running_mode=multi_processing"]`.

    Returns:
        `apache_beam.options.pipeline_options.PipelineOptions`.

    Raises:
        ValueError: an option Beam does not know (a typo would otherwise be
            ignored silently).

    Example:

    >>> options = pipeline_options("DirectRunner", ["--direct_num_workers=2"])
    """
    from apache_beam.options.pipeline_options import PipelineOptions  # pylint: disable=import-outside-toplevel

    options = PipelineOptions([f"--runner={runner}", *pipeline_args])
    # Beam drops arguments it does not know with a warning; a misspelt flag
    # (kbert's or Beam's) should stop the run instead.
    unknown = set(options.get_all_options(retain_unknown_options=True)) - set(options.get_all_options())
    if unknown:
        names = ", ".join(f"--{name}" for name in sorted(unknown))
        raise ValueError(
            f"{names}: neither a flag of this tool nor an Apache Beam pipeline option; "
            "check the spelling (--helpfull lists the tool's flags)."
        )
    return options


def runs_in_this_process(options: Any) -> bool:
    """Whether the DoFns run in the calling process (the DirectRunner's in-process modes)."""
    from apache_beam.options.pipeline_options import DirectOptions  # pylint: disable=import-outside-toplevel
    from apache_beam.options.pipeline_options import StandardOptions  # pylint: disable=import-outside-toplevel

    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    mode = options.view_as(DirectOptions).direct_running_mode
    return runner in ("DirectRunner", "direct") and mode in IN_PROCESS_MODES


def runner_name(options: Any) -> str:
    """The runner's name as the sidecar records it (`"DirectRunner"` when none is set)."""
    from apache_beam.options.pipeline_options import StandardOptions  # pylint: disable=import-outside-toplevel

    runner = options.view_as(StandardOptions).runner or "DirectRunner"
    return runner if isinstance(runner, str) else type(runner).__name__


def run_pipeline(pipeline: Any, what: str) -> None:
    """Runs a built pipeline and waits for it.

    Args:
        pipeline: `apache_beam.Pipeline`. Built, not yet run.
        what: str. What it makes, for error messages.

    Raises:
        ValueError: the pipeline failed because of kbert's checks (bad input:
            the message names the file and line as the local tools do) or
            ended in another state than DONE.
        Exception: any other failure, as the runner reports it.
    """
    from apache_beam.runners.runner import PipelineState  # pylint: disable=import-outside-toplevel

    try:
        result = pipeline.run()
        state = result.wait_until_finish()
    except Exception as e:  # pylint: disable=broad-except
        message = kbert_error_message(e)
        if message:
            raise ValueError(message) from e
        raise
    if state is not None and state != PipelineState.DONE:
        raise ValueError(f"the pipeline writing {what} ended in state {state}, not DONE.")


def kbert_error_message(error: BaseException) -> str | None:
    """The message of the ValueError a DoFn raised, from a runner's failure report.

    Runners report a worker's exception in their own wrapper (the DirectRunner
    in-process re-raises it with the step named, its multi-process mode and
    remote runners as text with the worker's traceback); the user should see
    the message of kbert's check (`file:line: not valid utf-8 ...`), not a
    traceback.

    Returns:
        The message, or None when the failure was not a ValueError or
        FileNotFoundError.
    """
    if isinstance(error, (ValueError, FileNotFoundError)):
        text = str(error)
        return re.sub(r" \[while running '[^']*'\]$", "", text.strip().splitlines()[0] if text.strip() else text)
    for line in reversed(str(error).splitlines()):
        match = _KBERT_ERROR.search(line.strip())
        if match:
            return match.group(1)
    return None
