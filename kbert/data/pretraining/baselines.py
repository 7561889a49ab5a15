"""What word frequencies alone achieve on held-out pre-training data: the unigram baselines.

Beside a model's held-out figures, `DataBaselines` says what knowing word
frequencies alone achieves on the same masked positions:
`unigram_masked_lm_loss` / `unigram_masked_lm_accuracy` (each masked token
predicted by its add-one smoothed frequency among the non-special tokens of the
training data) and `majority_next_sentence_accuracy`. A model whose held-out
loss is not below the unigram loss has learned less than word frequencies.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import tensorflow as tf

from kbert.data.pretraining.checks import named_data_error
from kbert.data.pretraining.dataset import pretraining_feature_spec
from kbert.data.pretraining.dynamic_masking import MaskingConfig
from kbert.data.pretraining.eval_data import EvalData
from kbert.data.pretraining.eval_data import recorded_lengths
from kbert.data.pretraining.metadata import read_pretraining_metadata
from kbert.data.pretraining.metadata import recorded_masking

# Training instances read for the unigram baseline (in file order): 100k instances of
# 128 tokens estimate every frequency that matters to a few parts in a thousand.
UNIGRAM_MAX_INSTANCES = 100_000


@dataclasses.dataclass(frozen=True)
class DataBaselines:
    """What word frequencies alone achieve on the eval data's masked positions.

    Example:

    >>> baselines = DataBaselines.compute(train_files, eval_data, vocabulary_size=30522)
    >>> baselines.as_dict()["unigram_masked_lm_accuracy"]
    """

    unigram_masked_lm_loss: float
    unigram_masked_lm_accuracy: float
    majority_next_sentence_accuracy: float | None
    unigram_instances: int

    @classmethod
    def compute(cls, train_files: list[str], eval_data: EvalData, vocabulary_size: int,
                next_sentence: bool, max_steps: int | None = None, batch_size: int = 256,
                masking_config: MaskingConfig | None = None,
                vocab_file: str | None = None) -> DataBaselines:
        """Counts token frequencies in the training files and scores them on the eval masks.

        Args:
            train_files: list of str. Training TFRecords (up to
                `UNIGRAM_MAX_INSTANCES` instances are read, in file order).
            eval_data: `EvalData`, read as the evaluator reads it.
            vocabulary_size: int. Rows of the model's vocabulary (add-one smoothing over it).
            next_sentence: bool. Also score the majority NSP label.
            max_steps: int or None. Eval batches scored, as the evaluator's `max_steps`.
            batch_size: int. The evaluator's batch size (with `max_steps`, the same data).
            masking_config: `MaskingConfig` or None. As the evaluator's.
            vocab_file: str or None. As the evaluator's.

        Returns:
            A `DataBaselines`.
        """
        counts, nsp_counts, instances = _train_counts(train_files, vocabulary_size)
        log_probability = np.log((counts + 1.0) / (counts.sum() + vocabulary_size))
        most_frequent = int(np.argmax(counts))
        majority = int(np.argmax(nsp_counts))
        loss = hits = weight = nsp_hits = nsp_total = 0.0
        dataset = eval_data.dataset(batch_size, next_sentence, masking_config, vocab_file)
        if max_steps is not None:
            dataset = dataset.take(max_steps)
        for _, labels, sample_weights in dataset.as_numpy_iterator():
            weights = sample_weights["mlm"].astype(np.float64)
            ids = np.clip(labels["mlm"], 0, vocabulary_size - 1)
            loss -= float((log_probability[ids] * weights).sum())
            hits += float(((labels["mlm"] == most_frequent) * weights).sum())
            weight += float(weights.sum())
            if next_sentence:
                nsp_hits += float((labels["nsp"] == majority).sum())
                nsp_total += labels["nsp"].size
        weight = max(weight, 1e-9)
        return cls(loss / weight, hits / weight,
                   nsp_hits / nsp_total if next_sentence and nsp_total else None, instances)

    def as_dict(self) -> dict[str, Any]:
        """The baselines as the keys written beside the model's figures (None values left out)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def _train_counts(train_files: list[str], vocabulary_size: int
                  ) -> tuple[np.ndarray, np.ndarray, int]:
    """Token counts (masked positions restored, specials left out) and NSP label counts."""
    metadata = read_pretraining_metadata(train_files)
    lengths = recorded_lengths(train_files[0], metadata)
    static = (recorded_masking(metadata) if metadata
              else ("static" if lengths["max_predictions_per_seq"] else "dynamic")) == "static"
    spec = pretraining_feature_spec(lengths["max_seq_length"],
                                    lengths["max_predictions_per_seq"] or 0,
                                    next_sentence=False, masked_lm=static)
    nsp_spec = {"next_sentence_labels": tf.io.FixedLenFeature([1], tf.int64, default_value=[-1])}
    records = tf.data.TFRecordDataset(train_files).take(UNIGRAM_MAX_INSTANCES).batch(1024)
    records = records.map(lambda s: (tf.io.parse_example(s, spec), tf.io.parse_example(s, nsp_spec)))
    counts = np.zeros(vocabulary_size, np.float64)
    nsp_counts = np.zeros(2, np.float64)
    instances = 0
    try:
        for example, nsp in records.as_numpy_iterator():
            ids = example["input_ids"]
            if static:  # Restore the original tokens at the masked positions.
                rows, slots = np.nonzero(example["masked_lm_weights"] > 0)
                ids = ids.copy()
                ids[rows, example["masked_lm_positions"][rows, slots]] = (
                    example["masked_lm_ids"][rows, slots])
            real = example["input_mask"].astype(bool)
            # [CLS] opens every row and [SEP] closes it: their ids (and [PAD]) are not words.
            lengths_ = real.sum(axis=1)
            specials = np.unique(np.concatenate([ids[:, 0], ids[np.arange(len(ids)),
                                                                 np.maximum(lengths_ - 1, 0)]]))
            keep = real & ~np.isin(ids, specials)
            counts += np.bincount(np.clip(ids[keep], 0, vocabulary_size - 1),
                                  minlength=vocabulary_size)
            labels = nsp["next_sentence_labels"][:, 0]
            nsp_counts += np.bincount(labels[labels >= 0], minlength=2)[:2]
            instances += len(ids)
    except tf.errors.OpError as e:
        raise named_data_error(train_files, e) from None
    return counts, nsp_counts, instances
