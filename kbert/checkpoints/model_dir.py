"""The one door to a model directory: `open_model_dir(path)` checks it once and hands out its parts.

A model directory is pre-trained (`bert_config.json` + `encoder.weights.h5`, see
`kbert.checkpoints.pretrained`) or fine-tuned (those plus `task_config.json` +
`task_model.keras`, see `kbert.checkpoints.finetuned`). Fine-tuning,
distillation, export, the index and `tools/extract_features.py` open
directories here and nowhere else, so every one of them gets the same checks,
made when the directory is opened and before anything is built or written:

- the files are present (which ones decides pre-trained or fine-tuned),
- `bert_config.json` (and `task_config.json`, `sentence_config.json`) are readable,
- the tokenizer is present, holds BERT's input tokens, and has as many
  tokens as the encoder has embedding rows; it is read by
  `kbert.data.tokenizers` (a WordPiece `vocab.txt` or, for ModernBERT-style
  models, a Hugging Face byte-level BPE `tokenizer.json`, used when there is
  no `vocab.txt` and allowed fewer tokens than rows),
- the tokenizer settings: `do_lower_case` as recorded, True when unrecorded
  (False for a kind without lower casing, such as a `tokenizer.json`).

The functions below it (`load_encoder`, `load_finetuned`, `read_tokenizer_config`,
...) stay the lower-level API for code that wants one file.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import keras
import tensorflow as tf

from kbert.checkpoints.config_files import read_encoder_config
from kbert.checkpoints.finetuned import TASK_CONFIG
from kbert.checkpoints.finetuned import TASK_MODEL
from kbert.checkpoints.finetuned import TaskConfig
from kbert.checkpoints.finetuned import is_finetuned
from kbert.checkpoints.finetuned import load_task_model
from kbert.checkpoints.finetuned import read_task_config
from kbert.checkpoints.pretrained import BERT_CONFIG
from kbert.checkpoints.pretrained import ENCODER_WEIGHTS
from kbert.checkpoints.pretrained import TOKENIZER_CONFIG
from kbert.checkpoints.pretrained import VOCAB
from kbert.checkpoints.pretrained import build_encoder
from kbert.checkpoints.pretrained import load_pretrainer
from kbert.checkpoints.pretrained import pretrained_settings
from kbert.checkpoints.pretrained import read_tokenizer_config
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.data.text_preprocessor import check_max_seq_length
from kbert.data.tokenizers import TOKENIZERS
from kbert.data.tokenizers import Tokenizer
from kbert.data.tokenizers import tokenizer_class
from kbert.models.encoder import Encoder
from kbert.models.masked_lm_pretrainer import MaskedLMPretrainer


@dataclasses.dataclass(frozen=True)
class ModelDir:
    """A checked model directory: what pre-trained and fine-tuned directories both give.

    Made by `open_model_dir`, never directly.

    Args:
        path: str. The directory.
        where: str. How errors name it: `--flag=path`, or the path alone.
        encoder_class: type. The encoder's registered class
            (`kbert.models.ARCHITECTURES`; `BertEncoder` for google-research/bert files).
        encoder_config: dict. Its arguments read from `bert_config.json`
            (keras-hub names).
        tokenizer: `kbert.data.tokenizers.Tokenizer` or None. The directory's
            `vocab.txt` (else its `tokenizer.json`), or the caller's override,
            with the tokenizer setting: the caller's `do_lower_case`, else the
            recorded one, else True (False for a kind without lower casing);
            None only when opened with `vocabulary_optional` and there is none.
        pretrained_settings: dict. What the directory records about using its
            encoder, for `Task.use_pretrained_settings` (see
            `kbert.checkpoints.pretrained.pretrained_settings`).
    """

    is_finetuned = False

    path: str
    where: str
    encoder_class: type
    encoder_config: dict[str, Any]
    tokenizer: Tokenizer | None = dataclasses.field(repr=False)
    pretrained_settings: dict[str, Any]

    @property
    def vocab_file(self) -> str | None:
        """The tokenizer's file (`vocab.txt` or `tokenizer.json`): what exports copy."""
        return self.tokenizer.file if self.tokenizer is not None else None

    @property
    def vocabulary(self) -> list[str]:
        """The tokenizer's tokens, one per embedding row (none without a tokenizer)."""
        return self.tokenizer.vocabulary if self.tokenizer is not None else []

    @property
    def do_lower_case(self) -> bool | None:
        """The tokenizer's lower casing (None without a tokenizer)."""
        return self.tokenizer.do_lower_case if self.tokenizer is not None else None

    @property
    def max_sequence_length(self) -> int:
        """The encoder's positions: the longest `max_seq_length` it takes."""
        return int(self.encoder_config["max_sequence_length"])

    @property
    def sentence_config(self) -> dict[str, Any] | None:
        """`sentence_config.json` (how the encoder pools sentence vectors); None when absent."""
        return self.pretrained_settings["sentence_config"]

    def encoder(self, **overrides) -> Encoder:
        """Builds the directory's encoder with its weights.

        Args:
            **overrides: encoder arguments to change, such as
                `dropout=0.0` or `output_all_layers=True` (sizes must stay as saved).

        Returns:
            The encoder (a fine-tuned directory's is the fine-tuned encoder).
        """
        return build_encoder(self.path, self.encoder_class, self.encoder_config, **overrides)

    def preprocessor(self, max_seq_length: int) -> TextPreprocessor:
        """The `TextPreprocessor` of the directory's tokenizer.

        Args:
            max_seq_length: int. Packed length; at most the encoder's positions.

        Returns:
            The `TextPreprocessor`.

        Raises:
            ValueError: `max_seq_length` is under 3 or beyond the encoder's positions,
                or the directory has no vocabulary.
        """
        check_max_seq_length(max_seq_length, self.max_sequence_length)
        if self.tokenizer is None:
            names = " or ".join(kind.file_name for kind in TOKENIZERS)
            raise ValueError(f"{self.where} has no {names} to tokenize with.")
        return TextPreprocessor(self.tokenizer, max_seq_length)


