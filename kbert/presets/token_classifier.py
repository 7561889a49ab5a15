"""`TokenClassifier`: a tag per word (NER), on raw text or word lists, on the token classification task."""

from __future__ import annotations

import dataclasses
from typing import Any

from kbert.checkpoints.finetuned import TaskConfig
from kbert.checkpoints.model_dir import ModelDir
from kbert.presets.task_preset_model import TaskPresetModel
from kbert.tasks import TokenClassificationConfig
from kbert.tasks import TokenClassificationTask


class TokenClassifier(TaskPresetModel):
    """One tag per word, the words found as the token classification task finds them.

    The task is `kbert-finetune --task=token_classification`'s
    (`kbert.tasks.TokenClassificationTask`): a text is split into words at
    whitespace and around punctuation (`split_punctuation`), or given as a
    list of words; each word's first piece carries its tag; labels are tag
    lists (names, or ids with `label_names`) or, for a text, its entities as
    `[start, end, label]` character spans. A fresh head learns its tags from
    `fit`'s labels (`O` first, the others sorted) unless `label_names` is
    given; a fine-tuned directory (`--task=ner` or `token_classification`)
    reloads with its head. Long inputs are read in rows of whole words.

    `predict` gives each input's words with their tags; `predict_records`
    its entities with character offsets, as `kbert-predict` writes them and
    the exported model serves them.

    Example:

    >>> tagger = kbert.TokenClassifier.from_preset("minilm/")
    >>> tagger.fit(["EU rejects German call ."],
    ...            [["B-ORG", "O", "B-MISC", "O", "O"]], epochs=3)
    >>> tagger.predict(["Peter flew to Paris."])
    [[('Peter', 'B-PER'), ('flew', 'O'), ('to', 'O'), ('Paris', 'B-LOC'), ('.', 'O')]]
    """

    takes_word_lists = True

    @classmethod
    def from_preset(cls, preset: str, *, max_seq_length: int | None = None,
                    label_names: list[str] | None = None, **config) -> "TokenClassifier":
        """Opens a pre-trained directory with a fresh head, or a fine-tuned tagger with its head.

        Args:
            preset: str. A kbert model directory (any registered architecture).
            max_seq_length: int or None. Pieces per row; defaults to the
                fine-tuned directory's, else 128 (capped at the positions).
            label_names: list of str or None. The tags in logit order; None:
                learned from `fit`'s labels. A fine-tuned directory's must match.
            **config: `kbert.tasks.TokenClassificationConfig` fields of a
                fresh head, such as `use_crf=True` or `split_punctuation=False`.

        Returns:
            The `TokenClassifier`.

        Raises:
            ValueError: `label_names` disagrees with a fine-tuned head; a
                directory fine-tuned for another task.
        """
        if label_names is not None:
            config["label_names"] = list(label_names)
        return super().from_preset(preset, max_seq_length=max_seq_length, **config)

    @classmethod
    def opens(cls, record: TaskConfig) -> bool:
        return record.model_type == "token_classifier"

    @classmethod
    def _new_task(cls, directory: ModelDir, **config) -> TokenClassificationTask:
        names = {field.name for field in dataclasses.fields(TokenClassificationConfig)}
        unknown = sorted(set(config) - names)
        if unknown:
            raise TypeError(f"TokenClassifier.from_preset got {unknown}; it takes "
                            f"max_seq_length and TokenClassificationConfig's {sorted(names)}.")
        return TokenClassificationTask(TokenClassificationConfig(**config))

    @classmethod
    def _sized(cls, task) -> bool:
        return bool(task.label_names)

    @classmethod
    def _check_head(cls, task, kwargs: dict[str, Any], where: str) -> None:
        given = kwargs.pop("label_names", None)
        if given is not None and list(given) != task.label_names:
            raise ValueError(
                f"{where} was fine-tuned with the tags {task.label_names}; label_names={given} "
                "disagrees. Drop label_names to use its head, or start from the pre-trained "
                "directory it was fine-tuned from for a new head.")
        super()._check_head(task, kwargs, where)

    def predict(self, x: Any, batch_size: int | None = None,
                verbose: str | int = "auto") -> list[list[tuple[str, str]]]:
        """Each input's words with their predicted tags (Viterbi-decoded with a CRF).

        Args:
            x: texts (split into words by the task's rule), lists of words, or
                a `tf.data.Dataset` of texts.
            batch_size: int or None. Rows per batch. Defaults to 32.
            verbose: accepted for Keras' signature.

        Returns:
            list, one per input, of `(word, tag)` pairs in order.
        """
        return super().predict(x, batch_size, verbose)

    def _predict(self, sentences, batch_size):
        tags, _ = self.task.tag_words(self.task_model, sentences, self.preprocessor, batch_size)
        return [list(zip(sentence.words, sentence_tags))
                for sentence, sentence_tags in zip(sentences, tags)]
