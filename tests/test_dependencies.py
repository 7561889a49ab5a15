"""Keeps the dependency direction (docs/architecture.md):

    files -> layers -> models -> data -> retrieval -> tasks, checkpoints
          -> training, export, index, presets -> configurables -> bin

`files` (atomic output) is the floor everything may use; `data` never imports
`models`; `retrieval` (BEIR files, ranking metrics, top-k, BM25, fusion,
sentence vectors) sits below the tasks that share it; `tasks` and
`checkpoints` are siblings that never import each other; a task folder
(`kbert/tasks/<name>/`) imports the modules at the top of `kbert/tasks/` and
lower floors, never another task folder, and only `kbert/tasks/` reaches
into task folders; `index` sits beside export and uses it; `serving` (the
server) imports no other part of kbert. Only `configurables` and `bin` import
gin or define absl flags. Imports inside functions count too: a lazy import is
still a dependency.
"""

import ast
import os

from tests.conftest import REPO

# Package -> kbert packages it may import.
_BELOW_TASKS = {"files", "layers", "models", "data", "retrieval"}
ALLOWED = {
    "files": {"files"},
    "layers": {"files", "layers"},
    "models": {"files", "layers", "models"},
    "data": {"files", "data"},
    "retrieval": {"files", "layers", "models", "data", "retrieval"},
    "tasks": _BELOW_TASKS | {"tasks"},
    "checkpoints": _BELOW_TASKS | {"checkpoints"},
    "training": _BELOW_TASKS | {"tasks", "checkpoints", "training"},
    "export": _BELOW_TASKS | {"tasks", "checkpoints", "export"},
    "index": _BELOW_TASKS | {"tasks", "checkpoints", "export", "index"},
    # The Keras task models: directories, tasks and fine-tuning's defaults (not kbert.models:
    # that floor is Keras only, without file I/O).
    "presets": _BELOW_TASKS | {"tasks", "checkpoints", "training", "presets"},
    # The server loads SavedModels and index directories through TensorFlow alone.
    "serving": {"serving"},
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


def _task_folder(path):
    """`<name>` for a module of `kbert/tasks/<name>/`, else None."""
    parts = os.path.relpath(path, os.path.join(REPO, "kbert")).split(os.sep)
    return parts[1] if parts[0] == "tasks" and len(parts) > 2 else None


def _imported_task_folders(name):
    """The task folders a dotted import name reaches: `kbert.tasks.<folder>[.<module>]`."""
    parts = name.split(".")
    if parts[:2] != ["kbert", "tasks"] or len(parts) < 3:
        return set()
    if os.path.isdir(os.path.join(REPO, "kbert", "tasks", parts[2])):
        return {parts[2]}
    return set()


def test_no_task_folder_imports_another():
    problems = []
    for package, path in _modules():
        folder = _task_folder(path)
        if folder is None:
            continue
        for name in _imports(path):
            for other in _imported_task_folders(name) - {folder}:
                problems.append(f"{os.path.relpath(path, REPO)} imports {name} (task folder "
                                f"{other}/); move what both use to kbert/retrieval/ or a "
                                "module at the top of kbert/tasks/")
    assert not problems, "\n".join(problems)


def test_only_tasks_reach_into_task_folders():
    # Other packages use a task through `kbert.tasks` (the registry, base, serving, ...).
    problems = []
    for package, path in _modules():
        if package == "tasks":
            continue
        for name in _imports(path):
            if _imported_task_folders(name):
                problems.append(f"{os.path.relpath(path, REPO)} imports {name}")
    assert not problems, "\n".join(problems)


def test_task_folder_rules_see_an_import_between_folders():
    # The two checks above pass vacuously if folders stop being found.
    folders = {_task_folder(path) for _, path in _modules()} - {None}
    assert {"glue", "token_classification", "squad", "similarity", "retrieval", "rerank",
            "embedding"} <= folders
    assert _imported_task_folders("kbert.tasks.token_classification.spans") == {
        "token_classification"}
    assert _imported_task_folders("kbert.tasks.token_classification") == {"token_classification"}
    assert _imported_task_folders("kbert.tasks.base") == set()
    assert _imported_task_folders("kbert.tasks.SquadTask") == set()


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
