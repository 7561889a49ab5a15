"""kbert's fine-tuned model directory: what `kbert-finetune` writes and `kbert-export` reads.

A fine-tuned directory is a pre-trained directory (see `kbert.checkpoints.pretrained`:
`bert_config.json`, `vocab.txt`, `tokenizer_config.json`, `encoder.weights.h5`,
holding the fine-tuned encoder) plus:

    task_model.keras   the whole task model (encoder + head), a Keras file
    task_config.json   what serving needs to turn raw text into inputs and
                       outputs back into answers (see `TaskConfig`)
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from typing import Any

import keras
import tensorflow as tf

from kbert.models.bert_task import BertTask
from kbert.checkpoints.pretrained import read_tokenizer_config
from kbert.checkpoints.pretrained import save_pretrained

TASK_MODEL = "task_model.keras"
TASK_CONFIG = "task_config.json"

# `model_type` -> the task model class it is.
MODEL_TYPES = ("classifier", "regressor", "token_classifier", "span_labeler")


@dataclasses.dataclass
class TaskConfig:
    """What a fine-tuned model is for, stored as `task_config.json`.

    Args:
        model_type: str. One of `classifier`, `regressor`, `token_classifier`,
            `span_labeler`.
        task: str. The fine-tuning task family (`glue`, `ner`, `squad`).
        task_name: str. E.g. `sst-2`, `mrpc`, `sts-b`, `conll2003`, `squad`.
        label_names: list of str. Class names in logit order (classifier) or
            tag names (token classifier); empty otherwise.
        text_pair: bool. Whether inputs are sentence pairs (`text`, `text_pair`).
        max_seq_length: int. Sequence length used in fine-tuning.
        do_lower_case: bool. Tokenizer setting.
        doc_stride: int. Span QA: stride between context windows.
        max_query_length: int. Span QA: question tokens kept.
        max_answer_length: int. Span QA: longest answer in tokens.

    Example:

    >>> TaskConfig(model_type="classifier", task="glue", task_name="sst-2",
    ...            label_names=["0", "1"], max_seq_length=128, do_lower_case=True)
    """

    model_type: str
    task: str
    task_name: str
    label_names: list[str] = dataclasses.field(default_factory=list)
    text_pair: bool = False
    max_seq_length: int = 128
    do_lower_case: bool = True
    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30

    def __post_init__(self):
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type={self.model_type!r}; expected one of {MODEL_TYPES}.")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "task_config") -> "TaskConfig":
        names = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ValueError(f"{source}: unknown key(s) {unknown}; expected some of {sorted(names)}.")
        return cls(**values)


def save_finetuned(
    model_dir: str,
    model: BertTask,
    task_config: TaskConfig,
    vocab_file: str,
) -> None:
    """Writes a fine-tuned model directory; each file lands atomically.

    Args:
        model_dir: str. Created if missing (`gs://` works).
        model: the fine-tuned task model (its `encoder` is saved too).
        task_config: `TaskConfig`.
        vocab_file: str. The WordPiece vocabulary, copied to `vocab.txt`.

    Example:

    >>> save_finetuned("runs/sst2", classifier,
    ...                TaskConfig("classifier", "glue", "sst-2", ["0", "1"]), "vocab.txt")
    """
    save_pretrained(model_dir, model.encoder, vocab_file=vocab_file,
                    do_lower_case=task_config.do_lower_case)
    with tempfile.TemporaryDirectory() as local:
        local_path = os.path.join(local, TASK_MODEL)
        model.save(local_path)
        destination = os.path.join(model_dir, TASK_MODEL)
        tf.io.gfile.copy(local_path, destination + ".tmp", overwrite=True)
        tf.io.gfile.rename(destination + ".tmp", destination, overwrite=True)
    destination = os.path.join(model_dir, TASK_CONFIG)
    with tf.io.gfile.GFile(destination + ".tmp", "w") as f:
        f.write(task_config.to_json())
    tf.io.gfile.rename(destination + ".tmp", destination, overwrite=True)


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
    with tf.io.gfile.GFile(path) as f:
        return TaskConfig.from_dict(json.load(f), source=path)


def load_finetuned(model_dir: str) -> tuple[BertTask, TaskConfig, str]:
    """Loads a fine-tuned model directory.

    Args:
        model_dir: str. A fine-tuned model directory.

    Returns:
        `(model, task_config, vocab_file)`: the task model with its weights, its
        `TaskConfig`, and the path of its `vocab.txt`.
    """
    task_config = read_task_config(model_dir)
    with tempfile.TemporaryDirectory() as local:
        local_path = os.path.join(local, TASK_MODEL)
        tf.io.gfile.copy(os.path.join(model_dir, TASK_MODEL), local_path)
        model = keras.saving.load_model(local_path, compile=False)
    vocab_file = read_tokenizer_config(model_dir)["vocab_file"]
    if vocab_file is None:
        raise FileNotFoundError(f"{model_dir}: vocab.txt is missing.")
    return model, task_config, vocab_file
