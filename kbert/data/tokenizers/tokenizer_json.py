"""The one reader of Hugging Face `tokenizer.json` files (byte-level BPE), with every check kbert makes.

ModernBERT, GPT-2 and RoBERTa ship their tokenizer as one `tokenizer.json`
written by the Hugging Face `tokenizers` library: a normalizer, a
pre-tokenizer, the BPE model (vocabulary and merges), the added tokens
(`[CLS]`, `[MASK]`, ...) and a post-processor that places the special tokens
around one or two texts. `read_tokenizer_json` reads the parts kbert
tokenizes with in the graph (`kbert.data.ByteLevelBpeTokenizer`) and refuses,
naming the field, every setting it would tokenize differently from
`tokenizers`, so a directory either gets the library's ids or a clear error.
"""

from __future__ import annotations

import dataclasses
import json
import unicodedata
from typing import Any

import tensorflow as tf

TOKENIZER_JSON = "tokenizer.json"
# Unicode normalizations that `tensorflow_text.normalize_utf8` does in the graph.
_NORMALIZATIONS = ("NFC", "NFD", "NFKC", "NFKD")


def _byte_symbols() -> list[str]:
    # GPT-2's `bytes_to_unicode`: byte b is written as one printable character
    # (itself for most printable bytes, U+0100 + n for the n-th other byte), so
    # "Ġ" (U+0120) is the space byte.
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    others = [b for b in range(256) if b not in printable]
    symbols = {b: chr(b) for b in printable}
    symbols.update({b: chr(256 + n) for n, b in enumerate(others)})
    return [symbols[b] for b in range(256)]


# BYTE_SYMBOLS[b] is the vocabulary symbol of byte b.
BYTE_SYMBOLS = _byte_symbols()


@dataclasses.dataclass(frozen=True)
class AddedToken:
    """One entry of `added_tokens`: a string matched before pre-tokenization.

    Args:
        id: int. Its id.
        content: str. The text it matches.
        lstrip: bool. The match also takes the whitespace before it.
        rstrip: bool. The match also takes the whitespace after it.
        normalized: bool. Matched in the normalized text (else in the raw text).
        special: bool. A special token such as `[CLS]`.
    """

    id: int
    content: str
    lstrip: bool
    rstrip: bool
    normalized: bool
    special: bool


@dataclasses.dataclass(frozen=True)
class TokenizerJson:
    """A checked byte-level BPE `tokenizer.json`.

    Args:
        path: str. The file.
        vocab: dict of str to int. The BPE model's tokens (byte-level symbols, "Ġthe").
        merges: list of (str, str). The merge rules, highest priority first.
        added_tokens: tuple of `AddedToken`.
        normalization: str or None. "NFC", "NFD", "NFKC", "NFKD" or None.
        add_prefix_space: bool. The `ByteLevel` pre-tokenizer's setting.
        single: tuple. The post-processor's template for one text: items
            `(id, type_id)` for a special token and `("A", type_id)` for the text.
        pair: tuple. The same for two texts, with `("B", type_id)`.
    """

    path: str
    vocab: dict[str, int] = dataclasses.field(repr=False)
    merges: list[tuple[str, str]] = dataclasses.field(repr=False)
    added_tokens: tuple[AddedToken, ...] = dataclasses.field(repr=False)
    normalization: str | None
    add_prefix_space: bool
    single: tuple[tuple[Any, int], ...]
    pair: tuple[tuple[Any, int], ...]

    @property
    def vocabulary(self) -> list[str]:
        """Every token (model vocabulary and added tokens) in id order: one per embedding row."""
        by_id = {i: token for token, i in self.vocab.items()}
        by_id.update({token.id: token.content for token in self.added_tokens})
        return [by_id[i] for i in range(len(by_id))]

    def token_id(self, token: str) -> int | None:
        """The id of an added token or vocabulary entry, None when there is none."""
        for added in self.added_tokens:
            if added.content == token:
                return added.id
        return self.vocab.get(token)