@dataclasses.dataclass(frozen=True)
class PretrainedDir(ModelDir):
    """A checked pre-trained directory (`kbert-pretrain` model_dir, `kbert-convert` output).

    Example:

    >>> directory = kbert.checkpoints.open_model_dir("minilm/")
    >>> encoder = directory.encoder(dropout=0.0)
    >>> preprocessor = directory.preprocessor(128)
    """

    def pretrainer(self, next_sentence: bool = True, **overrides) -> MaskedLMPretrainer:
        """The architecture's pre-trainer over the encoder, its heads loaded when the directory has them.

        Args:
            next_sentence: bool. Whether a `BertPretrainer` has the NSP head.
            **overrides: encoder arguments to change, such as `dtype`.

        Returns:
            The `BertPretrainer` (a ModernBERT directory: its
            `ModernBertPretrainer`; see `kbert.checkpoints.load_pretrainer`).
        """
        return load_pretrainer(self.path, next_sentence=next_sentence, **overrides)


@dataclasses.dataclass(frozen=True)
class FinetunedDir(ModelDir):
    """A checked fine-tuned directory (`kbert-finetune` or `kbert-distill` model_dir).

    Its encoder may also start another fine-tuning, as a pre-trained one does.

    Args:
        task_config: `TaskConfig`. What the model is for (`task_config.json`).

    Example:

    >>> directory = kbert.checkpoints.open_model_dir("runs/sst2")
    >>> directory.task_config.task, directory.is_finetuned
    ('glue', True)
    >>> classifier = directory.model()
    """

    is_finetuned = True

    task_config: TaskConfig

    def model(self) -> keras.Model:
        """Loads the task model (`task_model.keras`, uncompiled)."""
        return load_task_model(self.path)


