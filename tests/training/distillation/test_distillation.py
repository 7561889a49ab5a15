"""kbert-distill: the KL against numpy, students that learn the teacher, copied layers,
a narrower student through the projection, the student directory exported, bad inputs."""

import json
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import forked_python
from tests.conftest import REPO
from tests.conftest import tiny_encoder_kwargs
from tests.conftest import tiny_inputs
from tests.finetune_testing import TESTDATA
from tests.finetune_testing import count_train_step_traces
from tests.finetune_testing import make_tiny_pretrained
from tests.tasks.classification.files import ticket_rows
from tests.tasks.classification.files import write_rows

from kbert.checkpoints import TaskConfig
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.checkpoints import load_encoder
from kbert.checkpoints import load_finetuned
from kbert.checkpoints import open_model_dir
from kbert.checkpoints import save_finetuned
from kbert.models import BertClassifier
from kbert.models import BertDualEncoder
from kbert.models import BertSentenceEncoder
from kbert.models import BertEncoder
from kbert.models import BertTokenClassifier
from kbert.tasks import ClassificationConfig
from kbert.tasks import ClassificationTask
from kbert.tasks import TaskData
from kbert.tasks import get_task
from kbert.training.distillation import distiller as distillers
from kbert.training.distillation import run_distillation
from kbert.training.optimizer import build_optimizer_state

SST2 = os.path.join(TESTDATA, "glue", "SST-2")
STSB = os.path.join(TESTDATA, "glue", "STS-B")
CONLL = os.path.join(TESTDATA, "conll2003")
TEACHER_LAYERS = 4
FAST = dict(train_batch_size=4, eval_batch_size=8, learning_rate=1e-3, num_train_epochs=2.0,
            warmup_proportion=0.0, verbose=0)


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _numpy_kl(teacher, student, temperature, weights=None):
    """Hinton's soft loss by hand: KL(softmax(t/T) || softmax(s/T)) * T^2, weighted mean."""
    p, q = _softmax(teacher / temperature), _softmax(student / temperature)
    kl = (p * (np.log(p) - np.log(q))).sum(-1)
    weights = np.ones_like(kl) if weights is None else weights
    return (kl * weights).sum() / weights.sum() * temperature ** 2


@pytest.mark.parametrize("temperature", [1.0, 2.0, 5.0])
def test_temperature_kl_equals_hand_computation(temperature):
    rng = np.random.default_rng(0)
    teacher, student = rng.normal(0, 3, (5, 4)), rng.normal(0, 3, (5, 4))
    loss = distillers.TemperatureKL(temperature).compute_loss(
        tf.constant(teacher, tf.float32), tf.constant(student, tf.float32))
    np.testing.assert_allclose(float(loss), _numpy_kl(teacher, student, temperature), rtol=1e-5)
    # Per token, counting only the positions of weight 1 (NER's first wordpieces).
    teacher, student = rng.normal(0, 3, (2, 6, 9)), rng.normal(0, 3, (2, 6, 9))
    weights = (rng.random((2, 6)) > 0.4).astype("float32")
    loss = distillers.TemperatureKL(temperature).compute_loss(
        tf.constant(teacher, tf.float32), tf.constant(student, tf.float32),
        sample_weight=tf.constant(weights))
    np.testing.assert_allclose(float(loss), _numpy_kl(teacher, student, temperature, weights),
                               rtol=1e-5)
    assert _numpy_kl(teacher, student, temperature, weights) != pytest.approx(
        _numpy_kl(teacher, student, temperature))


@pytest.mark.parametrize("temperature", [1.0, 3.0])
def test_multi_label_soft_targets_are_each_labels_sigmoid_by_binary_cross_entropy(temperature):
    from kbert.training.distillation.loop import _logits_loss

    rng = np.random.default_rng(1)
    teacher, student = rng.normal(0, 3, (4, 5)), rng.normal(0, 3, (4, 5))
    weights = np.array([1.0, 0.0, 1.0, 2.0], "float32")
    p, q = (1 / (1 + np.exp(-x / temperature)) for x in (teacher, student))
    by_hand = -(p * np.log(q) + (1 - p) * np.log(1 - q)).mean(-1)  # mean over the labels
    loss = _logits_loss(None, temperature, "sigmoid_logits")
    assert isinstance(loss, distillers.TemperatureBinaryCrossentropy)
    np.testing.assert_allclose(
        float(loss.compute_loss(tf.constant(teacher, tf.float32), tf.constant(student, tf.float32),
                                sample_weight=tf.constant(weights))),
        (by_hand * weights).sum() / weights.sum() * temperature ** 2, rtol=1e-5)


