"""kbert-index: embed a document collection into a vector index, search it, evaluate runs.

    kbert-index build --model_dir=minilm --corpus=beir/corpus.jsonl --index_dir=indexes/docs
    kbert-index build --model_dir=minilm --corpus=more.jsonl --index_dir=indexes/docs --add
    kbert-index search --index_dir=indexes/docs --queries=beir/queries.jsonl --top_k=100 \\
        --output=run.trec [--exact] [--rerank_model_dir=runs/rerank --rerank_top_k=50 --rerank_fusion=rrf]
    kbert-index evaluate --run=run.trec --qrels=beir/qrels/test.tsv

An exact index is also a SavedModel: kbert-serve --model_base_path=indexes/docs serves its
`search` signature. See docs/retrieval.md.
"""

from __future__ import annotations

import json
import logging
import time

from absl import flags

from kbert.bin import common

COMMANDS = ("build", "search", "evaluate")

flags.DEFINE_string("index_dir", None, "The index directory (numbered versions below it).")
# build
flags.DEFINE_string("model_dir", None, "build: the sentence encoder: a pre-trained directory (kbert-convert/"
                    "kbert-pretrain output) or a fine-tuned similarity/retrieval model_dir. With --add it "
                    "defaults to the index's own.")
flags.DEFINE_multi_string("corpus", None, "build: BEIR corpus.jsonl file(s) ({\"_id\", \"title\", \"text\"} "
                          "per line); repeat the flag for several.")
flags.DEFINE_enum("backend", None, ["exact", "faiss"], "build: exact (vectors inside the SavedModel, "
                  "brute force; up to about a million documents) or faiss (pip install -e '.[ann]'). "
                  "Defaults to exact, or the index's own with --add.")
flags.DEFINE_bool("add", False, "build: add the corpus to the existing index (old documents are not "
                  "embedded again; ids must be new).")
flags.DEFINE_bool("overwrite", False, "build: replace an existing index.")
flags.DEFINE_integer("batch_size", 64, "Texts per embedding call (build: documents, search: queries).")
flags.DEFINE_integer("max_seq_length", None, "build, pre-trained directories: longest input in wordpieces "
                     "(default: the model's sentence_config.json, else 128).")
flags.DEFINE_enum("faiss_type", "auto", ["auto", "hnsw", "ivf"], "build --backend=faiss: HNSW or IVF-Flat; "
                  "auto is HNSW below a million documents, else IVF.")
flags.DEFINE_integer("hnsw_m", None, "HNSW neighbours per node (default 32).")
flags.DEFINE_integer("ef_construction", None, "HNSW build-time search depth (default 200).")
flags.DEFINE_integer("ef_search", None, "HNSW query-time search depth (default 128); higher: better recall.")
flags.DEFINE_integer("nlist", None, "IVF lists (default 4 sqrt(documents)).")
flags.DEFINE_integer("nprobe", None, "IVF lists searched per query (default nlist / 8).")
flags.DEFINE_integer("serving_top_k", 10, "build --backend=exact: hits the served `search` signature returns "
                     "(`search_top_k` takes any).")
flags.DEFINE_integer("keep_versions", 2, "build: index versions kept (older ones are removed).")
flags.DEFINE_bool("skip_ops_check", False, "build: publish without the fresh-process TF Serving ops check.")
# search
flags.DEFINE_string("queries", None, "search: queries JSONL ({\"_id\", \"text\"} per line, BEIR queries.jsonl).")
flags.DEFINE_integer("top_k", 100, "search: documents per query in the run.")
flags.DEFINE_string("output", None, "search: the TREC run file to write (qid Q0 docid rank score tag).")
flags.DEFINE_bool("exact", False, "search: brute force over the stored vectors whatever the back-end (to "
                  "measure an approximate index's recall).")
flags.DEFINE_string("rerank_model_dir", None, "search: a cross-encoder (fine-tuned --task=rerank directory or "
                    "its export) re-scoring the top --rerank_top_k hits.")
flags.DEFINE_integer("rerank_top_k", 50, "search: hits re-scored by the cross-encoder per query.")
flags.DEFINE_enum("rerank_fusion", "none", ["none", "rrf", "interpolate"], "search: order of the "
                  "re-scored hits: none = the cross-encoder's score alone; rrf = reciprocal-rank fusion "
                  "with the first stage's ranking; interpolate = z-scored first-stage and cross-encoder "
                  "scores mixed by --rerank_fusion_weight.")
