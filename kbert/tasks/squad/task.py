"""Extractive question answering on SQuAD v1.1 / v2.0 JSON (`--task=squad`)."""

from __future__ import annotations

import dataclasses
import json
import logging

import keras

from kbert.data.text_files import split_sentences
from kbert.models.bert_span_labeler import BertSpanLabeler
from kbert.tasks.base import Evaluation
from kbert.tasks.base import Task
from kbert.tasks.base import TaskData
from kbert.tasks.base import encoder_inputs
from kbert.tasks.base import inference_function
from kbert.tasks.squad.features import span_dataset
from kbert.tasks.squad.features import squad_features
from kbert.tasks.squad.metrics import squad_metrics
from kbert.tasks.squad.postprocessing import postprocess_squad
from kbert.tasks.squad.reader import SquadExample
from kbert.tasks.squad.reader import read_squad
from kbert.tasks.squad.reader import squad_gold_answers
from kbert.tasks.squad.serving import SpanLabelerServingModule

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class SquadConfig:
    """SQuAD's hyperparameters, with `run_squad.py`'s names and defaults.

    Bound in gin as `SquadConfig.doc_stride = 128` (see gin/finetune.gin).

    Args:
        doc_stride: int. Context pieces between window starts. Defaults to 128.
        max_query_length: int. Question pieces kept. Defaults to 64.
        max_answer_length: int. Longest answer, in pieces. Defaults to 30.
        n_best_size: int. Candidates kept per question. Defaults to 20.
        version_2_with_negative: bool. SQuAD 2.0 (unanswerable questions).
        null_score_diff_threshold: float. SQuAD 2.0: answer "" when the null
            score beats the best span by more than this. Defaults to 0.0.
    """

    doc_stride: int = 128
    max_query_length: int = 64
    max_answer_length: int = 30
    n_best_size: int = 20
    version_2_with_negative: bool = False
    null_score_diff_threshold: float = 0.0


class SquadTask(Task):
    """Span QA as `run_squad.py`: strided windows, start/end heads, n-best answers.

    Reads `--train_file` for training and `--predict_file` for evaluation and
    prediction; evaluation writes `predictions.json`, `nbest_predictions.json`
    (and `null_odds.json` for SQuAD 2.0) in the official formats and scores
    them with the official exact match and F1.

    Args:
        config: `SquadConfig` or None.
        task_name: str or None. Defaults to `squad` (`squad2` with
            `version_2_with_negative`).

    Example:

    >>> task = SquadTask(SquadConfig(doc_stride=64))
    >>> examples = task.read(TaskData(predict_file="dev-v1.1.json"), "dev")
    """

    name = "squad"
    config_class = SquadConfig
    evaluation_writes_predictions = True
    evaluation_fields = ("n_best_size", "version_2_with_negative", "null_score_diff_threshold")
    main_metric = "f1"
    metrics_in_percent = True  # the official scorer's exact match and F1

    def __init__(self, config: SquadConfig | None = None, task_name: str | None = None):
        super().__init__(config, task_name)
        if not self.task_name:
            self.task_name = "squad2" if self.config.version_2_with_negative else "squad"

    @property
    def model_type(self) -> str:
        return "span_labeler"

    @property
    def text_pair(self) -> bool:
        return True

    def check_data(self, data: TaskData, splits) -> None:
        if "train" in splits and not data.train_file:
            raise ValueError("--task=squad --do_train needs --train_file (SQuAD JSON).")
        if {"dev", "test"} & set(splits) and not data.predict_file:
            raise ValueError("--task=squad --do_eval/--do_predict need --predict_file (SQuAD JSON).")

    def selection_group(self, example: SquadExample) -> str:
        # A paragraph's questions stay together: none is selected on whose context was trained on.
        return example.context

    def input_texts(self, examples: list[SquadExample]) -> list[list[str]]:
        """Each paragraph once (its sentences), then its questions as one document; no answers."""
        questions: dict[str, list[str]] = {}
        for e in examples:
            questions.setdefault(e.context, []).append(e.question)
        documents = []
        for context, asked in questions.items():
            documents += [split_sentences(context), [q for q in asked if q.strip()]]
        return [d for d in documents if d]

    def read(self, data: TaskData, split: str) -> list[SquadExample]:
        version_2 = self.config.version_2_with_negative
        if split == "train":
            examples, skipped = read_squad(data.train_file, True, version_2)
            if skipped:
                logger.warning("%s: skipped %d question(s) whose answer text does not match the "
                               "context at answer_start.", data.train_file, skipped)
            return examples
        return read_squad(data.predict_file, False, version_2)[0]

    def _features(self, examples, preprocessor, is_training):
        return squad_features(preprocessor, examples, self.config.doc_stride,
                              self.config.max_query_length, is_training=is_training)

    def training_rows(self, examples, preprocessor):
        return self._features(examples, preprocessor, is_training=True)

    def dataset(self, examples, preprocessor, batch_size, is_training, seed=None):
        # Training datasets get the windows of `training_rows`; others, examples.
        features = examples if is_training else self._features(examples, preprocessor, False)
        return span_dataset(features, batch_size, preprocessor.max_seq_length,
                            is_training=is_training, seed=seed)

    def training_batch(self, batch):
        return encoder_inputs(batch), {"start_logits": batch["start_position"],
                                       "end_logits": batch["end_position"]}

    def build_model(self, encoder: keras.Model) -> keras.Model:
        return BertSpanLabeler(encoder)

    def compile_arguments(self):
        # The original averages the start and end losses.
        return {"loss_weights": {"start_logits": 0.5, "end_logits": 0.5}}

    def _answer(self, model, examples, preprocessor, batch_size) -> tuple[dict, dict[str, str]]:
        features = self._features(examples, preprocessor, is_training=False)
        forward = inference_function(model)
        starts, ends = [None] * len(features), [None] * len(features)
        for batch in span_dataset(features, batch_size, preprocessor.max_seq_length):
            outputs = forward(encoder_inputs(batch))
            start_logits = outputs["start_logits"].numpy()
            end_logits = outputs["end_logits"].numpy()
            for row, index in enumerate(batch["feature_index"].numpy()):
                length = len(features[index].token_ids)
                starts[index] = start_logits[row, :length]
                ends[index] = end_logits[row, :length]
        config = self.config
        predictions, nbest, null_odds = postprocess_squad(
            examples, features, starts, ends, n_best_size=config.n_best_size,
            max_answer_length=config.max_answer_length,
            version_2_with_negative=config.version_2_with_negative,
            null_score_diff_threshold=config.null_score_diff_threshold)
        files = {"predictions.json": json.dumps(predictions, indent=2, ensure_ascii=False) + "\n",
                 "nbest_predictions.json": json.dumps(nbest, indent=2, ensure_ascii=False) + "\n"}
        if config.version_2_with_negative:
            files["null_odds.json"] = json.dumps(null_odds, indent=2) + "\n"
        return predictions, files

    def evaluate(self, model, examples, preprocessor, batch_size) -> Evaluation:
        predictions, files = self._answer(model, examples, preprocessor, batch_size)
        results = squad_metrics(squad_gold_answers(examples), predictions)
        results["num_examples"] = results.pop("total")
        return Evaluation(results, files)

    def predict(self, model, examples, preprocessor, batch_size) -> dict[str, str]:
        return self._answer(model, examples, preprocessor, batch_size)[1]

    def serving_module(self, model, preprocessor):
        config = self.config
        return SpanLabelerServingModule(model, preprocessor, config.max_query_length,
                                        config.doc_stride, config.max_answer_length)
