"""Byte-level BPE (ModernBERT, GPT-2, RoBERTa) as TensorFlow ops, with the Hugging Face `tokenizers` ids.

`ByteLevelBpeTokenizer` tokenizes inside `tf.data` and inside an exported
SavedModel (core TensorFlow and tensorflow-text ops only, so it serves from a
stock `tensorflow_model_server`) exactly as `tokenizers` does with the same
`tokenizer.json` (`kbert.data.read_tokenizer_json`), and is the `Tokenizer`
of a model directory that holds one (ModernBERT's), packed as its
post-processor says:

1. added tokens matched in the raw text (`normalized: false`, such as `[CLS]`
   or `[MASK]` with its `lstrip`), leftmost-longest;
2. the rest normalized (NFC for ModernBERT), then split on the added tokens
   matched in normalized text (ModernBERT's runs of spaces);
3. the rest pre-tokenized with GPT-2's regex;
4. each piece's bytes merged by the BPE merge rules.

Why not keras-hub's `BytePairTokenizer`: its TF path approximates GPT-2's
regex with a marker character (U+0966 in the text breaks it), differs from
`tokenizers` on runs of whitespace, knows neither normalizers nor added
tokens' `lstrip` and normalized/raw matching, and caches every word it has
seen in a `MutableHashTable` that would grow without bound in a server. So the
steps are written here with core ops: GPT-2's regex (whose `\\s+(?!\\S)`
RE2 cannot express) as boundaries between characters plus one RE2 split,
and the merges over integer ids, every occurrence of a word's best pair per
step (`tokenizers`' one-at-a-time order gives the same result for merge lists
in learned order, which `read_tokenizer_json` checks).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text
from tensorflow_text.python.ops.regex_split_ops import gen_regex_split_ops

from kbert.data.tokenizers.tokenizer import Tokenizer
from kbert.data.tokenizers.tokenizer_json import BYTE_SYMBOLS
from kbert.data.tokenizers.tokenizer_json import TOKENIZER_JSON
from kbert.data.tokenizers.tokenizer_json import TokenizerJson
from kbert.data.tokenizers.tokenizer_json import normalize_added_content
from kbert.data.tokenizers.tokenizer_json import read_tokenizer_json

# Unicode White_Space, what `tokenizers` (Oniguruma's `\s`, Rust's
# `char::is_whitespace`) calls whitespace; RE2's `\s` is ASCII only.
_WHITESPACE_RANGES = ((0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
                      (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F),
                      (0x3000, 0x3000))
# The same as the inside of an RE2 character class.
WHITESPACE = "".join(rf"\x{{{a:X}}}" + (rf"-\x{{{b:X}}}" if b > a else "")
                     for a, b in _WHITESPACE_RANGES)
# GPT-2's pre-tokenizer regex without its whitespace alternatives
# (`\s+(?!\S)|\s+`), applied to a run of non-whitespace with at most one
# space before it; whitespace is split by `_split_whitespace`.
_WORD_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+"
                 rf"| ?[^{WHITESPACE}\p{{L}}\p{{N}}]+")


class ByteLevelBpeTokenizer(Tokenizer):
    """A Hugging Face byte-level BPE `tokenizer.json` as TensorFlow ops, and as a `Tokenizer`.

    It has no lower casing and no unknown token; its special tokens and type
    ids are those of the file's post-processor, which must place one special
    token before a text and one after it (`[CLS] $A [SEP]`, as ModernBERT's
    and RoBERTa's do). A word tokenized on its own is given a space first
    (`word_prefix`), as it reads in running text ("Ġworld").

    Args:
        spec: `TokenizerJson` from `kbert.data.read_tokenizer_json`.
        token_out_type: `tf.DType`. `tf.int32` or `tf.int64`. Defaults to `tf.int32`.
        name: str. Module name.

    Example:

    >>> tokenizer = ByteLevelBpeTokenizer(kbert.data.read_tokenizer_json("tokenizer.json"))
    >>> tokenizer.tokenize(tf.constant(["Hello world", "[MASK] it"]))
    <tf.RaggedTensor [[9707, 1879], [50284, 352]]>
    """

    file_name = TOKENIZER_JSON
    kind = "byte-level BPE"
    noun = "tokenizer"
    lower_casing = False
    allows_spare_rows = True

    def __init__(self, spec: TokenizerJson, token_out_type: tf.DType = tf.int32,
                 name: str = "byte_level_bpe_tokenizer"):
        super().__init__(spec.vocabulary, name=name)
        self.file = spec.path
        self.do_lower_case = False
        # Byte-level BPE marks a word that follows a space ("Ġworld"); a word
        # tokenized on its own (NER's words) gets that space so that its pieces
        # are those of running text, as RoBERTa's `add_prefix_space` does.
        self.word_prefix = " "
        self.pad_id, self.cls_id, self.sep_id, self.mask_id = special_ids(spec)
        self.unk_id = None
        self._continues_word = word_continuations(spec)
        self.templates = tuple(
            tuple((True, "AB".index(item), type_id) if isinstance(item, str)
                  else (False, item, type_id) for item, type_id in template)
            for template in (spec.single, spec.pair))
        self.token_out_type = token_out_type
        self.normalization = spec.normalization
        self.add_prefix_space = spec.add_prefix_space
        raw = [token for token in spec.added_tokens if not token.normalized]
        normalized = [token for token in spec.added_tokens if token.normalized]
        self._raw_added = _AddedTokens(raw, None)
        self._normalized_added = _AddedTokens(normalized, spec.normalization)
        self._byte_ids = tf.constant([spec.vocab[symbol] for symbol in BYTE_SYMBOLS], tf.int64)
        # A merge (a, b) is looked up by the key a * size + b of its two ids.
        self._size = max(spec.vocab.values()) + 1
        keys = [spec.vocab[a] * self._size + spec.vocab[b] for a, b in spec.merges]
        self._merge_rank = _int_table(keys, range(len(keys)), -1)
        self._merge_result = _int_table(keys, [spec.vocab[a + b] for a, b in spec.merges], -1)
        # Per BPE id, for offsets: its bytes (one per symbol) and its leading and
        # trailing spaces ("Ġ"), which `tokenizers`' ByteLevel `trim_offsets` leaves out.
        lengths, leading, trailing = [0] * self._size, [0] * self._size, [0] * self._size
        for symbol, token_id in spec.vocab.items():
            lengths[token_id] = len(symbol)
            leading[token_id] = len(symbol) - len(symbol.lstrip(BYTE_SYMBOLS[0x20]))
            trailing[token_id] = len(symbol) - len(symbol.rstrip(BYTE_SYMBOLS[0x20]))
        self._byte_lengths = tf.constant(lengths, tf.int64)
        self._leading_spaces = tf.constant(leading, tf.int64)
        self._trailing_spaces = tf.constant(trailing, tf.int64)

    @classmethod
    def from_file(cls, path: str, do_lower_case: bool | None = None) -> "ByteLevelBpeTokenizer":
        """Reads a byte-level BPE `tokenizer.json` (checked by `kbert.data.read_tokenizer_json`).

        Args:
            path: str. The file.
            do_lower_case: bool or None. Ignored: the kind has no lower casing.

        Returns:
            The `ByteLevelBpeTokenizer`.
        """
        return cls(read_tokenizer_json(path))

    @classmethod
    def read_vocabulary(cls, path: str) -> list[str]:
        return read_tokenizer_json(path).vocabulary

    def continues_word(self) -> np.ndarray:
        """The pieces that begin with no whitespace byte ("world" in "Ġhello world" is "Ġworld").

        A word of running text begins with its space ("Ġworld"), so a piece
        without one continues the word before it: "ing" after "Ġwalk", and
        punctuation after its word ("!" after "Ġworld"). Added tokens
        (`[MASK]`, ...) stand alone.
        """
        return self._continues_word.copy()

    # Plain TensorFlow ops with no Python control flow on tensors, so
    # AutoGraph has nothing to convert; skipping it halves tracing time.
    @tf.autograph.experimental.do_not_convert
    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Returns the ids of each string, `[batch] -> [batch, (tokens)]`.

        Args:
            texts: string `[batch]` of valid UTF-8.

        Returns:
            Ragged `[batch, (tokens)]` ids of `token_out_type`, as
            `tokenizers`' `encode(text, add_special_tokens=False).ids`.
        """
        texts = tf.convert_to_tensor(texts, tf.string)
        pieces, raw_ids, _ = self._raw_added.split(texts)
        flat = pieces.flat_values
        if self.normalization:
            flat = tf_text.normalize_utf8(flat, self.normalization)
        parts, normalized_ids, _ = self._normalized_added.split(flat)
        ids, _ = self._pre_tokenize_and_merge(parts.flat_values)
        ids = _with_added(parts.with_flat_values(ids), normalized_ids)
        ids = _with_added(pieces.with_flat_values(ids), raw_ids)
        return tf.cast(ids, self.token_out_type)

    @tf.autograph.experimental.do_not_convert
    def tokenize_with_offsets(self, texts: tf.Tensor):
        """`tokenize`, and where each token is in its text, and which tokens start a word.

        Offsets are those of the `tokenizers` library with a `ByteLevel`
        post-processor's `trim_offsets` (RoBERTa's setting; ModernBERT's
        TemplateProcessing does not trim): a token's leading and trailing
        spaces ("Ġ", and whitespace an added token matched) are left out, so
        " world" covers "world" and a run of spaces covers nothing; a token
        holding part of a character covers the whole character. They are
        UTF-8 byte offsets where `tokenizers` counts characters. A word is
        one piece of GPT-2's pre-tokenization (" world", "!") or an added token.

        Where normalization (NFC) changes the length of a word (a combining
        accent), offsets inside that word are cut to it (each of its tokens
        stays inside it; `tokenizers` aligns such characters one by one);
        every other word's are exact.

        Args:
            texts: string `[batch]` of valid UTF-8.

        Returns:
            `(ids, starts, ends, starts_word)`: ragged `[batch, (tokens)]`
            ids (`tokenize`'s), int64 byte offsets `[start, end)` of each
            token in its text, and bool: the token is its word's first.

        Example:

        >>> ids, starts, ends, first = tokenizer.tokenize_with_offsets(tf.constant(["Hi  there!"]))
        >>> starts.to_list(), ends.to_list(), first.to_list()
        ([[0, 4, 4, 9]], [[2, 4, 9, 10]], [[True, True, True, True]])
        """
        if self.add_prefix_space:
            raise NotImplementedError(
                "Offsets of a tokenizer.json with add_prefix_space=true (a space not in the "
                "text) are not implemented; ModernBERT's has add_prefix_space=false.")
        texts = tf.convert_to_tensor(texts, tf.string)
        pieces, raw_ids, raw_text = self._raw_added.split(texts)
        # Normalized chunk by chunk between whitespace (which composes with
        # nothing, so the text is the same), so that an offset moved by
        # normalization is moved within its chunk only.
        chunks = _regex_split(pieces.flat_values, f"[{WHITESPACE}]+")
        normalized = chunks.flat_values
        if self.normalization:
            normalized = tf_text.normalize_utf8(normalized, self.normalization)
        flat = tf.strings.reduce_join(chunks.with_flat_values(normalized), axis=1)
        parts, normalized_ids, part_text = self._normalized_added.split(flat)
        ids, starts_word = self._pre_tokenize_and_merge(parts.flat_values)
        ids = parts.with_flat_values(ids)
        # Per token: (id, bytes, leading spaces, trailing spaces, starts a word),
        # an added token's bytes and spaces those of the text it matched.
        per_id = [ids, ids.with_flat_values(tf.gather(self._byte_lengths, ids.flat_values)),
                  ids.with_flat_values(tf.gather(self._leading_spaces, ids.flat_values)),
                  ids.with_flat_values(tf.gather(self._trailing_spaces, ids.flat_values)),
                  ids.with_flat_values(tf.cast(starts_word, tf.int64))]
        tokens = [_with_added(values, added, normalized_ids >= 0) for values, added in
                  zip(per_id, [normalized_ids, *_extent(part_text), tf.ones_like(normalized_ids)])]
        # [batch, (pieces), (tokens)]: the tokens of each piece between raw added tokens.
        tokens = [_with_added(pieces.with_flat_values(values), added, raw_ids >= 0, merge=False)
                  for values, added in zip(tokens, [raw_ids, *_extent(raw_text),
                                                    tf.ones_like(raw_ids)])]
        ids, lengths, leading, trailing, starts_word = tokens
        # `lengths` count normalized bytes; a piece between raw added tokens
        # keeps its place and its original length (`raw_text`).
        piece_length = tf.cast(tf.strings.length(raw_text), tf.int64)
        piece_offset = _offsets_in_rows(piece_length, pieces.row_splits)
        per_piece = lengths.values  # [pieces, (tokens)]
        token_piece = per_piece.value_rowids()
        within = _offsets_in_rows(per_piece.flat_values, per_piece.row_splits)
        to_original = _ChunkMap(chunks, normalized, token_piece)
        base = tf.gather(piece_offset, token_piece)
        added = tf.gather(raw_ids >= 0, token_piece)
        starts = base + tf.where(added, tf.zeros_like(within), to_original(within, end=False))
        ends = base + tf.where(added, tf.gather(piece_length, token_piece),
                               to_original(within + per_piece.flat_values, end=True))
        # `tokenizers`' `process_offsets` with `trim_offsets`.
        starts = tf.minimum(starts + leading.flat_values, ends)
        ends = tf.maximum(ends - trailing.flat_values, starts)
        starts, ends = _whole_characters(texts, tf.gather(pieces.value_rowids(), token_piece),
                                         starts, ends)
        return (tf.cast(_merge_inner(ids), self.token_out_type),
                *(_merge_inner(ids.with_flat_values(values))
                  for values in (starts, ends, starts_word.flat_values > 0)))

    def _pre_tokenize_and_merge(self, texts: tf.Tensor) -> tuple[tf.RaggedTensor, tf.Tensor]:
        """Pre-tokenizes and BPE-merges texts free of added tokens: `[n] -> [n, (ids)]`.

        Also returns, flat over the ids, whether each is the first of its
        pre-tokenized word.
        """
        if self.add_prefix_space:
            # As `tokenizers`: a space before every piece that does not start with one.
            prefix = (tf.strings.substr(texts, 0, 1) != " ") & (texts != "")
            texts = tf.where(prefix, tf.strings.join([" ", texts]), texts)
        runs = _split_whitespace(texts)
        words = _regex_split(runs.flat_values, _WORD_PATTERN)
        # Each distinct word is merged once: running text repeats its words
        # (a page of prose holds each distinct word several times), and the
        # merge loop's work grows with the bytes it holds.
        distinct, index = tf.unique(words.flat_values, out_idx=tf.int64)
        ids = tf.gather(self._merge(distinct), index)
        first = tf.equal(tf.range(tf.size(ids.flat_values, out_type=tf.int64)),
                         tf.gather(ids.row_splits, ids.value_rowids()))
        ids = _merge_inner(runs.with_flat_values(_merge_inner(words.with_flat_values(ids))))
        return ids, first

    def _merge(self, words: tf.Tensor) -> tf.RaggedTensor:
        """BPE over each word's bytes: `[n] -> [n, (ids)]` int64."""
        # Latin-1 decoding gives one code point per byte: the byte values.
        splits, byte_values = tf.raw_ops.UnicodeDecode(input=words, input_encoding="ISO-8859-1")
        size = tf.constant(self._size, tf.int64)

        def step(values, row_splits, _):
            rows = tf.RaggedTensor.from_row_splits(values, row_splits, validate=False)
            row = rows.value_rowids()
            n = tf.size(values, out_type=tf.int64)
            # Pair p is (values[p], values[p + 1]) when both are in one row.
            same_row = tf.concat([row[1:] == row[:-1], [False]], 0)
            following = tf.concat([values[1:], [0]], 0)
            rank = tf.where(same_row, self._merge_rank.lookup(values * size + following), -1)
            big = tf.constant(2**62, tf.int64)
            best = tf.math.unsorted_segment_min(tf.where(rank >= 0, rank, big), row,
                                                rows.nrows())
            chosen = (rank >= 0) & (rank == tf.gather(best, row))
            # Overlapping occurrences (a run "a a a" of pair (a, a)) merge left
            # to right: every other pair of a run of chosen pairs, from its start.
            starts = chosen & ~tf.concat([[False], chosen[:-1]], 0)
            run = tf.maximum(tf.cumsum(tf.cast(starts, tf.int64)) - 1, 0)
            index = tf.range(n)
            run_start = tf.gather(tf.math.segment_max(tf.where(starts, index, -1), run), run)
            merge = chosen & ((index - run_start) % 2 == 0)
            merged = tf.where(merge, self._merge_result.lookup(values * size + following), values)
            keep = ~tf.concat([[False], merge[:-1]], 0)  # The right half of a merged pair goes.
            kept_per_row = tf.math.unsorted_segment_sum(tf.cast(keep, tf.int64), row, rows.nrows())
            new_values = tf.boolean_mask(merged, keep)
            splits = tf.concat([[0], tf.cumsum(kept_per_row)], 0)
            return new_values, splits, tf.reduce_any(merge)

        # `step` pairs each byte with the next by shifting with one padding
        # element, which needs at least one byte: with none (a batch of empty
        # strings) there is nothing to merge and the loop does not start.
        values, splits, _ = tf.while_loop(
            lambda values, splits, changed: changed, step,
            (tf.gather(self._byte_ids, byte_values), splits, tf.size(byte_values) > 0),
            shape_invariants=(tf.TensorShape([None]), tf.TensorShape([None]), tf.TensorShape([])))
        return tf.RaggedTensor.from_row_splits(values, splits, validate=False)


class _AddedTokens(tf.Module):
    """Splits texts on a set of added tokens, leftmost-longest as `tokenizers` matches them."""

    def __init__(self, tokens, normalization):
        super().__init__()
        self.empty = not tokens
        if self.empty:
            return
        contents = [normalize_added_content(token.content, normalization) for token in tokens]
        # RE2 tries alternatives in order, so longest first gives the longest
        # match at the leftmost position.
        order = sorted(range(len(tokens)), key=lambda i: -len(contents[i]))
        alternatives = []
        for i in order:
            token = tokens[i]
            alternatives.append((f"[{WHITESPACE}]*" if token.lstrip else "") + _literal(contents[i])
                                + (f"[{WHITESPACE}]*" if token.rstrip else ""))
        self.pattern = "|".join(alternatives)
        self.exact = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
            tf.constant(contents), tf.constant([token.id for token in tokens], tf.int64)), -1)
        self.strip = rf"^[{WHITESPACE}]+|[{WHITESPACE}]+$"

    def split(self, texts: tf.Tensor) -> tuple[tf.RaggedTensor, tf.Tensor, tf.Tensor]:
        """Returns `(pieces, ids, matched)`: `[n, (pieces)]` strings, the added token
        pieces replaced by ""; `ids` `[pieces]` int64, an added token's id or -1;
        and `matched` `[pieces]`, every piece's text (what an added token matched)."""
        if self.empty:
            # Each text is its one piece; an empty text has none.
            present = texts != ""
            pieces = tf.RaggedTensor.from_row_lengths(
                tf.boolean_mask(texts, present), tf.cast(present, tf.int64), validate=False)
            return pieces, tf.fill(tf.shape(pieces.flat_values, out_type=tf.int64),
                                   tf.constant(-1, tf.int64)), pieces.flat_values
        pieces = _regex_split(texts, self.pattern)
        flat = pieces.flat_values
        is_added = tf.strings.regex_full_match(flat, self.pattern)
        # A match that took whitespace (lstrip, rstrip) is found without it.
        ids = self.exact.lookup(flat)
        ids = tf.where(ids >= 0, ids, self.exact.lookup(tf.strings.regex_replace(flat, self.strip, "")))
        ids = tf.where(is_added, ids, -1)
        return pieces.with_flat_values(tf.where(is_added, "", flat)), ids, flat


