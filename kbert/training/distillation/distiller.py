"""Distillation of a fine-tuned task model into a student: losses, the Keras `Distiller`, students.

Built on `keras.distillation` (Keras 3.15): `TaskDistiller` is a
`keras.distillation.Distiller` (teacher frozen, student's supervised loss
weighted against the distillation losses, the three loss trackers the
progress bar shows) and the logits loss is a `LogitsDistillation`. What
Keras lacks is written here: a KL that skips padding and non-first
wordpieces (`TemperatureKL`), its per-label sigmoid counterpart for
multi-label classifiers (`TemperatureBinaryCrossentropy`), sample weights
reaching the losses, and
hidden-state losses through a learned projection when widths differ
(TinyBERT), and the embedding loss of bi-encoders (`EmbeddingMSE`, through a
learned projection when widths differ). Regression scores use Keras's
`FeatureDistillation("mse")` on the final outputs unchanged.

Reference:
    - [Hinton et al., 2015](https://arxiv.org/abs/1503.02531) (temperature, T^2)
    - [Sanh et al., 2019, DistilBERT](https://arxiv.org/abs/1910.01108) (every other layer)
    - [Jiao et al., 2020, TinyBERT](https://arxiv.org/abs/1909.10351) (hidden-state MSE, W_h)
    - [Reimers & Gurevych, 2020](https://arxiv.org/abs/2004.09813) (student embeddings MSE
      to the teacher's)
"""

from __future__ import annotations

from typing import Sequence

import keras
from keras import ops

from kbert.models.bert_dual_encoder import SIDES
from kbert.models.bert_dual_encoder import side_inputs
from kbert.models.encoder import Encoder

TARGETS = ("logits", "sigmoid_logits", "embeddings")
ATTENTION_LOSSES = ("kl", "mse")
# Floor of attention probabilities under the log of the KL: a softmax can underflow to 0.
ATTENTION_EPSILON = 1e-12


class TemperatureKL(keras.distillation.LogitsDistillation):
    """KL(teacher || student) of temperature-softened logits, times T^2, over weighted positions.

    `KL(softmax(t / T) || softmax(s / T)) * T^2` per example (or per token for
    `[batch, time, classes]` logits), averaged with `sample_weight` (positions
    of weight 0 do not count). The T^2 factor keeps the gradients' scale
    independent of T (Hinton et al.).

    Keras's `LogitsDistillation` averages over every position, padding
    included, and clips probabilities before the log; this computes the KL
    from log-softmax (exact for confident teachers) and takes weights.

    Args:
        temperature: float. Softmax temperature T > 0. Defaults to 2.0.

    Example:

    >>> loss = TemperatureKL(temperature=2.0)
    >>> loss.compute_loss(teacher_logits, student_logits, sample_weight=weights)
    """

    def __init__(self, temperature: float = 2.0):
        super().__init__(temperature=temperature, loss=keras.losses.KLDivergence())

    def compute_loss(self, teacher_outputs, student_outputs, sample_weight=None, **kwargs):
        t = float(self.temperature)
        teacher = ops.log_softmax(ops.cast(teacher_outputs, "float32") / t, axis=-1)
        student = ops.log_softmax(ops.cast(student_outputs, "float32") / t, axis=-1)
        kl = ops.sum(ops.exp(teacher) * (teacher - student), axis=-1)
        return weighted_mean(kl, sample_weight) * (t * t)


class TemperatureBinaryCrossentropy(keras.distillation.LogitsDistillation):
    """Binary cross-entropy of the student's per-label sigmoids to the teacher's, at temperature T.

    Multi-label logits are independent decisions, each a sigmoid: the soft
    target of label `k` is the teacher's `p_k = sigmoid(t_k / T)` and the loss
    `-(p_k log q_k + (1 - p_k) log(1 - q_k))` with `q_k = sigmoid(s_k / T)`,
    averaged over the labels (as the task's own `MultiLabelCrossentropy`),
    then over the examples with `sample_weight`, times T^2 (Hinton et al.:
    the gradients keep their scale whatever T). It differs from the
    per-label KL only by the teacher's entropy, a constant: the same
    gradients, and a floor at that entropy rather than at 0.

    Args:
        temperature: float. Temperature T > 0 of both sigmoids. Defaults to 2.0.

    Example:

    >>> loss = TemperatureBinaryCrossentropy(temperature=2.0)
    >>> loss.compute_loss(teacher_logits, student_logits)
    """

    def __init__(self, temperature: float = 2.0):
        super().__init__(temperature=temperature,
                         loss=keras.losses.BinaryCrossentropy(from_logits=True))

    def compute_loss(self, teacher_outputs, student_outputs, sample_weight=None, **kwargs):
        t = float(self.temperature)
        targets = ops.sigmoid(ops.cast(teacher_outputs, "float32") / t)
        per_label = ops.binary_crossentropy(targets, ops.cast(student_outputs, "float32") / t,
                                            from_logits=True)
        return weighted_mean(ops.mean(per_label, axis=-1), sample_weight) * (t * t)


