"""Cross-encoder re-ranking on BEIR-format data (`--task=rerank`).

A `BertClassifier` with one output scores `[CLS] query [SEP] document [SEP]`.
Training groups each judged (query, relevant document) with `negatives`
documents drawn from the first stage's top `negative_depth` (a TREC run given
as `--train_file`, else BM25), and learns either a listwise softmax over the
group (`loss="listwise"`, the positive first) or binary cross-entropy per row
(`loss="bce"`). Evaluation re-ranks the first stage's top `rerank_top_k` for
every judged query (`--predict_file` run, else BM25) and reports MRR@10 and
nDCG@10 before (`*_first_stage`) and after, the latter both for the re-ranker
alone and fused with the first stage's ranking (`*_rrf`, `*_interpolate`; see
`kbert.retrieval.fusion`); `fusion` picks which order `eval_run.trec` and
`predictions.trec` hold.

    kbert-finetune --task=rerank --data_dir=beir/xquad-reqa --init_checkpoint=minilm \\
        --train_file=runs/train.trec --predict_file=runs/dev.trec --model_dir=runs/rerank \\
        --do_train --do_eval
"""

from __future__ import annotations

import dataclasses
import os
import random

import keras
import numpy as np
import tensorflow as tf

from kbert.data.bucketing import batch_by_length
from kbert.models.bert_classifier import BertClassifier
from kbert.retrieval import fusion as fusion_lib
from kbert.retrieval.beir import format_run
from kbert.retrieval.beir import read_corpus
from kbert.retrieval.metrics import evaluate_run
from kbert.retrieval.query_set import QuerySet
from kbert.retrieval.query_set import mine_negatives
from kbert.retrieval.query_set import read_beir_split
from kbert.tasks.base import Evaluation
from kbert.tasks.base import Task
from kbert.tasks.base import TaskData
from kbert.tasks.base import encoder_inputs
from kbert.tasks.rerank.losses import ListwiseSoftmaxLoss
from kbert.tasks.rerank.serving import RerankServingModule
from kbert.tasks.serving import RERANK_API

LOSSES = ("listwise", "bce")


@dataclasses.dataclass
class RerankConfig:
    """The re-ranking task's hyperparameters (gin: `RerankConfig.negatives = 7`).

    Args:
        loss: str. `listwise` (softmax over 1 positive + k negatives) or `bce`.
        negatives: int. Negatives per positive in a training group. Defaults to 4.
        negative_depth: int. Draw them from the first stage's top this many.
            Defaults to 30.
        mining_seed: int. Seed of that draw. Defaults to 0.
        rerank_top_k: int. Documents of the first stage re-ranked per query at
            evaluation. Defaults to 50.
        fusion: str. The order written: `none` (the re-ranker's), `rrf` or
            `interpolate` with the first stage (`kbert.retrieval.fusion`).
            Defaults to `none`.
        fusion_weight: float. `interpolate`: the re-ranker's share. Defaults to 0.5.
    """

    loss: str = "listwise"
    negatives: int = 4
    negative_depth: int = 30
    mining_seed: int = 0
    rerank_top_k: int = 50
    fusion: str = "none"
    fusion_weight: float = fusion_lib.DEFAULT_WEIGHT


@dataclasses.dataclass(frozen=True)
class TrainingGroup:
    """A query with its documents: the relevant one first, then the negatives."""

    query: str
    documents: tuple[str, ...]