def test_a_regressor_learns_the_teachers_score_by_mse():
    from kbert.training.distillation.loop import _logits_loss

    regressor = BertClassifier(BertEncoder(**tiny_encoder_kwargs()), num_classes=1)
    loss = _logits_loss(regressor, temperature=2.0)
    assert isinstance(loss, keras.distillation.FeatureDistillation)
    teacher, student = np.array([[0.5], [2.0], [-1.0]]), np.array([[1.0], [2.0], [1.0]])
    np.testing.assert_allclose(float(loss.compute_loss(tf.constant(teacher), tf.constant(student))),
                               np.mean((teacher - student) ** 2), rtol=1e-6)


def _kl(teacher, student, inputs, weights=None, sigmoid=False):
    """KL of the student's outputs from the teacher's at T = 1: of the softmax, or (`sigmoid`)
    of each label's sigmoid, summed over the labels."""
    t, s = (np.asarray(model(inputs, training=False), "float64") for model in (teacher, student))
    if sigmoid:
        p, q = 1 / (1 + np.exp(-t)), 1 / (1 + np.exp(-s))
        return float((p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))).sum(-1).mean())
    return float(distillers.TemperatureKL(1.0).compute_loss(t, s, sample_weight=weights))


NARROW = dict(num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=24)


@pytest.mark.parametrize("model,narrow,sigmoid", [
    (BertClassifier, False, False), (BertTokenClassifier, False, False),
    (BertClassifier, True, False), (BertClassifier, False, True)])
