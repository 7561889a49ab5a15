"""GLUE task readers: the TSV files as GLUE distributes them, `--task_name` as `run_classifier.py`.

Each task is described by a `GlueSpec` (file names per split, the columns
holding the texts and the label, the label names, the metrics). Files with a
header row are read by column name, so test files with or without an extra
column (e.g. MRPC's with gold labels) read the same; CoLA's files have no
header and are read by position, as in `run_classifier.py`.

Read by the glue task and by the similarity task (STS-B), hence here beside
`base.py` rather than in `glue/`: task folders never import each other.
"""

from __future__ import annotations

import dataclasses
import os

import tensorflow as tf

from kbert.files import read_text

SPLITS = ("train", "dev", "test")


@dataclasses.dataclass(frozen=True)
class GlueSpec:
    """How to read one GLUE task.

    Args:
        name: str. The `--task_name` (lower case), e.g. `sst-2`.
        files: dict. Split -> tuple of alternatives; each alternative is a tuple
            of file names read one after another (CoLA's public release splits
            dev into in-domain and out-of-domain files).
        text_a: str or int. Column name (or index when `header` is False).
        text_b: str, int or None. Second text column for pair tasks.
        label: str or int. Label column.
        label_names: tuple of str. Classes in logit order; empty for regression.
        metrics: tuple of str. Metric names reported for the dev set.
        header: bool. Whether train/dev files start with a header row.
        test_text_a: str or int or None. Test-file column of text_a when it
            differs (CoLA's test.tsv has a header although train/dev do not).
    """

    name: str
    files: dict
    text_a: str | int
    text_b: str | int | None
    label: str | int
    label_names: tuple[str, ...]
    metrics: tuple[str, ...]
    header: bool = True
    test_text_a: str | int | None = None

    @property
    def is_regression(self) -> bool:
        return not self.label_names


@dataclasses.dataclass
class GlueExample:
    """One GLUE example.

    Args:
        guid: str. `<split>-<index>`; the `index` column for test files.
        text_a: str. The (first) sentence.
        text_b: str or None. The second sentence of pair tasks.
        label: int, float or None. Class id (index into `label_names`), score
            for regression, None for unlabeled test data.
    """

    guid: str
    text_a: str
    text_b: str | None
    label: int | float | None


def _task(name, files, text_a, text_b, label, label_names, metrics, **kwargs):
    return GlueSpec(name, files, text_a, text_b, label, tuple(label_names), tuple(metrics), **kwargs)


_STANDARD = {"train": (("train.tsv",),), "dev": (("dev.tsv",),), "test": (("test.tsv",),)}

GLUE_TASKS: dict[str, GlueSpec] = {
    "cola": _task(
        "cola",
        {"train": (("train.tsv",), ("in_domain_train.tsv",)),
         "dev": (("dev.tsv",), ("in_domain_dev.tsv", "out_of_domain_dev.tsv")),
         "test": (("test.tsv",),)},
        3, None, 1, ["0", "1"], ["matthews_corrcoef", "accuracy"],
        header=False, test_text_a="sentence"),
    "sst-2": _task("sst-2", _STANDARD, "sentence", None, "label", ["0", "1"], ["accuracy"]),
    "mrpc": _task("mrpc", _STANDARD, "#1 String", "#2 String", "Quality", ["0", "1"],
                  ["f1", "accuracy"]),
    "sts-b": _task("sts-b", _STANDARD, "sentence1", "sentence2", "score", [],
                   ["pearson", "spearman"]),
    "qqp": _task("qqp", _STANDARD, "question1", "question2", "is_duplicate", ["0", "1"],
                 ["f1", "accuracy"]),
    "mnli": _task(
        "mnli",
        {"train": (("train.tsv",),), "dev": (("dev_matched.tsv",),),
         "test": (("test_matched.tsv",),)},
        "sentence1", "sentence2", "gold_label", ["contradiction", "entailment", "neutral"],
        ["accuracy"]),
    "mnli-mm": _task(
        "mnli-mm",
        {"train": (("train.tsv",),), "dev": (("dev_mismatched.tsv",),),
         "test": (("test_mismatched.tsv",),)},
        "sentence1", "sentence2", "gold_label", ["contradiction", "entailment", "neutral"],
        ["accuracy"]),
    "qnli": _task("qnli", _STANDARD, "question", "sentence", "label",
                  ["entailment", "not_entailment"], ["accuracy"]),
    "rte": _task("rte", _STANDARD, "sentence1", "sentence2", "label",
                 ["entailment", "not_entailment"], ["accuracy"]),
    "wnli": _task("wnli", _STANDARD, "sentence1", "sentence2", "label", ["0", "1"],
                  ["accuracy"]),
}
# Names as GLUE's folders spell them.
_ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "sts": "sts-b", "mnli-m": "mnli"}


def get_glue_spec(task_name: str) -> GlueSpec:
    """Looks up a GLUE task by `--task_name` (case-insensitive, `SST-2` or `sst2`).

    Args:
        task_name: str.

    Returns:
        The `GlueSpec`.

    Example:

    >>> kbert.tasks.glue_reader.get_glue_spec("MRPC").label_names
    ('0', '1')
    """
    key = task_name.lower()
    key = _ALIASES.get(key, key)
    if key not in GLUE_TASKS:
        raise ValueError(
            f"--task_name={task_name!r} is not a GLUE task; expected one of {sorted(GLUE_TASKS)}."
        )
    return GLUE_TASKS[key]


