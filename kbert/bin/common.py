"""What every kbert binary shares: gin flags and clean error reporting."""

from __future__ import annotations

import os
import sys
from typing import Callable

from absl import app
from absl import flags

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def define_gin_flags() -> None:
    """Defines the repeatable `--gin_file` and `--gin_params` flags (Model Garden names)."""
    flags.DEFINE_multi_string(
        "gin_file", None, "Gin file(s) of model and training hyperparameters, by path or by "
        "name inside the repo's gin/ directory (e.g. gin/base.gin). Later files override earlier."
    )
    flags.DEFINE_multi_string(
        "gin_params", None, "Gin bindings applied after the files, e.g. "
        "--gin_params='BertEncoder.num_layers = 4'."
    )


def run(main: Callable[[list[str]], None]) -> None:
    """Runs an absl `main`, turning user errors into one line instead of a traceback.

    Args:
        main: the binary's `main(argv)`.
    """

    def guarded(argv):
        try:
            main(argv)
        except (ValueError, FileNotFoundError, PermissionError) as e:
            program = os.path.basename(sys.argv[0])
            print(f"{program}: error: {e}", file=sys.stderr)
            sys.exit(2)

    app.run(guarded)
