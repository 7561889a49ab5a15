"""Vocabulary learning: a BERT WordPiece `vocab.txt` from raw text (`build_vocab`).

`builder.py` is the front door (checks, and where the corpus is read),
`learning.py` the counting and the WordPiece trainer, `beam.py` the counting
as an Apache Beam pipeline (imported only with `runner=...`).
"""

from kbert.data.vocab.builder import build_vocab
