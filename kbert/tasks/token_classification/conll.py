"""CoNLL column files: `word POS chunk NER` columns, `-DOCSTART-` lines, blank line between sentences."""

from __future__ import annotations

import os

import tensorflow as tf

from kbert.files import read_text
from kbert.tasks.token_classification.sentence import Sentence

# The CoNLL-2003 tag set, `O` first. IOB1 files (the original `eng.train`) and
# IOB2 files (most redistributions) use the same nine tags.
CONLL2003_LABELS = (
    "O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC",
)

# Split -> accepted file names, first found wins (`eng.testa` is the dev set).
CONLL_FILES = {
    "train": ("train.txt", "eng.train"),
    "dev": ("dev.txt", "valid.txt", "eng.testa"),
    "test": ("test.txt", "eng.testb"),
}


def conll_split_file(data_dir: str, split: str) -> str:
    """The CoNLL file of one split in `data_dir`.

    Args:
        data_dir: str. Folder with `train.txt`, `dev.txt` (or `valid.txt`,
            `eng.testa`), `test.txt`.
        split: str. `train`, `dev` or `test`.

    Returns:
        The path.

    Raises:
        FileNotFoundError: no such file; names the ones looked for.
    """
    if split not in CONLL_FILES:
        raise ValueError(f"split={split!r}; expected one of {sorted(CONLL_FILES)}.")
    if not tf.io.gfile.isdir(data_dir):
        raise FileNotFoundError(f"--data_dir={data_dir} is not a directory.")
    for name in CONLL_FILES[split]:
        path = os.path.join(data_dir, name)
        if tf.io.gfile.exists(path):
            return path
    raise FileNotFoundError(
        f"no {split} data in --data_dir={data_dir}: expected one of {list(CONLL_FILES[split])}."
    )


def read_conll(path: str, label_names: tuple[str, ...] | None = CONLL2003_LABELS) -> list[Sentence]:
    """Reads a CoNLL-2003 file (any number of columns; the word is first, the tag last).

    Args:
        path: str. The file.
        label_names: tuple of str or None. Allowed tags; None allows any.
            Defaults to `CONLL2003_LABELS`.

    Returns:
        list of `Sentence` (each with the `source` of its first line);
        `-DOCSTART-` lines are dropped.

    Raises:
        ValueError: a line has fewer than 2 columns or an unknown tag (the
            message names the file and line), or the file has no sentences.

    Example:

    >>> sentences = kbert.tasks.token_classification.conll.read_conll("conll2003/valid.txt")
    >>> sentences[0].words[:3], sentences[0].tags[:3]
    (['CRICKET', '-', 'LEICESTERSHIRE'], ['O', 'O', 'B-ORG'])
    """
    allowed = None if label_names is None else set(label_names)
    sentences = []
    words, tags, first_line = [], [], 0
    lines = read_text(path).split("\n")
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r")
        if not line.strip():
            if words:
                sentences.append(Sentence(words, tags, source=f"{path}:{first_line}"))
                words, tags = [], []
            continue
        columns = line.split()
        if columns[0] == "-DOCSTART-":
            continue
        if len(columns) < 2:
            raise ValueError(
                f"{path}:{number}: {line!r} has {len(columns)} column(s); expected "
                "`word POS chunk NER` (at least a word and a tag)."
            )
        if allowed is not None and columns[-1] not in allowed:
            raise ValueError(
                f"{path}:{number}: unknown tag {columns[-1]!r}; expected one of {sorted(allowed)}."
            )
        if not words:
            first_line = number
        words.append(columns[0])
        tags.append(columns[-1])
    if words:
        sentences.append(Sentence(words, tags, source=f"{path}:{first_line}"))
    if not sentences:
        raise ValueError(f"{path} has no sentences.")
    return sentences
