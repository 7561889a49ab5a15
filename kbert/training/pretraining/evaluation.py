"""Held-out evaluation of a pre-trainer: masked-LM (and NSP or ELECTRA) metrics, and baselines.

What google-research/bert's `run_pretraining.py --do_eval` reports, computed
exactly: every metric is a ratio of sums over the whole evaluated data (the
masked-LM loss is `sum(cross_entropy * masked_lm_weights) / sum(masked_lm_weights)`
over every real masked position, not a mean of batch means), through the
pre-trainer's own `loss_normalizers` / `pretraining_losses` /
`pretraining_metrics` (the `kbert.models.Pretrainer` contract), so BERT and
ELECTRA report what their training reports, measured on held-out data.

Evaluation never changes training: it reads its own input pipeline, runs the
model with `training=False`, and sets the model's random-number states (ELECTRA's
sampler) to a fixed evaluation seed for its duration, restoring them after.
Dynamic masks of the eval data are drawn from `EVAL_SEED` too, so every
evaluation of a run, and every run on the same eval files, sees the same masks
(`kbert.data.pretraining.eval_data.EvalData` reads them).

Beside the model's figures, `kbert.data.pretraining.baselines.DataBaselines`
says what knowing word frequencies alone achieves on the same masked positions:
`unigram_masked_lm_loss` / `unigram_masked_lm_accuracy` (each masked token
predicted by its add-one smoothed frequency among the non-special tokens of the
training data) and `majority_next_sentence_accuracy`. A model whose held-out
loss is not below the unigram loss has learned less than word frequencies.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from kbert.data.pretraining.baselines import DataBaselines
from kbert.data.pretraining.checks import named_data_error
from kbert.data.pretraining.dynamic_masking import MaskingConfig
from kbert.data.pretraining.eval_data import EVAL_SEED
from kbert.data.pretraining.eval_data import EvalData
from kbert.files import iter_jsonl
from kbert.files import write_text
from kbert.training.pretraining.progress import write_scalar
from kbert.training.pretraining.settings import PretrainingSettings

EVAL_HISTORY_FILE = "eval_history.jsonl"
EVAL_RESULTS_FILE = "eval_results.json"
# `--nodo_train --do_eval` appends here (and to TensorBoard's eval_only/), never to a
# training run's history.
EVAL_ONLY_HISTORY_FILE = "eval_only_history.jsonl"
# Baselines counted on the held-out set itself (no training data given) carry this prefix:
# its own frequencies flatter them, so they are not printed as the model's baseline.
HELD_OUT_BASELINE_PREFIX = "heldout_"


class PretrainingEvaluator:
    """Evaluates a pre-trainer on held-out data: the metrics its training reports, exactly.

    Built once per run (the step is traced once); each call evaluates the
    model's current weights over the same batches and masks.

    Args:
        pretrainer: a `kbert.models.Pretrainer` (`BertPretrainer`, `ElectraPretrainer`).
        data: `EvalData`.
        batch_size: int. Global eval batch size.
        max_steps: int or None. Batches evaluated (None: the whole eval set).
        strategy: `tf.distribute.Strategy` the model was built in (None: the default).
        masking_config: `MaskingConfig` or None. Dynamic masking of unmasked eval data.
        vocab_file: str or None. Vocabulary for dynamic masking.

    Example:

    >>> evaluator = PretrainingEvaluator(pretrainer, EvalData.from_files(...), batch_size=64)
    >>> evaluator()["masked_lm_accuracy"]
    """

    def __init__(self, pretrainer: keras.Model, data: EvalData, batch_size: int,
                 max_steps: int | None = None, strategy: tf.distribute.Strategy | None = None,
                 masking_config: MaskingConfig | None = None, vocab_file: str | None = None):
        if batch_size < 1 or (max_steps is not None and max_steps < 1):
            raise ValueError(f"eval_batch_size={batch_size} and max_eval_steps={max_steps} must "
                             "be positive.")
        if pretrainer.next_sentence and not data.next_sentence:
            raise ValueError(
                f"--eval_input_file {data.files[0]} has no next_sentence_labels (made with "
                "--next_sentence=none) but the model has an NSP head; make the eval data with "
                "the training data's --next_sentence.")
        self.pretrainer, self.data = pretrainer, data
        self.strategy = strategy or tf.distribute.get_strategy()
        dataset = data.dataset(batch_size, pretrainer.next_sentence, masking_config, vocab_file)
        if max_steps is not None:
            dataset = dataset.take(max_steps)
        self.dataset = dataset
        self._distributed = self.strategy.experimental_distribute_dataset(
            dataset.with_options(_data_sharding()))
        self._step = self._make_step()
        # The model's random states (ELECTRA's sampler; dropout is off in evaluation).
        self._rng_states = [v for v in pretrainer.variables if "seed_generator_state" in v.path]

    def __call__(self) -> dict[str, Any]:
        """Evaluates the current weights.

        Returns:
            The pre-trainer's `pretraining_metrics` over the eval data
            (`masked_lm_loss`, `masked_lm_accuracy`, and `next_sentence_loss`
            / `next_sentence_accuracy` or ELECTRA's discriminator metrics),
            `perplexity` (exp of `masked_lm_loss`), `eval_batches`,
            `eval_masked_tokens` and `eval_seconds`.
        """
        start = time.time()
        saved = [v.numpy() for v in self._rng_states]
        for v in self._rng_states:
            v.assign(np.array([EVAL_SEED, 0]).astype(v.dtype))
        sums, batches = {}, 0
        try:
            for batch in self._distributed:
                for name, value in self._step(batch).items():
                    sums[name] = sums.get(name, 0.0) + value.numpy().astype(np.float64)
                batches += 1
        except tf.errors.OpError as e:
            if isinstance(e, (tf.errors.DataLossError, tf.errors.InvalidArgumentError)):
                raise named_data_error(list(self.data.files), e, "--eval_input_file") from None
            raise
        finally:
            for v, value in zip(self._rng_states, saved):
                v.assign(value)
        if not batches:
            raise ValueError(f"--eval_input_file {', '.join(self.data.files)} holds no records.")
        metrics = {k: v for k, v in self.pretrainer.pretraining_metrics(sums).items()
                   if v is not None}
        metrics["perplexity"] = _perplexity(metrics["masked_lm_loss"])
        metrics["eval_batches"] = batches
        metrics["eval_masked_tokens"] = int(round(float(sums["mlm_weight"])))
        metrics["eval_seconds"] = time.time() - start
        return metrics

    def _make_step(self):
        pretrainer, strategy = self.pretrainer, self.strategy

        def replica_sums(batch):
            features, labels, sample_weights = batch
            normalizers = pretrainer.loss_normalizers(features, labels, sample_weights)
            # Totals of one: the statistics are plain sums; the loss share is unused.
            ones = {name: tf.ones_like(value) for name, value in normalizers.items()}
            _, statistics = pretrainer.pretraining_losses(features, labels, sample_weights, ones,
                                                          training=False)
            return {**normalizers, **statistics}

        # reduce_retracing: the short last batch reuses the trace of the full ones.
        @tf.function(reduce_retracing=True)
        def step(batch):
            sums = strategy.run(replica_sums, args=(batch,))
            return {name: strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
                    for name, value in sums.items()}

        return step


def evaluate_pretrainer(pretrainer: keras.Model, eval_input_file: str | list[str],
                        batch_size: int = 32, max_seq_length: int | None = None,
                        max_predictions_per_seq: int | None = None,
                        max_steps: int | None = None, masking: str | None = None,
                        masking_config: MaskingConfig | None = None,
                        vocab_file: str | None = None,
                        strategy: tf.distribute.Strategy | None = None) -> dict[str, Any]:
    """Evaluates a pre-trainer on held-out pre-training TFRecords, as `kbert-pretrain` does.

    Args:
        pretrainer: a `kbert.models.Pretrainer` such as `BertPretrainer`
            (`kbert.checkpoints.load_pretrainer(dir)`) or `ElectraPretrainer`.
        eval_input_file: str or list of str. TFRecords from create_pretraining_data.
        batch_size: int. Defaults to 32 (the figures do not depend on it, up to float rounding).
        max_seq_length: int or None. Checked against the files (None: theirs).
        max_predictions_per_seq: int or None. Width of dynamic masks (None: 20).
        max_steps: int or None. Batches evaluated (None: all).
        masking: str or None. For files without a sidecar: `"static"` or `"dynamic"`.
        masking_config: `MaskingConfig` or None. Dynamic masking of unmasked eval data.
        vocab_file: str or None. Vocabulary of dynamic masking (default: the sidecar's).
        strategy: `tf.distribute.Strategy` or None. The one the model was built in.

    Returns:
        dict: `masked_lm_loss`, `masked_lm_accuracy`, `perplexity` and, with
        NSP, `next_sentence_loss` / `next_sentence_accuracy` (ELECTRA: its
        discriminator's metrics too), plus `eval_batches`, `eval_masked_tokens`,
        `eval_seconds`.

    Example:

    >>> pretrainer = kbert.checkpoints.load_pretrainer("out/tiny")
    >>> kbert.training.evaluate_pretrainer(pretrainer, "heldout.tfrecord")["masked_lm_accuracy"]
    """
    data = EvalData.from_files(eval_input_file, max_seq_length, max_predictions_per_seq, masking,
                               flag="eval_input_file")
    return PretrainingEvaluator(pretrainer, data, batch_size, max_steps, strategy,
                                masking_config, vocab_file)()


def format_evaluation(step: int, results: dict[str, Any]) -> str:
    """The progress line of one evaluation, each figure beside its data baseline.

    Example:

    >>> format_evaluation(300, {"masked_lm_loss": 5.1, "unigram_masked_lm_loss": 5.6, ...})
    'eval step 300  masked_lm_loss 5.1000 (unigram 5.6000)  ...'
    """
    parts = [f"eval step {step}"]
    for name, baseline, label in (("masked_lm_loss", "unigram_masked_lm_loss", "unigram"),
                                  ("masked_lm_accuracy", "unigram_masked_lm_accuracy", "unigram"),
                                  ("perplexity", None, None),
                                  ("next_sentence_loss", None, None),
                                  ("next_sentence_accuracy", "majority_next_sentence_accuracy",
                                   "majority"),
                                  ("discriminator_loss", None, None),
                                  ("discriminator_accuracy", None, None),
                                  ("discriminator_auc", None, None)):
        if results.get(name) is None:
            continue
        text = f"{name} {results[name]:.4f}"
        if baseline and results.get(baseline) is not None:
            text += f" ({label} {results[baseline]:.4f})"
        parts.append(text)
    if "eval_masked_tokens" in results:
        parts.append(f"[{results['eval_masked_tokens']} masked tokens, "
                     f"{results.get('eval_seconds', 0.0):.1f}s]")
    held_out = results.get(HELD_OUT_BASELINE_PREFIX + "unigram_masked_lm_loss")
    if held_out is not None:
        accuracy = results[HELD_OUT_BASELINE_PREFIX + "unigram_masked_lm_accuracy"]
        parts.append(f"[no training data given: the held-out set's own unigram (loss "
                     f"{held_out:.4f}, accuracy {accuracy:.4f}) is no baseline to compare with; "
                     "pass --input_file=<training data> for the training text's]")
    return "  ".join(parts)


class PeriodicEvaluation:
    """A run's held-out evaluation: evaluator, data baselines, history file and scalars.

    `eval_history.jsonl` holds one line per evaluation; on resume the lines
    after the checkpoint's step are dropped (they are evaluated again, with the
    same weights, data and masks), so a resumed run ends with the history of an
    uninterrupted one. An evaluation-only run (`resumed_from_step=None`) appends
    to `eval_only_history.jsonl` and TensorBoard's `eval_only/` instead, so it
    never changes a training run's history.

    Args:
        settings: the run's `PretrainingSettings` (`eval_*`, `model_dir`, strategy).
        pretrainer: the model being trained (or evaluated).
        train_files: list of str. The training data (the unigram baseline's counts);
            empty: the eval files are counted instead, and those figures are written
            as `heldout_unigram_*` and printed apart, not as the model's baseline.
        eval_data: `EvalData`.
        resumed_from_step: int or None. History lines after it are dropped; None:
            evaluation only (its own history file, appended to).

    Example:

    >>> evaluation = PeriodicEvaluation(settings, pretrainer, files, eval_data, 0)
    >>> if evaluation.due(step): evaluation(step)
    """

    def __init__(self, settings: PretrainingSettings, pretrainer: keras.Model,
                 train_files: list[str], eval_data: EvalData, resumed_from_step: int | None):
        self.settings = settings
        batch_size = settings.eval_batch_size or settings.train_batch_size
        self.evaluator = PretrainingEvaluator(
            pretrainer, eval_data, batch_size, settings.max_eval_steps, settings.strategy,
            settings.masking_config, settings.vocab_file)
        baselines = DataBaselines.compute(
            train_files or list(eval_data.files), eval_data, pretrainer.encoder.vocabulary_size,
            pretrainer.next_sentence, settings.max_eval_steps, batch_size,
            settings.masking_config, settings.vocab_file).as_dict()
        self.baselines = baselines if train_files else {
            HELD_OUT_BASELINE_PREFIX + name: value for name, value in baselines.items()}
        evaluation_only = resumed_from_step is None
        self.history_path = os.path.join(
            settings.model_dir, EVAL_ONLY_HISTORY_FILE if evaluation_only else EVAL_HISTORY_FILE)
        self.lines = [line for _, line in iter_jsonl(self.history_path)
                      if evaluation_only or line.get("step", 0) <= resumed_from_step] if (
            tf.io.gfile.exists(self.history_path)) else []
        self.last = self.lines[-1] if self.lines else None
        summary_dir = os.path.join(settings.model_dir, "eval_only" if evaluation_only else "eval")
        self.writer = (tf.summary.create_file_writer(summary_dir)
                       if settings.chief else tf.summary.create_noop_writer())
        self.train_seconds = 0.0

    def due(self, step: int) -> bool:
        """Whether `step` is evaluated: every `eval_interval` and the last step, once."""
        return ((step % self.settings.eval_interval == 0 or step == self.settings.num_train_steps)
                and not any(line["step"] == step for line in self.lines))

    def __call__(self, step: int) -> dict[str, Any]:
        """Evaluates now as step `step`: prints the line, writes the files and scalars."""
        results = {"step": step, **self.evaluator(), **self.baselines,
                   "train_seconds": self.train_seconds}
        self.settings.print_fn(format_evaluation(step, results))
        self.lines.append(results)
        self.last = results
        if self.settings.chief:
            text = "".join(json.dumps(line, sort_keys=True) + "\n" for line in self.lines)
            write_text(self.history_path, text)
            write_text(os.path.join(self.settings.model_dir, EVAL_RESULTS_FILE),
                       json.dumps(results, indent=2, sort_keys=True) + "\n")
            with self.writer.as_default():
                for name, value in results.items():
                    if name != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                        write_scalar(name, value, step)
            self.writer.flush()
        return results


def _perplexity(loss: float) -> float:
    return math.exp(loss) if loss < 700 else math.inf


def _data_sharding() -> tf.data.Options:
    # Every worker reads the whole (small) eval set and keeps its share of each
    # batch: file-based sharding would fail with fewer files than workers.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return options