def glue_split_files(data_dir: str, task: GlueSpec, split: str) -> list[str]:
    """The files of one split that exist in `data_dir`.

    Args:
        data_dir: str. The task's folder (e.g. `glue_data/SST-2`).
        task: `GlueSpec`.
        split: str. `train`, `dev` or `test`.

    Returns:
        list of paths.

    Raises:
        FileNotFoundError: none of the alternatives exists; names them.
    """
    if split not in SPLITS:
        raise ValueError(f"split={split!r}; expected one of {SPLITS}.")
    if not tf.io.gfile.isdir(data_dir):
        raise FileNotFoundError(f"--data_dir={data_dir} is not a directory.")
    for names in task.files[split]:
        paths = [os.path.join(data_dir, name) for name in names]
        if all(tf.io.gfile.exists(p) for p in paths):
            return paths
    expected = " or ".join("+".join(names) for names in task.files[split])
    raise FileNotFoundError(
        f"no {split} data for {task.name} in --data_dir={data_dir}: expected {expected}."
    )


def read_glue(data_dir: str, task_name: str, split: str) -> list[GlueExample]:
    """Reads one split of a GLUE task.

    Args:
        data_dir: str. The task's folder (e.g. `glue_data/MRPC`).
        task_name: str. The GLUE task (`cola`, `sst-2`, `mrpc`, `sts-b`, `qqp`,
            `mnli`, `mnli-mm`, `qnli`, `rte`, `wnli`).
        split: str. `train`, `dev` or `test` (test examples carry `label=None`
            when the file has no label column).

    Returns:
        list of `GlueExample`.

    Raises:
        FileNotFoundError: the split's file is missing.
        ValueError: a row has the wrong number of columns or an unknown label
            (the message names the file and line).

    Example:

    >>> examples = kbert.tasks.glue_reader.read_glue("glue_data/SST-2", "sst-2", "dev")
    >>> examples[0].text_a, examples[0].label
    ("it 's a charming and often affecting journey . ", 1)
    """
    task = get_glue_spec(task_name)
    examples = []
    for path in glue_split_files(data_dir, task, split):
        examples.extend(_read_file(path, task, split, offset=len(examples)))
    if not examples:
        raise ValueError(f"{split} data of {task.name} in {data_dir} has no examples.")
    return examples


def _read_file(path: str, task: GlueSpec, split: str, offset: int) -> list[GlueExample]:
    # read_text drops the byte-order mark GLUE's MRPC files start with.
    lines = read_text(path).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    has_header = task.header or split == "test"
    if has_header:
        if not lines:
            raise ValueError(f"{path} is empty; expected a header row.")
        header = lines[0].rstrip("\r").split("\t")
    else:
        header = None
    text_a = task.test_text_a if split == "test" and task.test_text_a is not None else task.text_a
    columns = {"text_a": text_a, "text_b": task.text_b, "label": task.label, "index": "index"}
    if header is not None:
        index_of = {name: i for i, name in enumerate(header)}
        positions = {key: index_of.get(name) for key, name in columns.items()}
        for key in ("text_a", "text_b"):
            if columns[key] is not None and positions[key] is None:
                raise ValueError(
                    f"{path}: header {header} has no column {columns[key]!r} for {task.name}; "
                    f"is this the {task.name} data?"
                )
        if positions["label"] is None and split != "test":
            raise ValueError(f"{path}: header {header} has no label column {task.label!r}.")
        width = len(header)
    else:
        positions = {key: (value if key != "index" else None) for key, value in columns.items()}
        width = 4
    examples = []
    for number, line in enumerate(lines[1:] if has_header else lines, start=2 if has_header else 1):
        line = line.rstrip("\r")
        # Plain split, no CSV quoting: GLUE texts contain bare double quotes.
        row = line.split("\t")
        if len(row) != width:
            raise ValueError(
                f"{path}:{number}: {len(row)} tab-separated columns, expected {width} "
                f"({'as the header' if header else 'for ' + task.name}); fix or remove the row."
            )
        label = None
        if positions["label"] is not None:
            label = _parse_label(row[positions["label"]], task, path, number)
        index = row[positions["index"]] if positions["index"] is not None else str(offset + len(examples))
        examples.append(GlueExample(
            guid=f"{split}-{index}",
            text_a=row[positions["text_a"]],
            text_b=row[positions["text_b"]] if positions["text_b"] is not None else None,
            label=label,
        ))
    return examples


def _parse_label(value: str, task: GlueSpec, path: str, number: int) -> int | float:
    if task.is_regression:
        try:
            return float(value)
        except ValueError:
            raise ValueError(f"{path}:{number}: score {value!r} is not a number.") from None
    if value not in task.label_names:
        raise ValueError(
            f"{path}:{number}: unknown label {value!r} for {task.name}; "
            f"expected one of {list(task.label_names)}."
        )
    return task.label_names.index(value)
