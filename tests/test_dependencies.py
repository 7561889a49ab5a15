"""Keeps the dependency direction (docs/architecture.md):

    files -> layers -> models -> data -> tasks, checkpoints -> training, export, index
          -> configurables -> bin

`files` (atomic output) is the floor everything may use; `data` never imports
`models`; `tasks` and `checkpoints` are siblings that never import each other;
`index` sits beside export and uses it; `serving` may use export and index. Only `configurables` and `bin` import gin or define
absl flags. Imports inside functions count too: a lazy import is still a
dependency.
"""

import ast
import os

from tests.conftest import REPO

# Package -> kbert packages it may import.
_BELOW_TASKS = {"files", "layers", "models", "data"}
ALLOWED = {
    "files": {"files"},
    "layers": {"files", "layers"},
    "models": {"files", "layers", "models"},
    "data": {"files", "data"},
    "tasks": _BELOW_TASKS | {"tasks"},
    "checkpoints": _BELOW_TASKS | {"checkpoints"},
    "training": _BELOW_TASKS | {"tasks", "checkpoints", "training"},
    "export": _BELOW_TASKS | {"tasks", "checkpoints", "export"},
    "index": _BELOW_TASKS | {"tasks", "checkpoints", "export", "index"},
    "serving": _BELOW_TASKS | {"tasks", "checkpoints", "export", "index", "serving"},
    "configurables": _BELOW_TASKS | {"tasks", "checkpoints", "training", "export"},
    "bin": _BELOW_TASKS | {"tasks", "checkpoints", "training", "export", "index", "serving",
                           "configurables", "bin"},
}


def _imports(path):
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _modules():
    root = os.path.join(REPO, "kbert")
    for directory, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                relative = os.path.relpath(path, root)
                package = relative.split(os.sep)[0].removesuffix(".py")
                yield package, path


def test_dependency_direction():
    problems = []
    for package, path in _modules():
        if package == "__init__":
            continue
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "kbert" and len(parts) > 1 and parts[1] != "__version__":
                if parts[1] not in ALLOWED[package]:
                    problems.append(f"{os.path.relpath(path, REPO)} imports {name}")
    assert not problems, "\n".join(problems)


def test_gin_and_flags_only_in_configurables_and_bin():
    problems = []
    for package, path in _modules():
        if package in ("configurables", "bin"):
            continue
        for name in _imports(path):
            if name == "gin" or name.startswith("gin.") or name in ("absl.flags", "absl.app"):
                problems.append(f"{os.path.relpath(path, REPO)} imports {name}")
    assert not problems, "\n".join(problems)


def test_every_package_is_known():
    assert {package for package, _ in _modules()} - {"__init__"} <= set(ALLOWED)
