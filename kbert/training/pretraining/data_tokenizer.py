"""Is the data made with the model's tokenizer? Checked for every data flag before anything is built.

Pre-training reads token ids, never text, so data made with another tokenizer
(another model's vocabulary, the vocabulary before `kbert-vocab extend`, a BPE
learned on other text) trains without an error: on ids that mean other tokens,
or, for held-out data, until the first evaluation meets an id past the
embedding. `check_data_tokenizers` compares what each data flag's sidecar
records (`kbert.data.pretraining.metadata.recorded_tokenizer`) with the model's
tokenizer, by the hash of what its ids mean, and refuses a difference naming
both, before the model is built.

The model's tokenizer is, in this order: `--init_checkpoint`'s (the model
continues its rows); `--vocab_file` (what the run copies into `model_dir`);
for evaluation alone, `model_dir`'s own (a finished run wrote it); else what
the training data's sidecar records (the model is built to its size).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from kbert.data.pretraining.checks import check_data_tokenizer
from kbert.data.pretraining.eval_data import EvalData
from kbert.data.pretraining.metadata import recorded_tokenizer
from kbert.data.tokenizers import TokenizerIdentity
from kbert.data.tokenizers import tokenizer_file
from kbert.training.pretraining.settings import PretrainingSettings
from kbert.training.pretraining.state import open_init_checkpoint


def check_data_tokenizers(settings: PretrainingSettings, files: list[str],
                          metadata: dict[str, Any] | None, eval_data: EvalData | None) -> None:
    """Refuses `--input_file` or `--eval_input_file` data made with another tokenizer than the model's.

    Args:
        settings: the run's `PretrainingSettings`, as given (before the
            sidecar's defaults fill `vocab_file`).
        files: list of str. The training data files (none for evaluation alone).
        metadata: dict or None. Their sidecar.
        eval_data: `EvalData` or None. The held-out data, with its sidecar.

    Raises:
        ValueError: naming the flag, the data's tokenizer, the model's and
            where it comes from.

    Example:

    >>> check_data_tokenizers(settings, ["data/train.tfrecord"], metadata,
    ...                       EvalData.from_files("data/heldout.tfrecord", 128, 20, "static"))
    """
    references = model_tokenizers(settings)
    for model, source in references:
        if files:
            check_data_tokenizer(metadata, files[0], model, source, "--input_file")
    if not references and files and recorded_tokenizer(metadata) is not None:
        # The model is built to the training data's size: held-out data must share its tokenizer.
        references = [(recorded_tokenizer(metadata), f"--input_file ({files[0]}.meta.json)")]
    if eval_data is not None:
        for model, source in references:
            check_data_tokenizer(eval_data.metadata, eval_data.files[0], model, source,
                                 "--eval_input_file")


def model_tokenizers(settings: PretrainingSettings) -> list[tuple[TokenizerIdentity, str]]:
    """The tokenizers the model is known to have, each with where it comes from.

    `--init_checkpoint`'s and `--vocab_file`'s (both when both are given: the
    data must match each); for evaluation alone without them, `model_dir`'s.

    Args:
        settings: the run's `PretrainingSettings`, as given.

    Returns:
        list of `(TokenizerIdentity, source)`; empty when the run names none.
    """
    found = []
    if settings.init_checkpoint:
        directory = open_init_checkpoint(settings.init_checkpoint)
        if directory.vocab_file:
            found.append((TokenizerIdentity.of_file(directory.vocab_file),
                          f"--init_checkpoint={settings.init_checkpoint}"))
    if settings.vocab_file:
        found.append((TokenizerIdentity.of_file(settings.vocab_file), "--vocab_file"))
    if not found and not settings.do_train:
        own = (tokenizer_file(settings.model_dir) if tf.io.gfile.isdir(settings.model_dir)
               else None)
        if own:
            found.append((TokenizerIdentity.of_file(own), f"--model_dir={settings.model_dir}"))
    return found
