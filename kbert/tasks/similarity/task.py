"""Sentence similarity with a bi-encoder (`--task=similarity`).

One shared tower (`BertSentenceEncoder`: encoder + pooling) embeds both
sentences; training compares the two vectors by cosine, either against graded
scores (`loss="cosine"`: sentence-transformers' `CosineSimilarityLoss`, STS-B
scores / 5) or contrastively (`loss="ranking"`: multiple-negatives ranking
loss over the batch's other positives and any hard negatives). Evaluation
(also zero-shot, `--do_eval` without `--do_train`) reports Spearman and
Pearson correlation of the cosine similarities with the gold scores, as the
STS benchmarks do.
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np

from kbert.models.bert_dual_encoder import BertDualEncoder
from kbert.models.bert_dual_encoder import side_inputs
from kbert.models.bert_sentence_encoder import BertSentenceEncoder
from kbert.retrieval.embedding import embed_texts
from kbert.retrieval.embedding import unit_rows
from kbert.retrieval.metrics import reciprocal_rank
from kbert.retrieval.pair_dataset import dual_encoder_batch
from kbert.retrieval.pair_dataset import pair_dataset
from kbert.retrieval.pooling import check_pooling
from kbert.retrieval.pooling import resolve_pooling
from kbert.tasks import metrics
from kbert.tasks.base import Evaluation
from kbert.tasks.base import Task
from kbert.tasks.base import TaskData
from kbert.tasks.sentence_embedding import sentence_serving_module
from kbert.tasks.serving import EMBEDDINGS_API
from kbert.tasks.similarity.reader import PairExample
from kbert.tasks.similarity.reader import read_pairs_jsonl
from kbert.tasks.similarity.reader import read_stsb

LOSSES = ("cosine", "ranking")


@dataclasses.dataclass
class SimilarityConfig:
    """The similarity task's hyperparameters (gin: `SimilarityConfig.loss = "ranking"`).

    Args:
        pooling: str or None. `mean`, `cls` or `max`; None takes what the
            pre-trained directory records (a converted sentence-transformers
            model), else `mean`.
        normalize: bool or None. L2-normalise vectors; None as `pooling`
            (else True).
        loss: str. `cosine` (graded pairs) or `ranking` (multiple negatives).
        scale: float. Similarity scale of the ranking loss. Defaults to 20.
        learn_scale: bool. Learn that scale. Defaults to False.
    """

    pooling: str | None = None
    normalize: bool | None = None
    loss: str = "cosine"
    scale: float = 20.0
    learn_scale: bool = False


class SimilarityTask(Task):
    """Bi-encoder sentence similarity on STS-B (`--task_name=STS-B --data_dir=...`) or pairs JSONL.

    Args:
        config: `SimilarityConfig` or None.
        task_name: str or None. `sts-b` to read GLUE's STS-B from `--data_dir`;
            otherwise `--train_file` / `--predict_file` are pairs JSONL files.

    Example:

    >>> task = SimilarityTask(task_name="sts-b")
    >>> pairs = task.read(TaskData(task_name="sts-b", data_dir="glue/STS-B"), "dev")
    """

    name = "similarity"
    config_class = SimilarityConfig
    distillation_target = "embeddings"  # the sentence vectors, not the scores
    serving_apis = (EMBEDDINGS_API,)

    def __init__(self, config: SimilarityConfig | None = None, task_name: str | None = None):
        super().__init__(config, task_name.lower() if task_name else "pairs")
        if self.task_name in ("stsb", "sts"):
            self.task_name = "sts-b"
        if self.config.loss not in LOSSES:
            raise ValueError(f"SimilarityConfig.loss={self.config.loss!r}; expected one of {LOSSES}.")
        check_pooling(self.config, "SimilarityConfig")
        self._num_negatives = 0

    @property
    def model_type(self) -> str:
        return "sentence_encoder"

    @property
    def text_pair(self) -> bool:
        return False

    def use_pretrained_settings(self, settings) -> None:
        self.config = resolve_pooling(self.config, settings)

    # -- Data ---------------------------------------------------------------------------

    def check_data(self, data: TaskData, splits) -> None:
        if self.task_name == "sts-b":
            if not data.data_dir:
                raise ValueError("--task=similarity --task_name=sts-b needs --data_dir (GLUE's STS-B folder).")
            return
        for split in splits:
            flag = "train_file" if split == "train" else "predict_file"
            if not getattr(data, flag):
                raise ValueError(f"--task=similarity needs --{flag} (a pairs JSONL) for the {split} "
                                 "split, or --task_name=sts-b with --data_dir.")

    def input_texts(self, examples: list[PairExample]) -> list[list[str]]:
        """Each pair a document: its two texts (and its hard negative); no scores."""
        return [[e.text_a, e.text_b] + ([e.negative] if e.negative else []) for e in examples]

    def read(self, data: TaskData, split: str) -> list[PairExample]:
        if self.task_name == "sts-b":
            examples = read_stsb(data.data_dir, split)
        else:
            examples = read_pairs_jsonl(data.train_file if split == "train" else data.predict_file)
        if split == "train":
            self._check_training_pairs(examples)
        return examples

    def _check_training_pairs(self, examples: list[PairExample]) -> None:
        if self.config.loss == "cosine":
            unscored = next((e for e in examples if e.score is None), None)
            if unscored is not None:
                raise ValueError(f"{unscored.guid}: no score, but SimilarityConfig.loss='cosine' trains "
                                 "on graded pairs; give every pair a score or bind "
                                 "SimilarityConfig.loss = 'ranking'.")
            return
        with_negative = sum(e.negative is not None for e in examples)
        if 0 < with_negative < len(examples):
            missing = next(e for e in examples if e.negative is None)
            raise ValueError(f"{missing.guid}: no 'negative', though {with_negative} other pairs have "
                             "one; give every pair a negative or none.")
        self._num_negatives = 1 if with_negative else 0

    def dataset(self, examples, preprocessor, batch_size, is_training, seed=None):
        negatives = ([[e.negative] for e in examples]
                     if self._num_negatives and self.config.loss == "ranking" else None)
        scores = [e.score or 0.0 for e in examples]
        return pair_dataset(preprocessor, [e.text_a for e in examples], [e.text_b for e in examples],
                            batch_size, negatives=negatives, scores=scores,
                            is_training=is_training, seed=seed)

    def training_batch(self, batch):
        return dual_encoder_batch(batch, self.config.loss)

    # -- Model --------------------------------------------------------------------------

    def build_model(self, encoder: keras.Model) -> keras.Model:
        self.config = resolve_pooling(self.config, {})
        tower = BertSentenceEncoder(encoder, self.config.pooling, self.config.normalize,
                                    name="sentence_encoder")
        num_negatives = self._num_negatives if self.config.loss == "ranking" else 0
        return BertDualEncoder(tower, None, self.config.loss, self.config.scale,
                               self.config.learn_scale, num_negatives)

    def compile_arguments(self):
        if self.config.loss == "ranking":
            return {"loss": keras.losses.SparseCategoricalCrossentropy(from_logits=True)}
        return {"loss": keras.losses.MeanSquaredError()}

    # -- Evaluation and prediction ------------------------------------------------------

    def cosines(self, model, examples, preprocessor, batch_size) -> np.ndarray:
        """Cosine similarity of each pair, `[len(examples)]`."""
        embed = self.serving_module(model, preprocessor).embed_queries
        first = unit_rows(embed_texts(embed, [e.text_a for e in examples], batch_size))
        second = unit_rows(embed_texts(embed, [e.text_b for e in examples], batch_size))
        return np.sum(first * second, axis=-1)

    def evaluate(self, model, examples, preprocessor, batch_size) -> Evaluation:
        if all(e.score is not None for e in examples):
            predicted = self.cosines(model, examples, preprocessor, batch_size)
            gold = np.asarray([e.score for e in examples])
            return Evaluation({"spearman": metrics.spearman_corrcoef(gold, predicted),
                               "pearson": metrics.pearson_corrcoef(gold, predicted),
                               "num_examples": len(examples)})
        return Evaluation(self._ranking_metrics(model, examples, preprocessor, batch_size))

    def _ranking_metrics(self, model, examples, preprocessor, batch_size) -> dict:
        # Pairs without scores: each anchor against every positive of the set (and the negatives).
        embed = self.serving_module(model, preprocessor).embed_queries
        anchors = unit_rows(embed_texts(embed, [e.text_a for e in examples], batch_size))
        candidates = [e.text_b for e in examples] + [e.negative for e in examples if e.negative]
        vectors = unit_rows(embed_texts(embed, candidates, batch_size))
        scores = anchors @ vectors.T
        top = np.argsort(-scores, axis=1, kind="stable")[:, :10]
        hits = [reciprocal_rank([str(j) for j in row], {str(i): 1}) for i, row in enumerate(top)]
        return {"recall@1": float(np.mean(top[:, 0] == np.arange(len(examples)))),
                "mrr@10": float(np.mean(hits)), "num_examples": len(examples)}

    def predict(self, model, examples, preprocessor, batch_size) -> dict[str, str]:
        predicted = self.cosines(model, examples, preprocessor, batch_size)
        lines = ["index\tprediction"]
        for example, value in zip(examples, predicted):
            index = example.guid.split("-", 1)[1] if self.task_name == "sts-b" else example.guid
            lines.append(f"{index}\t{value:.4f}")
        return {"predictions.tsv": "\n".join(lines) + "\n"}

    def inference_model(self, model, batch):
        # A served request embeds one text with the query tower.
        return model.query_tower, side_inputs(batch, "query")

    # -- Serving ------------------------------------------------------------------------

    def serving_module(self, model, preprocessor):
        return sentence_serving_module(model, preprocessor)
