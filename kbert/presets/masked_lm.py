"""`MaskedLM`: continued pre-training on raw text, masked on the fly as keras-hub's `MaskedLMPreprocessor` does."""

from __future__ import annotations

import math
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kbert.checkpoints.model_dir import ModelDir
from kbert.checkpoints.pretrained import save_pretrained
from kbert.data.pretraining.dynamic_masking import DynamicMasker
from kbert.data.pretraining.dynamic_masking import MaskingConfig
from kbert.data.pretraining.instances import VocabInfo
from kbert.data.text_datasets import classification_dataset
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.data.tokenizers import Tokenizer
from kbert.presets.preset_model import PresetModel
from kbert.training.finetuning.finetuned_dir import uncompiled

# The masks of `evaluate` and `predict`: the same every call, so figures compare.
EVALUATION_SEED = 0


class MaskedLM(PresetModel):
    """A pre-trained directory's encoder and masked-LM head, trained on raw text.

    Texts are tokenized with the directory's tokenizer, cut to
    `max_seq_length`, batched by length and masked anew for every batch
    inside the `tf.data` pipeline by kbert's dynamic masking
    (`kbert.data.pretraining.DynamicMasker`: google-research/bert's rules,
    15% of the tokens, 80% `[MASK]` / 10% random / 10% kept unless
    `masking` says otherwise). The model is the architecture's pre-trainer
    without next-sentence prediction (`BertPretrainer`, `ModernBertPretrainer`,
    ...; an ELECTRA discriminator gets a fresh masked-LM head), with the
    directory's masked-LM head when it has one; `fit`, `evaluate` report its
    `loss`, `mlm_loss` and `mlm_masked_lm_accuracy`.

    `save_to_preset` writes a pre-trained directory with the head
    (`pretrainer.weights.h5`), which `kbert-finetune`, `kbert-export` and
    `kbert-pretrain --init_checkpoint` (and its held-out evaluation) read.

    Example:

    >>> mlm = kbert.MaskedLM.from_preset("minilm/")
    >>> mlm.fit(domain_sentences, batch_size=32, epochs=1)
    >>> mlm.save_to_preset("minilm-domain/")
    """

    takes_labels = False

    def __init__(self, task_model: keras.Model, preprocessor: TextPreprocessor,
                 model_dir: ModelDir, masker: DynamicMasker, **kwargs):
        super().__init__(task_model, preprocessor, model_dir, **kwargs)
        self.masker = masker

    @classmethod
    def from_preset(cls, preset: str, *, max_seq_length: int | None = None,
                    masking: MaskingConfig | None = None,
                    max_predictions_per_seq: int | None = None) -> "MaskedLM":
        """Opens a pre-trained directory (any architecture) for masked-LM training.

        Args:
            preset: str. A `kbert-pretrain` or `kbert-convert` output, or a
                `MaskedLM.save_to_preset` one.
            max_seq_length: int or None. Texts are cut to this many pieces.
                Defaults to 128, capped at the encoder's positions.
            masking: `kbert.data.MaskingConfig` or None. How tokens are chosen
                and replaced (rate, 80/10/10 split, whole words). Defaults to
                google-research/bert's.
            max_predictions_per_seq: int or None. Most masked tokens per text.
                Defaults to `ceil(max_seq_length * masked_lm_prob)`.

        Returns:
            The `MaskedLM`, built in the current `tf.distribute` strategy's scope.

        Raises:
            ValueError: a fine-tuned directory; a tokenizer without `[MASK]`.
        """
        directory = cls._open_preset(preset)
        if directory.is_finetuned:
            raise ValueError(
                f"{directory.where} is fine-tuned for task {directory.task_config.task!r}; "
                "MaskedLM continues pre-training a pre-trained directory (kbert-pretrain or "
                "kbert-convert output, or a MaskedLM.save_to_preset one).")
        masking = masking or MaskingConfig()
        length = cls._max_seq_length(directory, max_seq_length)
        if max_predictions_per_seq is None:
            max_predictions_per_seq = math.ceil(length * masking.masked_lm_prob)
        masker = DynamicMasker(masking_vocabulary(directory.tokenizer, masking, directory.where),
                               max_predictions_per_seq, masking)
        return cls(directory.pretrainer(next_sentence=False), directory.preprocessor(length),
                   directory, masker)

    def save_to_preset(self, preset_dir: str) -> None:
        """Writes a pre-trained directory: encoder, masked-LM head, tokenizer.

        Args:
            preset_dir: str. Created if missing (`gs://` works).

        Example:

        >>> mlm.save_to_preset("minilm-domain/")
        """
        pretrainer = uncompiled(self.task_model)  # the weights without AdamW's moments
        save_pretrained(preset_dir, pretrainer.encoder, vocab_file=self.model_dir.vocab_file,
                        do_lower_case=self.preprocessor.do_lower_case, pretrainer=pretrainer,
                        sentence_config=self.model_dir.sentence_config)

    def predict(self, x: Any, batch_size: int | None = None,
                verbose: str | int = "auto") -> np.ndarray:
        """Masked-LM logits at the masked positions of each text, masked as `evaluate` masks.

        Args:
            x: texts.
            batch_size: int or None. Defaults to 32.
            verbose: accepted for Keras' signature.

        Returns:
            float32 `[len(x), max_predictions_per_seq, vocabulary_size]`
            (rows past a text's masked tokens are those of position 0).
        """
        return super().predict(x, batch_size, verbose)

    def _examples(self, texts, labels, where):
        if isinstance(texts, tuple):
            raise TypeError(f"{where}: x is a pair of text lists; MaskedLM reads single texts.")
        return texts

    def _training_dataset(self, texts, batch_size, seed):
        batches = classification_dataset(self.preprocessor, texts, None, None, batch_size,
                                         is_training=True, seed=seed)
        return self._masked(batches, seed)

    def _evaluation_dataset(self, texts, batch_size):
        batches = classification_dataset(self.preprocessor, texts, None, None, batch_size)
        return self._masked(batches, EVALUATION_SEED)

    def _masked(self, batches: tf.data.Dataset, seed: int,
                keep_index: bool = False) -> tf.data.Dataset:
        """Masks each batch (keyed by `seed` and the batch number): `(features, labels, weights)`."""
        base_seed = tf.constant([seed, 0], tf.int64)

        def mask(number, batch):
            masked, positions, labels, weights = self.masker(
                batch["token_ids"], tf.reduce_sum(batch["padding_mask"], axis=1),
                tf.random.experimental.stateless_fold_in(base_seed, number))
            features = {"token_ids": masked, "segment_ids": batch["segment_ids"],
                        "padding_mask": batch["padding_mask"], "mask_positions": positions}
            if keep_index:
                features["example_index"] = batch["example_index"]
            return features, {"mlm": labels}, {"mlm": weights}

        return batches.enumerate().map(mask, num_parallel_calls=tf.data.AUTOTUNE).prefetch(
            tf.data.AUTOTUNE)

    def _predict(self, texts, batch_size):
        batches = classification_dataset(self.preprocessor, texts, None, None, batch_size)
        rows = {}
        for features, _, _ in self._masked(batches, EVALUATION_SEED, keep_index=True):
            index = features.pop("example_index").numpy()
            logits = self.task_model(features, training=False)["mlm"].numpy()
            rows.update(zip(index.tolist(), logits))
        return np.stack([rows[i] for i in range(len(texts))]) if texts else np.zeros(
            (0, self.masker.max_predictions_per_seq, self.preprocessor.vocabulary_size),
            np.float32)


