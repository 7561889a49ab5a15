"""WordPiece vocabularies of converted models: extract from `tokenizer.json`, write, check.

Reading a `vocab.txt` is `kbert.data.read_vocab`, the one reader every part of kbert uses.
"""

from __future__ import annotations

import tensorflow as tf

from kbert.files import read_json


def vocab_from_tokenizer_json(path: str) -> list[str]:
    """Extracts the WordPiece vocabulary, ordered by id, from a Hugging Face `tokenizer.json`.

    Args:
        path: str. The `tokenizer.json` of a BERT (WordPiece) tokenizer.

    Returns:
        The tokens in id order (added tokens included at their ids).

    Example:

    >>> vocab_from_tokenizer_json("all-MiniLM-L6-v2/tokenizer.json")[:2]
    ['[PAD]', '[unused0]']
    """
    tokenizer = read_json(path, "tokenizer.json")
    model = tokenizer.get("model") or {}
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise ValueError(
            f"{path}: tokenizer model is {model.get('type')!r}, not a WordPiece vocabulary; "
            "kbert converts BERT (WordPiece) tokenizers only. Provide a vocab.txt."
        )
    by_id = {int(i): token for token, i in model["vocab"].items()}
    for added in tokenizer.get("added_tokens") or []:
        by_id.setdefault(int(added["id"]), added["content"])
    if sorted(by_id) != list(range(len(by_id))):
        gaps = sorted(set(range(max(by_id) + 1)) - set(by_id))[:10]
        raise ValueError(f"{path}: token ids are not contiguous (no token for ids {gaps}...), "
                         "so they cannot be written as vocab.txt lines.")
    return [by_id[i] for i in range(len(by_id))]


def lowercase_from_tokenizer_json(path: str) -> bool | None:
    """Returns the `lowercase` setting of a `tokenizer.json`'s BertNormalizer, or None."""
    normalizer = read_json(path, "tokenizer.json").get("normalizer") or {}
    normalizers = normalizer.get("normalizers", [normalizer])
    for item in normalizers:
        if item.get("type") == "BertNormalizer" and "lowercase" in item:
            return bool(item["lowercase"])
        if item.get("type") == "Lowercase":
            return True
    return None


def infer_do_lower_case(tokens: list[str]) -> bool:
    """Guesses whether a vocabulary is uncased: no upper-case letters outside `[SPECIAL]` tokens.

    Args:
        tokens: list of str. The vocabulary.

    Returns:
        True when no ordinary token has an upper-case letter (an uncased model).
    """
    for token in tokens:
        if token.startswith("[") and token.endswith("]"):
            continue
        if token != token.lower():
            return False
    return True


def write_vocab(tokens: list[str], path: str) -> None:
    """Writes tokens as `vocab.txt`, one per line, refusing tokens a line can't hold."""
    bad = [t for t in tokens if not t or any(c.isspace() for c in t)]
    if bad:
        raise ValueError(f"Cannot write {path}: {len(bad)} token(s) are empty or contain "
                         f"whitespace, e.g. {bad[:5]!r}; vocab.txt holds one token per line.")
    with tf.io.gfile.GFile(path, "w") as f:
        f.write("\n".join(tokens) + "\n")


def check_vocab_size(tokens: list[str], rows: int, vocab_source: str, weights_source: str) -> None:
    """Raises if the vocabulary and the word-embedding table disagree in size."""
    if len(tokens) != rows:
        raise ValueError(
            f"{vocab_source} has {len(tokens)} tokens but the word embeddings of "
            f"{weights_source} have {rows} rows; use the vocabulary released with these weights."
        )