class EmbeddingMSE(keras.distillation.DistillationLoss):
    """Squared error between teacher and student sentence vectors, summed per vector, mean over texts.

    sentence-transformers' `MSELoss` (Reimers & Gurevych, 2020) times the
    width: for unit vectors it is `2 * (1 - cos)`, on the scale of the
    similarity task's own cosine loss whatever the width. The student's
    vectors reach it already projected to the teacher's width when the
    widths differ (`TaskDistiller`).

    Example:

    >>> EmbeddingMSE().compute_loss(teacher_vectors, student_vectors)
    """

    def compute_loss(self, teacher_outputs, student_outputs, **kwargs):
        error = ops.square(ops.cast(student_outputs, "float32")
                           - ops.cast(teacher_outputs, "float32"))
        return ops.mean(ops.sum(error, axis=-1))


def attention_loss(teacher_scores, student_scores, padding_mask, kind: str = "kl"):
    """Distance of a student block's attention probabilities to its teacher block's.

    Per attention row (a head and a real query token) either the KL
    `sum_j t_j (log t_j - log s_j)` of the teacher's distribution over the
    keys to the student's (MiniLM's attention transfer), or the squared error
    summed over the keys (TinyBERT's MSE, on probabilities); then the mean
    over heads and real query tokens. Padded keys have probability 0 in
    both and add nothing.

    Args:
        teacher_scores, student_scores: `[batch, heads, length, length]`
            attention probabilities (`BertEncoder(output_attention_scores=True)`).
        padding_mask: `[batch, length]`; 1 for real tokens.
        kind: str. `kl` or `mse`. Defaults to `kl`.

    Returns:
        Scalar float32 loss.

    Example:

    >>> attention_loss(teacher["attention_scores"][3], student["attention_scores"][1], mask)
    """
    if kind not in ATTENTION_LOSSES:
        raise ValueError(f"attention loss {kind!r}; expected one of {ATTENTION_LOSSES}.")
    teacher = ops.cast(teacher_scores, "float32")
    student = ops.cast(student_scores, "float32")
    if kind == "kl":
        floor = ATTENTION_EPSILON
        per_key = ops.where(teacher > 0, teacher * (ops.log(ops.maximum(teacher, floor))
                                                    - ops.log(ops.maximum(student, floor))), 0.0)
    else:
        per_key = ops.square(teacher - student)
    rows = ops.sum(per_key, axis=-1)  # [batch, heads, queries]
    weights = ops.broadcast_to(ops.cast(padding_mask, "float32")[:, None, :], ops.shape(rows))
    return weighted_mean(rows, weights)


def weighted_mean(values, sample_weight=None):
    """Mean of `values`, weighted by `sample_weight` of the same shape when given."""
    if sample_weight is None:
        return ops.mean(values)
    weights = ops.cast(sample_weight, values.dtype)
    return ops.sum(values * weights) / ops.maximum(ops.sum(weights), 1.0)