def open_model_dir(path: str, flag: str | None = None, vocab_file: str | None = None,
                   do_lower_case: bool | None = None, vocab_flag: str | None = None, *,
                   vocabulary_optional: bool = False) -> PretrainedDir | FinetunedDir:
    """Opens a pre-trained or fine-tuned model directory, checking it once.

    Args:
        path: str. The directory (`gs://` works).
        flag: str or None. The caller's flag naming it (`--init_checkpoint`,
            `--model_dir`, `--teacher_dir`), so errors say `--flag=path`;
            None names the path alone.
        vocab_file: str or None. A vocabulary to use instead of the directory's
            `vocab.txt` (or `tokenizer.json`); refused when it differs from
            that one. Defaults to the directory's.
        do_lower_case: bool or None. The tokenizer setting to use instead of
            the recorded one. Defaults to the recorded one, else True (False,
            and True refused, for a `tokenizer.json`).
        vocab_flag: str or None. The caller's flag that overrides the
            vocabulary (`--vocab_file`), named in the vocabulary errors; None
            when the caller has no such flag.
        vocabulary_optional: bool. For callers that never tokenize
            (pre-training reads token ids): a directory without a vocabulary
            opens, with `vocab_file` None; one it has is checked as always.
            Defaults to False (a missing vocabulary is an error).

    Returns:
        A `FinetunedDir` when the directory has `task_config.json`, else a
        `PretrainedDir`.

    Raises:
        FileNotFoundError: not a directory, or a file the kind needs is missing
            (the path and the file are named).
        ValueError: a config is unreadable, the vocabulary does not fit the
            encoder's embedding rows (both counts are named), or the override
            vocabulary differs from the directory's.

    Example:

    >>> directory = kbert.checkpoints.open_model_dir("minilm/", flag="--init_checkpoint")
    >>> directory.is_finetuned, len(directory.vocabulary), directory.do_lower_case
    (False, 30522, True)
    """
    where = f"{flag}={path}" if flag else path
    if not tf.io.gfile.isdir(path):
        raise FileNotFoundError(f"{where} is not a directory.")
    task_config = read_task_config(path) if is_finetuned(path) else None
    _check_files(path, where, flag, task_config is not None)
    encoder_class, encoder_config = read_encoder_config(os.path.join(path, BERT_CONFIG))
    recorded = read_tokenizer_config(path)
    if task_config is not None:
        _check_same_lower_case(path, recorded["do_lower_case"], task_config)
        recorded_lower_case = task_config.do_lower_case
    else:
        recorded_lower_case = recorded["do_lower_case"]
    if vocabulary_optional and vocab_file is None and recorded["vocab_file"] is None:
        tokenizer = None
    else:
        tokenizer = _tokenizer(where, recorded["vocab_file"], vocab_file, vocab_flag,
                               do_lower_case, recorded_lower_case,
                               encoder_config["vocabulary_size"])
    common = dict(path=path, where=where, encoder_class=encoder_class,
                  encoder_config=encoder_config, tokenizer=tokenizer,
                  pretrained_settings=pretrained_settings(path))
    if task_config is not None:
        return FinetunedDir(**common, task_config=task_config)
    return PretrainedDir(**common)


def model_dir_kind(path: str) -> str | None:
    """What kind of model directory `path` looks like, without checking it.

    For callers that accept other things too (a SavedModel export); everything
    else opens the directory with `open_model_dir`.

    Args:
        path: str. Any path.

    Returns:
        `"finetuned"` (it has `task_config.json`), `"pretrained"` (it has
        `bert_config.json`), or None.
    """
    if is_finetuned(path):
        return "finetuned"
    if tf.io.gfile.exists(os.path.join(path, BERT_CONFIG)):
        return "pretrained"
    return None