def read_tokenizer_json(path: str) -> TokenizerJson:
    """Reads and checks a byte-level BPE `tokenizer.json`.

    Args:
        path: str. The file (any `tf.io.gfile` path).

    Returns:
        The `TokenizerJson`.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: it is not JSON, or uses a setting kbert cannot tokenize
            exactly as `tokenizers` does (the field and value are named).

    Example:

    >>> spec = kbert.data.read_tokenizer_json("modernbert/tokenizer.json")
    >>> spec.normalization, len(spec.vocabulary)
    ('NFC', 50368)
    """
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"tokenizer file {path!r} does not exist.")
    with tf.io.gfile.GFile(path, "rb") as f:
        try:
            config = json.loads(f.read().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"tokenizer file {path!r} is not UTF-8 JSON ({e}).") from None

    def refuse(field: str, value: Any, supported: str) -> ValueError:
        return ValueError(f"{path}: {field}={json.dumps(value)} is not supported; kbert "
                          f"tokenizes byte-level BPE tokenizer.json files with {supported}.")

    model = config.get("model") or {}
    if model.get("type") != "BPE":
        raise refuse("model.type", model.get("type"), '"BPE"')
    for field in ("dropout", "unk_token"):
        if model.get(field) is not None:
            raise refuse(f"model.{field}", model[field], "null")
    for field in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(field):
            raise refuse(f"model.{field}", model[field], 'null or ""')
    for field in ("byte_fallback", "ignore_merges"):
        if model.get(field):
            raise refuse(f"model.{field}", model[field], "false")
    vocab = {str(token): int(i) for token, i in model.get("vocab", {}).items()}
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model.get("merges", [])]
    _check_merges(path, vocab, merges)

    normalization = _normalization(config.get("normalizer"), refuse)
    pre_tokenizer = config.get("pre_tokenizer") or {}
    if pre_tokenizer.get("type") != "ByteLevel" or not pre_tokenizer.get("use_regex", True):
        raise refuse("pre_tokenizer", pre_tokenizer, 'a "ByteLevel" pre-tokenizer with use_regex')

    added = []
    for entry in config.get("added_tokens", []):
        if entry.get("single_word"):
            raise refuse(f"added_tokens[{entry['content']!r}].single_word", True, "false")
        added.append(AddedToken(int(entry["id"]), entry["content"], bool(entry.get("lstrip")),
                                bool(entry.get("rstrip")), bool(entry.get("normalized")),
                                bool(entry.get("special"))))
    _check_stripping(path, added)
    ids = sorted([*vocab.values(), *(token.id for token in added
                                     if vocab.get(token.content) != token.id)])
    if ids != list(range(len(ids))):
        raise ValueError(f"{path}: the ids of model.vocab and added_tokens are not 0..{len(ids) - 1} "
                         "each once; kbert needs one token per embedding row.")
    spec = TokenizerJson(path, vocab, merges, tuple(added), normalization,
                         bool(pre_tokenizer.get("add_prefix_space", False)), (), ())
    single, pair = _templates(config.get("post_processor"), spec, refuse)
    return dataclasses.replace(spec, single=single, pair=pair)


def normalize_added_content(content: str, normalization: str | None) -> str:
    """An added token's text as matched in normalized text (`tokenizers` normalizes it too)."""
    return unicodedata.normalize(normalization, content) if normalization else content


