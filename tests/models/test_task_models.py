
import keras
import numpy as np
import pytest

from tests.conftest import BATCH, SEQ, tiny_encoder_kwargs, tiny_inputs
from kbert.models import BertClassifier
from kbert.models import BertEncoder
from kbert.models import BertSpanLabeler
from kbert.models import BertTokenClassifier


def _np(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize(
    "cls, kwargs, shape",
    [
        (BertClassifier, {"num_classes": 3}, (BATCH, 3)),
        (BertClassifier, {"num_classes": 1}, (BATCH, 1)),
        (BertTokenClassifier, {"num_classes": 5}, (BATCH, SEQ, 5)),
    ],
)
def test_task_output_shapes_and_config(tiny_encoder, cls, kwargs, shape):
    model = cls(tiny_encoder, **kwargs)
    assert tuple(model(tiny_inputs()).shape) == shape
    config = model.get_config()
    assert cls.from_config(config).get_config() == config


def test_span_labeler_masks_padding(tiny_encoder):
    model = BertSpanLabeler(tiny_encoder)
    outputs = model(tiny_inputs())
    start = _np(outputs["start_logits"])
    assert start.shape == (BATCH, SEQ)
    assert (start[0, -2:] < -1e8).all() and (start[1] > -1e8).all()


def test_classifier_fit_lowers_loss():
    keras.utils.set_random_seed(1)
    model = BertClassifier(BertEncoder(**tiny_encoder_kwargs(dropout=0.0)), num_classes=2, dropout=0.0)
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    # Built before fit, so that fit traces its step once (not again without creating them).
    model.optimizer.build(model.trainable_variables)
    inputs, labels = tiny_inputs(), np.array([0, 1, 1])
    before = model.evaluate(inputs, labels, verbose=0, return_dict=True)["loss"]
    model.fit(inputs, labels, epochs=15, verbose=0)
    after = model.evaluate(inputs, labels, verbose=0, return_dict=True)
    assert after["loss"] < 0.5 * before and after["accuracy"] == 1.0
