"""Named-entity recognition on CoNLL-2003 files (`--task=ner`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import keras
import numpy as np
import tensorflow as tf

from kbert.models.bert_token_classifier import BertTokenClassifier
from kbert.layers.crf import bio_transitions
from kbert.tasks.base import INPUT_NAMES
from kbert.tasks.base import Evaluation
from kbert.tasks.base import Task
from kbert.tasks.base import TaskData
from kbert.tasks.base import encoder_inputs
from kbert.tasks.base import traced_once_per_model
from kbert.tasks.ner.dataset import token_classification_dataset
from kbert.tasks.ner.metrics import entity_f1
from kbert.tasks.ner.reader import CONLL2003_LABELS
from kbert.tasks.ner.reader import Sentence
from kbert.tasks.ner.reader import conll_split_file
from kbert.tasks.ner.reader import read_conll
from kbert.tasks.ner.serving import TokenClassifierServingModule


@dataclasses.dataclass
class NerConfig:
    """NER's own hyperparameters (the tag set is CoNLL-2003's unless the data says otherwise).

    Bound in gin as `NerConfig.window_stride = 64`.

    Args:
        window_stride: int or None. Served models only: a text longer than
            `max_seq_length - 2` pieces is read in windows this many pieces
            apart, and each word is tagged in the window where it has the most
            context. Defaults to half a window, `(max_seq_length - 2) // 2`.
        use_crf: bool. A linear-chain CRF over the words' tag scores
            (`BertTokenClassifier(crf=True)`): trained with the sentence's
            negative log-likelihood, decoded with Viterbi (also in the served
            model). Defaults to False.
        crf_bio_constraints: bool. With `use_crf`, forbid the transitions BIO
            tags do not allow (`I-X` after anything but `B-X`/`I-X`, or first),
            so no invalid sequence is ever predicted. Defaults to True.
        crf_learning_rate_multiplier: float. With `use_crf`, the CRF's scores
            learn this many times faster than the encoder. Defaults to 1.
        freeze_encoder: bool. Feature-based NER (the BERT paper, 5.3): the
            encoder's weights stay fixed (and it runs without dropout); only
            the head learns. Defaults to False.
        features: str or None. What the head reads: None for the last layer,
            or a mix of the encoder's layers, `last`, `sum_last_4`,
            `concat_last_4` or `weighted` (ELMo's learned softmax mix; see
            `kbert.layers.EncoderLayerMix`). Defaults to None.
    """

    window_stride: int | None = None
    use_crf: bool = False
    crf_bio_constraints: bool = True
    crf_learning_rate_multiplier: float = 1.0
    freeze_encoder: bool = False
    features: str | None = None


@traced_once_per_model
def _tagging_function(model):
    """One traced function: inputs and word positions -> the best tag of each position."""
    signature = {name: tf.TensorSpec([None, None], tf.int32) for name in INPUT_NAMES}

    @tf.function(input_signature=[signature, tf.TensorSpec([None, None], tf.int32)])
    def tag(inputs, word_position):
        logits = model(inputs, training=False)
        if getattr(model, "crf_layer", None) is None:
            return tf.argmax(logits, axis=-1, output_type=tf.int32)
        return model.decode(logits, word_position > 0)

    return tag


class NerTask(Task):
    """Token classification with one tag per word, scored by entity F1 (conlleval).

    Each word's first wordpiece carries its tag (the BERT paper's NER setup);
    `predictions.tsv` holds `word<TAB>tag` lines with a blank line between sentences.

    Args:
        config: `NerConfig` or None.
        task_name: str or None. The data set name recorded with the model.
            Defaults to `conll2003`.
        label_names: sequence of str or None. Tags in logit order. Defaults to
            CoNLL-2003's nine.

    Example:

    >>> task = NerTask()
    >>> sentences = task.read(TaskData(data_dir="conll2003"), "dev")
    """

    name = "ner"
    config_class = NerConfig
    main_metric = "f1"  # entity F1
    distillation_target = "logits"  # per-word tag logits

    def __init__(self, config: NerConfig | None = None, task_name: str | None = None,
                 label_names=None):
        super().__init__(config, task_name or "conll2003")
        self._label_names = tuple(label_names) if label_names else CONLL2003_LABELS

    @classmethod
    def from_description(cls, description: Mapping[str, Any]) -> "NerTask":
        return cls(cls.config_from_description(description), description.get("task_name"),
                   description.get("label_names"))

    @property
    def model_type(self) -> str:
        return "token_classifier"

    @property
    def label_names(self) -> list[str]:
        return list(self._label_names)

    def check_data(self, data: TaskData, splits) -> None:
        if not data.data_dir:
            raise ValueError("--task=ner needs --data_dir.")

    def read(self, data: TaskData, split: str) -> list[Sentence]:
        return read_conll(conll_split_file(data.data_dir, split), self._label_names)

    def input_texts(self, examples: list[Sentence]) -> list[list[str]]:
        """Each sentence a document: its words joined by spaces (no tags)."""
        return [[" ".join(s.words)] for s in examples if s.words]

    def unlabelled_examples(self, lines, source) -> list[Sentence]:
        """One sentence per non-empty line, words split on white space."""
        outside = self._label_names[0]  # a placeholder tag; transfer sets have no labels
        return [Sentence(line.split(), [outside] * len(line.split()))
                for line in lines if line.strip()]

    def dataset(self, examples, preprocessor, batch_size, is_training, seed=None):
        label_ids = {name: i for i, name in enumerate(self._label_names)}
        return token_classification_dataset(
            preprocessor, [s.words for s in examples],
            [[label_ids[t] for t in s.tags] for s in examples],
            batch_size, is_training=is_training, seed=seed)

    def training_batch(self, batch):
        return encoder_inputs(batch), batch["label"], tf.cast(batch["weight"], tf.float32)

    def build_model(self, encoder: keras.Model) -> keras.Model:
        config = self.config
        options = {"freeze_encoder": config.freeze_encoder, "features": config.features}
        if config.features is not None:
            encoder = encoder.with_all_layers()
        if config.use_crf:
            starts, transitions = (bio_transitions(self._label_names)
                                   if config.crf_bio_constraints else (None, None))
            options.update(crf=True, crf_allowed_starts=starts, crf_allowed_transitions=transitions,
                           crf_learning_rate_multiplier=config.crf_learning_rate_multiplier)
        return BertTokenClassifier(encoder, num_classes=len(self._label_names), **options)

    def _tag(self, model, sentences, preprocessor, batch_size) -> list[list[str]]:
        forward = _tagging_function(model)
        predicted = [["O"] * len(s.words) for s in sentences]
        for batch in self.evaluation_dataset(sentences, preprocessor, batch_size):
            best = forward(encoder_inputs(batch), batch["word_position"]).numpy()
            positions = batch["word_position"].numpy()
            for row, index in enumerate(batch["example_index"].numpy()):
                for position in np.nonzero(positions[row])[0]:
                    tag = self._label_names[best[row, position]]
                    predicted[index][positions[row, position] - 1] = tag
        return predicted

    def evaluate(self, model, examples, preprocessor, batch_size) -> Evaluation:
        predicted = self._tag(model, examples, preprocessor, batch_size)
        results = entity_f1([s.tags for s in examples], predicted)
        results["num_examples"] = len(examples)
        return Evaluation(results)

    def predict(self, model, examples, preprocessor, batch_size) -> dict[str, str]:
        lines = []
        for sentence, tags in zip(examples, self._tag(model, examples, preprocessor, batch_size)):
            lines.extend(f"{word}\t{tag}" for word, tag in zip(sentence.words, tags))
            lines.append("")
        return {"predictions.tsv": "\n".join(lines)}

    def serving_module(self, model, preprocessor):
        return TokenClassifierServingModule(model, preprocessor, self.label_names,
                                            self.config.window_stride)