def special_ids(spec: TokenizerJson) -> tuple[int, int, int, int | None]:
    """`(pad, cls, sep, mask)` ids of a byte-level BPE `tokenizer.json`.

    Padding is its `[PAD]`, `<pad>` or `<|padding|>`; `[CLS]` and `[SEP]` are
    the special tokens its post-processor puts before and after one text;
    mask is its `[MASK]` or `<mask>` (None without one).

    Args:
        spec: `TokenizerJson` from `read_tokenizer_json`.

    Returns:
        The four ids.

    Raises:
        ValueError: no padding token, or a single template other than
            one special token, the text, one special token.
    """
    pad = next((i for i in map(spec.token_id, ("[PAD]", "<pad>", "<|padding|>")) if i is not None),
               None)
    if pad is None:
        raise ValueError(f"{spec.path} has none of [PAD], <pad>, <|padding|>; padding needs one.")
    single = spec.single
    if len(single) != 3 or single[1][0] != "A":
        raise ValueError(f"{spec.path}: the post-processor's single template is "
                         f"{[item for item, _ in single]}; kbert packs one special token "
                         "before the text and one after it ([CLS] $A [SEP]).")
    mask = next((i for i in map(spec.token_id, ("[MASK]", "<mask>")) if i is not None), None)
    return pad, single[0][0], single[2][0], mask


