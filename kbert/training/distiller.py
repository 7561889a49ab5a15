"""Distillation of a fine-tuned task model into a student: losses, the Keras `Distiller`, students.

Built on `keras.distillation` (Keras 3.15): `TaskDistiller` is a
`keras.distillation.Distiller` (teacher frozen, student's supervised loss
weighted against the distillation losses, the three loss trackers the
progress bar shows) and the logits loss is a `LogitsDistillation`. What
Keras lacks is written here: a KL that skips padding and non-first
wordpieces (`TemperatureKL`), sample weights reaching the losses, and
hidden-state losses through a learned projection when widths differ
(TinyBERT). Regression scores and embeddings use Keras's
`FeatureDistillation("mse")` on the final outputs unchanged.

Reference:
    - [Hinton et al., 2015](https://arxiv.org/abs/1503.02531) (temperature, T^2)
    - [Sanh et al., 2019, DistilBERT](https://arxiv.org/abs/1910.01108) (every other layer)
    - [Jiao et al., 2020, TinyBERT](https://arxiv.org/abs/1909.10351) (hidden-state MSE, W_h)
"""

from __future__ import annotations

from typing import Sequence

import keras
from keras import ops

from kbert.models.bert_encoder import BertEncoder


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


def weighted_mean(values, sample_weight=None):
    """Mean of `values`, weighted by `sample_weight` of the same shape when given."""
    if sample_weight is None:
        return ops.mean(values)
    weights = ops.cast(sample_weight, values.dtype)
    return ops.sum(values * weights) / ops.maximum(ops.sum(weights), 1.0)


