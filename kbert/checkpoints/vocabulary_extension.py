"""Growing a pre-trained WordPiece vocabulary with a domain's words (`kbert-vocab extend`).

A released vocabulary splits a domain's frequent words into several pieces
("myocardial" -> "my ##oc ##ard ##ial"), which spends sequence length and
asks the model to learn the word from pieces that mean other things. The
usual answer (google-research/bert#9) is to put such words into the
`[unusedN]` slots BERT's vocabulary reserves, then to append rows, and to
continue pre-training. Here a new token's embedding row starts as the mean
of the rows of the pieces the old vocabulary split it into (the masked-LM
output bias likewise), as Hugging Face's `resize_token_embeddings` does with
the old embeddings' statistics (huggingface/transformers#33325), rather than
at random: the new token starts near what the model already understands.

Every old token keeps its id and its rows bit for bit, so text without the
new words tokenizes exactly as before. WordPiece matches the longest prefix
in the vocabulary first, so a whole word that is in `vocab.txt` always
becomes that one token, in `kbert.data.BertTokenizer` (pre-training data) and
in `kbert.data.TextPreprocessor` (fine-tuning and serving) alike.

Example:

>>> counts = kbert.data.vocab.count_words(["domain.txt"], load_tokenizer("minilm/"))
>>> words = kbert.data.vocab.frequent_split_words(counts, max_new_tokens=500)
>>> extension = extend_vocabulary("minilm/", words, "minilm-domain/", counts=counts,
...                               corpus_files=["domain.txt"])
>>> extension.tokens_per_word_before, extension.tokens_per_word_after
(1.42, 1.21)
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
from typing import Sequence

import keras
import numpy as np
import tensorflow as tf

from kbert.checkpoints.model_dir import ModelDir
from kbert.checkpoints.model_dir import open_model_dir
from kbert.checkpoints.pretrained import ELECTRA_PRETRAINER_WEIGHTS
from kbert.checkpoints.pretrained import PRETRAINER_WEIGHTS
from kbert.checkpoints.pretrained import load_pretrainer
from kbert.checkpoints.pretrained import save_pretrained
from kbert.data.text_files import iter_lines
from kbert.data.tokenizers import WordpieceTokenizer
from kbert.data.vocab import WordCounter
from kbert.data.vocab import WordCounts
from kbert.data.vocab import count_words
from kbert.files import atomic_directory
from kbert.files import check_output_dir
from kbert.files import write_text
from kbert.models.bert.bert_pretrainer import BertPretrainer

# What the extended directory records about the words it added.
EXTENSION_RECORD = "vocabulary_extension.json"
UNUSED_TOKEN = re.compile(r"\[unused\d+\]")


@dataclasses.dataclass(frozen=True)
class VocabularyExtension:
    """What `extend_vocabulary` did (also written to the directory's `vocabulary_extension.json`).

    Args:
        added: list of dict. Each new word: `word`, `id`, `pieces` (the old
            tokens its rows were averaged from) and `slot` (`"unused"` or
            `"appended"`).
        already_in_vocabulary: list of str. Words asked for that were tokens already.
        vocabulary_size_before: int.
        vocabulary_size_after: int.
        tokens_per_word_before: float or None. Over `corpus_files`, when given.
        tokens_per_word_after: float or None.
        notes: list of str. What was left behind (e.g. ELECTRA heads).
    """

    added: list[dict]
    already_in_vocabulary: list[str]
    vocabulary_size_before: int
    vocabulary_size_after: int
    tokens_per_word_before: float | None = None
    tokens_per_word_after: float | None = None
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def filled_unused(self) -> int:
        """New words put into `[unusedN]` slots."""
        return sum(1 for item in self.added if item["slot"] == "unused")

    @property
    def appended(self) -> int:
        """New words given new rows."""
        return sum(1 for item in self.added if item["slot"] == "appended")


def read_words_file(path: str) -> list[str]:
    """Reads a list of words to add, one per line (blank lines are skipped).

    Args:
        path: str. The file.

    Returns:
        The words in file order.

    Raises:
        ValueError: a line holds whitespace inside a word (named with its line).
    """
    words = []
    for number, text, _, _ in iter_lines(path):
        if not text:
            continue
        if re.search(r"\s", text):
            raise ValueError(
                f"--words_file={path}:{number}: {text!r} contains whitespace; a vocabulary token "
                "is one word (BERT splits text at whitespace before WordPiece): put one word a line.")
        words.append(text)
    return words


def extend_vocabulary(model_dir: str, words: Sequence[str], output_dir: str, *,
                      max_new_tokens: int | None = None, append_rows: bool = True,
                      overwrite: bool = False, counts: WordCounts | None = None,
                      corpus_files: str | Sequence[str] | None = None) -> VocabularyExtension:
    """Writes a copy of a pre-trained directory whose vocabulary also holds `words`.

    New words go into the `[unusedN]` slots first (in id order), then into
    appended rows. A new token's embedding row (and masked-LM output bias) is
    the mean of the rows of the pieces the old vocabulary split it into; every
    other row is copied bit for bit. The directory is written atomically: on
    any error nothing is left at `output_dir`.

    Args:
        model_dir: str. A pre-trained directory with a WordPiece `vocab.txt`
            (kbert-pretrain, TF1- or Hugging Face-converted).
        words: list of str. Words to add, as a user writes them; each is
            normalized as the model's tokenizer does (lower cased for an
            uncased model) and must stay one word. Words already in the
            vocabulary and repeats are skipped.
        output_dir: str. The new directory.
        max_new_tokens: int or None. Refuse more new words than this.
            Defaults to no limit.
        append_rows: bool. Whether rows may be appended once the `[unusedN]`
            slots are full; False keeps the embedding's shape. Defaults to True.
        overwrite: bool. Replace an existing `output_dir`. Defaults to False.
        counts: `WordCounts` or None. `corpus_files` counted under the old
            vocabulary, when the caller has them already.
        corpus_files: str, list of str or None. A corpus over which tokens per
            word are measured before and after.

    Returns:
        The `VocabularyExtension`.

    Raises:
        ValueError: a BPE or fine-tuned directory, a word that is not one word
            (punctuation splits it) or that WordPiece cannot spell, too many
            words for `max_new_tokens` or for the free `[unusedN]` slots
            without `append_rows`, or an existing `output_dir`.

    Example:

    >>> extension = kbert.checkpoints.extend_vocabulary(
    ...     "minilm/", ["myocardial", "troponin"], "minilm-cardio/")
    >>> [item["slot"] for item in extension.added]
    ['unused', 'unused']
    """
    check_output_dir(output_dir, overwrite)
    directory = open_model_dir(model_dir, flag="--model_dir")
    check_extendable(directory)
    tokenizer = directory.tokenizer
    vocabulary = tokenizer.vocabulary
    new_words, known = _new_words(words, tokenizer)
    if max_new_tokens is not None and len(new_words) > max_new_tokens:
        raise ValueError(f"{len(new_words)} new words but --max_new_tokens={max_new_tokens}; "
                         "shorten the list or raise --max_new_tokens.")
    slots = [i for i, token in enumerate(vocabulary) if UNUSED_TOKEN.fullmatch(token)]
    if len(new_words) > len(slots) and not append_rows:
        raise ValueError(
            f"{len(new_words)} new words but {directory.vocab_file} has {len(slots)} free "
            "[unusedN] slots and --noappend_rows keeps the embedding's shape; add at most "
            f"{len(slots)} words (--max_new_tokens={len(slots)}) or allow --append_rows.")
    ids = slots[:len(new_words)] + list(
        range(len(vocabulary), len(vocabulary) + max(0, len(new_words) - len(slots))))
    new_vocabulary = vocabulary + [""] * (len(ids) - min(len(ids), len(slots)))
    for word, i in zip(new_words, ids):
        new_vocabulary[i] = word
    pieces = {i: new_words[word] for word, i in zip(new_words, ids)}

    old_model, notes = _load_source(directory)
    new_encoder = directory.encoder_class(
        **{**directory.encoder_config, "vocabulary_size": len(new_vocabulary)})
    new_model = (BertPretrainer(new_encoder, next_sentence=old_model.next_sentence)
                 if isinstance(old_model, BertPretrainer) else new_encoder)
    _copy_rows(old_model, new_model, len(vocabulary), pieces)
    new_tokenizer = WordpieceTokenizer(new_vocabulary, tokenizer.do_lower_case)
    _check_single_tokens(new_tokenizer, dict(zip(new_words, ids)))

    before = after = None
    if corpus_files is not None:
        counts = counts or count_words(corpus_files, tokenizer)
        before = counts.tokens_per_word
        after = count_words(corpus_files, new_tokenizer).tokens_per_word
    extension = VocabularyExtension(
        added=[{"word": word, "id": i, "pieces": [vocabulary[p] for p in new_words[word]],
                "slot": "unused" if i < len(vocabulary) else "appended"}
               for word, i in zip(new_words, ids)],
        already_in_vocabulary=known, vocabulary_size_before=len(vocabulary),
        vocabulary_size_after=len(new_vocabulary), tokens_per_word_before=before,
        tokens_per_word_after=after, notes=notes)
    with atomic_directory(output_dir, overwrite=overwrite) as temporary:
        save_pretrained(temporary, new_encoder,
                        pretrainer=new_model if new_model is not new_encoder else None,
                        sentence_config=directory.sentence_config)
        new_tokenizer.save(temporary)  # vocab.txt and tokenizer_config.json
        record = {**dataclasses.asdict(extension), "source": model_dir}
        write_text(os.path.join(temporary, EXTENSION_RECORD),
                   json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return extension


def check_extendable(directory: ModelDir) -> None:
    """Refuses a directory whose vocabulary `extend_vocabulary` cannot grow.

    Args:
        directory: `ModelDir` from `open_model_dir`.

    Raises:
        ValueError: a byte-level BPE (`tokenizer.json`) or a fine-tuned directory.
    """
    if not isinstance(directory.tokenizer, WordpieceTokenizer):
        raise ValueError(f"{directory.where} tokenizes with the {directory.tokenizer.kind} "
                         f"{directory.vocab_file}; kbert-vocab extend supports WordPiece "
                         "vocab.txt directories only.")
    if directory.is_finetuned:
        raise ValueError(f"{directory.where} is a fine-tuned directory; extend the pre-trained "
                         "directory it was fine-tuned from, then pre-train and fine-tune again.")


def _new_words(words: Sequence[str],
               tokenizer: WordpieceTokenizer) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """The words to add with their old pieces, and the words that are tokens already."""
    counter = WordCounter(tokenizer)
    found, found_pieces, lines = counter.words(list(words))
    per_word: dict[int, list[tuple[str, tuple[int, ...]]]] = collections.defaultdict(list)
    for text, word_pieces, line in zip(found, found_pieces, lines):
        per_word[line].append((text, word_pieces))
    unk = tokenizer.unk_id
    new: dict[str, tuple[int, ...]] = {}
    known: list[str] = []
    for index, word in enumerate(words):
        if re.search(r"\s", word):
            raise ValueError(f"word {word!r} contains whitespace; a vocabulary token is one word.")
        parts = per_word.get(index, [])
        if len(parts) != 1:
            raise ValueError(
                f"word {word!r} is {len(parts)} words to BERT's tokenizer "
                f"({[text for text, _ in parts]}: it splits at punctuation and CJK characters); "
                "WordPiece never sees it whole, so it cannot become one token.")
        text, word_pieces = parts[0]
        if word_pieces == (unk,):
            raise ValueError(f"word {word!r} tokenizes to [UNK] (a character the vocabulary "
                             "lacks, or longer than 100 bytes): no pieces to start its row from.")
        if len(word_pieces) == 1:
            if text not in known:
                known.append(text)
        elif text not in new:
            new[text] = word_pieces
    return new, known


def _load_source(directory) -> tuple[keras.Model, list[str]]:
    """The directory's pre-trainer (heads loaded) when it has BERT heads, else its encoder; notes."""
    if tf.io.gfile.exists(os.path.join(directory.path, PRETRAINER_WEIGHTS)) and (
            directory.encoder_class.__name__ == "BertEncoder"):
        try:
            model = load_pretrainer(directory.path, next_sentence=True)
        except ValueError:  # heads saved without the NSP head
            model = load_pretrainer(directory.path, next_sentence=False)
        return model, []
    notes = []
    if tf.io.gfile.exists(os.path.join(directory.path, ELECTRA_PRETRAINER_WEIGHTS)):
        notes.append(f"{directory.path} has ELECTRA pre-training heads "
                     f"({ELECTRA_PRETRAINER_WEIGHTS}); the extended directory keeps the encoder "
                     "only.")
    return directory.encoder(), notes