def _check_files(path: str, where: str, flag: str | None, finetuned: bool) -> None:
    if finetuned:
        for name in (TASK_MODEL, BERT_CONFIG, ENCODER_WEIGHTS):
            if not tf.io.gfile.exists(os.path.join(path, name)):
                raise FileNotFoundError(
                    f"{where} has {TASK_CONFIG} but {name} is missing; a fine-tuned directory "
                    f"holds {TASK_CONFIG}, {TASK_MODEL}, {BERT_CONFIG}, {ENCODER_WEIGHTS} and "
                    f"{VOCAB} as kbert-finetune writes them.")
        return
    for name in (BERT_CONFIG, ENCODER_WEIGHTS):
        if not tf.io.gfile.exists(os.path.join(path, name)):
            raise FileNotFoundError(
                f"{where} is neither a fine-tuned directory ({TASK_CONFIG}) nor a kbert "
                f"pre-trained one: {name} is missing. Point {flag or 'it'} at a kbert-pretrain "
                "model_dir, a kbert-convert output_dir or a kbert-finetune model_dir.")


def _tokenizer(where: str, recorded: str | None, vocab_file: str | None, vocab_flag: str | None,
               do_lower_case: bool | None, recorded_lower_case: bool | None,
               vocabulary_size: int) -> Tokenizer:
    """The tokenizer to use, checked against the directory's own and the embedding rows.

    Args:
        where: str. How errors name the directory.
        recorded: str or None. The directory's tokenizer file.
        vocab_file: str or None. The caller's override of it.
        vocab_flag: str or None. The caller's flag for `vocab_file`.
        do_lower_case: bool or None. The caller's setting; refused when True
            for a kind without lower casing.
        recorded_lower_case: bool or None. The directory's record, used when
            the caller gives none (None: the kind's default, True for WordPiece);
            ignored for a kind without lower casing.
        vocabulary_size: int. The encoder's embedding rows.
    """
    if vocab_file is None:
        if recorded is None:
            names = [kind.file_name for kind in TOKENIZERS]
            fix = (f"pass {vocab_flag}" if vocab_flag else
                   f"copy the {names[0]} (or {' or '.join(names[1:])}) the model was trained "
                   "with into it")
            raise FileNotFoundError(f"{where} has no {' or '.join(names)}; {fix}.")
        vocab_file = recorded
    kind = tokenizer_class(vocab_file)
    if not kind.lower_casing:
        if do_lower_case:
            raise ValueError(f"{where} tokenizes with the {kind.kind} {vocab_file}, which has no "
                             "lower casing; drop do_lower_case.")
    elif do_lower_case is None and recorded_lower_case is not None:
        do_lower_case = bool(recorded_lower_case)
    tokenizer = kind.from_file(vocab_file, do_lower_case)
    if recorded is not None and vocab_file != recorded:
        if tokenizer_class(recorded) is not kind or kind.read_vocabulary(
                recorded) != tokenizer.vocabulary:
            name = vocab_flag or "vocab_file"
            raise ValueError(
                f"{name}={vocab_file} differs from the {kind.noun} {recorded} of {where}; drop "
                f"{name} to use the model's own.")
    # Hugging Face models may have more embedding rows than tokens (rounded up
    # for speed); the ids the tokenizer makes must all have a row.
    rows = tokenizer.vocabulary_size
    if rows > vocabulary_size or (rows != vocabulary_size and not kind.allows_spare_rows):
        raise ValueError(
            f"{vocab_file} has {rows} tokens but the encoder of {where} has "
            f"{vocabulary_size} embedding rows; use the {kind.file_name} the model was trained "
            "with.")
    return tokenizer


def _check_same_lower_case(path: str, recorded: bool | None, task_config: TaskConfig) -> None:
    # kbert-finetune writes the setting to both files; one changed by hand would
    # make export and evaluation tokenize differently, so neither is guessed.
    if recorded is not None and bool(recorded) != bool(task_config.do_lower_case):
        raise ValueError(
            f"{os.path.join(path, TOKENIZER_CONFIG)} records do_lower_case={bool(recorded)} but "
            f"{os.path.join(path, TASK_CONFIG)} records {bool(task_config.do_lower_case)}; make "
            "them agree (the value the model was fine-tuned with).")