class RerankTask(Task):
    """Cross-encoder re-ranking over a BEIR folder.

    Args:
        config: `RerankConfig` or None.
        task_name: str or None. The data set's name, recorded. Defaults to `beir`.

    Example:

    >>> task = RerankTask()
    >>> model = task.build_model(kbert.checkpoints.load_encoder("minilm/"))
    """

    name = "rerank"
    config_class = RerankConfig
    evaluation_fields = ("fusion", "fusion_weight")
    serving_apis = (RERANK_API,)

    def __init__(self, config: RerankConfig | None = None, task_name: str | None = None):
        super().__init__(config, task_name or "beir")
        if self.config.loss not in LOSSES:
            raise ValueError(f"RerankConfig.loss={self.config.loss!r}; expected one of {LOSSES}.")
        for field in ("negatives", "negative_depth", "rerank_top_k"):
            if getattr(self.config, field) < 1:
                raise ValueError(f"RerankConfig.{field}={getattr(self.config, field)}; it must be >= 1.")
        fusion_lib.check_fusion(self.config.fusion, self.config.fusion_weight)
        self._corpora: dict[str, list] = {}

    @property
    def model_type(self) -> str:
        return "cross_encoder"

    @property
    def text_pair(self) -> bool:
        return True

    # -- Data ---------------------------------------------------------------------------

    def check_data(self, data: TaskData, splits) -> None:
        if not data.data_dir:
            raise ValueError("--task=rerank needs --data_dir: a BEIR folder (corpus.jsonl, "
                             "queries.jsonl, qrels/<split>.tsv).")

    def input_texts(self, examples: QuerySet) -> list[list[str]]:
        """The queries, then the corpus documents (sentence by sentence); no judgements."""
        return examples.input_texts()

    def read(self, data: TaskData, split: str) -> QuerySet:
        path = os.path.join(data.data_dir, "corpus.jsonl")
        if path not in self._corpora:
            self._corpora[path] = read_corpus(path)
        first_stage = data.train_file if split == "train" else data.predict_file
        return read_beir_split(data.data_dir, split, first_stage, self._corpora[path])

    def training_rows(self, examples: QuerySet, preprocessor) -> list[TrainingGroup]:
        by_id = {d.doc_id: d for d in examples.corpus}
        negatives = mine_negatives(examples, self.config.negatives, self.config.negative_depth,
                                   random.Random(self.config.mining_seed))
        return [TrainingGroup(e.text, (by_id[doc].contents, *negatives[e.query_id]))
                for e in examples for doc, relevance in e.relevant.items() if relevance > 0]

    def dataset(self, examples, preprocessor, batch_size, is_training, seed=None):
        columns = {"query": np.asarray([g.query for g in examples], dtype=object),
                   "documents": np.asarray([list(g.documents) for g in examples], dtype=object)}
        dataset = tf.data.Dataset.from_tensor_slices(columns)
        if is_training:
            dataset = dataset.shuffle(len(examples), seed=seed,
                                      reshuffle_each_iteration=True).repeat()

        def encode(group):
            # One query against each of its documents: [group, (length)] packed pairs.
            documents = preprocessor.tokenize(group["documents"])
            queries = preprocessor.tokenize(tf.fill(tf.shape(group["documents"]), group["query"]))
            token_ids, segment_ids = preprocessor.pack_ragged([queries, documents])
            return {"token_ids": token_ids.to_tensor(), "segment_ids": segment_ids.to_tensor(),
                    "padding_mask": tf.ones_like(token_ids).to_tensor()}

        dataset = dataset.map(encode, num_parallel_calls=tf.data.AUTOTUNE)
        return batch_by_length(dataset, batch_size, preprocessor.max_seq_length,
                               bucket=False).prefetch(tf.data.AUTOTUNE)

    def training_batch(self, batch):
        # [batch, group, length] -> [batch * group, length]; labels 1 for each group's first row.
        inputs = {key: tf.reshape(value, [-1, tf.shape(value)[-1]])
                  for key, value in encoder_inputs(batch).items()}
        group = tf.shape(batch["token_ids"])[1]
        labels = tf.tile(tf.one_hot(0, group), [tf.shape(batch["token_ids"])[0]])
        return inputs, labels[:, tf.newaxis]

    # -- Model --------------------------------------------------------------------------

    def build_model(self, encoder: keras.Model) -> keras.Model:
        return BertClassifier(encoder, num_classes=1)

    def compile_arguments(self):
        if self.config.loss == "bce":
            return {"loss": keras.losses.BinaryCrossentropy(from_logits=True)}
        return {"loss": ListwiseSoftmaxLoss(group_size=1 + self.config.negatives)}

    # -- Evaluation and prediction ------------------------------------------------------

    def rerank(self, model, examples: QuerySet, preprocessor, batch_size: int,
               first_stage: dict | None = None, fusion: str | None = None) -> dict:
        """The first stage's top `rerank_top_k` of each query, re-scored, fused and re-sorted.

        Args:
            model: the cross-encoder.
            examples: `QuerySet`.
            preprocessor: `kbert.data.TextPreprocessor`.
            batch_size: int. Pairs scored at once.
            first_stage: dict query id -> [(document id, score)] best first, or
                None for `examples.first_stage`.
            fusion: str or None. `none`, `rrf` or `interpolate`; None: `config.fusion`.

        Returns:
            A run: query id -> [(document id, score)], best first.
        """
        return self.fuse(self.cross_scores(model, examples, preprocessor, batch_size, first_stage),
                         fusion)

    def cross_scores(self, model, examples: QuerySet, preprocessor, batch_size: int,
                     first_stage: dict | None = None) -> dict:
        """query id -> (first-stage hits [(document id, score)], the cross-encoder's scores of them)."""
        first_stage = first_stage or examples.first_stage(self.config.rerank_top_k)
        by_id = {d.doc_id: d for d in examples.corpus}
        score = self.serving_module(model, preprocessor).score
        scored = {}
        for example in examples:
            hits = first_stage[example.query_id][:self.config.rerank_top_k]
            scores = []
            for start in range(0, len(hits), batch_size):
                chunk = hits[start:start + batch_size]
                documents = tf.constant([by_id[doc].contents for doc, _ in chunk])
                queries = tf.fill(tf.shape(documents), example.text)
                scores.extend(score(query=queries, document=documents)["score"].numpy().tolist())
            scored[example.query_id] = (hits, scores)
        return scored

    def fuse(self, scored: dict, fusion: str | None = None) -> dict:
        """A run from `cross_scores`' output, ordered by `fusion` (None: `config.fusion`)."""
        run = {}
        for query_id, (hits, scores) in scored.items():
            final = fusion_lib.fuse_scores([s for _, s in hits], scores, fusion or self.config.fusion,
                                           self.config.fusion_weight)
            # Stable sort: equal scores keep the first stage's order.
            order = sorted(range(len(hits)), key=lambda i: -final[i])
            run[query_id] = [(hits[i][0], float(final[i])) for i in order]
        return run

    def evaluate(self, model, examples, preprocessor, batch_size) -> Evaluation:
        first_stage = examples.first_stage(self.config.rerank_top_k)
        scored = self.cross_scores(model, examples, preprocessor, batch_size, first_stage)
        before = evaluate_run(first_stage, examples.qrels, recall_ks=(1, 10))
        results = dict(evaluate_run(self.fuse(scored, "none"), examples.qrels, recall_ks=(1, 10)))
        for name, value in before.items():
            if name != "num_queries":
                results[f"{name}_first_stage"] = value
        for fusion in fusion_lib.FUSIONS[1:]:
            fused = evaluate_run(self.fuse(scored, fusion), examples.qrels, recall_ks=(1, 10))
            results.update({f"{name}_{fusion}": value for name, value in fused.items()
                            if name != "num_queries"})
        results["rerank_top_k"] = self.config.rerank_top_k
        results["fusion"] = self.config.fusion
        run = self.fuse(scored)
        return Evaluation(results, {"eval_run.trec": format_run(run, tag="kbert-rerank")})

    def predict(self, model, examples, preprocessor, batch_size) -> dict[str, str]:
        run = self.rerank(model, examples, preprocessor, batch_size)
        return {"predictions.trec": format_run(run, tag="kbert-rerank")}

    # -- Serving ------------------------------------------------------------------------

    def serving_module(self, model, preprocessor):
        return RerankServingModule(model, preprocessor)
