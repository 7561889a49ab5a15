"""What every task shares: evaluation's dataset and traced function are built once, not per evaluation."""

import gc
import weakref

import keras
import numpy as np

from tests import serving_testlib as lib
from tests.conftest import tiny_encoder_kwargs
from tests.conftest import tiny_inputs
from kbert.data import TextPreprocessor
from kbert.models import BertClassifier
from kbert.models import BertEncoder
from kbert.tasks import GlueTask
from kbert.tasks.base import inference_function
from kbert.tasks.glue_reader import GlueExample


def test_the_evaluation_dataset_is_reused_only_for_the_same_examples_and_settings():
    task = GlueTask(task_name="sst-2")
    preprocessor = TextPreprocessor.from_vocab_file(lib.VOCAB, True, 16)
    examples = [GlueExample(f"dev-{i}", text, None, i % 2) for i, text in enumerate(lib.TEXTS)]
    first = task.evaluation_dataset(examples, preprocessor, 3)
    assert task.evaluation_dataset(examples, preprocessor, 3) is first
    assert task.evaluation_dataset(list(examples), preprocessor, 3) is first  # equal examples
    # Iterated again, it gives the same batches (it does not shuffle or run out).
    again = [batch["token_ids"].numpy().tolist() for batch in first]
    assert again == [batch["token_ids"].numpy().tolist() for batch in first]
    assert sorted(i for b in first for i in b["example_index"].numpy()) == [0, 1, 2, 3]
    # Other batch size, other examples (even the same list changed in place), other preprocessor.
    assert task.evaluation_dataset(examples, preprocessor, 2) is not first
    changed = task.evaluation_dataset(examples, preprocessor, 3)
    examples.append(GlueExample("dev-4", "one more", None, 0))
    assert task.evaluation_dataset(examples, preprocessor, 3) is not changed
    assert sum(len(b["example_index"]) for b in task.evaluation_dataset(
        examples, preprocessor, 3)) == 5
    other = TextPreprocessor.from_vocab_file(lib.VOCAB, True, 16)
    assert task.evaluation_dataset(examples, other, 3) is not task.evaluation_dataset(
        examples, preprocessor, 3)


def test_inference_function_is_traced_once_per_model_and_keeps_no_model_alive():
    # Fixed weights: unseeded, an output near zero can miss rtol=1e-6 by a rounding step.
    keras.utils.set_random_seed(0)
    model = BertClassifier(BertEncoder(**tiny_encoder_kwargs()), num_classes=2)
    forward = inference_function(model)
    assert inference_function(model) is forward
    inputs = tiny_inputs()
    np.testing.assert_allclose(forward(inputs).numpy(), model(inputs, training=False).numpy(),
                               rtol=1e-6)
    forward(tiny_inputs(seed=1, batch=2, seq=5))  # any batch and length: no new trace
    assert forward.experimental_get_tracing_count() == 1
    # Trained further, the same function sees the new weights.
    before = forward(inputs).numpy()
    for weight in model.weights:
        weight.assign(weight * 1.5)
    after = forward(inputs).numpy()
    assert not np.allclose(after, before)
    np.testing.assert_allclose(after, model(inputs, training=False).numpy(), rtol=1e-6)
    other = BertClassifier(BertEncoder(**tiny_encoder_kwargs()), num_classes=2)
    assert inference_function(other) is not forward
    alive = weakref.ref(model)
    del model, forward
    gc.collect()
    assert alive() is None


def test_what_a_task_does_not_do_is_refused_by_name():
    import pytest

    from kbert.tasks import TaskData

    task = GlueTask(task_name="sst-2")
    with pytest.raises(ValueError, match="task 'glue' does not take examples from Python values"):
        task.examples_from_values(["a film"])
    with pytest.raises(ValueError, match="task 'glue' does not predict records for kbert-predict"):
        task.predict_records(None, [], None, 8)
    with pytest.raises(ValueError, match="task 'glue' reads no columns of a user's file"):
        task.input_columns()
    # What every task has by default: all splits, nothing to learn, keep or count.
    assert task.has_split(TaskData(), "dev") and task.adapt([]) is None
    assert task.keep_chosen({}) is None and task.count_truncated([], None) is None
    assert TaskData(text_column_names=["a", "b"]).text_column_names == ("a", "b")