def _check_merges(path: str, vocab: dict[str, int], merges: list[tuple[str, str]]) -> None:
    # The in-graph BPE merges every occurrence of a word's best pair at once,
    # which equals `tokenizers`' one-at-a-time merging when a merge only uses
    # tokens made by earlier merges (true of every trained merge list).
    missing = [symbol for symbol in BYTE_SYMBOLS if symbol not in vocab]
    if missing:
        raise ValueError(f"{path}: model.vocab lacks the byte-level symbols {missing[:5]}...; "
                         "a byte-level BPE needs all 256.")
    made = {symbol: -1 for symbol in BYTE_SYMBOLS}
    for rank, merge in enumerate(merges):
        if len(merge) != 2:
            raise ValueError(f"{path}: model.merges[{rank}]={list(merge)} is not a pair.")
        a, b = merge
        if a + b not in vocab:
            raise ValueError(f"{path}: model.merges[{rank}] makes {a + b!r}, which is not in "
                             "model.vocab.")
        for part in (a, b):
            if made.get(part, rank) >= rank:
                raise ValueError(f"{path}: model.merges[{rank}] uses {part!r} before a merge "
                                 "makes it; kbert needs merges in the order they were learned.")
        made.setdefault(a + b, rank)


def _check_stripping(path: str, added: list[AddedToken]) -> None:
    # The graph matches an lstrip/rstrip token with its whitespace in one
    # regex; `tokenizers` matches contents first and then takes whitespace no
    # other match holds. They agree unless a token matched in the same text
    # (raw or normalized) starts or ends with whitespace (ModernBERT's runs of
    # spaces are normalized, its [MASK] raw).
    for normalized in (False, True):
        group = [token for token in added if token.normalized == normalized]
        stripping = [token.content for token in group if token.lstrip or token.rstrip]
        spaced = [token.content for token in group
                  if token.content[:1].isspace() or token.content[-1:].isspace()]
        if stripping and spaced:
            raise ValueError(
                f"{path}: added_tokens {stripping[0]!r} (lstrip/rstrip) and {spaced[0]!r} "
                f"(whitespace at an end) are both matched in the {'normalized' if normalized else 'raw'} "
                "text; kbert does not tokenize that combination as tokenizers does.")


def _normalization(normalizer: dict | None, refuse) -> str | None:
    if normalizer is None:
        return None
    if normalizer.get("type") == "Sequence" and len(normalizer.get("normalizers", [])) == 1:
        normalizer = normalizer["normalizers"][0]
    if normalizer.get("type") in _NORMALIZATIONS:
        return normalizer["type"]
    raise refuse("normalizer", normalizer, "no normalizer or one of NFC, NFD, NFKC, NFKD")


def _templates(post_processor: dict | None, spec: TokenizerJson, refuse):
    """The single and pair templates as `(id or "A"/"B", type_id)` items."""
    kind = (post_processor or {}).get("type")

    def special(token: str) -> int:
        token_id = spec.token_id(token)
        if token_id is None:
            raise ValueError(f"{spec.path}: the post-processor's {token!r} has no id.")
        return token_id

    if kind in ("BertProcessing", "RobertaProcessing"):
        (sep, _), (cls, _) = post_processor["sep"], post_processor["cls"]
        cls, sep = special(cls), special(sep)
        single = ((cls, 0), ("A", 0), (sep, 0))
        if kind == "BertProcessing":
            return single, single + (("B", 1), (sep, 1))
        return single, single + ((sep, 0), ("B", 0), (sep, 0))
    if kind == "TemplateProcessing":
        templates = []
        for name, sequences in (("single", ("A",)), ("pair", ("A", "B"))):
            items = []
            for piece in post_processor[name]:
                if "SpecialToken" in piece:
                    token_ids = post_processor["special_tokens"][piece["SpecialToken"]["id"]]["ids"]
                    items += [(int(i), int(piece["SpecialToken"]["type_id"])) for i in token_ids]
                else:
                    items.append((piece["Sequence"]["id"], int(piece["Sequence"]["type_id"])))
            if tuple(item for item, _ in items if isinstance(item, str)) != sequences:
                raise refuse(f"post_processor.{name}", post_processor[name],
                             f"the sequences {' then '.join('$' + s for s in sequences)} once each")
            templates.append(tuple(items))
        return tuple(templates)
    raise refuse("post_processor", post_processor,
                 "TemplateProcessing, BertProcessing or RobertaProcessing (special tokens around "
                 "the texts)")
