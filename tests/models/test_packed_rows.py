"""Packed rows: each instance gets the outputs and losses it gets alone; no attention crosses instances."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kbert.models import BertEncoder
from kbert.models import BertPretrainer
from kbert.models.packed_rows import packed_attention_mask
from tests.conftest import P
from tests.conftest import V
from tests.conftest import tiny_encoder_kwargs

# Three instances (token ids, segment ids, masked positions, NSP label) packed into one row of P.
INSTANCES = [
    ([2, 11, 12, 3, 21, 22, 3], [0, 0, 0, 0, 1, 1, 1], [1, 5], 1),
    ([2, 31, 32, 3], [0, 0, 0, 0], [2], 0),
    ([2, 41, 3, 51, 3], [0, 0, 0, 1, 1], [1, 3], 1),
]


@pytest.fixture(scope="module")
def pretrainer():
    keras.utils.set_random_seed(3)
    return BertPretrainer(BertEncoder(**tiny_encoder_kwargs(dropout=0.0)))


def _alone(instance):
    ids, segments, masked, label = instance
    row = np.zeros((1, P), "int32")
    inputs = {"token_ids": row.copy(), "segment_ids": row.copy(), "padding_mask": row.copy(),
              "mask_positions": np.array([masked], "int32")}
    inputs["token_ids"][0, :len(ids)] = ids
    inputs["segment_ids"][0, :len(ids)] = segments
    inputs["padding_mask"][0, :len(ids)] = 1
    return inputs, np.array([masked], "int32"), label


def _packed(instances):
    row = {key: np.zeros((1, P), "int32") for key in
           ("token_ids", "segment_ids", "padding_mask", "instance_ids", "position_ids")}
    positions, starts, offset = [], [], 0
    for number, (ids, segments, masked, _) in enumerate(instances, start=1):
        span = slice(offset, offset + len(ids))
        row["token_ids"][0, span] = ids
        row["segment_ids"][0, span] = segments
        row["padding_mask"][0, span] = 1
        row["instance_ids"][0, span] = number
        row["position_ids"][0, span] = np.arange(len(ids))
        positions += [offset + m for m in masked]
        starts.append(offset)
        offset += len(ids)
    row["mask_positions"] = np.array([positions], "int32")
    row["cls_positions"] = np.array([starts], "int32")
    return row


def _mlm_losses(logits, labels):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits).numpy()


def test_a_packed_row_gives_each_instance_its_outputs_and_losses_alone(pretrainer):
    row = _packed(INSTANCES)
    packed = pretrainer(row)
    encoded = pretrainer.encoder({k: row[k] for k in ("token_ids", "segment_ids", "padding_mask",
                                                      "instance_ids", "position_ids")})
    assert packed["nsp"].shape == (1, 3, 2)
    prediction = 0
    for slot, instance in enumerate(INSTANCES):
        inputs, masked, label = _alone(instance)
        alone = pretrainer(inputs)
        length, start = len(instance[0]), row["cls_positions"][0, slot]
        sequence = pretrainer.encoder({k: inputs[k] for k in ("token_ids", "segment_ids",
                                                              "padding_mask")})["sequence_output"]
        np.testing.assert_allclose(encoded["sequence_output"][0, start:start + length],
                                   sequence[0, :length], atol=1e-5)
        count = len(instance[2])
        span = slice(prediction, prediction + count)
        np.testing.assert_allclose(packed["mlm"][0, span], alone["mlm"][0], atol=1e-5)
        labels = np.array(instance[0])[instance[2]]
        np.testing.assert_allclose(_mlm_losses(packed["mlm"][0, span], labels),
                                   _mlm_losses(alone["mlm"][0], labels), atol=1e-5)
        np.testing.assert_allclose(packed["nsp"][0, slot], alone["nsp"][0], atol=1e-5)
        np.testing.assert_allclose(
            _mlm_losses(packed["nsp"][0, slot:slot + 1], [label]),
            _mlm_losses(alone["nsp"], [label]), atol=1e-5)
        prediction += count


def test_the_attention_mask_is_block_diagonal():
    instance_ids = np.array([[1, 1, 1, 2, 2, 3, 0, 0]], "int32")
    mask = keras.ops.convert_to_numpy(packed_attention_mask(instance_ids))[0]
    expected = np.zeros((8, 8), "int32")
    for begin, end in ((0, 3), (3, 5), (5, 6)):
        expected[begin:end, begin:end] = 1
    np.testing.assert_array_equal(mask, expected)


def test_a_packed_row_never_attends_across_instances(pretrainer):
    row = _packed(INSTANCES)
    before = pretrainer.encoder({k: v for k, v in row.items() if k != "mask_positions"
                                 and k != "cls_positions"})["sequence_output"].numpy()
    # Change every token of instances 2 and 3 and the padding: instance 1 must not move at all.
    changed = {k: v.copy() for k, v in row.items()}
    first = len(INSTANCES[0][0])
    changed["token_ids"][0, first:] = np.arange(P - first) % (V - 60) + 55
    changed["segment_ids"][0, first:] = 1
    after = pretrainer.encoder({k: v for k, v in changed.items() if k != "mask_positions"
                                and k != "cls_positions"})["sequence_output"].numpy()
    np.testing.assert_array_equal(after[0, :first], before[0, :first])
    assert not np.allclose(after[0, first:], before[0, first:])


def test_unpacked_inputs_are_unchanged_and_a_saved_model_takes_packed_rows(pretrainer, tmp_path):
    inputs, _, _ = _alone(INSTANCES[0])
    path = str(tmp_path / "pretrainer.keras")
    pretrainer.save(path)
    loaded = keras.saving.load_model(path)
    assert sorted(loaded.input) == ["mask_positions", "padding_mask", "segment_ids", "token_ids"]
    np.testing.assert_array_equal(loaded(inputs)["mlm"], pretrainer(inputs)["mlm"])
    row = _packed(INSTANCES)
    np.testing.assert_array_equal(loaded(row)["nsp"], pretrainer(row)["nsp"])


def test_a_packed_row_needs_both_instance_and_position_ids(pretrainer):
    row = _packed(INSTANCES)
    with pytest.raises(ValueError, match=r"needs both \('instance_ids', 'position_ids'\); "
                                         r"\['position_ids'\] missing"):
        pretrainer.encoder({k: row[k] for k in ("token_ids", "segment_ids", "padding_mask",
                                                "instance_ids")})


def test_a_packed_classifier_row_gives_each_example_its_logits_alone():
    from kbert.models import BertClassifier

    keras.utils.set_random_seed(4)
    classifier = BertClassifier(BertEncoder(**tiny_encoder_kwargs(dropout=0.0)), num_classes=3)
    row = _packed(INSTANCES)
    packed = classifier({k: v for k, v in row.items() if k != "mask_positions"})
    assert packed.shape == (1, 3, 3)
    for slot, instance in enumerate(INSTANCES):
        inputs, _, _ = _alone(instance)
        alone = classifier({k: v for k, v in inputs.items() if k != "mask_positions"})
        np.testing.assert_allclose(packed[0, slot], alone[0], atol=1e-5)


def test_packed_electra_rows_keep_each_instance_alone_in_both_encoders():
    from kbert.models import ElectraPretrainer

    keras.utils.set_random_seed(5)
    # Narrow embeddings (ELECTRA-Small's layout): the packed path projects them too.
    electra = ElectraPretrainer(BertEncoder(**tiny_encoder_kwargs(dropout=0.0, embedding_dim=16)))
    row = _packed(INSTANCES)
    slots = row["mask_positions"].shape[1]
    labels = np.array([[INSTANCES[0][0][1], 22, 32, 41, 51]], "int32")[:, :slots]
    outputs = electra({**row, "mask_labels": labels, "mask_weights": np.ones((1, slots), "float32")})
    replaced = keras.ops.convert_to_numpy(outputs["replaced_ids"])
    unmasked = np.ones(P, bool)
    unmasked[row["mask_positions"][0]] = False
    np.testing.assert_array_equal(replaced[0, unmasked], row["token_ids"][0, unmasked])
    prediction = 0
    for slot, instance in enumerate(INSTANCES):
        inputs, _, _ = _alone(instance)
        start, length = row["cls_positions"][0, slot], len(instance[0])
        inputs["token_ids"][0, :length] = replaced[0, start:start + length]
        encoders_inputs = {k: inputs[k] for k in ("token_ids", "segment_ids", "padding_mask")}
        alone = electra.replaced_token_head(electra.encoder(encoders_inputs)["sequence_output"])
        np.testing.assert_allclose(outputs["rtd"][0, start:start + length], alone[0, :length],
                                   atol=1e-5)
        count = len(instance[2])
        generated = electra.generator(
            {k: _alone(instance)[0][k] for k in ("token_ids", "segment_ids", "padding_mask")})
        mlm = electra.masked_lm_head(generated["sequence_output"],
                                     mask_positions=np.array([instance[2]], "int32"))
        np.testing.assert_allclose(outputs["mlm"][0, prediction:prediction + count], mlm[0],
                                   atol=1e-5)
        prediction += count
