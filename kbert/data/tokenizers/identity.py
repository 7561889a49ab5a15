"""Which tokenizer a file is: its kind, size and a hash of what its ids mean (`TokenizerIdentity`).

Pre-training data records the tokenizer it was made with in its sidecar, and
`kbert-pretrain` refuses data whose tokenizer is not the model's. Two
tokenizers are the same when each id means the same token, so the hash is
over what gives ids their meaning: a WordPiece `vocab.txt`'s bytes (its
tokens, one a line: what data sidecars have always recorded as
`vocab_sha256`), a byte-level BPE `tokenizer.json`'s tokens in id order and
its merge rules (so the same tokenizer saved with other indentation is the
same). Comparing sizes alone is not enough: a vocabulary of the same size
with other tokens trains the model on ids that mean other words.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json

from kbert.data.tokenizers.byte_level_bpe import ByteLevelBpeTokenizer
from kbert.data.tokenizers.loading import tokenizer_class
from kbert.data.tokenizers.tokenizer_json import read_tokenizer_json
from kbert.data.vocabulary import read_vocab
from kbert.data.vocabulary import vocab_sha256


@dataclasses.dataclass(frozen=True)
class TokenizerIdentity:
    """A tokenizer file's kind, size and hash, and where they were read.

    Args:
        kind: str. `Tokenizer.kind`: "WordPiece" or "byte-level BPE".
        file: str or None. The file, as given (None when not recorded).
        sha256: str or None. `tokenizer_sha256` of the file (None when not recorded).
        size: int or None. Its ids (None when not recorded).

    Example:

    >>> identity = TokenizerIdentity.of_file("bpe/tokenizer.json")
    >>> identity.describe()
    'the byte-level BPE bpe/tokenizer.json (1,024 ids, sha256 5d41402abc4b...)'
    """

    kind: str
    file: str | None
    sha256: str | None
    size: int | None

    @classmethod
    def of_file(cls, path: str) -> TokenizerIdentity:
        """Reads a `vocab.txt` or `tokenizer.json` (its kind by its extension).

        Args:
            path: str. The file (any `tf.io.gfile` path).

        Returns:
            The `TokenizerIdentity`.

        Raises:
            FileNotFoundError: no such file.
            ValueError: the file is unreadable (named).
        """
        kind = tokenizer_class(path)
        return cls(kind.kind, path, tokenizer_sha256(path), len(kind.read_vocabulary(path)))

    def same_as(self, other: TokenizerIdentity) -> bool:
        """Whether both are known to be one tokenizer: equal hashes, else equal kinds and sizes.

        A side that recorded no hash (sidecars of other tools) is compared by
        kind and size only; one that recorded no size, by kind.
        """
        if self.sha256 and other.sha256:
            return self.sha256 == other.sha256
        if self.kind != other.kind:
            return False
        return self.size is None or other.size is None or self.size == other.size

    def describe(self) -> str:
        """How errors name it: "the WordPiece vocab.txt (30,522 ids, sha256 0123abcd4567...)"."""
        facts = [f"{self.size:,} ids" if self.size is not None else None,
                 f"sha256 {self.sha256[:12]}..." if self.sha256 else None]
        facts = [fact for fact in facts if fact]
        return (f"the {self.kind} {self.file or 'tokenizer'}"
                + (f" ({', '.join(facts)})" if facts else ""))


def tokenizer_sha256(path: str) -> str:
    """The hex sha256 of what a tokenizer file's ids mean.

    Args:
        path: str. A WordPiece `vocab.txt` (its bytes are hashed, as
            `kbert.data.vocab_sha256`) or a byte-level BPE `tokenizer.json`
            (its tokens in id order and its merges, as compact JSON).

    Returns:
        str: 64 hex digits.

    Example:

    >>> tokenizer_sha256("vocab.txt") == kbert.data.vocab_sha256("vocab.txt")
    True
    """
    if tokenizer_class(path) is not ByteLevelBpeTokenizer:
        read_vocab(path)  # The one reader's errors for a missing or bad file.
        return vocab_sha256(path)
    spec = read_tokenizer_json(path)
    content = json.dumps([spec.vocabulary, [" ".join(merge) for merge in spec.merges]],
                         ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(content.encode("utf-8")).hexdigest()