def test_student_trained_on_a_fixed_batch_moves_toward_the_teacher(model, narrow, sigmoid):
    """Soft targets only; the narrow student (H=16 vs 32) also learns the teacher's
    hidden states through the learned projection; a multi-label student (`sigmoid`) each
    label's probability by binary cross-entropy."""
    keras.utils.set_random_seed(1)
    teacher = model(BertEncoder(**tiny_encoder_kwargs(num_layers=TEACHER_LAYERS)), num_classes=3)
    # Sharper targets than a fresh head gives, so there is something to learn.
    teacher.output_dense.kernel.assign(teacher.output_dense.kernel * 30.0)
    sizes = NARROW if narrow else dict(num_layers=1)
    student = model(BertEncoder(**tiny_encoder_kwargs(dropout=0.0, **sizes)), num_classes=3,
                    dropout=0.0)
    inputs = tiny_inputs()
    weights = tf.cast(inputs["padding_mask"], tf.float32) if model is BertTokenClassifier else None
    before = _kl(teacher, student, inputs, weights, sigmoid)
    hidden = dict(hidden_state_weight=1.0, layer_map=distillers.uniform_layer_map(2, 4))
    distiller = distillers.TaskDistiller(
        distillers.with_encoder_all_layers(teacher) if narrow else teacher,
        distillers.with_encoder_all_layers(student) if narrow else student,
        distillers.TemperatureBinaryCrossentropy(2.0) if sigmoid else distillers.TemperatureKL(2.0),
        hard_label_weight=0.0, target="sigmoid_logits" if sigmoid else "logits",
        **(hidden if narrow else {}))
    distiller.compile(optimizer=keras.optimizers.Adam(3e-3),
                      loss=keras.losses.BinaryCrossentropy(from_logits=True) if sigmoid
                      else keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    build_optimizer_state(distiller)  # as kbert-distill does: fit traces its step once
    labels = np.zeros(inputs["token_ids"].shape if weights is not None else (3,), "int32")
    if sigmoid:
        labels = np.zeros((3, 3), "float32")  # a multi-hot row per input
    dataset = tf.data.Dataset.from_tensors((inputs, labels) if weights is None
                                           else (inputs, labels, weights)).repeat()
    history = distiller.fit(dataset, steps_per_epoch=20, epochs=2, verbose=0)
    after = _kl(distiller.teacher, distiller.student, inputs, weights, sigmoid)
    assert after < 0.2 * before, (before, after)
    if narrow:
        assert hidden["layer_map"] == [1, 3]
        assert [p.units for p in distiller.projections] == [32, 32]
        assert all(p.kernel.trainable for p in distiller.projections)
        losses = history.history["total_loss"]
        assert losses[-1] < 0.5 * losses[0], losses
    assert not any(w.trainable for w in distiller.teacher.weights)


def test_embedding_mse_equals_hand_computation():
    rng = np.random.default_rng(3)
    teacher, student = rng.normal(size=(6, 5)), rng.normal(size=(6, 5))
    loss = distillers.EmbeddingMSE().compute_loss(tf.constant(teacher, tf.float32),
                                                  tf.constant(student, tf.float32))
    np.testing.assert_allclose(float(loss), ((teacher - student) ** 2).sum(-1).mean(), rtol=1e-5)


def _pair_inputs():
    single = {k: tf.constant(v) for k, v in tiny_inputs().items()}
    pairs = {f"{side}_{k}": v for side in ("query", "document") for k, v in single.items()}
    pairs["document_token_ids"] = tf.reverse(pairs["document_token_ids"], [0])
    return pairs


def test_bi_encoder_student_embeddings_move_toward_the_teachers_through_the_projection():
    """A narrower student (H=16 vs 32): the learned projection maps its vectors to the
    teacher's width; the squared error of the vectors falls on a fixed batch."""
    keras.utils.set_random_seed(5)
    teacher = BertDualEncoder(BertSentenceEncoder(
        BertEncoder(**tiny_encoder_kwargs(num_layers=TEACHER_LAYERS))), None, "cosine")
    student = BertDualEncoder(BertSentenceEncoder(
        BertEncoder(**tiny_encoder_kwargs(dropout=0.0, **NARROW))), None, "cosine")
    distiller = distillers.TaskDistiller(teacher, student, distillers.EmbeddingMSE(),
                                         hard_label_weight=0.0, target="embeddings")
    assert distiller.embedding_projection.units == 32
    inputs = _pair_inputs()
    views = [distillers.embedding_view(m, sorted(inputs)) for m in (teacher, student)]

    def error():
        vectors = [view(inputs, training=False)["embeddings"] for view in views]
        assert vectors[0].shape == (6, 32) and vectors[1].shape == (6, 16)
        return float(distillers.EmbeddingMSE().compute_loss(
            vectors[0], distiller.embedding_projection(vectors[1])))

    before = error()
    distiller.compile(optimizer=keras.optimizers.Adam(3e-3), loss=keras.losses.MeanSquaredError())
    build_optimizer_state(distiller)
    dataset = tf.data.Dataset.from_tensors((inputs, np.zeros(3, "float32"))).repeat()
    distiller.fit(dataset, steps_per_epoch=20, epochs=2, verbose=0)
    assert error() < 0.2 * before, (before, error())
    assert not any(w.trainable for w in teacher.weights)
    assert distiller.embedding_projection.kernel.trainable
    with pytest.raises(ValueError, match=r"hidden_state_weight=1.0, attention_weight=0.0: bi-encoders"):
        distillers.TaskDistiller(teacher, student, distillers.EmbeddingMSE(), 0.0,
                                 hidden_state_weight=1.0, layer_map=[3, 3], target="embeddings")


def _numpy_attention_loss(teacher, student, mask, kind):
    if kind == "kl":
        with np.errstate(divide="ignore", invalid="ignore"):
            per_key = np.where(teacher > 0, teacher * (np.log(teacher) - np.log(student)), 0.0)
    else:
        per_key = (teacher - student) ** 2
    rows = per_key.sum(-1)  # [batch, heads, queries]
    weights = np.broadcast_to(mask[:, None, :], rows.shape)
    return (rows * weights).sum() / weights.sum()


def _attention_probabilities(rng, mask, heads=2):
    logits = rng.normal(0, 2, (len(mask), heads, mask.shape[1], mask.shape[1]))
    logits = np.where(mask[:, None, None, :] > 0, logits, -np.inf)  # padded keys get 0
    return _softmax(logits)


@pytest.mark.parametrize("kind", ["kl", "mse"])
def test_attention_loss_equals_numpy_and_is_zero_for_equal_maps(kind):
    rng = np.random.default_rng(6)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], "float32")
    teacher, student = _attention_probabilities(rng, mask), _attention_probabilities(rng, mask)
    loss = distillers.attention_loss(tf.constant(teacher, tf.float32),
                                     tf.constant(student, tf.float32), tf.constant(mask), kind)
    expected = _numpy_attention_loss(teacher, student, mask, kind)
    assert expected > 0.05
    np.testing.assert_allclose(float(loss), expected, rtol=1e-5)
    assert float(distillers.attention_loss(tf.constant(teacher, tf.float32),
                                           tf.constant(teacher, tf.float32),
                                           tf.constant(mask), kind)) == pytest.approx(0, abs=1e-7)


