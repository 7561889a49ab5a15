"""The task registry: the one list of tasks, old task_config.json files, and a new task in one line."""

import ast
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import REPO
from tests.finetune_testing import make_tiny_pretrained
from tests.tasks.toy_task import ToyTask
from kbert import tasks
from kbert.checkpoints import TaskConfig
from kbert.export import export_saved_model
from kbert.training import run_finetuning

# task_config.json as kbert wrote it before the task registry: every key for every task.
OLD_GLUE = {"model_type": "classifier", "task": "glue", "task_name": "sst-2",
            "label_names": ["negative", "positive"], "text_pair": False, "max_seq_length": 64,
            "do_lower_case": True, "doc_stride": 128, "max_query_length": 64,
            "max_answer_length": 30}
OLD_SQUAD = {**OLD_GLUE, "model_type": "span_labeler", "task": "squad", "task_name": "squad",
             "label_names": [], "text_pair": True, "doc_stride": 5, "max_query_length": 6,
             "max_answer_length": 4}


def test_the_registry_lists_every_task_once():
    assert list(tasks.TASKS) == ["glue", "classification", "ner", "token_classification", "squad",
                                 "embedding", "similarity", "retrieval", "rerank"]
    assert tasks.trainable_tasks() == ("glue", "classification", "ner", "token_classification",
                                       "squad", "similarity", "retrieval", "rerank")
    assert tasks.get_task("squad").config_class is tasks.SquadConfig
    with pytest.raises(ValueError,
                       match=r"--task='pos'; expected one of \('glue', 'classification'"):
        tasks.get_task("pos")


def test_old_task_config_files_still_load():
    glue = tasks.GlueTask.from_description(TaskConfig.from_dict(OLD_GLUE).to_dict())
    assert (glue.task_name, glue.label_names, glue.model_type) == (
        "sst-2", ["negative", "positive"], "classifier")
    squad = tasks.SquadTask.from_description(TaskConfig.from_dict(OLD_SQUAD).to_dict())
    assert squad.config == tasks.SquadConfig(doc_stride=5, max_query_length=6,
                                             max_answer_length=4)


def test_describe_round_trips_and_unknown_settings_are_named():
    squad = tasks.SquadTask(tasks.SquadConfig(doc_stride=64, version_2_with_negative=True))
    description = squad.describe()
    assert description["task_name"] == "squad2" and description["doc_stride"] == 64
    assert tasks.SquadTask.from_description(description).config == squad.config
    with pytest.raises(ValueError, match=r"task 'glue': unknown setting\(s\) \['labels'\]"):
        tasks.GlueTask.from_description({**OLD_GLUE, "labels": []})


def test_tasks_state_what_export_the_index_distillation_and_the_server_need():
    facts = {name: (task.metrics_in_percent, task.distillation_target, task.serving_apis)
             for name, task in tasks.TASKS.items() if name != "classification"}
    assert facts == {"glue": (False, "logits", ()),
                     "ner": (False, "logits", ()), "token_classification": (False, "logits", ()),
                     "squad": (True, None, ()), "embedding": (False, None, ("embeddings",)),
                     "similarity": (False, "embeddings", ("embeddings",)),
                     "retrieval": (False, None, ("embeddings",)), "rerank": (False, None, ("rerank",))}
    # Classification's target follows its problem type: independent sigmoids for multi-label.
    classification = tasks.TASKS["classification"]
    targets = {kind: classification(tasks.ClassificationConfig(problem_type=kind, label_names=(
        ["a", "b"] if kind != "regression" else None))).distillation_target
        for kind in ("single_label", "multi_label", "regression")}
    assert targets == {"single_label": "logits", "multi_label": "sigmoid_logits",
                       "regression": "logits"}
    # A task states nothing it does not need: the toy task takes the defaults.
    assert (ToyTask.metrics_in_percent, ToyTask.distillation_target, ToyTask.serving_apis) == (
        False, None, ())
    # A pre-trained encoder (no task_config.json) serves as sentence embeddings, pooled as recorded.
    task = tasks.encoder_task({"pooling": "cls", "normalize": False})
    assert (task.serving_apis, task.config.pooling, task.config.normalize) == (("embeddings",), "cls", False)


TASK_FOLDER = os.path.join("kbert", "tasks", "")


def _parsed_modules(root: str) -> dict:
    """`kbert/**.py` under `root`: relative path -> AST."""
    trees = {}
    for directory, _, files in os.walk(os.path.join(root, "kbert")):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                trees[os.path.relpath(path, root)] = ast.parse(open(path, encoding="utf-8").read(), path)
    return trees


