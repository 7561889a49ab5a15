"""Held-out pre-training data: its files and how to read them, as evaluation reads them.

`EvalData` lists the eval files and takes their lengths and masking from their
sidecar (or their first record); its batches come in file order, unpacked, with
dynamic masks drawn from `EVAL_SEED`, so every evaluation of a run, and every
run on the same eval files, sees the same masks. Pre-training's held-out
evaluation reads them, and `baselines.py` scores word frequencies on them.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from kbert.data.pretraining.checks import list_input_files
from kbert.data.pretraining.checks import named_data_error
from kbert.data.pretraining.dataset import pretraining_dataset
from kbert.data.pretraining.dynamic_masking import MaskingConfig
from kbert.data.pretraining.metadata import read_pretraining_metadata
from kbert.data.pretraining.metadata import recorded_masking

# Seed of the eval data's dynamic masks and of the model's samplers during evaluation.
EVAL_SEED = 20181011


@dataclasses.dataclass(frozen=True)
class EvalData:
    """The eval files and how to read them: lengths and masking (from their sidecar or first record).

    Example:

    >>> data = EvalData.from_files("heldout-*.tfrecord", max_seq_length=128,
    ...                            max_predictions_per_seq=20, masking="static")
    """

    files: tuple[str, ...]
    max_seq_length: int
    max_predictions_per_seq: int
    masking: str
    # Whether the records carry next_sentence_labels (NSP or SOP data).
    next_sentence: bool = True
    # Their sidecar (`read_pretraining_metadata`), None without one: what they
    # were made with, which the run checks against the model's tokenizer.
    metadata: dict[str, Any] | None = dataclasses.field(default=None, compare=False, repr=False)

    @classmethod
    def from_files(cls, eval_input_file: str | list[str], max_seq_length: int | None,
                   max_predictions_per_seq: int | None, masking: str | None,
                   flag: str = "--eval_input_file") -> EvalData:
        """Lists and checks the eval files; lengths and masking default to what they record.

        Args:
            eval_input_file: str or list of str. TFRecord files or globs, comma-separated.
            max_seq_length: int or None. The model's (training's) length: the
                files must have it. None takes theirs.
            max_predictions_per_seq: int or None. The width of dynamic masks
                (static files keep their own). None takes theirs (or 20).
            masking: str or None. Used for files without a sidecar; a sidecar's
                record wins (eval data may be static while training is dynamic).
            flag: str. The flag named in errors.

        Returns:
            An `EvalData`.

        Raises:
            FileNotFoundError: nothing matches, naming `flag`.
            ValueError: another `max_seq_length` than training's, naming the file.
        """
        files = list_input_files(eval_input_file, flag=flag)
        metadata = read_pretraining_metadata(files)
        lengths = recorded_lengths(files[0], metadata)
        if metadata:
            masking = recorded_masking(metadata)
        elif masking is None:
            masking = "dynamic" if lengths.get("max_predictions_per_seq") is None else "static"
        if max_seq_length is not None and lengths["max_seq_length"] != max_seq_length:
            source = metadata.get("sidecar", files[0]) if metadata else files[0]
            raise ValueError(
                f"{flag}: {source} records max_seq_length={lengths['max_seq_length']} but the "
                f"model is trained at run_pretraining.max_seq_length={max_seq_length}; make the "
                f"eval data with create_pretraining_data --max_seq_length={max_seq_length}.")
        if masking == "static":
            max_predictions_per_seq = lengths["max_predictions_per_seq"]
        next_sentence = (metadata.get("next_sentence") not in ("none", False) if metadata
                         else bool(lengths["next_sentence"]))
        return cls(tuple(files), lengths["max_seq_length"], max_predictions_per_seq or 20, masking,
                   next_sentence, metadata)

    def dataset(self, batch_size: int, next_sentence: bool,
                masking_config: MaskingConfig | None = None,
                vocab_file: str | None = None) -> tf.data.Dataset:
        """The eval batches in file order, unpacked, the last one short; dynamic masks from `EVAL_SEED`."""
        return pretraining_dataset(
            list(self.files), batch_size, self.max_seq_length, self.max_predictions_per_seq,
            next_sentence=next_sentence, is_training=False, seed=EVAL_SEED,
            masking=self.masking, masking_config=masking_config, vocab_file=vocab_file)


def recorded_lengths(first_file: str, metadata: dict[str, Any] | None) -> dict[str, int | None]:
    """`max_seq_length`, (static data) `max_predictions_per_seq` and NSP labels of the files.

    Args:
        first_file: str. The first data file: read when there is no sidecar.
        metadata: dict or None. The files' sidecar (`read_pretraining_metadata`).

    Returns:
        dict with `max_seq_length`, `max_predictions_per_seq` (None for
        unmasked data) and `next_sentence` (whether the records carry NSP labels).

    Raises:
        ValueError: the first file is empty, corrupt or not pre-training data, naming it.
    """
    if metadata and metadata.get("max_seq_length"):
        return {"max_seq_length": metadata["max_seq_length"],
                "max_predictions_per_seq": metadata.get("max_predictions_per_seq"),
                "next_sentence": metadata.get("next_sentence") not in ("none", False)}
    try:
        record = next(iter(tf.data.TFRecordDataset(first_file).take(1)), None)
    except tf.errors.OpError as e:
        raise named_data_error([first_file], e) from None
    if record is None:
        raise ValueError(f"{first_file} holds no records; regenerate it or leave it out.")
    feature = tf.train.Example.FromString(record.numpy()).features.feature
    if "input_ids" not in feature:
        raise ValueError(f"{first_file}: the first record has no 'input_ids' feature; is it "
                         "pre-training data from tools/create_pretraining_data.py?")
    return {"max_seq_length": len(feature["input_ids"].int64_list.value),
            "max_predictions_per_seq": (len(feature["masked_lm_positions"].int64_list.value)
                                        if "masked_lm_positions" in feature else None),
            "next_sentence": "next_sentence_labels" in feature}
