"""The tools' tests load `tools/*.py` into the test process, whose absl flags are global.

Two tools may define the same flag (`--output_file`), and absl refuses a flag
defined twice; so each test module's tools take their flags away when its
tests end, whichever modules share the process (pytest-xdist runs several).
"""

import pytest
from absl import flags


@pytest.fixture(scope="module", autouse=True)
def _tool_flags_removed_after_the_module():
    before = set(flags.FLAGS)
    yield
    for name in set(flags.FLAGS) - before:
        delattr(flags.FLAGS, name)