def word_continuations(spec: TokenizerJson) -> np.ndarray:
    """Per id of a byte-level BPE `tokenizer.json`: the piece begins with no whitespace byte.

    What `ByteLevelBpeTokenizer.continues_word` says, read from the file alone
    (pre-training data's whole-word masking needs no TensorFlow tables).

    Args:
        spec: `TokenizerJson` from `read_tokenizer_json`.

    Returns:
        bool array `[len(spec.vocabulary)]`: False for added tokens and for
        pieces whose first byte is whitespace ("Ġ" space, "Ċ" line feed, ...).
    """
    spaces = {BYTE_SYMBOLS[b] for b in b" \t\n\r\x0b\x0c"}
    continues = np.array([token[:1] not in spaces for token in spec.vocabulary], bool)
    continues[[token.id for token in spec.added_tokens]] = False
    return continues


def _split_whitespace(texts: tf.Tensor) -> tf.RaggedTensor:
    """GPT-2's whitespace rule as boundaries between characters: `[n] -> [n, (runs)]`.

    `\\s+(?!\\S)|\\s+` after the word alternatives means: a whitespace run
    before a non-space loses its last character, which, when it is a space,
    starts the next word (" world"); a run at the end stays whole. So a new
    run starts at a text's start, at whitespace after non-whitespace, at the
    last whitespace before non-whitespace, and at non-whitespace after
    whitespace other than a space. `_WORD_PATTERN` then splits each run.
    """
    # Raw ops: the ragged wrappers add hundreds of validation nodes to the graph.
    splits, code_points = tf.raw_ops.UnicodeDecode(input=texts, input_encoding="UTF-8")
    n = tf.size(code_points, out_type=tf.int64)
    chars = tf.raw_ops.UnicodeEncode(input_values=code_points, input_splits=tf.range(n + 1),
                                     output_encoding="UTF-8")
    row = tf.RaggedTensor.from_row_splits(code_points, splits, validate=False).value_rowids()
    position = tf.range(n) - tf.gather(splits, row)
    first = position == 0
    last = position == tf.gather(splits[1:] - splits[:-1], row) - 1
    space = tf.zeros_like(first)
    for low, high in _WHITESPACE_RANGES:
        space |= (code_points >= low) & (code_points <= high)
    previous = tf.concat([[False], space[:-1]], 0) & ~first
    previous_is_space = tf.concat([[False], code_points[:-1] == 0x20], 0) & ~first
    following = tf.concat([space[1:], [False]], 0)
    starts = (first | (space & ~previous) | (space & previous & ~last & ~following)
              | (~space & previous & ~previous_is_space))
    run = tf.cumsum(tf.cast(starts, tf.int64)) - 1
    joined = tf.strings.unsorted_segment_join(chars, run, tf.reduce_sum(tf.cast(starts, tf.int64)))
    runs_per_text = tf.math.unsorted_segment_sum(tf.cast(starts, tf.int64), row, tf.size(texts))
    return tf.RaggedTensor.from_row_lengths(joined, runs_per_text, validate=False)


