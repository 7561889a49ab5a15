"""`TextEmbedder`: sentence vectors from any kbert directory, pooled as the directory records."""

from __future__ import annotations

from typing import Any

import numpy as np

from kbert.checkpoints.finetuned import TaskConfig
from kbert.checkpoints.model_dir import ModelDir
from kbert.checkpoints.pretrained import save_pretrained
from kbert.presets.task_preset_model import TaskPresetModel
from kbert.retrieval.embedding import embed_texts
from kbert.tasks import encoder_task
from kbert.tasks import get_task
from kbert.tasks.sentence_embedding import sentence_serving_module
from kbert.tasks.serving import EMBEDDINGS_API
from kbert.training.finetuning.finetuned_dir import save_task_model


class TextEmbedder(TaskPresetModel):
    """Raw text in, one sentence vector per text out, as the exported model serves it.

    A pre-trained directory embeds as its `sentence_config.json` says (a
    converted sentence-transformers model: its pooling, normalisation and
    length, so all-MiniLM-L6-v2 gives sentence-transformers' vectors), else
    by mean pooling, L2-normalised, at 128 pieces. A fine-tuned bi-encoder
    (`kbert-finetune --task=similarity` or `retrieval`) embeds with its query
    tower. `predict` runs the `tf.function` the export serves
    (`kbert.tasks.sentence_embedding`), so its vectors are the served ones.
    Any registered architecture works.

    TextEmbedder does not train: fine-tune a bi-encoder with
    `kbert-finetune --task=similarity` (pairs and scores) or `--task=retrieval`.

    Example:

    >>> embedder = kbert.TextEmbedder.from_preset("minilm/")
    >>> vectors = embedder.predict(["A man is playing a guitar.", "A cat sleeps."])
    >>> vectors.shape, float(vectors[0] @ vectors[0])
    ((2, 384), 1.0)
    """

    # Texts go to the serving graph, not to the task's examples.
    takes_raw_values = False

    @classmethod
    def from_preset(cls, preset: str, *, max_seq_length: int | None = None,
                    pooling: str | None = None, normalize: bool | None = None) -> "TextEmbedder":
        """Opens a pre-trained directory, or a fine-tuned bi-encoder.

        Args:
            preset: str. A kbert model directory.
            max_seq_length: int or None. Longest input in pieces (longer texts
                are cut); defaults to the length `sentence_config.json`
                records (256 for all-MiniLM-L6-v2), else 128, capped at the
                encoder's positions; a fine-tuned directory's own.
            pooling: str or None. Pre-trained directories: `mean`, `cls` or
                `max` instead of the recorded pooling.
            normalize: bool or None. Pre-trained directories: L2-normalise
                (or not) instead of the recorded setting.

        Returns:
            The `TextEmbedder`.
        """
        options = {name: value for name, value in (("pooling", pooling), ("normalize", normalize))
                   if value is not None}
        return super().from_preset(preset, max_seq_length=max_seq_length, **options)

    @classmethod
    def opens(cls, record: TaskConfig) -> bool:
        return EMBEDDINGS_API in get_task(record.task).serving_apis

    @classmethod
    def _new_task(cls, directory: ModelDir, **options):
        recorded = dict(directory.sentence_config or {})
        return encoder_task({"pooling": "mean", "normalize": True, **recorded, **options})

    @classmethod
    def _default_length(cls, directory: ModelDir) -> int:
        recorded = (directory.sentence_config or {}).get("max_seq_length")
        return int(recorded) if recorded else cls.default_max_seq_length

    def predict(self, x: Any, batch_size: int | None = None,
                verbose: str | int = "auto") -> np.ndarray:
        """The vectors of `x`, as the exported model's `serving_default` gives them.

        Args:
            x: texts (a list, array, tensor or Series of str) or a
                `tf.data.Dataset` of texts.
            batch_size: int or None. Texts per call. Defaults to 32.
            verbose: accepted for Keras' signature.

        Returns:
            float32 `[len(x), dim]`, row i the vector of `x[i]`.
        """
        return super().predict(x, batch_size, verbose)

    def fit(self, *args, **kwargs):
        raise NotImplementedError(
            "TextEmbedder does not train; fine-tune a bi-encoder with kbert-finetune "
            "--task=similarity (scored pairs) or --task=retrieval and open its directory here.")

    def evaluate(self, *args, **kwargs):
        raise NotImplementedError("TextEmbedder has no labels to evaluate against; score its "
                                  "vectors with kbert-finetune --do_eval of a similarity or "
                                  "retrieval directory.")

    def save_to_preset(self, preset_dir: str) -> None:
        """Writes a kbert directory that embeds as this model does.

        A fine-tuned bi-encoder is written as `kbert-finetune` writes it; an
        embedder opened from a pre-trained directory as a pre-trained directory
        whose `sentence_config.json` records its pooling, normalisation and
        length (what `kbert-export` and `kbert-index` read).

        Args:
            preset_dir: str. Created if missing.
        """
        model = self._model("save_to_preset")
        if self.model_dir.is_finetuned:
            save_task_model(preset_dir, model, self.task, self.preprocessor,
                            self.model_dir.vocab_file)
            return
        sentence_config = {**(self.model_dir.sentence_config or {}),
                           "pooling": self.task.config.pooling,
                           "normalize": bool(self.task.config.normalize),
                           "max_seq_length": self.max_seq_length}
        save_pretrained(preset_dir, model.encoder, vocab_file=self.model_dir.vocab_file,
                        do_lower_case=self.preprocessor.do_lower_case,
                        sentence_config=sentence_config)

    def _examples(self, texts, labels, where):
        if isinstance(texts, tuple):
            raise TypeError(f"{where}: x is a pair of text lists; TextEmbedder embeds single "
                            "texts (embed each side and compare the vectors).")
        return texts

    def _predict(self, texts, batch_size):
        embed = getattr(self, "_embed_function", None)
        if embed is None:
            module = sentence_serving_module(self.task_model, self.preprocessor)
            embed = self._embed_function = module.embed_queries
        return embed_texts(embed, texts, batch_size)