def test_encoder_attention_scores_leave_the_default_outputs_and_weights_alone():
    keras.utils.set_random_seed(7)
    plain = BertEncoder(**tiny_encoder_kwargs())
    assert "output_attention_scores" not in plain.get_config()
    scoring = BertEncoder.from_config({**plain.get_config(), "output_attention_scores": True})
    scoring.set_weights(plain.get_weights())
    assert [w.path for w in scoring.weights] == [w.path for w in plain.weights]
    assert BertEncoder.from_config(scoring.get_config()).get_config() == scoring.get_config()
    inputs = tiny_inputs()
    expected, outputs = plain(inputs), scoring(inputs)
    for name in ("sequence_output", "pooled_output"):
        np.testing.assert_allclose(outputs[name], expected[name], atol=1e-5)
    scores = [np.asarray(s) for s in outputs["attention_scores"]]
    assert len(scores) == plain.num_layers and scores[0].shape == (3, plain.num_heads, 7, 7)
    np.testing.assert_allclose(scores[0].sum(-1), 1.0, atol=1e-5)
    assert np.all(scores[0][0, :, :, 5:] < 1e-6)  # row 0 pads its last two tokens


def test_attention_distillation_is_zero_for_a_copy_of_the_teacher_and_needs_its_heads():
    keras.utils.set_random_seed(8)
    teacher = BertClassifier(BertEncoder(**tiny_encoder_kwargs(num_layers=TEACHER_LAYERS)),
                             num_classes=3)
    layers = list(range(TEACHER_LAYERS))
    copy = BertClassifier(distillers.encoder_from_layers(teacher.encoder, layers), num_classes=3)
    distillers.copy_head(teacher, copy)
    inputs, labels = tiny_inputs(), np.zeros(3, "int32")

    def attention_term(student, layer_map):
        distiller = distillers.TaskDistiller(
            distillers.with_encoder_all_layers(teacher, False, attention_scores=True),
            distillers.with_encoder_all_layers(student, False, attention_scores=True),
            distillers.TemperatureKL(2.0), hard_label_weight=0.0, kl_weight=0.0,
            attention_weight=1.0, layer_map=layer_map)
        return float(distiller.compute_loss(inputs, labels, training=False))

    same = attention_term(copy, layers)
    assert same == pytest.approx(0.0, abs=1e-9)
    # Other blocks' maps differ (a fresh encoder's maps are near uniform: a small KL).
    assert attention_term(copy, [1, 0, 3, 2]) > 1e-5
    narrow = BertClassifier(BertEncoder(**tiny_encoder_kwargs(**NARROW)), num_classes=3)
    with pytest.raises(ValueError, match=r"student has 2 attention heads and the teacher 4"):
        attention_term(narrow, [1, 3])


def test_student_layers_copy_the_chosen_teacher_layers():
    keras.utils.set_random_seed(2)
    teacher = BertClassifier(BertEncoder(**tiny_encoder_kwargs(num_layers=TEACHER_LAYERS)),
                             num_classes=2)
    encoder = distillers.encoder_from_layers(teacher.encoder, [0, 3])
    assert encoder.num_layers == 2 and encoder.hidden_dim == teacher.encoder.hidden_dim
    for student_index, teacher_index in enumerate([0, 3]):
        for a, b in zip(encoder.transformer_layers[student_index].get_weights(),
                        teacher.encoder.transformer_layers[teacher_index].get_weights()):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(encoder.token_embedding.get_weights() + encoder.pooled_dense.get_weights(),
                    teacher.encoder.token_embedding.get_weights()
                    + teacher.encoder.pooled_dense.get_weights()):
        np.testing.assert_array_equal(a, b)
    # Layer 1 of the teacher was left out: the student's second block is not it.
    assert not np.array_equal(encoder.transformer_layers[1].get_weights()[0],
                              teacher.encoder.transformer_layers[1].get_weights()[0])
    student = BertClassifier(encoder, num_classes=2)
    distillers.copy_head(teacher, student)
    np.testing.assert_array_equal(student.output_dense.kernel.numpy(),
                                  teacher.output_dense.kernel.numpy())
    # Same first and last block, embeddings and head as a 2-layer teacher: same logits.
    two_layer = BertClassifier(BertEncoder(**tiny_encoder_kwargs(num_layers=2)), num_classes=2)
    two_layer.set_weights(student.get_weights())
    np.testing.assert_allclose(two_layer(tiny_inputs(), training=False),
                               student(tiny_inputs(), training=False), atol=1e-6)