class TaskDistiller(keras.distillation.Distiller):
    """A `keras.distillation.Distiller` for kbert task models, with weights and hidden states.

    The loss is `h * hard + (1 - h) * (kl_weight * logits_loss + hidden_state_weight *
    hidden)`, Keras's combination with `h = hard_label_weight`. `hard` is the
    student's task loss on the labels (given to `compile`), `logits_loss` a
    `DistillationLoss` between the outputs, and `hidden` the MSE between
    student layer `i` (projected by a learned Dense layer when the widths
    differ) and teacher layer `layer_map[i]` over real tokens. Sample
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
        **kwargs: passed to `keras.distillation.Distiller`.

    Example:

    >>> distiller = TaskDistiller(teacher, student, TemperatureKL(2.0), hard_label_weight=0.5)
    >>> distiller.compile(optimizer, loss=keras.losses.SparseCategoricalCrossentropy(True))
    >>> distiller.fit(dataset, epochs=3)
    """

    def __init__(self, teacher: keras.Model, student: keras.Model,
                 logits_loss: keras.distillation.DistillationLoss, hard_label_weight: float,
                 kl_weight: float = 1.0, hidden_state_weight: float = 0.0,
                 layer_map: Sequence[int] | None = None, **kwargs):
        super().__init__(teacher, student, distillation_losses=[logits_loss],
                         distillation_loss_weights=[kl_weight],
                         student_loss_weight=hard_label_weight, **kwargs)
        self.hidden_state_weight = float(hidden_state_weight)
        self.layer_map = None if layer_map is None else [int(i) for i in layer_map]
        self.projections = []
        self._teacher_view = self._student_view = None
        if self.hidden_state_weight:
            self._build_hidden_views(teacher, student)

    def _build_hidden_views(self, teacher: keras.Model, student: keras.Model) -> None:
        # Keras's FeatureDistillation finds layers by name among the model's
        # top-level layers; the Transformer blocks sit inside the nested
        # encoder, so the views take the encoder's `encoder_outputs` from the
        # task model's own graph (one forward pass gives logits and states).
        self._teacher_view = hidden_state_view(teacher)
        self._student_view = hidden_state_view(student)
        if self.layer_map is None or len(self.layer_map) != student.encoder.num_layers:
            raise ValueError(f"layer_map={self.layer_map} must name a teacher layer for each of "
                             f"the student's {student.encoder.num_layers} layers.")
        width = teacher.encoder.hidden_dim
        if student.encoder.hidden_dim != width:
            self.projections = [keras.layers.Dense(width, name=f"hidden_projection_{i}")
                                for i in range(len(self.layer_map))]

    def call(self, inputs, training=None, **kwargs):
        if self._student_view is not None:
            return self._student_view(inputs, training=training)
        return self.student(inputs, training=training, **kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        if y_pred is None:
            y_pred = self(x, training=training)
        student_logits = y_pred["logits"] if self._student_view is not None else y_pred
        hard = 0.0
        if self.student_loss_weight > 0.0 and y is not None:
            hard = self._student_loss(y, student_logits, sample_weight=sample_weight)
        if self._teacher_view is not None:
            teacher = self._teacher_view(x, training=False)
            teacher_logits = teacher["logits"]
        else:
            teacher_logits = self.teacher(x, training=False)
        (logits_loss,), (kl_weight,) = self.distillation_losses, self.distillation_loss_weights
        distillation = kl_weight * logits_loss.compute_loss(
            teacher_logits, student_logits, sample_weight=sample_weight)
        if self._teacher_view is not None:
            hidden = self._hidden_state_loss(teacher["hidden"], y_pred["hidden"],
                                             x["padding_mask"])
            distillation = distillation + self.hidden_state_weight * hidden
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
    `encoder_outputs` (`with_encoder_all_layers`).
    """
    if not getattr(model.encoder, "output_all_layers", False):
        raise ValueError("the model's encoder does not output its layers; "
                         "use with_encoder_all_layers(model).")
    node = model.encoder._inbound_nodes[0]  # the encoder's call in the task model's graph
    encoded = keras.tree.pack_sequence_as(model.encoder.output, node.outputs)
    return keras.Model(model.inputs, {"logits": model.output, "hidden": encoded["encoder_outputs"]})


def with_encoder_all_layers(model: keras.Model, all_layers: bool = True) -> keras.Model:
    """A copy of a task model (same class, config and weights) whose encoder outputs its layers.

    Args:
        model: a `kbert.models` task model with an `encoder`.
        all_layers: bool. True adds `encoder_outputs`; False removes it (the
            plain model to save). The weights are the same either way.

    Returns:
        The new model.
    """
    config = model.get_config()
    encoder_config = dict(config["encoder"]["config"])
    if all_layers:
        encoder_config["output_all_layers"] = True
    else:
        encoder_config.pop("output_all_layers", None)
    config["encoder"] = {**config["encoder"], "config": encoder_config}
    copy = model.__class__.from_config(config)
    copy.set_weights(model.get_weights())
    return copy


def encoder_from_layers(teacher: BertEncoder, layers: Sequence[int]) -> BertEncoder:
    """DistilBERT's student: the teacher's width, its embeddings, pooler and chosen blocks.

    Args:
        teacher: `BertEncoder`.
        layers: sequence of int. Teacher blocks (0-based) to copy, in order.

    Returns:
        A `BertEncoder` of `len(layers)` blocks with copied weights.

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
    student = BertEncoder.from_config(config)
    for name in ("token_embedding", "position_embedding", "segment_embedding",
                 "embeddings_layer_norm", "embeddings_projection", "pooled_dense"):
        if getattr(teacher, name) is not None:
            getattr(student, name).set_weights(getattr(teacher, name).get_weights())
    for student_block, teacher_index in zip(student.transformer_layers, layers):
        student_block.set_weights(teacher.transformer_layers[teacher_index].get_weights())
    return student


def copy_head(teacher: keras.Model, student: keras.Model) -> None:
    """Copies every weighted layer of `teacher` but its encoder into `student` (same names)."""
    for layer in teacher.layers:
        if layer is not teacher.encoder and layer.weights:
            student.get_layer(layer.name).set_weights(layer.get_weights())


def uniform_layer_map(student_layers: int, teacher_layers: int) -> list[int]:
    """TinyBERT's mapping: student block i learns teacher block (i + 1) * Lt / Ls - 1."""
    return [(i + 1) * teacher_layers // student_layers - 1 for i in range(student_layers)]
