"""Users' token classification files: CoNLL columns, `tokens`/`ner_tags` rows, or text with spans.

Three forms, as the tools people label with write them:

- CoNLL columns (`.txt`, `.conll`): a word per line, its tag in the last
  column, a blank line between sentences, `-DOCSTART-` lines skipped
  (`kbert.tasks.token_classification.conll.read_conll`).
- Words and tags (Hugging Face's `run_ner.py`): rows with a `tokens` list and
  an `ner_tags` list of the same length; tags as strings, or as class ids
  with `TokenClassificationConfig.label_names` giving their names.
- Text and character spans (spaCy, doccano): rows with a `text` string and
  `entities` (doccano: `label`) as `[start, end, label]` spans; the words are
  found in the text (`kbert.data.words.word_spans`) and tagged IOB2
  (`kbert.tasks.token_classification.spans.tags_from_spans`).

Rows come from any file `kbert.data.table_files` reads (JSON lines, CSV, TSV,
Parquet; a CSV cell holds a list as JSON text), and a file's form is told by
its columns, so a training file and a validation file may differ.
`--text_column_name` and `--label_column_name` name other columns; the form
then follows the first row's value (a list of words, or a text).

Example:

>>> sentences = read_token_file("train.jsonl", "train_file")
>>> sentences[0].words, sentences[0].tags
(['EU', 'rejects', 'German', 'call'], ['B-ORG', 'O', 'B-MISC', 'O'])
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Sequence

from kbert.data.table_files import infer_value
from kbert.data.table_files import read_table
from kbert.data.words import word_spans
from kbert.tasks.token_classification.conll import read_conll
from kbert.tasks.token_classification.sentence import Sentence
from kbert.tasks.token_classification.spans import tags_from_spans

CONLL_EXTENSIONS = (".txt", ".conll")
WORDS_COLUMN, TAGS_COLUMN = "tokens", "ner_tags"  # Hugging Face's run_ner.py
TEXT_COLUMN, SPANS_COLUMNS = "text", ("entities", "label")  # spaCy's; doccano's


@dataclasses.dataclass(frozen=True)
class TokenReading:
    """How to read words and tags: the columns asked for and what a word is.

    Args:
        text_column: str or None. The words' or the text's column; None:
            `tokens`, else `text`.
        label_column: str or None. The tags' or the spans' column; None:
            `ner_tags` beside words, `entities` (or `label`) beside a text.
        label_names: sequence of str or None. Tag names by class id, for
            integer tags.
        split_punctuation: bool. A text's punctuation characters are words of
            their own (`kbert.data.words.word_spans`).
    """

    text_column: str | None = None
    label_column: str | None = None
    label_names: Sequence[str] | None = None
    split_punctuation: bool = True


def read_token_file(path: str, flag: str, reading: TokenReading = TokenReading(),
                    labelled: bool = True) -> list[Sentence]:
    """Reads a token classification file of any form.

    Args:
        path: str. The file; `.txt` and `.conll` are CoNLL columns, other
            extensions tables (`kbert.data.table_files`).
        flag: str. The flag that named it (`train_file`), for errors.
        reading: `TokenReading`. Columns and word rule.
        labelled: bool. Tags are required; False: a file without a label
            column gives sentences whose `tags` are None (to predict).

    Returns:
        list of `Sentence`, each with its `source` (`file:line`).

    Raises:
        ValueError: a missing column (the columns found are listed), a bad
            row (named by file and line), or an empty file.
    """
    if is_conll_file(path):
        if path.endswith(".gz"):
            raise ValueError(f"--{flag}={path}: a CoNLL file is read uncompressed; gunzip it.")
        return read_conll(path, label_names=None)
    table = read_table(path, flag)
    text_column, label_column = _columns(table.columns, reading, labelled, f"--{flag}={path}")
    spans = label_column in SPANS_COLUMNS or _holds_spans(table.rows, label_column)
    sentences = []
    for row in table.rows:
        values = row.values
        if text_column not in values:
            raise ValueError(f"{row.source}: no {text_column!r} field; the row has "
                             f"{sorted(values)}.")
        text = infer_value(values[text_column])
        labels = None
        if label_column is not None:
            if values.get(label_column) is None:
                raise ValueError(f"{row.source}: no {label_column!r} field (or it is empty); "
                                 f"the row has {sorted(values)}.")
            labels = infer_value(values[label_column])
        if isinstance(text, str):
            sentences.append(sentence_from_text(text, labels, row.source, reading, spans))
        else:
            sentences.append(sentence_from_words(text, labels, row.source, reading))
    return sentences


def is_conll_file(path: str) -> bool:
    """Whether a file is read as CoNLL columns (by its extension, `.txt` or `.conll`)."""
    base = path[:-3] if path.endswith(".gz") else path
    return os.path.splitext(base)[1].lower() in CONLL_EXTENSIONS


def sentence_from_words(words: Any, tags: Any, source: str,
                        reading: TokenReading = TokenReading()) -> Sentence:
    """A sentence from a word list and its tag list (or None), checked.

    Args:
        words: list of str.
        tags: list of str (or of int class ids with `reading.label_names`), or None.
        source: str. Named in errors.
        reading: `TokenReading`.

    Returns:
        `Sentence`.
    """
    if not isinstance(words, (list, tuple)) or not all(isinstance(w, str) for w in words):
        raise ValueError(f"{source}: the words must be a list of strings; got {words!r:.80}.")
    words = list(words)
    if tags is None:
        return Sentence(words, None, source=source)
    tags = _tag_names(tags, source, reading.label_names)
    if len(tags) != len(words):
        raise ValueError(f"{source}: {len(words)} words but {len(tags)} tags; give one tag per "
                         "word.")
    return Sentence(words, tags, source=source)


def sentence_from_text(text: str, labels: Any, source: str,
                       reading: TokenReading = TokenReading(), spans: bool = True) -> Sentence:
    """A sentence from a text: its words found by the word rule, tagged from spans or a tag list.

    Args:
        text: str.
        labels: `[start, end, label]` spans (`spans=True`), one tag per word
            (`spans=False`), or None.
        source: str. Named in errors.
        reading: `TokenReading`. Its `split_punctuation` is the word rule.
        spans: bool. `labels` are character spans.

    Returns:
        `Sentence` with the text and each word's offsets.
    """
    offsets = word_spans(text, reading.split_punctuation)
    words = [text[start:end] for start, end in offsets]
    if labels is None:
        tags = None
    elif spans:
        if not isinstance(labels, (list, tuple)):
            raise ValueError(f"{source}: the entities must be a list of [start, end, label] "
                             f"spans; got {labels!r:.80}.")
        tags = tags_from_spans(text, offsets, labels, source)
    else:
        tags = _tag_names(labels, source, reading.label_names)
        if len(tags) != len(words):
            rule = "whitespace and punctuation" if reading.split_punctuation else "whitespace"
            raise ValueError(f"{source}: the text splits into {len(words)} words (at {rule}) "
                             f"but {len(tags)} tags are given: {words[:8]}...")
    return Sentence(words, tags, text, offsets, source)


def _columns(columns: Sequence[str], reading: TokenReading, labelled: bool,
             where: str) -> tuple[str, str | None]:
    """The file's text (or words) column and label column, or an error listing its columns."""
    text_column = reading.text_column
    if text_column is None:
        text_column = next((c for c in (WORDS_COLUMN, TEXT_COLUMN) if c in columns), None)
        if text_column is None:
            raise ValueError(f"{where}: no {WORDS_COLUMN!r} column (words, with {TAGS_COLUMN!r}) "
                             f"and no {TEXT_COLUMN!r} column (a text, with 'entities' spans); "
                             f"the columns are {list(columns)}. Name yours with "
                             "--text_column_name (and --label_column_name).")
    elif text_column not in columns:
        raise ValueError(f"{where}: no column {text_column!r} (--text_column_name); the "
                         f"columns are {list(columns)}.")
    label_column = reading.label_column
    if label_column is None:
        candidates = (TAGS_COLUMN,) if text_column == WORDS_COLUMN else SPANS_COLUMNS
        if text_column not in (WORDS_COLUMN, TEXT_COLUMN):
            candidates = (TAGS_COLUMN, *SPANS_COLUMNS)
        label_column = next((c for c in candidates if c in columns), None)
        if label_column is None and labelled:
            raise ValueError(f"{where}: no label column beside {text_column!r}: expected "
                             f"{' or '.join(map(repr, candidates))}; the columns are "
                             f"{list(columns)}. Name yours with --label_column_name.")
    elif label_column not in columns:
        if labelled:
            raise ValueError(f"{where}: no column {label_column!r} (--label_column_name); the "
                             f"columns are {list(columns)}.")
        label_column = None
    return text_column, label_column


