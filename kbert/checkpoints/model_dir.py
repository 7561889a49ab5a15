"""The one door to a model directory: `open_model_dir(path)` checks it once and hands out its parts.

A model directory is pre-trained (`bert_config.json` + `encoder.weights.h5`, see
`kbert.checkpoints.pretrained`) or fine-tuned (those plus `task_config.json` +
`task_model.keras`, see `kbert.checkpoints.finetuned`). Fine-tuning,
distillation, export, the index and `tools/extract_features.py` open
directories here and nowhere else, so every one of them gets the same checks,
made when the directory is opened and before anything is built or written:

- the files are present (which ones decides pre-trained or fine-tuned),
- `bert_config.json` (and `task_config.json`, `sentence_config.json`) are readable,
- the vocabulary is present, holds BERT's input tokens, and has as many
  tokens as the encoder has embedding rows; it is a WordPiece `vocab.txt` or,
  for ModernBERT-style models, a Hugging Face byte-level BPE `tokenizer.json`
  (used when there is no `vocab.txt`; at most as many tokens as rows),
- the tokenizer settings: `do_lower_case` as recorded, True when unrecorded
  (False for a `tokenizer.json`, which has no lower casing).

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
from kbert.checkpoints.pretrained import tokenizer_file_name
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.data.text_preprocessor import check_max_seq_length
from kbert.data.tokenizer_json import TOKENIZER_JSON
from kbert.data.tokenizer_json import TokenizerJson
from kbert.data.tokenizer_json import read_tokenizer_json
from kbert.data.vocabulary import INPUT_TOKENS
from kbert.data.vocabulary import read_vocab
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
        vocab_file: str or None. The vocabulary used: the directory's `vocab.txt`
            (else its `tokenizer.json`), or the caller's override; None only
            when opened with `vocabulary_optional` and there is none.
        vocabulary: list of str. Its tokens, one per embedding row (empty when
            `vocab_file` is None).
        do_lower_case: bool. The tokenizer setting: the caller's override, else
            the recorded one, else True; False with `tokenizer_json`.
        pretrained_settings: dict. What the directory records about using its
            encoder, for `Task.use_pretrained_settings` (see
            `kbert.checkpoints.pretrained.pretrained_settings`).
        tokenizer_json: `TokenizerJson` or None. The byte-level BPE tokenizer
            when `vocab_file` is a `tokenizer.json`; None for WordPiece.
    """

    is_finetuned = False

    path: str
    where: str
    encoder_class: type
    encoder_config: dict[str, Any]
    vocab_file: str | None
    vocabulary: list[str] = dataclasses.field(repr=False)
    do_lower_case: bool
    pretrained_settings: dict[str, Any]
    tokenizer_json: TokenizerJson | None = dataclasses.field(default=None, repr=False,
                                                             kw_only=True)

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
        """The `TextPreprocessor` of the directory's vocabulary (or `tokenizer.json`) and settings.

        Args:
            max_seq_length: int. Packed length; at most the encoder's positions.

        Returns:
            The `TextPreprocessor`.

        Raises:
            ValueError: `max_seq_length` is under 3 or beyond the encoder's positions,
                or the directory has no vocabulary.
        """
        check_max_seq_length(max_seq_length, self.max_sequence_length)
        if self.vocab_file is None:
            raise ValueError(f"{self.where} has no {VOCAB} or {TOKENIZER_JSON} to tokenize with.")
        if self.tokenizer_json is not None:
            return TextPreprocessor.from_tokenizer_json(self.tokenizer_json, max_seq_length)
        return TextPreprocessor(self.vocabulary, self.do_lower_case, max_seq_length)


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
    if vocabulary_optional and vocab_file is None and recorded["vocab_file"] is None:
        vocab_file, vocabulary, tokenizer_json = None, [], None
    else:
        vocab_file, vocabulary, tokenizer_json = _vocabulary(
            path, where, recorded["vocab_file"], vocab_file, vocab_flag,
            encoder_config["vocabulary_size"])
    if tokenizer_json is not None:
        if do_lower_case:
            raise ValueError(f"{where} tokenizes with the byte-level BPE {vocab_file}, which "
                             "has no lower casing; drop do_lower_case.")
        do_lower_case = False
    if task_config is not None:
        _check_same_lower_case(path, recorded["do_lower_case"], task_config)
        recorded_lower_case = task_config.do_lower_case
    else:
        recorded_lower_case = recorded["do_lower_case"]
    if do_lower_case is None:
        do_lower_case = True if recorded_lower_case is None else bool(recorded_lower_case)
    common = dict(path=path, where=where, encoder_class=encoder_class, encoder_config=encoder_config, vocab_file=vocab_file,
                  vocabulary=vocabulary, tokenizer_json=tokenizer_json, do_lower_case=do_lower_case,
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


def _vocabulary(path: str, where: str, recorded: str | None, vocab_file: str | None,
                vocab_flag: str | None,
                vocabulary_size: int) -> tuple[str, list[str], TokenizerJson | None]:
    """The vocabulary to use, checked against the directory's own and the embedding rows.

    Returns `(vocab_file, vocabulary, tokenizer_json)`, the last None for WordPiece.
    """
    if vocab_file is None:
        if recorded is None:
            fix = (f"pass {vocab_flag}" if vocab_flag else
                   f"copy the {VOCAB} (or {TOKENIZER_JSON}) the model was trained with into it")
            raise FileNotFoundError(f"{where} has no {VOCAB} or {TOKENIZER_JSON}; {fix}.")
        vocab_file = recorded
    if tokenizer_file_name(vocab_file) == TOKENIZER_JSON:
        return _tokenizer_json(where, recorded, vocab_file, vocab_flag, vocabulary_size)
    vocabulary = read_vocab(vocab_file, INPUT_TOKENS)
    if recorded is not None and vocab_file != recorded:
        if tokenizer_file_name(recorded) != VOCAB or read_vocab(recorded) != vocabulary:
            name = vocab_flag or "vocab_file"
            raise ValueError(
                f"{name}={vocab_file} differs from the vocabulary {recorded} of {where}; drop "
                f"{name} to use the model's own.")
    if len(vocabulary) != vocabulary_size:
        raise ValueError(
            f"{vocab_file} has {len(vocabulary)} tokens but the encoder of {where} has "
            f"{vocabulary_size} embedding rows; use the {VOCAB} the model was trained with.")
    return vocab_file, vocabulary, None


def _tokenizer_json(where: str, recorded: str | None, vocab_file: str, vocab_flag: str | None,
                    vocabulary_size: int) -> tuple[str, list[str], TokenizerJson]:
    """A byte-level BPE `tokenizer.json`, checked as `_vocabulary` checks a `vocab.txt`."""
    spec = read_tokenizer_json(vocab_file)
    vocabulary = spec.vocabulary
    if recorded is not None and vocab_file != recorded:
        if (tokenizer_file_name(recorded) != TOKENIZER_JSON
                or read_tokenizer_json(recorded).vocabulary != vocabulary):
            name = vocab_flag or "vocab_file"
            raise ValueError(
                f"{name}={vocab_file} differs from the tokenizer {recorded} of {where}; drop "
                f"{name} to use the model's own.")
    # Hugging Face models may have more embedding rows than tokens (rounded up
    # for speed); the ids the tokenizer makes must all have a row.
    if len(vocabulary) > vocabulary_size:
        raise ValueError(
            f"{vocab_file} has {len(vocabulary)} tokens but the encoder of {where} has "
            f"{vocabulary_size} embedding rows; use the {TOKENIZER_JSON} the model was trained with.")
    return vocab_file, vocabulary, spec


def _check_same_lower_case(path: str, recorded: bool | None, task_config: TaskConfig) -> None:
    # kbert-finetune writes the setting to both files; one changed by hand would
    # make export and evaluation tokenize differently, so neither is guessed.
    if recorded is not None and bool(recorded) != bool(task_config.do_lower_case):
        raise ValueError(
            f"{os.path.join(path, TOKENIZER_CONFIG)} records do_lower_case={bool(recorded)} but "
            f"{os.path.join(path, TASK_CONFIG)} records {bool(task_config.do_lower_case)}; make "
            "them agree (the value the model was fine-tuned with).")