@pytest.mark.parametrize("layers", [[0, 4], [-1], [], [1, 1]])
def test_student_layers_out_of_range_name_the_value(layers):
    teacher = BertEncoder(**tiny_encoder_kwargs(num_layers=TEACHER_LAYERS))
    with pytest.raises(ValueError, match=r"--student_layers=.*0\.\.3"):
        distillers.encoder_from_layers(teacher, layers)


# -- End to end on tiny real data: directories, export, bad inputs -------------------------


@pytest.fixture(scope="module")
def teachers(tmp_path_factory):
    """Untrained tiny fine-tuned directories of 4 layers (a trained one is not needed to
    check the plumbing; the tests above check learning)."""
    root = tmp_path_factory.mktemp("teachers")
    pretrained = make_tiny_pretrained(root / "pretrained", max_sequence_length=32)
    keras.utils.set_random_seed(4)
    made = {"pretrained": pretrained}
    for name, task, task_name in (("sst2", "glue", "sst-2"), ("ner", "ner", None),
                                  ("stsb", "glue", "sts-b"), ("similarity", "similarity", "sts-b")):
        encoder = BertEncoder(**{**load_encoder(pretrained).get_config(),
                                 "num_layers": TEACHER_LAYERS})
        task_object = get_task(task)(task_name=task_name)
        model = task_object.build_model(encoder)
        record = TaskConfig.from_dict({**task_object.describe(), "max_seq_length": 32,
                                       "do_lower_case": True})
        made[name] = str(root / name)
        save_finetuned(made[name], model, record, os.path.join(pretrained, "vocab.txt"))
    return made


def test_narrow_ner_student_from_gin_sizes_with_hidden_states(teachers, tmp_path, monkeypatch):
    def build_student_encoder(**sizes):
        return BertEncoder(**tiny_encoder_kwargs(num_layers=2, hidden_dim=16, num_heads=2,
                                                 intermediate_dim=24, **sizes))

    transfer = tmp_path / "transfer.txt"
    transfer.write_text("EU rejects German call\nPeter Blackburn\n\nBRUSSELS 1996-08-22\n")
    traces = count_train_step_traces(monkeypatch)
    results = run_distillation(teachers["ner"], str(tmp_path / "ner"), data_dir=CONLL,
                               build_student_encoder=build_student_encoder,
                               transfer_file=str(transfer), hidden_state_weight=1.0,
                               **{**FAST, "num_train_epochs": 1.0})
    assert results["hard_label_weight"] == 0.0  # a transfer file has no labels
    assert set(results) >= {"f1", "precision", "recall", "teacher", "speedup"}
    # The projections and the optimizer are built before fit: one trace of the step.
    assert traces == ["TaskDistiller"]
    student, record, _ = load_finetuned(str(tmp_path / "ner"))
    assert record.task == "ner" and student.encoder.hidden_dim == 16
    assert "output_all_layers" not in student.encoder.get_config()
    assert not [layer for layer in student.layers if "projection" in layer.name]


@pytest.fixture
def untimed(monkeypatch):
    """Records teacher-against-student timing instead of running it: it traces both models
    twice more, for nothing the selection tests check (the NER, similarity and binary tests
    time for real)."""
    from kbert.training.distillation import loop as distillation

    timed = []
    monkeypatch.setattr(distillation, "measure_speedup",
                        lambda teacher, student, *args: timed.append(student) or {})
    return timed


def test_the_best_dev_step_of_the_student_is_kept_saved_and_reported(teachers, tmp_path, untimed):
    """STS-B's Spearman on dev, evaluated every step: the saved student is the best step's,
    not the last one's."""
    data_dir = tmp_path / "STS-B"  # a dev split of 12 pairs (dev + train), for a finer Spearman
    data_dir.mkdir()
    train = open(os.path.join(STSB, "train.tsv")).read()
    (data_dir / "train.tsv").write_text(train)
    (data_dir / "dev.tsv").write_text(open(os.path.join(STSB, "dev.tsv")).read()
                                      + "".join(train.splitlines(True)[1:]))
    settings = dict(data_dir=str(data_dir), student_layers=[0, 3], eval_every_steps=1,
                    **{**FAST, "learning_rate": 3e-3})
    results = run_distillation(teachers["stsb"], str(tmp_path / "best"), **settings)
    curve = [point["spearman"] for point in results["eval_curve"]]
    assert [point["step"] for point in results["eval_curve"]] == [1, 2, 3, 4]
    assert results["main_metric"] == "spearman" and results["spearman"] == max(curve)
    assert results["best_step"] == curve.index(max(curve)) + 1 and len(untimed) == 1
    assert curve[-1] < max(curve), curve  # the last step is not the best: keeping matters
    saved = json.load(open(tmp_path / "best" / "eval_results.json"))
    assert saved["best_step"] == results["best_step"] and saved["eval_curve"] == results["eval_curve"]
    student, record, _ = load_finetuned(str(tmp_path / "best"))
    task = get_task("glue").from_description(record.to_dict())
    preprocessor = TextPreprocessor.from_vocab_file(
        str(tmp_path / "best" / "vocab.txt"), True, record.max_seq_length)
    dev = task.read(TaskData("sts-b", str(data_dir)), "dev")
    np.testing.assert_allclose(task.evaluate(student, dev, preprocessor, 8).metrics["spearman"],
                               max(curve), atol=1e-6)