def _copy_rows(old: keras.Model, new: keras.Model, vocabulary_size: int,
               pieces: dict[int, tuple[int, ...]]) -> None:
    """Copies every weight; rows of a vocabulary-indexed weight for new ids are their pieces' mean."""
    old_weights, new_weights = old.weights, new.weights
    if [w.path for w in old_weights] != [w.path for w in new_weights]:
        raise RuntimeError("the extended model's weights do not line up with the source's")
    embedding_paths = {w.path for w in _token_embedding_weights(old)}
    for old_weight, new_weight in zip(old_weights, new_weights):
        value = keras.ops.convert_to_numpy(old_weight)
        # The token embedding (and any tied reverse) and the masked-LM output
        # bias are the weights with one row per token.
        if old_weight.path in embedding_paths or (
                old_weight.path.endswith("output_bias") and value.shape == (vocabulary_size,)):
            grown = np.zeros(tuple(new_weight.shape), value.dtype)
            grown[:vocabulary_size] = value
            for i, word_pieces in pieces.items():
                grown[i] = value[list(word_pieces)].astype(np.float64).mean(0).astype(value.dtype)
            value = grown
        new_weight.assign(value)


def _token_embedding_weights(model: keras.Model) -> list:
    encoder = model.encoder if hasattr(model, "encoder") else model
    return [w for w in encoder.token_embedding.weights if w.shape[0] == encoder.vocabulary_size]


def _check_single_tokens(tokenizer: WordpieceTokenizer, ids: dict[str, int]) -> None:
    # WordPiece's longest-match-first makes a whole word in the vocabulary one
    # token; checked here, before anything is written, with the tokenizer itself.
    if not ids:
        return
    got = tokenizer.tokenize(tf.constant(list(ids))).to_list()
    for (word, i), tokens in zip(ids.items(), got):
        if tokens != [i]:
            raise RuntimeError(f"the extended vocabulary tokenizes {word!r} as {tokens}, not [{i}]")