def _regex_split(texts: tf.Tensor, pattern: str) -> tf.RaggedTensor:
    """`tensorflow_text.regex_split(texts, pattern, pattern)`: `[n] -> [n, (pieces)]`.

    The same op, called directly: tensorflow-text's wrapper also builds
    validated ragged offsets, about 300 graph nodes a call, which made tracing
    and tf.data's graph optimization several times slower.
    """
    pattern = f"({pattern})".encode("utf-8")
    pieces, _, _, row_splits = gen_regex_split_ops.regex_split_with_offsets(texts, pattern, pattern)
    return tf.RaggedTensor.from_row_splits(pieces, row_splits, validate=False)


def _with_added(ids: tf.RaggedTensor, added: tf.Tensor, is_added: tf.Tensor | None = None,
                merge: bool = True) -> tf.RaggedTensor:
    """`[n, (pieces), (ids)]` to `[n, (ids)]`, an added token's piece (no ids) replaced by its id.

    With `is_added`, `added` holds any per-piece value of an added token
    (its length, ...) and `ids` values of the same kind. With `merge=False`
    the pieces stay: `[n, (pieces), (ids)]`.
    """
    if is_added is None:
        is_added = added >= 0
    # Flat index arithmetic, not `tf.concat` of ragged rows and `merge_dims`:
    # the same values, but TensorFlow's ragged concat adds ~0.3 s of graph
    # building per call to every trace (this runs ten times in one tokenizer).
    inner = ids.values  # [pieces, (ids)]
    extra = tf.cast(is_added, inner.row_splits.dtype)
    splits = tf.concat([[0], tf.cumsum(inner.row_lengths() + extra)], 0)
    piece = inner.value_rowids()
    value_at = (tf.range(tf.size(inner.flat_values, out_type=splits.dtype))
                - tf.gather(inner.row_splits, piece) + tf.gather(splits[:-1] + extra, piece))
    flat = tf.dynamic_stitch([tf.cast(tf.boolean_mask(splits[:-1], is_added), tf.int32),
                              tf.cast(value_at, tf.int32)],
                             [tf.boolean_mask(added, is_added), inner.flat_values])
    per_piece = ids.with_values(tf.RaggedTensor.from_row_splits(flat, splits, validate=False))
    return _merge_inner(per_piece) if merge else per_piece