class TaskDistiller(keras.distillation.Distiller):
    """A `keras.distillation.Distiller` for kbert task models, with weights and hidden states.

    The loss is `h * hard + (1 - h) * (kl_weight * logits_loss + hidden_state_weight *
    hidden + attention_weight * attention)`, Keras's combination with `h = hard_label_weight`. `hard` is the
    student's task loss on the labels (given to `compile`), `logits_loss` a
    `DistillationLoss` between the outputs, and `hidden` the MSE between
    student layer `i` (projected by a learned Dense layer when the widths
    differ) and teacher layer `layer_map[i]` over real tokens; `attention` the
    `attention_loss` between their attention probabilities (same number of
    heads). Sample
    weights (NER's first wordpieces) reach the hard loss and the logits
    loss, which Keras's `Distiller.compute_loss` ignores.

    Args:
        teacher: the fine-tuned task model (frozen; runs without dropout).
        student: the task model to train; same inputs and output shape.
        logits_loss: `keras.distillation.DistillationLoss`, such as
            `TemperatureKL` or `FeatureDistillation("mse")`.
        hard_label_weight: float in [0, 1]. Weight of the label loss.
        kl_weight: float. Weight of `logits_loss`. Defaults to 1.
        hidden_state_weight: float. Weight of the hidden-state MSE; 0 turns it
            off. Defaults to 0.
        layer_map: sequence of int or None. Teacher layer of each student
            layer (needed with `hidden_state_weight`).
        attention_weight: float. Weight of the attention-probability loss; 0
            turns it off (the encoders must output `attention_scores`
            otherwise: `with_encoder_all_layers(model, attention_scores=True)`).
            Defaults to 0.
        attention_loss: str. `kl` or `mse` (`attention_loss`). Defaults to `kl`.
        target: str. `logits` or `sigmoid_logits` (the task models' outputs;
            `logits_loss` says how they compare) or `embeddings` (the sentence
            vectors of `BertDualEncoder`s). Defaults to `logits`.
        **kwargs: passed to `keras.distillation.Distiller`.

    Example:

    >>> distiller = TaskDistiller(teacher, student, TemperatureKL(2.0), hard_label_weight=0.5)
    >>> distiller.compile(optimizer, loss=keras.losses.SparseCategoricalCrossentropy(True))
    >>> distiller.fit(dataset, epochs=3)
    """

    def __init__(self, teacher: keras.Model, student: keras.Model,
                 logits_loss: keras.distillation.DistillationLoss, hard_label_weight: float,
                 kl_weight: float = 1.0, hidden_state_weight: float = 0.0,
                 layer_map: Sequence[int] | None = None, attention_weight: float = 0.0,
                 attention_loss: str = "kl", target: str = "logits", **kwargs):
        if target not in TARGETS:
            raise ValueError(f"target={target!r}; expected one of {TARGETS}.")
        if attention_loss not in ATTENTION_LOSSES:
            raise ValueError(f"attention_loss={attention_loss!r}; expected one of "
                             f"{ATTENTION_LOSSES}.")
        if target == "embeddings" and (hidden_state_weight or attention_weight):
            raise ValueError(f"hidden_state_weight={hidden_state_weight}, attention_weight="
                             f"{attention_weight}: bi-encoders learn the teacher's sentence "
                             "vectors; layer losses are not built for them (use 0).")
        super().__init__(teacher, student, distillation_losses=[logits_loss],
                         distillation_loss_weights=[kl_weight],
                         student_loss_weight=hard_label_weight, **kwargs)
        self.hidden_state_weight = float(hidden_state_weight)
        self.attention_weight = float(attention_weight)
        self.attention_loss = attention_loss
        self.layer_map = None if layer_map is None else [int(i) for i in layer_map]
        self.target = target
        self.projections = []
        self.embedding_projection = None
        self._teacher_view = self._student_view = None
        if self.hidden_state_weight or self.attention_weight:
            self._build_layer_views(teacher, student)
        if target == "embeddings":
            self._build_embedding_views(teacher, student)

    def _build_layer_views(self, teacher: keras.Model, student: keras.Model) -> None:
        # Keras's FeatureDistillation finds layers by name among the model's
        # top-level layers; the Transformer blocks sit inside the nested
        # encoder, so the views take the encoder's `encoder_outputs` from the
        # task model's own graph (one forward pass gives logits and states).
        self._teacher_view = hidden_state_view(teacher)
        self._student_view = hidden_state_view(student)
        if self.layer_map is None or len(self.layer_map) != student.encoder.num_layers:
            raise ValueError(f"layer_map={self.layer_map} must name a teacher layer for each of "
                             f"the student's {student.encoder.num_layers} layers.")
        if self.attention_weight and student.encoder.num_heads != teacher.encoder.num_heads:
            raise ValueError(f"attention_weight={self.attention_weight}: the student has "
                             f"{student.encoder.num_heads} attention heads and the teacher "
                             f"{teacher.encoder.num_heads}; attention maps are compared head by "
                             "head, so give the student the teacher's num_heads (or bind "
                             "attention_weight = 0).")
        width = teacher.encoder.hidden_dim
        if self.hidden_state_weight and student.encoder.hidden_dim != width:
            self.projections = [keras.layers.Dense(width, name=f"hidden_projection_{i}")
                                for i in range(len(self.layer_map))]
            # Built now, so that their kernels are among the trainable variables
            # an optimizer is built for before the first step.
            for projection in self.projections:
                projection.build((None, None, student.encoder.hidden_dim))

    def _build_embedding_views(self, teacher: keras.Model, student: keras.Model) -> None:
        names = sorted(student.input)  # the teacher reads the same batch
        self._teacher_view = embedding_view(teacher, names)
        self._student_view = embedding_view(student, names)
        width = teacher.query_tower.dimension
        if student.query_tower.dimension != width:
            # Dropped at export: only the student's own layers are saved.
            self.embedding_projection = keras.layers.Dense(width, name="embedding_projection")
            self.embedding_projection.build((None, student.query_tower.dimension))

    def call(self, inputs, training=None, **kwargs):
        if self._student_view is not None:
            return self._student_view(inputs, training=training)
        return self.student(inputs, training=training, **kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if y_pred is None:
            y_pred = self(x, training=training)
        student = y_pred if self._student_view is not None else {"logits": y_pred}
        hard = 0.0
        if self.student_loss_weight > 0.0 and y is not None:
            hard = self._student_loss(y, student["logits"], sample_weight=sample_weight)
        if self._teacher_view is not None:
            teacher = self._teacher_view(x, training=False)
        else:
            teacher = {"logits": self.teacher(x, training=False)}
        (logits_loss,), (kl_weight,) = self.distillation_losses, self.distillation_loss_weights
        if self.target == "embeddings":
            vectors = student["embeddings"]
            if self.embedding_projection is not None:
                vectors = self.embedding_projection(vectors)
            distillation = kl_weight * logits_loss.compute_loss(teacher["embeddings"], vectors)
        else:
            distillation = kl_weight * logits_loss.compute_loss(
                teacher["logits"], student["logits"], sample_weight=sample_weight)
        if self.hidden_state_weight:
            hidden = self._hidden_state_loss(teacher["hidden"], student["hidden"],
                                             x["padding_mask"])
            distillation = distillation + self.hidden_state_weight * hidden
        if self.attention_weight:
            attention = ops.mean(ops.stack([
                attention_loss(teacher["attention"][t], student["attention"][i],
                               x["padding_mask"], self.attention_loss)
                for i, t in enumerate(self.layer_map)]))
            distillation = distillation + self.attention_weight * attention
        h = self.student_loss_weight
        total = h * hard + (1.0 - h) * distillation
        self.student_loss_tracker.update_state(hard)
        self.distillation_loss_tracker.update_state(distillation)
        self.total_loss_tracker.update_state(total)
        return total

    def _hidden_state_loss(self, teacher_states, student_states, padding_mask):
        losses = []
        for i, teacher_layer in enumerate(self.layer_map):
            state = ops.cast(student_states[i], "float32")
            if self.projections:
                state = self.projections[i](state)
            error = ops.mean(ops.square(state - ops.cast(teacher_states[teacher_layer],
                                                         "float32")), axis=-1)
            losses.append(weighted_mean(error, padding_mask))
        return ops.mean(ops.stack(losses))


def hidden_state_view(model: keras.Model) -> keras.Model:
    """A model of `model`'s graph giving `{"logits": output, "hidden": [block outputs]}`.

    Shares `model`'s layers and weights. The encoder must output
    `encoder_outputs` or `attention_scores` (`with_encoder_all_layers`); each
    it outputs is in the view (`hidden`, `attention`: lists first to last).
    """
    encoder = model.encoder
    if not (getattr(encoder, "output_all_layers", False)
            or getattr(encoder, "output_attention_scores", False)):
        raise ValueError("the model's encoder does not output its layers; "
                         "use with_encoder_all_layers(model).")
    node = encoder._inbound_nodes[0]  # the encoder's call in the task model's graph
    encoded = keras.tree.pack_sequence_as(encoder.output, node.outputs)
    outputs = {"logits": model.output}
    if "encoder_outputs" in encoded:
        outputs["hidden"] = encoded["encoder_outputs"]
    if "attention_scores" in encoded:
        outputs["attention"] = encoded["attention_scores"]
    return keras.Model(model.inputs, outputs)


def embedding_view(model: keras.Model, input_names: Sequence[str]) -> keras.Model:
    """A model of a `BertDualEncoder`'s towers giving `{"logits": scores, "embeddings": vectors}`.

    Shares `model`'s layers and weights. `embeddings` stacks the query
    vectors over the document vectors, `[2 * batch, dim]` (hard negatives
    count in `logits` only: a teacher trained without them has no such input).

    Args:
        model: `kbert.models.BertDualEncoder`.
        input_names: the batch's input names (`query_token_ids`, ...).

    Returns:
        A functional `keras.Model` of those inputs.
    """
    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in input_names}
    sides = [side for side in SIDES if f"{side}_token_ids" in inputs]
    vectors = [model.query_tower(side_inputs(inputs, "query"))]
    vectors += [model.document_tower(side_inputs(inputs, side)) for side in sides[1:]]
    return keras.Model(inputs, {"logits": model.scores(*vectors),
                                "embeddings": ops.concatenate(vectors[:2], axis=0)})