def _imported_from_models(tree) -> dict:
    """Local name -> class name, of what a module imports from `kbert.models`."""
    return {alias.asname or alias.name: alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kbert.models")
            for alias in node.names}


def _strings(node, tuples: dict) -> set:
    """The string constants a node is: a literal, a literal collection, or a module-level tuple."""
    if isinstance(node, ast.Constant):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant)}
    return tuples.get(node.id, set()) if isinstance(node, ast.Name) else set()


def task_name_uses(root: str) -> list[str]:
    """Where a module outside `kbert/tasks/` branches on a task's name or looks a task up by
    name, or `kbert/training/` tests a task model's class: what a task should state instead.

    Finds `x.task == "squad"` (and `!=`, `in`, `not in` a literal or a module-level tuple of
    names), `get_task("embedding")`, and in `kbert/training/`, `isinstance(m, C)` of a task
    model class (one that a task folder imports from `kbert.models`).
    """
    names = set(tasks.TASKS)
    trees = _parsed_modules(root)
    task_models = {name for relative, tree in trees.items() if relative.startswith(TASK_FOLDER)
                   for name in _imported_from_models(tree).values()}
    found = []
    for relative, tree in sorted(trees.items()):
        if relative.startswith(TASK_FOLDER):
            continue
        tuples = {target.id: _strings(node.value, {}) for node in tree.body if isinstance(node, ast.Assign)
                  for target in node.targets if isinstance(target, ast.Name)}
        model_classes = {local for local, name in _imported_from_models(tree).items() if name in task_models}
        training = relative.startswith(os.path.join("kbert", "training", ""))
        for node in ast.walk(tree):
            where = f"{relative}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if (any(isinstance(side, ast.Attribute) and side.attr == "task" for side in sides)
                        and any(_strings(side, tuples) & names for side in sides)):
                    found.append(f"{where} compares a task's name")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                arguments = node.args
                if node.func.id == "get_task" and arguments and _strings(arguments[0], tuples) & names:
                    found.append(f"{where} looks a task up by name")
                if (training and node.func.id == "isinstance" and len(arguments) == 2
                        and isinstance(arguments[1], ast.Name) and arguments[1].id in model_classes):
                    found.append(f"{where} tests a task model's class ({arguments[1].id})")
    return found


def test_nothing_outside_the_tasks_names_a_task_or_tests_a_task_model_class():
    assert task_name_uses(REPO) == []


@pytest.fixture()
def toy_data(tmp_path):
    rows = {"train": [("a red car", 1), ("a fast car", 0), ("blue sky", 1), ("open sky", 0)] * 4,
            "dev": [("green grass", 1), ("tall grass", 0)],
            "test": [("a red car", 1), ("open sky", 0)]}
    for split, examples in rows.items():
        with open(tmp_path / f"{split}.tsv", "w", encoding="utf-8") as f:
            f.writelines(f"{text}\t{label}\n" for text, label in examples)
    return str(tmp_path)


def test_a_new_task_needs_one_module_and_one_registry_line(monkeypatch, tmp_path, toy_data):
    monkeypatch.setitem(tasks.TASKS, "toy", ToyTask)  # the one registry line
    pretrained = make_tiny_pretrained(tmp_path / "pretrained")
    model_dir = str(tmp_path / "toy")
    results = run_finetuning("toy", pretrained, model_dir, data_dir=toy_data, do_predict=True,
                             train_batch_size=4, learning_rate=3e-3, warmup_proportion=0.0,
                             num_train_epochs=4, max_seq_length=32, verbose=0)
    assert results["num_examples"] == 2 and results["accuracy"] in (0.0, 0.5, 1.0)
    assert results["train_steps"] == 16 and results["train_loss"][-1] < results["train_loss"][0]
    saved = json.load(open(os.path.join(model_dir, "task_config.json")))
    assert (saved["task"], saved["label_names"], saved["lowercase_labels"]) == (
        "toy", ["plain", "colour"], True)
    # The generic export serves it with the task's own signatures.
    version = export_saved_model(model_dir, str(tmp_path / "export"), check=False)
    served = tf.saved_model.load(version).signatures["serving_default"](
        text=tf.constant(["a red car", "open sky"]))
    assert sorted(served) == ["label", "logits", "probabilities"]
    labels = [label.decode() for label in served["label"].numpy()]
    predicted = open(os.path.join(model_dir, "toy_predictions.txt")).read().split()
    assert labels == predicted and set(labels) <= {"plain", "colour"}
    np.testing.assert_allclose(served["probabilities"].numpy().sum(axis=1), [1.0, 1.0], atol=1e-6)
