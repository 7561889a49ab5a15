"""Dense retrieval with a dual encoder on BEIR-format data (`--task=retrieval`).

Queries and documents are embedded by one shared tower or two (`shared_towers`);
training uses the multiple-negatives ranking loss: each query against its
relevant document, the batch's other documents (in-batch negatives) and,
with `hard_negatives > 0`, documents mined from the first stage (a TREC run
given as `--train_file`, else BM25). Evaluation embeds the whole corpus and
ranks it for every judged query: recall@1/10/100, MRR@10 and nDCG@10, and the
ranking as a TREC run file.

    kbert-finetune --task=retrieval --data_dir=beir/xquad-reqa --init_checkpoint=minilm \\
        --model_dir=runs/reqa --do_train --do_eval
"""

from __future__ import annotations

import dataclasses
import os
import random

import keras

from kbert.models.bert_dual_encoder import BertDualEncoder
from kbert.models.bert_dual_encoder import side_inputs
from kbert.models.bert_sentence_encoder import BertSentenceEncoder
from kbert.retrieval.beir import format_run
from kbert.retrieval.beir import read_corpus
from kbert.retrieval.embedding import embed_texts
from kbert.retrieval.embedding import unit_rows
from kbert.retrieval.metrics import evaluate_run
from kbert.retrieval.pair_dataset import dual_encoder_batch
from kbert.retrieval.pair_dataset import pair_dataset
from kbert.retrieval.pooling import check_pooling
from kbert.retrieval.pooling import resolve_pooling
from kbert.retrieval.query_set import QuerySet
from kbert.retrieval.query_set import mine_negatives
from kbert.retrieval.query_set import read_beir_split
from kbert.retrieval.top_k import top_k_inner_product
from kbert.tasks.base import Evaluation
from kbert.tasks.base import Task
from kbert.tasks.base import TaskData
from kbert.tasks.sentence_embedding import sentence_serving_module
from kbert.tasks.serving import EMBEDDINGS_API


@dataclasses.dataclass
class RetrievalConfig:
    """The retrieval task's hyperparameters (gin: `RetrievalConfig.hard_negatives = 1`).

    Args:
        pooling: str or None. `mean`, `cls`, `max`; None: as the pre-trained
            directory records, else `mean`.
        normalize: bool or None. L2-normalise vectors; None as `pooling`.
        shared_towers: bool. One encoder for queries and documents (False:
            two copies of the pre-trained encoder, trained apart). Defaults to True.
        scale: float. Similarity scale of the ranking loss. Defaults to 20.
        learn_scale: bool. Learn that scale. Defaults to False.
        hard_negatives: int. Mined negatives per query in each batch (0: in-batch
            negatives only). Defaults to 0.
        negative_depth: int. Draw them from the first stage's top this many.
            Defaults to 30.
        mining_seed: int. Seed of that draw. Defaults to 0.
        eval_top_k: int. Depth of the evaluation ranking (recall@100 needs 100).
            Defaults to 100.
    """

    pooling: str | None = None
    normalize: bool | None = None
    shared_towers: bool = True
    scale: float = 20.0
    learn_scale: bool = False
    hard_negatives: int = 0
    negative_depth: int = 30
    mining_seed: int = 0
    eval_top_k: int = 100


@dataclasses.dataclass(frozen=True)
class TrainingPair:
    """One training row: a query, a relevant document and its mined negatives."""

    query: str
    document: str
    negatives: tuple[str, ...] = ()


