"""Token classification (`--task=token_classification`), and NER on CoNLL-2003 (`--task=ner`).

One implementation: a tag per word, predicted at the word's first piece
(the BERT paper's NER setup), any tag set, scored by entity F1 (conlleval).
`token_classification` reads users' files in three forms
(`kbert.tasks.token_classification.token_files`) and learns its tags from
the training file (`adapt`); `ner` is the same task with CoNLL-2003's
defaults: a `--data_dir` of CoNLL files, its nine tags, words split at
whitespace only.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any, ClassVar, Mapping, Sequence

import keras
import numpy as np
import tensorflow as tf

from kbert.data.table_files import infer_value
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.layers.crf import first_forbidden
from kbert.layers.crf import tag_scheme
from kbert.layers.crf import tag_transitions
from kbert.models.bert_token_classifier import BertTokenClassifier
from kbert.tasks.base import Evaluation
from kbert.tasks.base import Task
from kbert.tasks.base import TaskData
from kbert.tasks.base import encoder_inputs
from kbert.tasks.base import inference_function
from kbert.tasks.base import traced_once_per_model
from kbert.tasks.serving import window_preprocessor
from kbert.tasks.token_classification.conll import CONLL2003_LABELS
from kbert.tasks.token_classification.conll import conll_split_file
from kbert.tasks.token_classification.conll import read_conll
from kbert.tasks.token_classification.dataset import fitting_windows
from kbert.tasks.token_classification.dataset import tagging_windows
from kbert.tasks.token_classification.dataset import token_classification_dataset
from kbert.tasks.token_classification.dataset import windows_dataset
from kbert.tasks.token_classification.dataset import word_piece_counts
from kbert.tasks.token_classification.metrics import MajorityTagger
from kbert.tasks.token_classification.metrics import entity_f1
from kbert.tasks.token_classification.metrics import word_accuracy
from kbert.tasks.token_classification.sentence import Sentence
from kbert.tasks.token_classification.serving import TokenClassifierServingModule
from kbert.tasks.token_classification.spans import entities_from_tags
from kbert.tasks.token_classification.token_files import TokenReading
from kbert.tasks.token_classification.token_files import is_conll_file
from kbert.tasks.token_classification.token_files import read_token_file
from kbert.tasks.token_classification.token_files import sentence_from_text
from kbert.tasks.token_classification.token_files import sentence_from_words

logger = logging.getLogger(__name__)
# The tag that marks a word outside every entity; the first tag when present.
OUTSIDE = "O"


@dataclasses.dataclass
class NerConfig:
    """A tagger's hyperparameters: NER's (CoNLL-2003's tags), and token classification's.

    Bound in gin as `NerConfig.window_stride = 64` (`--task=ner`);
    `TokenClassificationConfig` has these fields and its own.

    Args:
        window_stride: int or None. Evaluation, prediction and served models:
            a text longer than `max_seq_length - 2` pieces is read in windows
            this many pieces apart, and each word is tagged in the window where
            it has the most context (training reads rows of whole words).
            Defaults to half a window, `(max_seq_length - 2) // 2`.
        use_crf: bool. A linear-chain CRF over the words' tag scores
            (`BertTokenClassifier(crf=True)`): trained with the sentence's
            negative log-likelihood, decoded with Viterbi (also in the served
            model). Defaults to False.
        crf_bio_constraints: bool. With `use_crf`, forbid the transitions the
            tag scheme does not allow (`kbert.layers.tag_transitions`: IOB2's
            `I-X` after anything but `B-X`/`I-X` or first; IOBES's and BILOU's
            unfinished entities too; plain tags allow everything), so no invalid
            sequence is ever predicted. Training tags that break them (an IOB1
            file) are refused. Defaults to True.
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


@dataclasses.dataclass
class TokenClassificationConfig(NerConfig):
    """Token classification's hyperparameters: `NerConfig`'s, the tag names and the word rule.

    Bound in gin as `TokenClassificationConfig.use_crf = True`.

    Args:
        label_names: list of str or None. The tags in logit order; a tag of
            the data outside it is refused. Needed when the files give tags as
            class ids (Hugging Face's integer `ner_tags`: the names in id
            order). None: learned from the training file, `O` first and the
            others sorted. Defaults to None.
        split_punctuation: bool. A text (a spans file, a str given to
            `examples_from_values`, the served `text`) is split into words at
            whitespace and around each punctuation character, as
            google-research/bert's `BasicTokenizer` and Hugging Face's
            `BertPreTokenizer` do, so an entity before a full stop is a whole
            word. False: at whitespace only (`--task=ner`'s words). Defaults to True.
        (and `NerConfig`'s fields)
    """

    label_names: list[str] | None = None
    split_punctuation: bool = True


@traced_once_per_model
def _viterbi_function(model):
    """One traced function: padded word scores and lengths -> the CRF's best tag sequences."""

    @tf.function(input_signature=[tf.TensorSpec([None, None, None], tf.float32),
                                  tf.TensorSpec([None], tf.int32)])
    def decode(emissions, lengths):
        return model.crf_layer.decode(emissions, lengths)

    return decode


def _viterbi_paths(model, emissions: Sequence[np.ndarray]):
    """`(index, path)` of each sentence's Viterbi path over its words' scores, 256 at a time."""
    decode = _viterbi_function(model)
    for begin in range(0, len(emissions), 256):
        block = emissions[begin:begin + 256]
        lengths = [len(e) for e in block]
        width = max(lengths + [1])
        padded = np.zeros((len(block), width, block[0].shape[-1]), np.float32)
        for row, e in enumerate(block):
            padded[row, :len(e)] = e
        paths = decode(padded, np.array(lengths, np.int32)).numpy()
        for row, count in enumerate(lengths):
            yield begin + row, paths[row, :count]


class TokenClassificationTask(Task):
    """Token classification with one tag per word, any tag set, scored by entity F1 (conlleval).

    Each word's first piece carries its tag (the BERT paper's NER setup);
    `predictions.tsv` holds `word<TAB>tag` lines with a blank line between
    sentences. Files: `--train_file`, `--validation_file`, `--test_file` in
    any form `read_token_file` reads (or a `--data_dir` of CoNLL files); the
    tags are learned from the training file (`adapt`).

    Args:
        config: `TokenClassificationConfig` (`NerConfig` for `ner`) or None.
        task_name: str or None. The data set name recorded with the model.
        label_names: sequence of str or None. Tags in logit order (a
            fine-tuned model's); None: the config's, else learned by `adapt`.

    Example:

    >>> task = TokenClassificationTask()
    >>> train = task.read(TaskData(train_file="train.jsonl"), "train")
    >>> task.adapt(train)
    >>> task.label_names
    ['O', 'B-LOC', 'I-LOC', 'B-PER', 'I-PER']
    """

    name = "token_classification"
    config_class = TokenClassificationConfig
    main_metric = "f1"  # entity F1
    distillation_target = "logits"  # per-word tag logits
    # The tags every model of the task has (CoNLL-2003's for `ner`); None: learned.
    fixed_label_names: ClassVar[tuple[str, ...] | None] = None
    default_task_name: ClassVar[str] = "token_classification"
    # Split file flags (`TaskData` fields).
    split_files: ClassVar[dict[str, str]] = {"train": "train_file", "dev": "validation_file",
                                             "test": "test_file"}
    # What happens to a sentence longer than a row (the fine-tuning summary prints it).
    long_inputs: ClassVar[str] = ("were read in parts, no word cut (training: rows of whole "
                                  "words; evaluation and prediction: the served model's windows)")

    def __init__(self, config=None, task_name: str | None = None, label_names=None,
                 text_column: str | None = None):
        super().__init__(config, task_name or self.default_task_name)
        given = label_names or getattr(self.config, "label_names", None) or self.fixed_label_names
        self._label_names = tuple(given) if given else None
        # Where the tags came from, for errors about a tag outside them.
        self._tags_origin = ("the fine-tuned model's" if label_names
                             else f"{type(self.config).__name__}.label_names"
                             if getattr(self.config, "label_names", None)
                             else "CoNLL-2003's" if given else "learned from the training data")
        self.text_column = text_column
        self._baseline: MajorityTagger | None = None

    @classmethod
    def from_description(cls, description: Mapping[str, Any]) -> "TokenClassificationTask":
        columns = description.get("text_column_names") or [None]
        rest = {key: value for key, value in description.items() if key != "text_column_names"}
        config = cls.config_from_description(rest)
        label_names = description.get("label_names")
        if label_names and hasattr(config, "label_names"):
            # The model's tags, in its logit order, are given from now on.
            config = dataclasses.replace(config, label_names=list(label_names))
        return cls(config, description.get("task_name"), label_names, columns[0])

    def describe(self) -> dict[str, Any]:
        # The tags in use (learned or given), not the config's None; and the column read.
        described = {**super().describe(), "label_names": self.label_names}
        if self.text_column is not None:
            described["text_column_names"] = [self.text_column]
        return described

    @property
    def model_type(self) -> str:
        return "token_classifier"

    @property
    def label_names(self) -> list[str]:
        return list(self._label_names or ())

    @property
    def split_punctuation(self) -> bool:
        """Whether a text's punctuation characters are words of their own."""
        return bool(getattr(self.config, "split_punctuation", False))

    # -- Data ---------------------------------------------------------------------------

    def check_data(self, data: TaskData, splits: Sequence[str]) -> None:
        for split in splits:
            flag = self.split_files[split]
            # Without a dev file, training chooses on a held-out share of the training file.
            if (split != "dev" or "train" not in splits) and not self.has_split(data, split):
                raise ValueError(f"--task={self.name} needs --{flag} (a CoNLL, JSON lines, CSV, "
                                 "TSV or Parquet file) or a --data_dir of CoNLL files.")
        if data.text_column_names and len(data.text_column_names) > 1:
            raise ValueError(f"--text_column_names={','.join(data.text_column_names)}: token "
                             "classification reads one column (the words or the text).")

    def has_split(self, data: TaskData, split: str) -> bool:
        return bool(getattr(data, self.split_files[split]) or data.data_dir)

    def read(self, data: TaskData, split: str) -> list[Sentence]:
        flag = self.split_files[split]
        path = getattr(data, flag)
        if path is None:
            path, flag = conll_split_file(data.data_dir, split), "data_dir"
        reading = TokenReading(data.text_column_names[0] if data.text_column_names else None,
                               data.label_column_name, self.label_names or None,
                               self.split_punctuation)
        sentences = read_token_file(path, flag, reading, labelled=split != "test")
        if split != "train":
            self.check_tags(sentences)
        elif not is_conll_file(path):
            # The column kbert-predict reads by default (a CoNLL file has none).
            self.text_column = reading.text_column or _column_read(sentences)
        return sentences

    def adapt(self, train_examples: list[Sentence]) -> None:
        """Learns the tag set (unless given) and the majority-tag baseline from training sentences.

        Args:
            train_examples: list of `Sentence`.

        Raises:
            ValueError: a tag outside the given tag set, tags mixing schemes,
                or (with a constrained CRF) a sequence the scheme forbids; the
                message names the file and line.
        """
        labelled = [s for s in train_examples if s.tags is not None]
        if self._label_names is None:
            found = {tag for s in labelled for tag in s.tags}
            self._label_names = tuple(sorted(found, key=lambda tag: (tag != OUTSIDE, tag)))
        else:
            self.check_tags(labelled)
        if not self._label_names:
            raise ValueError("the training data has no tags to learn.")
        scheme = tag_scheme(self._label_names)
        if self.config.use_crf and self.config.crf_bio_constraints:
            for sentence in labelled:
                position = first_forbidden(sentence.tags, self._label_names, scheme)
                if position is not None:
                    raise ValueError(_forbidden_message(sentence, position, scheme,
                                                        type(self.config).__name__))
        self._baseline = MajorityTagger([s.words for s in labelled], [s.tags for s in labelled])

    def check_tags(self, sentences: Sequence[Sentence]) -> None:
        """Refuses a tag outside the task's tag set, naming it, its file and line.

        Args:
            sentences: list of `Sentence`; unlabelled ones pass.
        """
        if self._label_names is None:
            return
        known = set(self._label_names)
        for sentence in sentences:
            unknown = [tag for tag in sentence.tags or () if tag not in known]
            if unknown:
                raise ValueError(f"{sentence.source}: tag {unknown[0]!r} is not in the tags "
                                 f"{list(self._label_names)} ({self._tags_origin}); a model "
                                 "cannot predict a tag it never learned. Fix the tag, or add "
                                 "examples of it to the training file.")

    def examples_from_values(self, inputs: Any, labels: Sequence | None = None,
                             source: str | Sequence[str] = "values") -> list[Sentence]:
        """Sentences from texts (str, split by the task's word rule) or word lists.

        Args:
            inputs: sequence of str texts, or of word lists (lists of str).
            labels: None, or one label per input: a tag list (one tag per word;
                tag names, or class ids with `label_names`), or for a text its
                entities as `[start, end, label]` character spans.
            source: str, or one str per input, named in errors.

        Returns:
            list of `Sentence`. A text keeps its characters: predictions'
            offsets point into it. Word lists' offsets point into the words
            joined by single spaces.

        Example:

        >>> task.examples_from_values(["I flew to Paris."], [[[10, 15, "LOC"]]])[0].tags
        ['O', 'O', 'O', 'B-LOC', 'O']
        """
        if isinstance(inputs, (str, bytes)):
            raise ValueError(f"{source}: inputs must be a list of texts or of word lists, not "
                             "one string.")
        inputs = [_python_value(value) for value in inputs]
        if labels is not None:
            labels = [_python_value(value) for value in labels]
            if len(labels) != len(inputs):
                raise ValueError(f"{source}: {len(inputs)} inputs but {len(labels)} labels.")
        sources = ([f"{source} item {n}" for n in range(1, len(inputs) + 1)]
                   if isinstance(source, str) else list(source))
        reading = TokenReading(label_names=self.label_names or None,
                               split_punctuation=self.split_punctuation)
        sentences = []
        for index, value in enumerate(inputs):
            tags = None if labels is None else labels[index]
            if isinstance(value, str):
                spans = bool(tags) and isinstance(tags[0], (list, tuple, dict))
                sentences.append(sentence_from_text(value, tags, sources[index], reading, spans))
            else:
                sentences.append(sentence_from_words(value, tags, sources[index], reading))
        self.check_tags(sentences)
        return sentences

    def input_texts(self, examples: list[Sentence]) -> list[list[str]]:
        """Each sentence a document: its text (its words joined by spaces), no tags."""
        return [[s.text_and_offsets()[0]] for s in examples if s.words]

    def unlabelled_examples(self, lines, source) -> list[Sentence]:
        """One sentence per non-empty line, words found by the task's word rule."""
        outside = self.label_names[0]  # a placeholder tag; transfer sets have no labels
        reading = TokenReading(split_punctuation=self.split_punctuation)
        sentences = [sentence_from_text(line, None, f"{source}:{number}", reading)
                     for number, line in enumerate(lines, start=1) if line.strip()]
        for sentence in sentences:
            sentence.tags = [outside] * len(sentence.words)
        return sentences

    def training_rows(self, examples: list[Sentence], preprocessor: TextPreprocessor) -> list:
        """The sentences, a long one as several rows of whole words (`fitting_windows`)."""
        return self._windows(examples, preprocessor)

    def dataset(self, examples, preprocessor, batch_size, is_training, seed=None):
        label_ids = {name: i for i, name in enumerate(self._label_names or ())}
        return token_classification_dataset(
            preprocessor, [s.words for s in examples],
            [[label_ids[t] for t in s.tags] if s.tags is not None else [0] * len(s.words)
             for s in examples],
            batch_size, is_training=is_training, seed=seed)

    def training_batch(self, batch):
        return encoder_inputs(batch), batch["label"], tf.cast(batch["weight"], tf.float32)

    # -- Model --------------------------------------------------------------------------

    def build_model(self, encoder: keras.Model) -> keras.Model:
        if not self._label_names:
            raise ValueError(f"task {self.name!r} has no tags yet: adapt it to training "
                             "sentences (kbert-finetune does), or give "
                             "TokenClassificationConfig.label_names.")
        config = self.config
        options = {"freeze_encoder": config.freeze_encoder, "features": config.features}
        if config.features is not None:
            encoder = encoder.with_all_layers()
        if config.use_crf:
            starts, transitions, ends = (tag_transitions(self._label_names)
                                         if config.crf_bio_constraints else (None, None, None))
            options.update(crf=True, crf_allowed_starts=_unless_all(starts),
                           crf_allowed_transitions=(None if transitions is None or
                                                    all(map(all, transitions)) else transitions),
                           crf_allowed_ends=_unless_all(ends),
                           crf_learning_rate_multiplier=config.crf_learning_rate_multiplier)
        return BertTokenClassifier(encoder, num_classes=len(self._label_names), **options)

    # -- Evaluation and prediction ------------------------------------------------------

    def count_truncated(self, examples: list[Sentence], preprocessor: TextPreprocessor) -> int:
        """How many sentences are longer than `max_seq_length - 2` pieces (none is cut:
        `long_inputs` says how they are read)."""
        budget = preprocessor.max_seq_length - 2
        counts = word_piece_counts(preprocessor, [s.words for s in examples])
        return sum(int(pieces.sum() > budget) for pieces in counts)

    def _windows(self, sentences: Sequence[Sentence], preprocessor: TextPreprocessor
                 ) -> list[Sentence]:
        """Training rows: a sentence longer than `max_seq_length` as rows of whole words."""
        budget = preprocessor.max_seq_length - 2
        counts = word_piece_counts(preprocessor, [s.words for s in sentences])
        rows = []
        for sentence, pieces in zip(sentences, counts):
            if pieces.sum() <= budget:
                rows.append(sentence)
            else:
                rows.extend(sentence.window(start, end)
                            for start, end in fitting_windows(pieces, budget))
        if len(rows) > len(sentences):
            # The summary counts the long sentences (`count_truncated`); this, the rows.
            logger.info("Long training sentences are read as %d more rows of whole words.",
                        len(rows) - len(sentences))
        return rows

    def _tag(self, model, sentences, preprocessor, batch_size) -> list[list[str]]:
        """Each sentence's tags (`tag_words` without the probabilities)."""
        return self.tag_words(model, sentences, preprocessor, batch_size)[0]

    def tag_words(self, model: keras.Model, sentences: Sequence[Sentence],
                  preprocessor: TextPreprocessor, batch_size: int
                  ) -> tuple[list[list[str]], list[list[float]]]:
        """Each sentence's tags and each tag's probability, read as the served model reads it.

        Sentences are read in the served model's windows (`tagging_windows`:
        the window length of `kbert.tasks.serving.window_preprocessor`,
        `window_stride` apart), each word scored in the window where it has the
        most context, so a text of any length gets the served model's tags.
        With a CRF, Viterbi runs over each sentence's words; a tag's
        probability is the softmax of its word's own scores. A word without
        pieces gets the first tag, with probability 0.

        Args:
            model: the task model.
            sentences: list of `Sentence`.
            preprocessor: `TextPreprocessor`.
            batch_size: int.

        Returns:
            `(tags, probabilities)`: per sentence, one tag (str) and one float per word.

        Example:

        >>> tags, probabilities = task.tag_words(model, task.examples_from_values(["Ada wrote"]),
        ...                                      preprocessor, 32)
        """
        scores, scored = self._word_scores(model, sentences, preprocessor, batch_size)
        crf = getattr(model, "crf_layer", None)
        tags, probabilities = [], []
        for emissions, has_pieces in zip(scores, scored):
            ids = np.zeros(len(emissions), np.int64)
            if crf is None:
                ids[has_pieces] = emissions[has_pieces].argmax(axis=-1)
            tags.append(ids)
        if crf is not None:
            for index, path in _viterbi_paths(model, [e[h] for e, h in zip(scores, scored)]):
                tags[index][scored[index]] = path
        for ids, emissions, has_pieces in zip(tags, scores, scored):
            exp = np.exp(emissions - emissions.max(axis=-1, keepdims=True))
            chosen = (exp / exp.sum(axis=-1, keepdims=True))[np.arange(len(ids)), ids]
            probabilities.append(np.where(has_pieces, chosen, 0.0).tolist())
        return [[self._label_names[i] for i in ids] for ids in tags], probabilities

    def _word_scores(self, model, sentences, preprocessor, batch_size
                     ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Each word's logits from its max-context window, and whether it has pieces at all."""
        windows, dataset = self._tagging_windows(model, sentences, preprocessor, batch_size)
        num_tags = len(self._label_names)
        scores = [np.zeros((len(s.words), num_tags), np.float32) for s in sentences]
        scored = [np.zeros(len(s.words), bool) for s in sentences]
        forward = inference_function(model)
        for batch in dataset:
            logits = forward(encoder_inputs(batch)).numpy().astype(np.float32)
            positions = batch["word_position"].numpy()
            for row, window in enumerate(batch["example_index"].numpy()):
                sentence = windows["sentence"][window]
                for position in np.nonzero(positions[row])[0]:
                    word = positions[row, position] - 1
                    scores[sentence][word] = logits[row, position]
                    scored[sentence][word] = True
        return scores, scored

    def _tagging_windows(self, model, sentences, preprocessor, batch_size
                         ) -> tuple[dict[str, list], tf.data.Dataset]:
        """`tagging_windows` of the sentences and their batches, reused while the same
        arguments come back (as `Task.evaluation_dataset`, for the same reason: fine-tuning
        evaluates the same dev sentences at every interval)."""
        windows_preprocessor = window_preprocessor(model, preprocessor)
        length = windows_preprocessor.max_seq_length
        stride = self.config.window_stride or max(1, (length - 2) // 2)
        words = [list(s.words) for s in sentences]
        cached = getattr(self, "_windows_cache", None)
        # The preprocessor by identity (a ModernBERT's window preprocessor is made anew).
        if (cached is None or cached[0] is not preprocessor
                or cached[1] != (length, stride, batch_size) or cached[2] != words):
            windows = tagging_windows(windows_preprocessor, words, stride)
            cached = (preprocessor, (length, stride, batch_size), words, windows,
                      windows_dataset(windows, batch_size, length))
            self._windows_cache = cached
        return cached[3], cached[4]

    def evaluate(self, model, examples, preprocessor, batch_size) -> Evaluation:
        predicted = self._tag(model, examples, preprocessor, batch_size)
        gold = [s.tags for s in examples]
        results = entity_f1(gold, predicted, per_type=True)
        results["accuracy"] = word_accuracy(gold, predicted)
        results["num_examples"] = len(examples)
        if self._baseline is not None:
            baseline_tags = self._baseline.tag([s.words for s in examples])
            baseline = entity_f1(gold, baseline_tags)
            baseline["accuracy"] = word_accuracy(gold, baseline_tags)
            results["baseline"] = {**baseline, "predicts": self._baseline.describe()}
        return Evaluation(results)

    def predict(self, model, examples, preprocessor, batch_size) -> dict[str, str]:
        lines = []
        tagged = self._tag(model, examples, preprocessor, batch_size)
        for sentence, tags in zip(examples, tagged):
            lines.extend(f"{word}\t{tag}" for word, tag in zip(sentence.words, tags))
            lines.append("")
        return {"predictions.tsv": "\n".join(lines)}

    def predict_records(self, model, examples, preprocessor, batch_size) -> list[dict[str, Any]]:
        """Each sentence's `entities`: `{"start", "end", "label", "text", "score"}`, in text order.

        Offsets are characters of the input text (`text[start:end]` is the
        entity's text); for word-list input, of the words joined by single
        spaces. An entity's score is the mean probability of its words' tags.

        Args:
            model: the task model.
            examples: list of `Sentence` (`examples_from_values`).
            preprocessor: `TextPreprocessor`.
            batch_size: int.

        Returns:
            list of `{"entities": [...]}`, one per example.
        """
        tagged, scores = self.tag_words(model, examples, preprocessor, batch_size)
        records = []
        for sentence, tags, word_scores in zip(examples, tagged, scores):
            text, offsets = sentence.text_and_offsets()
            records.append({"entities": entities_from_tags(tags, text, offsets, word_scores)})
        return records

    def input_columns(self, text_column_names: Sequence[str] | None = None) -> tuple[str, ...]:
        """The one column `kbert-predict` reads: the one asked for, else the one trained on
        (a `tokens` column of word lists, or a `text` column)."""
        if text_column_names:
            if len(text_column_names) != 1:
                raise ValueError(f"--text_column_names={','.join(text_column_names)}: token "
                                 "classification reads one column (the words or the text).")
            return tuple(text_column_names)
        return (self.text_column or "text",)

    def serving_module(self, model, preprocessor):
        return TokenClassifierServingModule(model, preprocessor, self.label_names,
                                            self.config.window_stride, self.split_punctuation)


class NerTask(TokenClassificationTask):
    """Named-entity recognition on CoNLL-2003 files (`--task=ner`): token classification with
    CoNLL-2003's defaults.

    A `--data_dir` of CoNLL files (`train.txt`, `dev.txt` or `valid.txt`,
    `test.txt`), CoNLL-2003's nine tags (others are refused), and words split
    at whitespace only, as CoNLL's are.

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
    fixed_label_names = CONLL2003_LABELS
    default_task_name = "conll2003"

    def __init__(self, config: NerConfig | None = None, task_name: str | None = None,
                 label_names=None, text_column: str | None = None):
        super().__init__(config, task_name, label_names, text_column)

    def check_data(self, data: TaskData, splits) -> None:
        if not data.data_dir:
            raise ValueError("--task=ner needs --data_dir.")

    def has_split(self, data: TaskData, split: str) -> bool:
        return True

    def read(self, data: TaskData, split: str) -> list[Sentence]:
        return read_conll(conll_split_file(data.data_dir, split), self._label_names)


def _column_read(sentences: Sequence[Sentence]) -> str | None:
    """The kind of column the training sentences came from: `text` for texts, else `tokens`."""
    return "text" if sentences and sentences[0].text is not None else "tokens"


def _unless_all(allowed: list[bool] | None) -> list[bool] | None:
    """None for a constraint that allows everything (the model records none)."""
    return None if allowed is None or all(allowed) else allowed


def _python_value(value: Any, cell: bool = True) -> Any:
    """A numpy array or bytes (a `tf.data` element, a column) as the Python value it holds;
    a cell holding a JSON list (`["EU", "rejects"]`: CSV cells, as kbert-predict reads them) as
    the list (the items of a list are kept as they are)."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, str) and cell:
        parsed = infer_value(value)
        return parsed if isinstance(parsed, list) else value
    if isinstance(value, (list, tuple)):
        return [_python_value(item, cell=False) for item in value]
    return value


def _forbidden_message(sentence: Sentence, position: int, scheme: str, config: str) -> str:
    tags = sentence.tags
    if position == len(tags):
        what = f"the sentence ends on {tags[-1]!r}"
    elif position == 0:
        what = f"the sentence starts with {tags[0]!r}"
    else:
        what = f"{tags[position]!r} (word {sentence.words[position]!r}) follows {tags[position - 1]!r}"
    hint = " (an IOB1 file?); convert the tags to IOB2" if scheme == "IOB2" else "; fix the tags"
    return (f"{sentence.source}: {what}, which {scheme} tags do not allow{hint}, or set "
            f"{config}.crf_bio_constraints = False.")
