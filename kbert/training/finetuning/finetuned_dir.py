"""A trained task model written as a fine-tuned directory: what every writer of one shares.

`kbert-finetune` (`run_finetuning`), `kbert-distill` (`run_distillation`) and
the preset models' `save_to_preset` (`kbert.presets`) all write a task model
with what its task describes (`Task.describe`), the length and tokenizer
setting it was trained with and its tokenizer file, through
`kbert.checkpoints.save_finetuned`; this module is that one step, so the
three write the same files.
"""

from __future__ import annotations

from typing import Any, Mapping

import keras

from kbert.checkpoints.finetuned import TaskConfig
from kbert.checkpoints.finetuned import save_finetuned
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.tasks import Task


def save_task_model(model_dir: str, model: keras.Model, task: Task,
                    preprocessor: TextPreprocessor, vocab_file: str,
                    dev_data: Mapping[str, Any] | None = None) -> None:
    """Writes `model` and its task's record as a fine-tuned directory.

    Args:
        model_dir: str. Created if missing (`gs://` works).
        model: the trained task model (`task.build_model`'s), compiled or not;
            `task_model.keras` holds it without its optimizer.
        task: the `kbert.tasks.Task` it was trained for (its `describe()` is
            recorded in `task_config.json`).
        preprocessor: `TextPreprocessor` it was trained with: its
            `max_seq_length` and `do_lower_case` are recorded.
        vocab_file: str. The tokenizer's file (`vocab.txt` or `tokenizer.json`).
        dev_data: mapping or None. Where the dev split is (`TaskConfig.dev_data`).

    Example:

    >>> save_task_model("runs/sst2", classifier, task, preprocessor, "minilm/vocab.txt")
    """
    record = TaskConfig.from_dict({**task.describe(),
                                   "max_seq_length": preprocessor.max_seq_length,
                                   "do_lower_case": preprocessor.do_lower_case,
                                   "dev_data": dict(dev_data or {})})
    save_finetuned(model_dir, uncompiled(model), record, vocab_file)


def uncompiled(model: keras.Model) -> keras.Model:
    """A copy of `model` with its weights and without its optimizer.

    Why: `task_model.keras` should hold the model, not AdamW's two extra
    copies of every weight.

    Args:
        model: a Keras model that `from_config` rebuilds (every kbert task model).

    Returns:
        The copy.
    """
    if not model.compiled:
        return model
    copy = model.__class__.from_config(model.get_config())
    copy.set_weights(model.get_weights())
    return copy