class RetrievalTask(Task):
    """Dual-encoder retrieval over a BEIR folder (`--data_dir`: corpus.jsonl, queries.jsonl, qrels/).

    Args:
        config: `RetrievalConfig` or None.
        task_name: str or None. The data set's name, recorded. Defaults to `beir`.

    Example:

    >>> task = RetrievalTask()
    >>> queries = task.read(TaskData(data_dir="beir/xquad-reqa"), "dev")
    >>> len(queries.corpus)
    1354
    """

    name = "retrieval"
    config_class = RetrievalConfig
    serving_apis = (EMBEDDINGS_API,)

    def __init__(self, config: RetrievalConfig | None = None, task_name: str | None = None):
        super().__init__(config, task_name or "beir")
        check_pooling(self.config, "RetrievalConfig")
        for field in ("hard_negatives", "negative_depth", "eval_top_k"):
            minimum = 0 if field == "hard_negatives" else 1
            if getattr(self.config, field) < minimum:
                raise ValueError(f"RetrievalConfig.{field}={getattr(self.config, field)}; "
                                 f"it must be >= {minimum}.")
        self._corpora: dict[str, list] = {}

    @property
    def model_type(self) -> str:
        return "dual_encoder"

    def use_pretrained_settings(self, settings) -> None:
        self.config = resolve_pooling(self.config, settings)

    # -- Data ---------------------------------------------------------------------------

    def check_data(self, data: TaskData, splits) -> None:
        if not data.data_dir:
            raise ValueError("--task=retrieval needs --data_dir: a BEIR folder (corpus.jsonl, "
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

    def training_rows(self, examples: QuerySet, preprocessor) -> list[TrainingPair]:
        by_id = {d.doc_id: d for d in examples.corpus}
        negatives = {}
        if self.config.hard_negatives:
            negatives = mine_negatives(examples, self.config.hard_negatives,
                                       self.config.negative_depth,
                                       random.Random(self.config.mining_seed))
        return [TrainingPair(e.text, by_id[doc].contents, tuple(negatives.get(e.query_id, ())))
                for e in examples for doc, relevance in e.relevant.items() if relevance > 0]

    def dataset(self, examples, preprocessor, batch_size, is_training, seed=None):
        negatives = [list(row.negatives) for row in examples] if self.config.hard_negatives else None
        return pair_dataset(preprocessor, [row.query for row in examples],
                            [row.document for row in examples], batch_size, negatives=negatives,
                            is_training=is_training, seed=seed)

    def training_batch(self, batch):
        return dual_encoder_batch(batch, "ranking")

    # -- Model --------------------------------------------------------------------------

    def build_model(self, encoder: keras.Model) -> keras.Model:
        self.config = resolve_pooling(self.config, {})
        query_tower = BertSentenceEncoder(encoder, self.config.pooling, self.config.normalize,
                                          name="query_encoder")
        document_tower = None
        if not self.config.shared_towers:
            copy = encoder.__class__.from_config(encoder.get_config())
            copy.set_weights(encoder.get_weights())
            document_tower = BertSentenceEncoder(copy, self.config.pooling, self.config.normalize,
                                                 name="document_encoder")
        return BertDualEncoder(query_tower, document_tower, "ranking", self.config.scale,
                               self.config.learn_scale, self.config.hard_negatives)

    def compile_arguments(self):
        return {"loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}

    # -- Evaluation and prediction ------------------------------------------------------

    def rank(self, model, examples: QuerySet, preprocessor, batch_size) -> dict:
        """Every query's top `eval_top_k` documents of the whole corpus: query id -> [(id, score)]."""
        module = self.serving_module(model, preprocessor)
        documents = unit_rows(embed_texts(module.embed_documents,
                                          [d.contents for d in examples.corpus], batch_size))
        queries = unit_rows(embed_texts(module.embed_queries, [e.text for e in examples], batch_size))
        indices, scores = top_k_inner_product(queries, documents, self.config.eval_top_k)
        return {e.query_id: [(examples.corpus[i].doc_id, float(s)) for i, s in zip(row, values)]
                for e, row, values in zip(examples, indices, scores)}

    def evaluate(self, model, examples, preprocessor, batch_size) -> Evaluation:
        run = self.rank(model, examples, preprocessor, batch_size)
        return Evaluation(evaluate_run(run, examples.qrels), {"eval_run.trec": format_run(run)})

    def predict(self, model, examples, preprocessor, batch_size) -> dict[str, str]:
        return {"predictions.trec": format_run(self.rank(model, examples, preprocessor, batch_size))}

    def inference_model(self, model, batch):
        # A served request embeds one text with the query tower.
        return model.query_tower, side_inputs(batch, "query")

    # -- Serving ------------------------------------------------------------------------

    def serving_module(self, model, preprocessor):
        return sentence_serving_module(model, preprocessor)