flags.DEFINE_float("rerank_fusion_weight", 0.5, "search: the cross-encoder's share with "
                   "--rerank_fusion=interpolate (0..1).")
# evaluate
flags.DEFINE_string("run", None, "evaluate: a TREC run file.")
flags.DEFINE_string("qrels", None, "evaluate: judgements, BEIR qrels TSV or TREC qrels.")
FLAGS = flags.FLAGS


def build() -> None:
    from kbert.index import build_index

    options = {name: getattr(FLAGS, flag) for name, flag in (
        ("hnsw_m", "hnsw_m"), ("ef_construction", "ef_construction"), ("ef_search", "ef_search"),
        ("nlist", "nlist"), ("nprobe", "nprobe")) if getattr(FLAGS, flag) is not None}
    if FLAGS.faiss_type != "auto":
        options["faiss_type"] = FLAGS.faiss_type
    if options and FLAGS.backend != "faiss" and not FLAGS.add:
        raise ValueError(f"--{sorted(options)[0]} applies to --backend=faiss only.")
    build_index(FLAGS.corpus or [], FLAGS.index_dir, model_dir=FLAGS.model_dir, backend=FLAGS.backend,
                add=FLAGS.add, overwrite=FLAGS.overwrite, batch_size=FLAGS.batch_size,
                max_seq_length=FLAGS.max_seq_length, faiss_options=options,
                serving_top_k=FLAGS.serving_top_k, check=not FLAGS.skip_ops_check,
                keep_versions=FLAGS.keep_versions, progress=print)


def search() -> None:
    from kbert.files import write_text
    from kbert.index import IndexSearcher
    from kbert.retrieval.beir import format_run
    from kbert.retrieval.beir import read_queries

    if not FLAGS.queries or not FLAGS.output:
        raise ValueError("kbert-index search needs --queries (JSONL) and --output (the TREC run to write).")
    queries = read_queries(FLAGS.queries)
    searcher = IndexSearcher(FLAGS.index_dir, exact=FLAGS.exact, rerank_model_dir=FLAGS.rerank_model_dir,
                             rerank_top_k=FLAGS.rerank_top_k,
                             rerank_fusion=FLAGS.rerank_fusion,
                             rerank_fusion_weight=FLAGS.rerank_fusion_weight)
    query_ids, texts = list(queries), list(queries.values())
    run = {}
    started = time.perf_counter()
    for start in range(0, len(texts), FLAGS.batch_size):
        results = searcher.search(texts[start:start + FLAGS.batch_size], FLAGS.top_k)
        run.update(results.run(query_ids[start:start + FLAGS.batch_size]))
    seconds = time.perf_counter() - started
    write_text(FLAGS.output, format_run(run, tag=searcher.tag))
    print(f"kbert-index: {len(texts)} queries in {seconds:.2f} s ({len(texts) / seconds:.1f} queries/s, "
          f"{searcher.tag}); wrote {FLAGS.output}")


def evaluate() -> None:
    from kbert.retrieval.beir import read_qrels
    from kbert.retrieval.beir import read_run
    from kbert.retrieval.metrics import evaluate_run

    if not FLAGS.run or not FLAGS.qrels:
        raise ValueError("kbert-index evaluate needs --run (TREC run) and --qrels.")
    results = evaluate_run(read_run(FLAGS.run), read_qrels(FLAGS.qrels))
    for name, value in results.items():
        print(f"{name}\t{value:.4f}" if isinstance(value, float) else f"{name}\t{value}")
    print(json.dumps(results))


def main(argv: list[str]) -> None:
    if len(argv) != 2 or argv[1] not in COMMANDS:
        raise ValueError(f"expected one command, {' | '.join(COMMANDS)}; got {argv[1:]}.")
    logging.getLogger("kbert").setLevel(logging.INFO)
    if argv[1] != "evaluate" and not FLAGS.index_dir:
        raise ValueError(f"kbert-index {argv[1]} needs --index_dir.")
    try:
        {"build": build, "search": search, "evaluate": evaluate}[argv[1]]()
    except ImportError as e:  # faiss missing: one line, with the install command
        raise ValueError(str(e)) from None


def run() -> None:
    common.run(main)


if __name__ == "__main__":
    run()