def test_a_selection_split_from_training_data_picks_the_step_and_dev_is_scored_once(
        teachers, tmp_path, untimed):
    """`selection_fraction`: the kept step is chosen on held-out training sentences (the same
    ones `run_finetuning` holds out with that fraction and seed), and dev is scored on the
    kept student only, so its figure is clean."""
    from kbert.training.finetuning.selection_split import carve_selection_split

    settings = dict(data_dir=SST2, student_layers=[0, 3], selection_fraction=0.25, **FAST)
    results = run_distillation(teachers["sst2"], str(tmp_path / "held"), **settings)
    task = get_task("glue")(task_name="sst-2")
    train = task.read(TaskData("sst-2", SST2), "train")
    _, held = carve_selection_split(task, train, 0.25, 12345)
    assert len(train) == 12 and len(held) == 3
    curve = [point["accuracy"] for point in results["eval_curve"]]
    assert results["train_steps"] == 6 and len(curve) == 2  # 9 sentences: 3 steps an epoch
    assert results["selection"] == {"split": "train_holdout", "fraction": 0.25, "seed": 12345,
                                    "num_examples": 3, "accuracy": max(curve)}
    student, record, _ = load_finetuned(str(tmp_path / "held"))
    preprocessor = TextPreprocessor.from_vocab_file(
        str(tmp_path / "held" / "vocab.txt"), True, record.max_seq_length)
    assert task.evaluate(student, held, preprocessor, 8).metrics["accuracy"] == max(curve)
    assert len(untimed) == 1
    dev = task.read(TaskData("sst-2", SST2), "dev")
    assert results["accuracy"] == task.evaluate(student, dev, preprocessor, 8).metrics["accuracy"]
    with pytest.raises(ValueError, match=r"selection_fraction=1\.0; it must be in \[0, 1\)"):
        run_distillation(teachers["sst2"], str(tmp_path / "bad"), **{**settings,
                                                                    "selection_fraction": 1.0})


def test_similarity_student_directory_exports_as_an_embedding_model(teachers, tmp_path):
    """A narrower bi-encoder student of a similarity teacher: Spearman of both in
    eval_results.json, the teacher's pooling, no projection saved, kbert-export serves
    its vectors."""
    def build_student_encoder(**sizes):
        return BertEncoder(**tiny_encoder_kwargs(**NARROW, **sizes))

    model_dir = tmp_path / "similarity"
    results = run_distillation(teachers["similarity"], str(model_dir), data_dir=STSB,
                               build_student_encoder=build_student_encoder,
                               **{**FAST, "num_train_epochs": 1.0, "train_batch_size": 8})
    assert results["train_steps"] == 1  # one trace of the training step: a fast test
    # The query towers are timed (one vector per text, as served).
    assert set(results["speedup"]) == {"batch_1", "batch_32"}
    assert all(v["teacher_ms"] > 0 and v["student_ms"] > 0 for v in results["speedup"].values())
    assert results["main_metric"] == "spearman" and "spearman" in results["teacher"]
    assert -1 <= results["spearman"] <= 1 and results["num_examples"] == 4
    student, record, _ = load_finetuned(str(model_dir))
    teacher, teacher_record, _ = load_finetuned(teachers["similarity"])
    assert isinstance(student, BertDualEncoder) and record == teacher_record
    assert (student.query_tower.pooling, student.query_tower.normalize) == (
        teacher.query_tower.pooling, teacher.query_tower.normalize)
    assert student.query_tower.dimension == 16
    assert not [w for w in student.weights if "projection" in w.path]
    assert results["student_parameters"] == student.count_params() < results["teacher_parameters"]

    from kbert.export import export_saved_model

    version_dir = export_saved_model(str(model_dir), str(tmp_path / "export"), check=False)
    texts = [b"a man is dancing", b"a child rides a horse"]
    served = tf.saved_model.load(version_dir).signatures["serving_default"](
        text=tf.constant(texts))["embedding"].numpy()
    preprocessor = TextPreprocessor.from_vocab_file(str(model_dir / "vocab.txt"), True, 32)
    reference = student.query_tower(preprocessor.pack([preprocessor.tokenize(tf.constant(texts))]),
                                    training=False)
    assert served.shape == (2, 16)
    np.testing.assert_allclose(served, np.asarray(reference), atol=1e-5)