def with_encoder_all_layers(model: keras.Model, all_layers: bool = True,
                            attention_scores: bool = False) -> keras.Model:
    """A copy of a task model (same class, config and weights) whose encoder outputs its layers.

    Args:
        model: a `kbert.models` task model with an `encoder`.
        all_layers: bool. True adds `encoder_outputs`; False removes it (the
            plain model to save). The weights are the same either way.
        attention_scores: bool. Also add `attention_scores` (else removed).
            Defaults to False.

    Returns:
        The new model.
    """
    config = model.get_config()
    encoder_config = dict(config["encoder"]["config"])
    for key, wanted in (("output_all_layers", all_layers),
                        ("output_attention_scores", attention_scores)):
        if wanted:
            encoder_config[key] = True
        else:
            encoder_config.pop(key, None)
    config["encoder"] = {**config["encoder"], "config": encoder_config}
    copy = model.__class__.from_config(config)
    copy.set_weights(model.get_weights())
    return copy


def encoder_from_layers(teacher: Encoder, layers: Sequence[int]) -> Encoder:
    """DistilBERT's student: the teacher's width, its embeddings, pooler and chosen blocks.

    Args:
        teacher: `BertEncoder` (or another encoder of its layer names).
        layers: sequence of int. Teacher blocks (0-based) to copy, in order.

    Returns:
        An encoder of the teacher's class with `len(layers)` blocks, weights copied.

    Raises:
        ValueError: an index is out of range or repeated, or `layers` is empty.

    Example:

    >>> student = encoder_from_layers(teacher.encoder, [0, 2, 4])
    """
    layers = [int(i) for i in layers]
    bad = [i for i in layers if not 0 <= i < teacher.num_layers]
    if not layers or bad or len(set(layers)) != len(layers):
        raise ValueError(f"--student_layers={','.join(map(str, layers))}: expected distinct "
                         f"teacher layers in 0..{teacher.num_layers - 1} (the teacher has "
                         f"{teacher.num_layers}){'; out of range: ' + str(bad) if bad else ''}.")
    config = {**teacher.get_config(), "num_layers": len(layers)}
    config.pop("output_all_layers", None)
    config.pop("output_attention_scores", None)
    student = type(teacher).from_config(config)
    for name in ("token_embedding", "position_embedding", "segment_embedding",
                 "embeddings_layer_norm", "embeddings_projection", "final_layer_norm",
                 "pooled_dense"):
        # Each architecture has some of these (ModernBERT: no position, segment or pooler).
        if getattr(teacher, name, None) is not None:
            getattr(student, name).set_weights(getattr(teacher, name).get_weights())
    for index, (student_block, teacher_index) in enumerate(zip(student.transformer_layers, layers)):
        weights = teacher.transformer_layers[teacher_index].get_weights()
        if len(weights) != len(student_block.weights):
            # ModernBERT's first block has no attention norm; its others do.
            raise ValueError(
                f"--student_layers={','.join(map(str, layers))}: teacher block {teacher_index} "
                f"has {len(weights)} weights but student block {index} has "
                f"{len(student_block.weights)} ({type(teacher).__name__}'s blocks differ by "
                "position); start with teacher block 0.")
        student_block.set_weights(weights)
    return student


def copy_head(teacher: keras.Model, student: keras.Model) -> None:
    """Copies every weighted layer of `teacher` but its encoder into `student` (same names).

    Layers holding the encoder (a bi-encoder's tower) are left out: their
    weighted parts besides it are copied through their own layers.
    """
    for layer in teacher.layers:
        if layer is teacher.encoder or not layer.weights:
            continue
        if getattr(layer, "encoder", None) is teacher.encoder:
            copy_head(layer, student.get_layer(layer.name))
        else:
            student.get_layer(layer.name).set_weights(layer.get_weights())


def uniform_layer_map(student_layers: int, teacher_layers: int) -> list[int]:
    """TinyBERT's mapping: student block i learns teacher block (i + 1) * Lt / Ls - 1."""
    return [(i + 1) * teacher_layers // student_layers - 1 for i in range(student_layers)]
