"""Vocabularies: learning a BERT WordPiece `vocab.txt` (`build_vocab`) or a ModernBERT-style
byte-level BPE `tokenizer.json` (`build_bpe_tokenizer`) from raw text, and counting what a
vocabulary makes of a corpus's words (`count_words`).

`builder.py` is the front door of learning (checks, and where the corpus is
read), `learning.py` the counting and the WordPiece trainer, `bpe_learning.py`
the byte-level BPE's, `beam.py` the counting as an Apache Beam pipeline
(imported only with `runner=...`);
`coverage.py` counts a corpus's words and the pieces a vocabulary splits them
into (what `kbert-vocab extend` chooses new tokens from).
"""

from kbert.data.vocab.builder import build_bpe_tokenizer
from kbert.data.vocab.builder import build_vocab
from kbert.data.vocab.coverage import SplitWordChoice
from kbert.data.vocab.coverage import WordCounter
from kbert.data.vocab.coverage import WordCounts
from kbert.data.vocab.coverage import choose_split_words
from kbert.data.vocab.coverage import count_words
from kbert.data.vocab.coverage import frequent_split_words
