"""BERT's WordPiece (`vocab.txt` + `do_lower_case`) as a `Tokenizer`."""

from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np
import tensorflow as tf

from kbert.data.tokenizers.bert_wordpiece_tokenizer import BertWordpieceTokenizer
from kbert.data.tokenizers.tokenizer import TOKENIZER_CONFIG
from kbert.data.tokenizers.tokenizer import Tokenizer
from kbert.data.vocabulary import INPUT_TOKENS
from kbert.data.vocabulary import read_vocab
from kbert.files import write_text

VOCAB = "vocab.txt"


class WordpieceTokenizer(Tokenizer):
    """google-research/bert's WordPiece over a `vocab.txt`, packed `[CLS] a [SEP] (b [SEP])`.

    Tokenizes with `BertWordpieceTokenizer` (the original normalization, then
    tensorflow-text's `FastBertTokenizer`); a piece starts a word unless it
    begins with "##". What `kbert-pretrain`, `kbert-convert` from BERT
    checkpoints and `kbert-finetune` on them keep in a model directory.

    Args:
        vocabulary: list of str. Tokens in id order; must contain `[PAD]`,
            `[UNK]`, `[CLS]` and `[SEP]`.
        do_lower_case: bool. Lower case and strip accents (uncased models).
            Defaults to True.
        file: str or None. The `vocab.txt` it was read from. Defaults to None.
        name: str. Module name.

    Example:

    >>> tokenizer = WordpieceTokenizer.from_file("minilm/vocab.txt", do_lower_case=True)
    >>> tokenizer.tokenize(tf.constant(["Héllo, world…"]))
    <tf.RaggedTensor [[7592, 1010, 2088, 1529]]>
    """

    file_name = VOCAB
    kind = "WordPiece"
    noun = "vocabulary"
    lower_casing = True
    allows_spare_rows = False
    _TF_MODULE_IGNORED_PROPERTIES = frozenset(("starts_word",)).union(
        Tokenizer._TF_MODULE_IGNORED_PROPERTIES)

    def __init__(self, vocabulary: Sequence[str], do_lower_case: bool = True,
                 file: str | None = None, name: str = "wordpiece_tokenizer"):
        missing = [token for token in INPUT_TOKENS if token not in vocabulary]
        if missing:
            raise ValueError(f"The vocabulary lacks {missing}; BERT inputs need {list(INPUT_TOKENS)}.")
        super().__init__(vocabulary, name=name)
        self.file = file
        self.do_lower_case = bool(do_lower_case)
        self.word_prefix = ""
        self.pad_id = vocabulary.index("[PAD]")
        self.cls_id = vocabulary.index("[CLS]")
        self.sep_id = vocabulary.index("[SEP]")
        self.unk_id = vocabulary.index("[UNK]")
        self.mask_id = vocabulary.index("[MASK]") if "[MASK]" in vocabulary else None
        self.templates = (
            ((False, self.cls_id, 0), (True, 0, 0), (False, self.sep_id, 0)),
            ((False, self.cls_id, 0), (True, 0, 0), (False, self.sep_id, 0), (True, 1, 1),
             (False, self.sep_id, 1)))
        self.wordpiece = BertWordpieceTokenizer(vocabulary, self.do_lower_case)
        # WordPiece marks a word's later pieces with "##"; a piece without it
        # (an [UNK] for a whole word included) starts a word.
        self.starts_word = np.array([not token.startswith("##") for token in vocabulary])
        self._starts_word = tf.constant(self.starts_word)

    @classmethod
    def from_file(cls, path: str, do_lower_case: bool | None = None) -> "WordpieceTokenizer":
        """Reads a `vocab.txt` (checked by `kbert.data.read_vocab`).

        Args:
            path: str. The `vocab.txt`.
            do_lower_case: bool or None. None: True (uncased), as google-research/bert.

        Returns:
            The `WordpieceTokenizer`.
        """
        lower = True if do_lower_case is None else do_lower_case
        return cls(read_vocab(path, INPUT_TOKENS), lower, file=path)

    @classmethod
    def read_vocabulary(cls, path: str) -> list[str]:
        return read_vocab(path)

    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        return self.wordpiece.tokenize(texts)

    def tokenize_with_offsets(self, texts: tf.Tensor):
        pieces, starts, ends = self.wordpiece.tokenize_with_offsets(texts)
        starts_word = tf.ragged.map_flat_values(tf.gather, self._starts_word, pieces)
        return pieces, starts, ends, starts_word

    def continues_word(self) -> np.ndarray:
        """The `##` pieces: they continue the word before them."""
        return ~self.starts_word

    def save(self, directory: str) -> None:
        """Writes `vocab.txt` and `tokenizer_config.json` (`{"do_lower_case": ...}`)."""
        super().save(directory)
        write_text(os.path.join(directory, TOKENIZER_CONFIG),
                   json.dumps({"do_lower_case": self.do_lower_case}) + "\n")