def test_a_multi_label_student_directory_is_a_multi_label_classifier(teachers, tmp_path,
                                                                      untimed):
    """A multi-label teacher (kbert-finetune's `--task=classification` on lists of labels):
    the student learns by binary cross-entropy, and its directory is a multi-label
    classifier with the teacher's labels and decision threshold, as kbert-predict,
    kbert-export and `kbert.TextClassifier` read it."""
    import kbert

    train = write_rows(tmp_path / "train.jsonl", ticket_rows(16, seed=1))
    task = ClassificationTask(ClassificationConfig(
        problem_type="multi_label", label_names=["billing", "bug", "other"], threshold=0.4),
        text_column_names=("text",), label_column_name="tags")
    encoder = BertEncoder(**{**load_encoder(teachers["pretrained"]).get_config(),
                             "num_layers": TEACHER_LAYERS})
    teacher_dir = str(tmp_path / "teacher")
    save_finetuned(teacher_dir, task.build_model(encoder), TaskConfig.from_dict(
        {**task.describe(), "max_seq_length": 32, "do_lower_case": True}),
        os.path.join(teachers["pretrained"], "vocab.txt"))
    results = run_distillation(teacher_dir, str(tmp_path / "student"), train_file=train,
                               student_layers=[1], do_eval=False,
                               **{**FAST, "train_batch_size": 8, "num_train_epochs": 1.0})
    assert results["train_steps"] == 2 and len(results["train_loss"]) == 1
    record = open_model_dir(str(tmp_path / "student")).task_config
    assert (record.options["problem_type"], record.options["threshold"], record.label_names) == (
        "multi_label", 0.4, ["billing", "bug", "other"])
    classifier = kbert.TextClassifier.from_preset(str(tmp_path / "student"))
    assert classifier.task.problem_type == "multi_label"
    assert classifier.task_model.encoder.num_layers == 1
    [answer] = classifier.predict_records(["refund, please"])
    assert set(answer) == {"labels", "probabilities"}
    assert list(answer["probabilities"]) == ["billing", "bug", "other"]
    chosen = {name for name, p in answer["probabilities"].items() if p >= 0.4}
    assert set(answer["labels"]) == chosen  # by the teacher's threshold


def _refused(teachers, tmp_path, match, **arguments):
    model_dir = tmp_path / "refused"
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        run_distillation(teachers["sst2"], str(model_dir), **{"data_dir": SST2, **FAST,
                                                              **arguments})
    assert not model_dir.exists()  # nothing half-written


