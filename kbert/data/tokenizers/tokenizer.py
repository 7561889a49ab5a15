"""The `Tokenizer` contract: what kbert needs of a tokenizer, whatever its kind.

`TextPreprocessor` (tf.data and every serving graph), `open_model_dir`,
NER's words and the embedding `features` signature use a tokenizer only
through this contract, so they never ask which kind it is. A kind is one
subclass (`WordpieceTokenizer` for a `vocab.txt`, `ByteLevelBpeTokenizer` for a
Hugging Face byte-level BPE `tokenizer.json`) and one entry in
`kbert.data.tokenizers.loading.TOKENIZERS`; docs/architecture.md says how to add one.
"""

from __future__ import annotations

import abc
import os
from typing import ClassVar

import numpy as np
import tensorflow as tf

from kbert.files import copy_file
from kbert.files import write_text

# A model directory's record of the tokenizer settings: {"do_lower_case": bool}.
TOKENIZER_CONFIG = "tokenizer_config.json"
# One item of a packing template: `(True, segment index, type id)` places a
# segment's pieces, `(False, token id, type id)` one special token.
TemplateItem = tuple[bool, int, int]
Template = tuple[TemplateItem, ...]


class Tokenizer(tf.Module, abc.ABC):
    """A tokenizer kbert can pack, serve and keep in a model directory.

    It is a `tf.Module` because its tables live in the graphs that use it (a
    SavedModel tracks them through the `TextPreprocessor` holding it). A
    subclass sets, in its constructor, the attributes below and implements
    `from_file`, `read_vocabulary`, `tokenize` and `tokenize_with_offsets`.

    Attributes:
        file: str or None. The file it was read from (None when built from a
            list of tokens): what `--vocab_file` names and exports copy.
        do_lower_case: bool. Whether it lower cases (False for a kind without
            lower casing).
        word_prefix: str. What a word tokenized on its own (NER's words) is
            given first so that its pieces are those of running text: "" for
            WordPiece, " " for byte-level BPE ("Ġworld").
        pad_id: int. Padding.
        cls_id: int. The token before the text, where `[CLS]` stands.
        sep_id: int. The token after each text, where `[SEP]` stands.
        unk_id: int or None. Unknown words; None when the kind has none.
        mask_id: int or None. `[MASK]` (masked-LM), None when absent.
        templates: `(single, pair)`: what a packed row holds for one and for
            two segments, in order, as `TemplateItem`s.

    Class attributes:
        file_name: str. Its file's name inside a model directory.
        kind: str. How errors name the kind ("WordPiece", "byte-level BPE").
        noun: str. How errors call its file ("vocabulary", "tokenizer").
        lower_casing: bool. Whether `do_lower_case` applies to the kind.
        allows_spare_rows: bool. Whether an encoder may have more embedding
            rows than tokens (Hugging Face rounds ModernBERT's up); otherwise
            one row per token exactly.

    Example:

    >>> tokenizer = kbert.data.tokenizers.load_tokenizer("minilm/")
    >>> tokenizer.tokenize(tf.constant(["Hello world"])), tokenizer.cls_id
    (<tf.RaggedTensor [[7592, 2088]]>, 101)
    """

    file_name: ClassVar[str]
    kind: ClassVar[str]
    noun: ClassVar[str]
    lower_casing: ClassVar[bool]
    allows_spare_rows: ClassVar[bool]

    # A vocabulary is tens of thousands of strings: tf.Module would walk them
    # each time it looks for variables (0.4 s for 30k), so it is kept out of that walk.
    _TF_MODULE_IGNORED_PROPERTIES = frozenset(("_tokens",)).union(
        tf.Module._TF_MODULE_IGNORED_PROPERTIES)

    file: str | None
    do_lower_case: bool
    word_prefix: str
    pad_id: int
    cls_id: int
    sep_id: int
    unk_id: int | None
    mask_id: int | None
    templates: tuple[Template, Template]

    def __init__(self, tokens, name: str):
        super().__init__(name=name)
        self._tokens = tuple(tokens)

    @property
    def vocabulary(self) -> list[str]:
        """Every token in id order: one per embedding row."""
        return list(self._tokens)

    @property
    def vocabulary_size(self) -> int:
        """How many tokens (ids 0 to `vocabulary_size - 1`)."""
        return len(self._tokens)

    @classmethod
    @abc.abstractmethod
    def from_file(cls, path: str, do_lower_case: bool | None = None) -> "Tokenizer":
        """Reads and checks the kind's file.

        Args:
            path: str. The file (any `tf.io.gfile` path).
            do_lower_case: bool or None. The setting, for a kind with lower
                casing (None: its default); a kind without ignores it.

        Returns:
            The tokenizer.
        """

    @classmethod
    @abc.abstractmethod
    def read_vocabulary(cls, path: str) -> list[str]:
        """The tokens of the kind's file in id order, without building the tokenizer."""

    @abc.abstractmethod
    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Returns the ids of each string: string `[batch]` -> int32 ragged `[batch, (pieces)]`.

        Args:
            texts: string `[batch]` of valid UTF-8 (`TextPreprocessor.clean`).
        """

    @abc.abstractmethod
    def tokenize_with_offsets(self, texts: tf.Tensor):
        """Tokenizes keeping where each piece is and which pieces start a word.

        Args:
            texts: string `[batch]` of valid UTF-8.

        Returns:
            `(ids, starts, ends, starts_word)`: ragged `[batch, (pieces)]`
            ids (`tokenize`'s), int64 byte offsets `[start, end)` of each
            piece in its text as given, and bool: the piece begins a word.
        """

    def continues_word(self) -> np.ndarray:
        """Per id, whether a piece of that id continues the word of the piece before it.

        What whole-word masking of pre-training data groups by, from ids alone
        (the data holds no text): a piece that continues a word is masked with
        the pieces before it. WordPiece: the `##` pieces; byte-level BPE: the
        pieces that do not begin with a space or other whitespace byte. This
        default makes every piece a word of its own.

        Returns:
            bool array `[vocabulary_size]`.
        """
        return np.zeros(self.vocabulary_size, bool)

    def save(self, directory: str) -> None:
        """Writes the files this tokenizer owns into a model directory.

        Its file is copied byte for byte as `file_name`; a tokenizer built
        from a list of tokens writes them one a line. A kind that records
        settings beside its file (WordPiece's `do_lower_case`) writes them too.

        Args:
            directory: str. An existing directory (`gs://` works).
        """
        target = os.path.join(directory, self.file_name)
        if self.file is not None:
            copy_file(self.file, target)
        else:
            write_text(target, "\n".join(self._tokens) + "\n")

