"""Vector indexes of documents embedded by a kbert sentence encoder: build, search, evaluate.

An index directory holds numbered versions, each a SavedModel with the index's
files in `assets.extra/` (see `kbert.index.metadata`). With the exact back-end
the document vectors live inside the SavedModel, whose `search` signature takes
query text and returns the top-k ids, scores and texts (`tf.matmul` +
`tf.math.top_k`), so `kbert-serve` or stock TF Serving serve the index like any
model. With the faiss back-end (the `ann` extra: `pip install -e '.[ann]'`) the SavedModel
embeds queries and `index.faiss` finds neighbours; `kbert-serve --index_dir`
adds a search endpoint for it. `kbert-index` is the command-line front end
(docs/retrieval.md).

Example:

>>> kbert.index.build_index(["corpus.jsonl"], "indexes/docs", model_dir="minilm/")
>>> searcher = kbert.index.IndexSearcher("indexes/docs")
>>> searcher.search(["who wrote Emma?"], top_k=3).ids
"""

from kbert.index.builder import build_index
from kbert.index.metadata import IndexMetadata
from kbert.index.metadata import read_index_metadata
from kbert.index.searcher import IndexSearcher
from kbert.index.searcher import SearchResults