def _merge_inner(values: tf.RaggedTensor) -> tf.RaggedTensor:
    """`values.merge_dims(1, 2)` of a `[n, (a), (b)]` tensor, without validation ops."""
    inner = values.values
    return tf.RaggedTensor.from_row_splits(inner.values,
                                           tf.gather(inner.row_splits, values.row_splits),
                                           validate=False)


def _extent(matched: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """Bytes, leading and trailing whitespace bytes of each matched text: int64 `[n]` each."""
    length = tf.cast(tf.strings.length(matched), tf.int64)
    stripped = [tf.strings.regex_replace(matched, pattern, "")
                for pattern in (f"^[{WHITESPACE}]+", f"[{WHITESPACE}]+$")]
    leading, trailing = (length - tf.cast(tf.strings.length(text), tf.int64) for text in stripped)
    return length, leading, trailing


def _offsets_in_rows(lengths: tf.Tensor, row_splits: tf.Tensor) -> tf.Tensor:
    """Where each item starts within its row, items of `lengths` laid end to end: int64 `[n]`."""
    ends = tf.cumsum(lengths)
    starts = ends - lengths
    row = tf.RaggedTensor.from_row_splits(lengths, row_splits, validate=False).value_rowids()
    row_start = tf.gather(tf.concat([[0], ends], 0), row_splits[:-1])
    return starts - tf.gather(row_start, row)


class _ChunkMap:
    """Offsets in normalized pieces -> offsets in the original pieces, chunk by chunk.

    Args:
        chunks: ragged string `[pieces, (chunks)]`, the original text of each
            piece cut at whitespace.
        normalized: string `[chunks]`, each chunk normalized.
        token_piece: int64 `[tokens]`, the piece of each token.
    """

    def __init__(self, chunks: tf.RaggedTensor, normalized: tf.Tensor, token_piece: tf.Tensor):
        def starts(text):  # Where each chunk starts over all pieces; one past the last at the end.
            ends = tf.cumsum(tf.cast(tf.strings.length(text), tf.int64))
            total = tf.reduce_sum(ends[-1:])
            return tf.concat([[0], ends, [total]], 0)  # And one more: there may be no chunk.

        self.normalized_start = starts(normalized)
        self.original_start = starts(chunks.flat_values)
        first_chunk = chunks.row_splits[:-1]
        self.normalized_base = tf.gather(tf.gather(self.normalized_start, first_chunk), token_piece)
        self.original_base = tf.gather(tf.gather(self.original_start, first_chunk), token_piece)
        self.last = tf.size(chunks.flat_values, out_type=tf.int64) - 1

    def __call__(self, offsets: tf.Tensor, end: bool) -> tf.Tensor:
        """Normalized byte offsets within each token's piece -> original ones."""
        position = self.normalized_base + offsets
        # The chunk holding the byte at `position` (or, for an end, before it).
        chunk = tf.searchsorted(self.normalized_start, position, side="left" if end else "right",
                                out_type=tf.int64) - 1
        chunk = tf.clip_by_value(chunk, 0, tf.maximum(self.last, 0))
        into = position - tf.gather(self.normalized_start, chunk)
        normalized_length = tf.gather(self.normalized_start, chunk + 1) - tf.gather(
            self.normalized_start, chunk)
        original_length = tf.gather(self.original_start, chunk + 1) - tf.gather(
            self.original_start, chunk)
        # A chunk whose length normalization changed keeps the offsets inside it.
        moved = tf.where(into >= normalized_length, original_length,
                         tf.minimum(into, original_length))
        return tf.gather(self.original_start, chunk) + moved - self.original_base


def _whole_characters(texts: tf.Tensor, row: tf.Tensor, starts: tf.Tensor, ends: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Byte offsets widened to whole UTF-8 characters (a token may hold part of one)."""
    splits, byte_values = tf.raw_ops.UnicodeDecode(input=texts, input_encoding="ISO-8859-1")
    # A continuation byte is 10xxxxxx; a text's first byte and the end never are.
    continuation = tf.concat([tf.equal(tf.bitwise.bitwise_and(byte_values, 0xC0), 0x80),
                              [False]], 0)
    base = tf.gather(splits, row)
    for _ in range(3):  # A character has at most 3 continuation bytes.
        starts -= tf.cast(tf.gather(continuation, base + starts), tf.int64)
        ends += tf.cast(tf.gather(continuation, base + ends), tf.int64)
    return starts, ends


def _literal(text: str) -> str:
    """An RE2 pattern matching `text` literally."""
    return "".join(c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):X}}}" for c in text)


def _int_table(keys, values, default: int) -> tf.lookup.StaticHashTable:
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(
        tf.constant(list(keys), tf.int64), tf.constant(list(values), tf.int64)), default)
