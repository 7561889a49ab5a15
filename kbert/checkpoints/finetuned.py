"""kbert's fine-tuned model directory: what `kbert-finetune` writes and `kbert-export` reads.

A fine-tuned directory is a pre-trained directory (see `kbert.checkpoints.pretrained`:
`bert_config.json`, `vocab.txt`, `tokenizer_config.json`, `encoder.weights.h5`,
holding the fine-tuned encoder) plus:

    task_model.keras   the whole task model (encoder + head), a Keras file
    task_config.json   which task the model is for and what serving needs to
                       turn raw text into inputs and outputs back into
                       answers (see `TaskConfig`)

This module knows the files; what the task-specific keys mean is the task's
business (`kbert.tasks`, `Task.describe` / `Task.from_description`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

import keras
import tensorflow as tf

from kbert.checkpoints.pretrained import read_tokenizer_config
from kbert.checkpoints.pretrained import save_pretrained
from kbert.files import local_copy
from kbert.files import local_output
from kbert.files import read_json
from kbert.files import write_text

TASK_MODEL = "task_model.keras"
TASK_CONFIG = "task_config.json"


@dataclasses.dataclass
class TaskConfig:
    """What a fine-tuned model is for, stored flat as `task_config.json`.

    Args:
        task: str. The registered task (`glue`, `ner`, `squad`, `similarity`,
            `retrieval`, `rerank`; see `kbert.tasks.TASKS`).
        task_name: str. E.g. `sst-2`, `mrpc`, `sts-b`, `conll2003`, `squad`.
        model_type: str. The kind of model (`classifier`, `regressor`,
            `token_classifier`, `span_labeler`), for tools that read the file.
        label_names: list of str. Class names in logit order (classifier) or
            tag names (token classifier); empty otherwise.
        text_pair: bool. Whether inputs are sentence pairs (`text`, `text_pair`).
        max_seq_length: int. Sequence length used in fine-tuning.
        do_lower_case: bool. Tokenizer setting.
        options: dict. The task's own config fields (e.g. SQuAD's
            `doc_stride`), written flat beside the keys above.
        dev_data: dict. Where the dev split fine-tuning evaluated on is
            (`task_name`, `data_dir`, `predict_file`: `kbert.tasks.TaskData`'s
            fields, absolute paths); `kbert-export --quantize` scores on it.
            Empty for directories written without it.

    Example:

    >>> TaskConfig(task="glue", task_name="sst-2", model_type="classifier",
    ...            label_names=["0", "1"], max_seq_length=128, do_lower_case=True)
    """

    task: str
    task_name: str
    model_type: str
    label_names: list[str] = dataclasses.field(default_factory=list)
    text_pair: bool = False
    max_seq_length: int = 128
    do_lower_case: bool = True
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    dev_data: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The flat dict `task_config.json` holds (the task's options beside the common keys)."""
        values = dataclasses.asdict(self)
        if not values["dev_data"]:
            del values["dev_data"]  # files written without it stay as they were
        return {**values.pop("options"), **values}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "task_config") -> "TaskConfig":
        """Reads the flat dict; keys other than the fields above are the task's options.

        Args:
            values: dict. A parsed `task_config.json`.
            source: str. Where it came from, named in errors.

        Returns:
            The `TaskConfig`.
        """
        names = [field.name for field in dataclasses.fields(cls) if field.name != "options"]
        missing = [name for name in ("task", "task_name", "model_type") if name not in values]
        if missing:
            raise ValueError(f"{source}: missing key(s) {missing}; is it a kbert task_config.json?")
        common = {name: values[name] for name in names if name in values}
        options = {key: value for key, value in values.items() if key not in names}
        return cls(**common, options=options)


def save_finetuned(
    model_dir: str,
    model: keras.Model,
    task_config: TaskConfig,
    vocab_file: str,
) -> None:
    """Writes a fine-tuned model directory; each file lands atomically.

    Args:
        model_dir: str. Created if missing (`gs://` works).
        model: the fine-tuned task model (its `encoder` is saved too).
        task_config: `TaskConfig`.
        vocab_file: str. The WordPiece vocabulary, copied to `vocab.txt` (or a byte-level
            BPE `.json`, copied to `tokenizer.json`).

    Example:

    >>> save_finetuned("runs/sst2", classifier,
    ...                TaskConfig("glue", "sst-2", "classifier", ["0", "1"]), "vocab.txt")
    """
    save_pretrained(model_dir, model.encoder, vocab_file=vocab_file,
                    do_lower_case=task_config.do_lower_case)
    with local_output(os.path.join(model_dir, TASK_MODEL)) as local_path:
        model.save(local_path)
    write_text(os.path.join(model_dir, TASK_CONFIG), task_config.to_json())


def is_finetuned(model_dir: str) -> bool:
    """Whether `model_dir` is a fine-tuned directory (it has `task_config.json`)."""
    return tf.io.gfile.exists(os.path.join(model_dir, TASK_CONFIG))


def read_task_config(model_dir: str) -> TaskConfig:
    """Reads `task_config.json` of a fine-tuned directory.

    Args:
        model_dir: str. A fine-tuned model directory.

    Returns:
        The `TaskConfig`.
    """
    path = os.path.join(model_dir, TASK_CONFIG)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(
            f"{model_dir} is not a fine-tuned model directory: {TASK_CONFIG} is missing. "
            "Point to the --model_dir of kbert-finetune."
        )
    values = read_json(path)
    if not isinstance(values, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(values).__name__}.")
    return TaskConfig.from_dict(values, source=path)


def load_finetuned(model_dir: str) -> tuple[keras.Model, TaskConfig, str]:
    """Loads a fine-tuned model directory.

    Args:
        model_dir: str. A fine-tuned model directory.

    Returns:
        `(model, task_config, vocab_file)`: the task model with its weights, its
        `TaskConfig`, and the path of its `vocab.txt`.
    """
    task_config = read_task_config(model_dir)
    model = load_task_model(model_dir)
    vocab_file = read_tokenizer_config(model_dir)["vocab_file"]
    if vocab_file is None:
        raise FileNotFoundError(f"{model_dir}: vocab.txt is missing.")
    return model, task_config, vocab_file


def load_task_model(model_dir: str) -> keras.Model:
    """Loads `task_model.keras` of a fine-tuned directory (uncompiled).

    Args:
        model_dir: str. A fine-tuned model directory.

    Returns:
        The task model with its weights.
    """
    with local_copy(os.path.join(model_dir, TASK_MODEL)) as local_path:
        return keras.saving.load_model(local_path, compile=False)
