"""Fine-tuning on GLUE, CoNLL-2003 NER and SQuAD: one typed function, `run_finetuning`.

`kbert-finetune` calls it with paths from flags and hyperparameters from gin
(`gin/finetune.gin`). It checks every input before writing anything, trains the
task model with `kbert.training.create_optimizer` (AdamW with google-research/bert's
linear warmup and linear decay from step 0, as its `optimization.py`), evaluates with the official metrics, writes predictions and
saves a fine-tuned model directory (`kbert.checkpoints.save_finetuned`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import warnings
from typing import Any, Callable

import keras
import numpy as np
import tensorflow as tf

from kbert.data.conll import CONLL2003_LABELS
from kbert.data.conll import conll_split_file
from kbert.data.conll import read_conll
from kbert.data.glue import get_glue_task
from kbert.data.glue import read_glue
from kbert.data.squad import read_squad
from kbert.data.squad import squad_gold_answers
from kbert.data.squad_features import span_dataset
from kbert.data.squad_features import squad_features
from kbert.data.squad_postprocessing import postprocess_squad
from kbert.data.text_features import TextFeaturizer
from kbert.data.text_features import check_max_seq_length
from kbert.data.text_features import classification_dataset
from kbert.data.vocabulary import INPUT_TOKENS
from kbert.data.vocabulary import read_vocab
from kbert.data.text_features import token_classification_dataset
from kbert.models.bert_classifier import BertClassifier
from kbert.checkpoints.config_files import read_bert_config
from kbert.models.bert_span_labeler import BertSpanLabeler
from kbert.models.bert_token_classifier import BertTokenClassifier
from kbert.checkpoints.finetuned import TASK_CONFIG
from kbert.checkpoints.finetuned import TaskConfig
from kbert.checkpoints.finetuned import load_finetuned
from kbert.checkpoints.finetuned import save_finetuned
from kbert.checkpoints.pretrained import BERT_CONFIG
from kbert.checkpoints.pretrained import load_encoder
from kbert.checkpoints.pretrained import read_tokenizer_config
from kbert.training import metrics as metric_functions
from kbert.training.optimizer import create_optimizer
from kbert.training.strategy import create_strategy

TASKS = ("glue", "ner", "squad")
# Fine-tuning batches are padded per batch (dynamic shapes, which TPUs would
# recompile for) and every process writes model_dir, so the TPU and
# multi-worker strategies of `create_strategy` are not offered here.
STRATEGIES = ("default", "one_device", "mirrored")
EVAL_RESULTS = "eval_results.json"
# Arguments that are runtime data (flags of kbert-finetune), never gin bindings.
RUNTIME_ARGUMENTS = (
    "task", "init_checkpoint", "model_dir", "task_name", "data_dir", "train_file",
    "predict_file", "vocab_file", "do_lower_case", "do_train", "do_eval", "do_predict",
    "strategy", "verbose",
)

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class _Task:
    """What one task family provides to the shared loop."""

    task_config: TaskConfig
    build_model: Callable[[Any], keras.Model]
    train_count: int
    train_dataset: Callable[[], tf.data.Dataset] | None
    to_training: Callable[[dict], tuple]
    evaluate: Callable[[keras.Model], tuple[dict, Callable[[str], None]]] | None
    predict: Callable[[keras.Model], Callable[[str], None]] | None
    loss_weights: dict | None = None


def _write_atomic(path: str, text: str) -> None:
    with tf.io.gfile.GFile(path + ".tmp", "w") as f:
        f.write(text)
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


def _glue_task(featurizer, data_dir, task_name, config, do_train, do_eval, do_predict,
               train_batch_size, eval_batch_size, max_seq_length, seed) -> _Task:
    glue = get_glue_task(task_name)
    # Read every split needed now, so bad files fail before anything is written.
    train = read_glue(data_dir, glue.name, "train") if do_train else []
    dev = read_glue(data_dir, glue.name, "dev") if do_eval else []
    test = read_glue(data_dir, glue.name, "test") if do_predict else []
    regression = glue.is_regression
    task_config = config or TaskConfig(
        model_type="regressor" if regression else "classifier", task="glue",
        task_name=glue.name, label_names=list(glue.label_names),
        text_pair=glue.text_b is not None, max_seq_length=max_seq_length,
        do_lower_case=featurizer.do_lower_case)

    def dataset(examples, batch_size, is_training):
        return classification_dataset(
            featurizer, [e.text_a for e in examples],
            [e.text_b for e in examples] if glue.text_b is not None else None,
            [e.label if e.label is not None else 0 for e in examples],
            batch_size, max_seq_length, is_training=is_training, regression=regression,
            seed=seed)

    def scores(model, examples):
        outputs = _classifier_outputs(model, dataset(examples, eval_batch_size, False))
        return outputs[:, 0] if regression else outputs.argmax(axis=-1)

    def evaluate(model):
        predictions = scores(model, dev)
        labels = np.asarray([e.label for e in dev])
        results = {}
        for name in glue.metrics:
            function = {"accuracy": metric_functions.accuracy, "f1": metric_functions.f1_score,
                        "matthews_corrcoef": metric_functions.matthews_corrcoef,
                        "pearson": metric_functions.pearson_corrcoef,
                        "spearman": metric_functions.spearman_corrcoef}[name]
            results[name] = function(labels, predictions)
        results["num_examples"] = len(dev)
        return results, lambda model_dir: None

    def predict(model):
        predictions = scores(model, test)
        lines = ["index\tprediction"]
        for example, value in zip(test, predictions):
            text = f"{value:.3f}" if regression else glue.label_names[int(value)]
            lines.append(f"{example.guid.split('-', 1)[1]}\t{text}")
        return lambda model_dir: _write_atomic(
            os.path.join(model_dir, "predictions.tsv"), "\n".join(lines) + "\n")

    return _Task(
        task_config=task_config,
        build_model=lambda encoder: BertClassifier(
            encoder, num_classes=1 if regression else len(glue.label_names)),
        train_count=len(train),
        train_dataset=(lambda: dataset(train, train_batch_size, True)) if do_train else None,
        to_training=lambda b: (_inputs(b), b["label"]),
        evaluate=evaluate if do_eval else None,
        predict=predict if do_predict else None,
    )


def _inputs(batch: dict) -> dict:
    return {name: batch[name] for name in ("token_ids", "segment_ids", "padding_mask")}


def _forward_function(model):
    signature = {name: tf.TensorSpec([None, None], tf.int32)
                 for name in ("token_ids", "segment_ids", "padding_mask")}

    @tf.function(input_signature=[signature])
    def forward(inputs):
        return model(inputs, training=False)

    return forward


def _classifier_outputs(model, dataset) -> np.ndarray:
    forward = _forward_function(model)
    rows = {}
    for batch in dataset:
        logits = forward(_inputs(batch)).numpy()
        for row, index in enumerate(batch["example_index"].numpy()):
            rows[int(index)] = logits[row]
    return np.stack([rows[i] for i in range(len(rows))])


def _ner_task(featurizer, data_dir, task_name, config, do_train, do_eval, do_predict,
              train_batch_size, eval_batch_size, max_seq_length, seed) -> _Task:
    label_names = tuple(config.label_names) if config else CONLL2003_LABELS
    splits = {split: read_conll(conll_split_file(data_dir, split), label_names)
              for split, wanted in (("train", do_train), ("dev", do_eval), ("test", do_predict))
              if wanted}
    task_config = config or TaskConfig(
        model_type="token_classifier", task="ner", task_name=task_name or "conll2003",
        label_names=list(label_names), max_seq_length=max_seq_length,
        do_lower_case=featurizer.do_lower_case)
    label_ids = {name: i for i, name in enumerate(label_names)}

    def dataset(sentences, batch_size, is_training):
        return token_classification_dataset(
            featurizer, [s.words for s in sentences],
            [[label_ids[t] for t in s.tags] for s in sentences],
            batch_size, max_seq_length, is_training=is_training, seed=seed)

    def tag(model, sentences):
        forward = _forward_function(model)
        predicted = [["O"] * len(s.words) for s in sentences]
        for batch in dataset(sentences, eval_batch_size, False):
            best = forward(_inputs(batch)).numpy().argmax(axis=-1)
            positions = batch["word_position"].numpy()
            for row, index in enumerate(batch["example_index"].numpy()):
                for position in np.nonzero(positions[row])[0]:
                    predicted[index][positions[row, position] - 1] = label_names[best[row, position]]
        return predicted

    def lines(sentences, predicted):
        out = []
        for sentence, tags in zip(sentences, predicted):
            out.extend(f"{word}\t{t}" for word, t in zip(sentence.words, tags))
            out.append("")
        return "\n".join(out)

    def evaluate(model):
        dev = splits["dev"]
        predicted = tag(model, dev)
        results = metric_functions.entity_f1([s.tags for s in dev], predicted)
        results["num_examples"] = len(dev)
        return results, lambda model_dir: None

    def predict(model):
        test = splits["test"]
        text = lines(test, tag(model, test))
        return lambda model_dir: _write_atomic(os.path.join(model_dir, "predictions.tsv"), text)

    train = splits.get("train", [])
    return _Task(
        task_config=task_config,
        build_model=lambda encoder: BertTokenClassifier(encoder, num_classes=len(label_names)),
        train_count=len(train),
        train_dataset=(lambda: dataset(train, train_batch_size, True)) if do_train else None,
        to_training=lambda b: (_inputs(b), b["label"], tf.cast(b["weight"], tf.float32)),
        evaluate=evaluate if do_eval else None,
        predict=predict if do_predict else None,
    )


def _squad_task(featurizer, train_file, predict_file, config, do_train, do_eval, do_predict,
                train_batch_size, eval_batch_size, max_seq_length, doc_stride,
                max_query_length, max_answer_length, n_best_size, version_2_with_negative,
                null_score_diff_threshold, seed) -> _Task:
    if do_train and not train_file:
        raise ValueError("--task=squad --do_train needs --train_file (SQuAD JSON).")
    if (do_eval or do_predict) and not predict_file:
        raise ValueError("--task=squad --do_eval/--do_predict need --predict_file (SQuAD JSON).")
    if config:
        doc_stride, max_query_length = config.doc_stride, config.max_query_length
        max_answer_length = config.max_answer_length
    train_features = []
    if do_train:
        train, skipped = read_squad(train_file, True, version_2_with_negative)
        if skipped:
            logger.warning("%s: skipped %d question(s) whose answer text does not match the "
                           "context at answer_start.", train_file, skipped)
        train_features = squad_features(featurizer, train, max_seq_length, doc_stride,
                                        max_query_length, is_training=True)
    if do_eval or do_predict:
        examples, _ = read_squad(predict_file, False, version_2_with_negative)
        features = squad_features(featurizer, examples, max_seq_length, doc_stride,
                                  max_query_length, is_training=False)
    task_config = config or TaskConfig(
        model_type="span_labeler", task="squad",
        task_name="squad2" if version_2_with_negative else "squad", text_pair=True,
        max_seq_length=max_seq_length, do_lower_case=featurizer.do_lower_case,
        doc_stride=doc_stride, max_query_length=max_query_length,
        max_answer_length=max_answer_length)

    def answer(model):
        forward = _forward_function(model)
        starts, ends = [None] * len(features), [None] * len(features)
        for batch in span_dataset(features, eval_batch_size, max_seq_length):
            outputs = forward(_inputs(batch))
            start_logits = outputs["start_logits"].numpy()
            end_logits = outputs["end_logits"].numpy()
            for row, index in enumerate(batch["feature_index"].numpy()):
                length = len(features[index].token_ids)
                starts[index] = start_logits[row, :length]
                ends[index] = end_logits[row, :length]
        predictions, nbest, null_odds = postprocess_squad(
            examples, features, starts, ends, n_best_size=n_best_size,
            max_answer_length=max_answer_length,
            version_2_with_negative=version_2_with_negative,
            null_score_diff_threshold=null_score_diff_threshold)

        def write(model_dir):
            _write_atomic(os.path.join(model_dir, "predictions.json"),
                          json.dumps(predictions, indent=2, ensure_ascii=False) + "\n")
            _write_atomic(os.path.join(model_dir, "nbest_predictions.json"),
                          json.dumps(nbest, indent=2, ensure_ascii=False) + "\n")
            if version_2_with_negative:
                _write_atomic(os.path.join(model_dir, "null_odds.json"),
                              json.dumps(null_odds, indent=2) + "\n")

        return predictions, write

    def evaluate(model):
        predictions, write = answer(model)
        results = metric_functions.squad_metrics(squad_gold_answers(examples), predictions)
        results["num_examples"] = results.pop("total")
        return results, write

    return _Task(
        task_config=task_config,
        build_model=BertSpanLabeler,
        train_count=len(train_features),
        train_dataset=(lambda: span_dataset(train_features, train_batch_size, max_seq_length,
                                            is_training=True, seed=seed)) if do_train else None,
        to_training=lambda b: (_inputs(b), {"start_logits": b["start_position"],
                                            "end_logits": b["end_position"]}),
        evaluate=evaluate if do_eval else None,
        # Evaluation already writes predictions.json for the same file.
        predict=(lambda model: answer(model)[1]) if do_predict and not do_eval else None,
        # The original averages the start and end losses.
        loss_weights={"start_logits": 0.5, "end_logits": 0.5},
    )


def _resolve_vocabulary(init_checkpoint: str, vocab_file: str | None,
                        vocabulary_size: int) -> str:
    recorded = read_tokenizer_config(init_checkpoint)["vocab_file"]
    if vocab_file is None:
        if recorded is None:
            raise FileNotFoundError(
                f"--init_checkpoint={init_checkpoint} has no vocab.txt; pass --vocab_file.")
        vocab_file = recorded
    vocabulary = read_vocab(vocab_file, INPUT_TOKENS)
    if recorded is not None and vocab_file != recorded:
        if read_vocab(recorded) != vocabulary:
            raise ValueError(
                f"--vocab_file={vocab_file} differs from the vocabulary {recorded} of "
                f"--init_checkpoint={init_checkpoint}; drop --vocab_file to use the model's own.")
    if len(vocabulary) != vocabulary_size:
        raise ValueError(
            f"{vocab_file} has {len(vocabulary)} tokens but the encoder of --init_checkpoint="
            f"{init_checkpoint} has {vocabulary_size} embedding rows; use the vocab.txt the "
            "model was trained with.")
    return vocab_file


def run_finetuning(
    task: str,
    init_checkpoint: str,
    model_dir: str,
    task_name: str | None = None,
    data_dir: str | None = None,
    train_file: str | None = None,
    predict_file: str | None = None,
    vocab_file: str | None = None,
    do_lower_case: bool | None = None,
    do_train: bool = True,
    do_eval: bool = True,
    do_predict: bool = False,
    strategy: str = "default",
    train_batch_size: int = 32,
    eval_batch_size: int = 64,
    learning_rate: float = 2e-5,
    num_train_epochs: float = 3.0,
    warmup_proportion: float = 0.1,
    weight_decay: float = 0.01,
    max_seq_length: int = 128,
    doc_stride: int = 128,
    max_query_length: int = 64,
    max_answer_length: int = 30,
    n_best_size: int = 20,
    version_2_with_negative: bool = False,
    null_score_diff_threshold: float = 0.0,
    seed: int = 12345,
    verbose: str | int = "auto",
) -> dict[str, Any]:
    """Fine-tunes, evaluates and predicts on one task; writes a fine-tuned model directory.

    All inputs (data files, vocabulary, sizes) are checked before anything is
    written. With `do_train`, `init_checkpoint` is a pre-trained directory
    (`kbert-pretrain` model_dir or `kbert-convert` output); without it, it may
    also be a fine-tuned directory to evaluate or predict with.

    Args:
        task: str. `glue`, `ner` or `squad`.
        init_checkpoint: str. Pre-trained (or, without training, fine-tuned) directory.
        model_dir: str. Output: fine-tuned model directory, `eval_results.json`,
            predictions (`predictions.tsv`; `predictions.json` for SQuAD).
        task_name: str or None. GLUE task (`sst-2`, `mrpc`, ...); the NER
            dataset name (defaults to `conll2003`).
        data_dir: str or None. GLUE task folder, or CoNLL folder.
        train_file: str or None. SQuAD training JSON.
        predict_file: str or None. SQuAD JSON to evaluate/predict.
        vocab_file: str or None. Defaults to `init_checkpoint`'s `vocab.txt`.
        do_lower_case: bool or None. Defaults to `init_checkpoint`'s
            `tokenizer_config.json`, else True.
        do_train: bool. Train on the train split / `train_file`.
        do_eval: bool. Evaluate on the dev split / `predict_file`.
        do_predict: bool. Predict the test split / `predict_file`.
        strategy: str. `default`, `one_device` or `mirrored`, built by
            `kbert.training.create_strategy`.
        train_batch_size: int. Global batch size. Defaults to 32.
        eval_batch_size: int. Defaults to 64.
        learning_rate: float. Peak AdamW learning rate. Defaults to 2e-5.
        num_train_epochs: float. Defaults to 3.0.
        warmup_proportion: float. Fraction of steps warming up. Defaults to 0.1.
        weight_decay: float. Decoupled weight decay (not on LayerNorm and
            biases). Defaults to 0.01.
        max_seq_length: int. Packed length. Defaults to 128.
        doc_stride: int. SQuAD window stride. Defaults to 128.
        max_query_length: int. SQuAD question wordpieces. Defaults to 64.
        max_answer_length: int. SQuAD answer wordpieces. Defaults to 30.
        n_best_size: int. SQuAD candidates kept. Defaults to 20.
        version_2_with_negative: bool. SQuAD 2.0 (unanswerable questions).
        null_score_diff_threshold: float. SQuAD 2.0: answer "" when the null
            score beats the best span by more than this. Defaults to 0.0.
        seed: int. Shuffling, dropout and head initialization. Defaults to 12345.
        verbose: Keras `fit` verbosity. Defaults to "auto".

    Returns:
        dict with the evaluation metrics (if `do_eval`), `train_loss` (per epoch,
        if `do_train`) and `train_steps`.

    Example:

    >>> kbert.training.run_finetuning(
    ...     task="glue", task_name="sst-2", data_dir="glue_data/SST-2",
    ...     init_checkpoint="minilm/", model_dir="runs/sst2")
    """
    if task not in TASKS:
        raise ValueError(f"--task={task!r}; expected one of {TASKS}.")
    if strategy not in STRATEGIES:
        raise ValueError(f"--strategy={strategy!r}; fine-tuning supports {', '.join(STRATEGIES)}.")
    if not (do_train or do_eval or do_predict):
        raise ValueError("nothing to do: pass at least one of --do_train, --do_eval, --do_predict.")
    if task == "glue" and not task_name:
        raise ValueError("--task=glue needs --task_name (e.g. sst-2, mrpc, cola, sts-b).")
    if task in ("glue", "ner") and not data_dir:
        raise ValueError(f"--task={task} needs --data_dir.")
    if not tf.io.gfile.isdir(init_checkpoint):
        raise FileNotFoundError(f"--init_checkpoint={init_checkpoint} is not a directory.")
    finetuned = tf.io.gfile.exists(os.path.join(init_checkpoint, TASK_CONFIG))
    config = None
    if finetuned and not do_train:
        from kbert.checkpoints.finetuned import read_task_config

        config = read_task_config(init_checkpoint)
        if config.task != task:
            raise ValueError(f"--init_checkpoint={init_checkpoint} was fine-tuned for "
                             f"--task={config.task}, not {task}.")
        max_seq_length = config.max_seq_length
    if not tf.io.gfile.exists(os.path.join(init_checkpoint, BERT_CONFIG)):
        raise FileNotFoundError(
            f"--init_checkpoint={init_checkpoint} is not a kbert pre-trained directory: "
            f"{BERT_CONFIG} is missing. Point to a kbert-pretrain model_dir or a kbert-convert "
            "output_dir.")
    encoder_config = read_bert_config(os.path.join(init_checkpoint, BERT_CONFIG))
    check_max_seq_length(max_seq_length, encoder_config["max_sequence_length"])
    vocab_file = _resolve_vocabulary(init_checkpoint, vocab_file,
                                     encoder_config["vocabulary_size"])
    if do_lower_case is None:
        recorded = read_tokenizer_config(init_checkpoint)["do_lower_case"]
        do_lower_case = True if recorded is None else recorded
    for name, value in (("train_batch_size", train_batch_size),
                        ("eval_batch_size", eval_batch_size)):
        if value < 1:
            raise ValueError(f"{name}={value}; it must be >= 1.")
    if do_train and num_train_epochs <= 0:
        raise ValueError(f"num_train_epochs={num_train_epochs}; it must be > 0.")
    if not 0 <= warmup_proportion < 1:
        raise ValueError(f"warmup_proportion={warmup_proportion}; it must be in [0, 1).")

    keras.utils.set_random_seed(seed)
    featurizer = TextFeaturizer(vocab_file, do_lower_case=do_lower_case)
    common = dict(config=config, do_train=do_train, do_eval=do_eval, do_predict=do_predict,
                  train_batch_size=train_batch_size, eval_batch_size=eval_batch_size,
                  max_seq_length=max_seq_length, seed=seed)
    if task == "glue":
        spec = _glue_task(featurizer, data_dir, task_name, **common)
    elif task == "ner":
        spec = _ner_task(featurizer, data_dir, task_name, **common)
    else:
        spec = _squad_task(featurizer, train_file, predict_file, doc_stride=doc_stride,
                           max_query_length=max_query_length,
                           max_answer_length=max_answer_length, n_best_size=n_best_size,
                           version_2_with_negative=version_2_with_negative,
                           null_score_diff_threshold=null_score_diff_threshold, **common)
    if do_train and spec.train_count == 0:
        raise ValueError("no training examples after reading the data.")

    distribution = create_strategy(strategy)
    results: dict[str, Any] = {}
    with distribution.scope():
        if config is not None:
            model, _, _ = load_finetuned(init_checkpoint)
        else:
            model = spec.build_model(load_encoder(init_checkpoint))
        if do_train:
            steps_per_epoch = math.ceil(spec.train_count / train_batch_size)
            total_steps = max(1, round(steps_per_epoch * num_train_epochs))
            epochs = math.ceil(num_train_epochs)
            steps_per_epoch = math.ceil(total_steps / epochs)
            total_steps = steps_per_epoch * epochs
            warmup_steps = int(total_steps * warmup_proportion)
            optimizer = create_optimizer(learning_rate, num_train_steps=total_steps,
                                         num_warmup_steps=warmup_steps,
                                         weight_decay_rate=weight_decay)
            model.compile(optimizer=optimizer,
                          loss_weights=spec.loss_weights,
                          # XLA compiles once per shape; batches here have many lengths.
                          jit_compile=False)
    if do_train:
        logger.info("Training %s on %d examples: %d steps (%d warmup), batch %d.",
                    spec.task_config.task_name, spec.train_count, total_steps, warmup_steps,
                    train_batch_size)
        dataset = spec.train_dataset().map(spec.to_training)
        with warnings.catch_warnings():
            # The token and span heads do not use the pooler; Keras warns each step.
            warnings.filterwarnings("ignore", message="Gradients do not exist for variables")
            history = model.fit(dataset, epochs=epochs, steps_per_epoch=steps_per_epoch,
                                shuffle=False, verbose=verbose)
        results["train_loss"] = [float(v) for v in history.history["loss"]]
        results["train_steps"] = total_steps
    writers = []
    if spec.evaluate is not None:
        metrics_found, write = spec.evaluate(model)
        results.update(metrics_found)
        writers.append(write)
    if spec.predict is not None:
        writers.append(spec.predict(model))

    tf.io.gfile.makedirs(model_dir)
    if do_train:
        save_finetuned(model_dir, _uncompiled(model), spec.task_config, vocab_file)
    for write in writers:
        write(model_dir)
    if do_eval:
        _write_atomic(os.path.join(model_dir, EVAL_RESULTS),
                      json.dumps(results, indent=2, sort_keys=True) + "\n")
    return results


def _uncompiled(model: keras.Model) -> keras.Model:
    # `task_model.keras` should hold the model, not AdamW's two extra copies
    # of every weight.
    copy = model.__class__.from_config(model.get_config())
    copy.set_weights(model.get_weights())
    return copy