def _tag_names(tags: Any, source: str, label_names: Sequence[str] | None) -> list[str]:
    """A row's tags as names: strings as they are, class ids through `label_names`."""
    if not isinstance(tags, (list, tuple)):
        raise ValueError(f"{source}: the tags must be a list, one per word; got {tags!r:.80}.")
    names = []
    for tag in tags:
        if isinstance(tag, str) and tag.strip():
            names.append(tag)
        elif isinstance(tag, int) and not isinstance(tag, bool):
            if not label_names:
                raise ValueError(f"{source}: the tags are class ids ({list(tags)[:8]}); set "
                                 "TokenClassificationConfig.label_names to their names in id "
                                 "order (Hugging Face's features['ner_tags'].feature.names).")
            if not 0 <= tag < len(label_names):
                raise ValueError(f"{source}: tag id {tag} is outside "
                                 f"TokenClassificationConfig.label_names' {len(label_names)} "
                                 "names.")
            names.append(label_names[tag])
        else:
            raise ValueError(f"{source}: tag {tag!r} is neither a tag name nor a class id.")
    return names


def _holds_spans(rows, label_column: str | None) -> bool:
    """Whether a label column holds spans (lists of `[start, end, label]`), by its first
    non-empty list."""
    for row in rows:
        labels = infer_value(row.values.get(label_column))
        if isinstance(labels, (list, tuple)) and labels:
            return isinstance(labels[0], (list, tuple, dict))
    return False