def masking_vocabulary(tokenizer: Tokenizer, masking: MaskingConfig, where: str) -> VocabInfo:
    """What dynamic masking needs of a tokenizer of any kind: its special ids and `##` pieces.

    Args:
        tokenizer: `kbert.data.tokenizers.Tokenizer`.
        masking: `MaskingConfig`. Whole-word masking needs WordPiece's `##` pieces.
        where: str. How errors name the directory.

    Returns:
        `VocabInfo`: random replacements are drawn from the tokenizer's ids.

    Raises:
        ValueError: no `[MASK]` token; whole words asked of a tokenizer without `##` pieces.
    """
    if tokenizer.mask_id is None:
        raise ValueError(f"{where}: its {tokenizer.kind} tokenizer has no [MASK] token, which "
                         "masked-LM training puts in place of the chosen tokens.")
    continuation = frozenset(i for i, token in enumerate(tokenizer.vocabulary)
                             if token.startswith("##"))
    if masking.do_whole_word_mask and not continuation:
        raise ValueError(f"{where}: do_whole_word_mask finds words by WordPiece's ## pieces, and "
                         f"its {tokenizer.kind} tokenizer has none; mask tokens "
                         "(do_whole_word_mask=False).")
    return VocabInfo(vocab_size=tokenizer.vocabulary_size, cls_id=tokenizer.cls_id,
                     sep_id=tokenizer.sep_id, mask_id=tokenizer.mask_id,
                     continuation_ids=continuation)