def test_bad_inputs_are_refused_before_anything_is_written(teachers, tmp_path):
    _refused(teachers, tmp_path, r"fine-tuned for --task=glue, not --task=ner",
             task="ner", student_layers=[0])
    _refused(teachers, tmp_path, r"--task_name=sst-2, not --task_name=mrpc",
             task_name="mrpc", student_layers=[0])
    _refused(teachers, tmp_path, r"exactly one of --student_layers .* got neither")
    _refused(teachers, tmp_path, r"got both", student_layers=[0],
             build_student_encoder=BertEncoder)
    _refused(teachers, tmp_path, r"--student_layers=0,7: .* 0\.\.3", student_layers=[0, 7])
    _refused(teachers, tmp_path, r"attention_loss='cosine'; expected one of",
             student_layers=[0], attention_weight=1.0, attention_loss="cosine")
    _refused(teachers, tmp_path, r"student has 2 attention heads and the teacher 4",
             attention_weight=1.0,
             build_student_encoder=lambda **sizes: BertEncoder(**tiny_encoder_kwargs(
                 **NARROW, **sizes)))
    # Same size, another order: a directory that fits its encoder but not the teacher.
    other = make_tiny_pretrained(tmp_path / "other_vocab", max_sequence_length=32)
    lines = open(os.path.join(other, "vocab.txt")).read().splitlines()
    with open(os.path.join(other, "vocab.txt"), "w") as f:
        f.write("\n".join(lines[:5] + lines[6:] + [lines[5]]) + "\n")
    _refused(teachers, tmp_path, r"--student_init_checkpoint=.*other_vocab has a vocabulary",
             build_student_encoder=BertEncoder, student_init_checkpoint=other)
    # A token more than the embedding rows: the directory itself is refused when opened.
    extra = make_tiny_pretrained(tmp_path / "extra_token", max_sequence_length=32)
    with open(os.path.join(extra, "vocab.txt"), "a") as f:
        f.write("extra\n")
    _refused(teachers, tmp_path, rf"{len(lines) + 1} tokens but the encoder of "
                                 rf"--student_init_checkpoint=.*extra_token has {len(lines)} "
                                 "embedding rows",
             build_student_encoder=BertEncoder, student_init_checkpoint=extra)
    # A complete fine-tuned directory whose task_config.json names a task kbert-distill refuses.
    embedding = tmp_path / "embedding_teacher"
    shutil.copytree(teachers["sst2"], embedding)
    config = json.load(open(os.path.join(teachers["sst2"], "task_config.json")))
    (embedding / "task_config.json").write_text(json.dumps(
        {**config, "task": "squad", "model_type": "span_labeler"}))
    with pytest.raises(ValueError, match=r"embedding_teacher is a span_labeler"):
        run_distillation(str(embedding), str(tmp_path / "refused"), student_layers=[0])
    bad = tmp_path / "pairs.txt"
    bad.write_text("one sentence\ttwo\n")
    _refused(teachers, tmp_path, r"pairs.txt:1: expected one text", student_layers=[0],
             transfer_file=str(bad))


def test_binary_writes_an_exportable_student_directory_and_prints_the_summary(teachers,
                                                                            tmp_path):
    model_dir = tmp_path / "cli"
    params = ["run_distillation.train_batch_size = 4", "run_distillation.num_train_epochs = 2.0",
              "run_distillation.learning_rate = 1e-3", "run_distillation.attention_weight = 1.0"]
    command = ["-m", "kbert.bin.distill", f"--teacher_dir={teachers['sst2']}",
               "--student_layers=1,3", "--task=glue", "--task_name=SST-2", f"--data_dir={SST2}",
               f"--model_dir={model_dir}", "--do_train", "--do_eval",
               *[f"--gin_params={p}" for p in params]]
    env = {**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = forked_python.run(command, cwd=REPO, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "***** distillation *****" in result.stdout
    assert "dev accuracy: teacher" in result.stdout and "speed-up" in result.stdout
    assert "run_distillation.temperature = 2.0" in (model_dir / "operative_config.gin").read_text()
    saved = json.load(open(model_dir / "eval_results.json"))
    assert saved["num_examples"] == 6 and 0 <= saved["accuracy"] <= 1
    assert set(saved["teacher"]) >= {"accuracy", "num_examples"}
    student, record, _ = load_finetuned(str(model_dir))
    teacher, teacher_record, _ = load_finetuned(teachers["sst2"])
    assert record == teacher_record and student.encoder.num_layers == 2
    assert "output_attention_scores" not in student.encoder.get_config()
    assert saved["attention_weight"] == 1.0
    assert saved["student_parameters"] == student.count_params() < saved["teacher_parameters"]
    assert saved["teacher_parameters"] == teacher.count_params()
    assert set(saved["speedup"]) == {"batch_1", "batch_32"}
    assert all(v["speedup"] > 0 for v in saved["speedup"].values())
    assert len(saved["train_loss"]) == 2

    # An ordinary fine-tuned directory: kbert-export takes it, the SavedModel answers
    # as the Keras student does.
    from kbert.export import export_saved_model

    version_dir = export_saved_model(str(model_dir), str(tmp_path / "export"), check=False)
    texts = [b"a fine film", b"dull"]
    served = tf.saved_model.load(version_dir).signatures["serving_default"](
        text=tf.constant(texts))
    preprocessor = TextPreprocessor.from_vocab_file(str(model_dir / "vocab.txt"), True, 32)
    reference = preprocessor.pack([preprocessor.tokenize(tf.constant(texts))])
    np.testing.assert_allclose(served["logits"].numpy(),
                               np.asarray(student(reference, training=False)), atol=1e-5)
