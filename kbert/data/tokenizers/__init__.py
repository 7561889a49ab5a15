"""Tokenizers: the `Tokenizer` contract, its two kinds and `load_tokenizer`.

`tokenizer.py` (`Tokenizer`: vocabulary, special ids, packing templates,
in-graph `tokenize` and `tokenize_with_offsets` with word starts, lower
casing and `word_prefix`, the files it owns), `wordpiece_tokenizer.py`
(`WordpieceTokenizer`: `vocab.txt` + `do_lower_case`) over
`bert_wordpiece_tokenizer.py` (`BertWordpieceTokenizer`: google-research/bert's
normalization and tensorflow-text's WordPiece, also what pre-training data
uses), `byte_level_bpe.py` (`ByteLevelBpeTokenizer`: a Hugging Face byte-level
BPE `tokenizer.json`, ModernBERT's) over `tokenizer_json.py`
(`read_tokenizer_json`), `loading.py` (`load_tokenizer`, `TOKENIZERS`) and
`identity.py` (`TokenizerIdentity`: a file's kind, size and the hash of what
its ids mean, which pre-training data records).
"""

from kbert.data.tokenizers.bert_wordpiece_tokenizer import BertWordpieceTokenizer
from kbert.data.tokenizers.byte_level_bpe import ByteLevelBpeTokenizer
from kbert.data.tokenizers.identity import TokenizerIdentity
from kbert.data.tokenizers.identity import tokenizer_sha256
from kbert.data.tokenizers.loading import TOKENIZERS
from kbert.data.tokenizers.loading import load_tokenizer
from kbert.data.tokenizers.loading import recorded_lower_case
from kbert.data.tokenizers.loading import tokenizer_class
from kbert.data.tokenizers.loading import tokenizer_file
from kbert.data.tokenizers.tokenizer import TOKENIZER_CONFIG
from kbert.data.tokenizers.tokenizer import Tokenizer
from kbert.data.tokenizers.tokenizer_json import TOKENIZER_JSON
from kbert.data.tokenizers.tokenizer_json import TokenizerJson
from kbert.data.tokenizers.tokenizer_json import read_tokenizer_json
from kbert.data.tokenizers.wordpiece_tokenizer import VOCAB
from kbert.data.tokenizers.wordpiece_tokenizer import WordpieceTokenizer
