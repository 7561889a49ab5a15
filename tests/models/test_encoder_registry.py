"""A second encoder architecture needs one module and one registry line: it pre-trains, fine-tunes, exports."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import tiny_encoder_kwargs
from tests.finetune_testing import character_vocabulary
from tests.models.test_packed_rows import INSTANCES
from tests.models.test_packed_rows import _alone
from tests.models.test_packed_rows import _packed
from tests.models.toy_encoder import ARCHITECTURE
from tests.models.toy_encoder import PreNormEncoder
from tests.tasks.toy_task import ToyTask
from tests.training.pretraining_data import write_pretraining_data
from kbert import tasks
from kbert.checkpoints import load_encoder
from kbert.checkpoints import load_finetuned
from kbert.export import export_saved_model
from kbert.models import ENCODERS
from kbert.models import BertEncoder
from kbert.models import BertPretrainer
from kbert.models import ElectraPretrainer
from kbert.models import ModernBertEncoder
from kbert.models import encoder_architecture
from kbert.models import encoder_sizes
from kbert.training import run_finetuning
from kbert.training import run_pretraining

TOY_ROWS = {"train": [("a red car", 1), ("a fast car", 0), ("blue sky", 1), ("open sky", 0)] * 2,
            "dev": [("green grass", 1), ("tall grass", 0)],
            "test": [("a red car", 1), ("open sky", 0)]}


def _toy_encoder(**overrides):
    return PreNormEncoder(**tiny_encoder_kwargs(vocabulary_size=len(character_vocabulary()),
                                                max_sequence_length=32, **overrides))


def test_the_registry_lists_bert_and_names_the_unknown():
    assert ENCODERS == {"bert": BertEncoder, "modernbert": ModernBertEncoder}
    assert encoder_architecture(BertEncoder) == "bert"
    with pytest.raises(ValueError, match=r"PreNormEncoder is not a registered encoder "
                                         r"architecture; add it to kbert.models.registry"):
        encoder_architecture(PreNormEncoder)


def test_the_toy_is_the_bert_graph_with_pre_layer_norm():
    encoder = _toy_encoder()
    assert all(block.normalize_first for block in encoder.transformer_layers)
    assert encoder.final_layer_norm is not None
    assert encoder_sizes(encoder) == encoder_sizes(BertEncoder(**encoder.get_config()))
    # Every use keeps its class: all layers, and ELECTRA's generator.
    assert type(encoder.with_all_layers()) is PreNormEncoder
    assert type(ElectraPretrainer(encoder).generator) is PreNormEncoder
    # Packed rows go through the same layers, the final LayerNorm included.
    row = _packed(INSTANCES)
    packed = encoder({k: row[k] for k in ("token_ids", "segment_ids", "padding_mask",
                                          "instance_ids", "position_ids")}, training=False)
    start, length = row["cls_positions"][0, 1], len(INSTANCES[1][0])
    alone = encoder({k: v for k, v in _alone(INSTANCES[1])[0].items() if k != "mask_positions"},
                    training=False)
    np.testing.assert_allclose(packed["sequence_output"][0, start:start + length],
                               alone["sequence_output"][0, :length], atol=1e-5)


def test_a_directory_naming_an_unknown_architecture_is_refused(tmp_path):
    (tmp_path / "bert_config.json").write_text(json.dumps({"model_type": "nope", "hidden_dim": 8}))
    (tmp_path / "encoder.weights.h5").write_text("")
    with pytest.raises(ValueError, match=r"bert_config.json: model_type='nope' is not a kbert "
                                         r"encoder architecture; expected one of "
                                         r"\('bert', 'modernbert'\)"):
        load_encoder(str(tmp_path))


def test_a_new_encoder_needs_one_module_and_one_registry_line(monkeypatch, tmp_path):
    monkeypatch.setitem(ENCODERS, ARCHITECTURE, PreNormEncoder)  # the one registry line
    monkeypatch.setitem(tasks.TASKS, "toy", ToyTask)
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(character_vocabulary()) + "\n")
    data = write_pretraining_data(str(tmp_path / "train.tfrecord"), num_examples=16)

    pretrained = str(tmp_path / "pretrained")
    summary = run_pretraining(
        data, pretrained, lambda: BertPretrainer(_toy_encoder()), train_batch_size=8,
        max_seq_length=16, max_predictions_per_seq=3, num_train_steps=4, num_warmup_steps=1,
        learning_rate=1e-3, save_checkpoints_steps=4, log_every_steps=2,
        vocab_file=str(vocab_file), do_lower_case=True, print_fn=lambda line: None)
    assert summary["global_step"] == 4 and np.isfinite(summary["loss"])
    config = json.load(open(os.path.join(pretrained, "bert_config.json")))
    assert config["model_type"] == ARCHITECTURE and config["hidden_dim"] == 32
    encoder = load_encoder(pretrained)
    assert type(encoder) is PreNormEncoder and encoder.max_sequence_length == 32

    data_dir = tmp_path / "toy_data"
    data_dir.mkdir()
    for split, examples in TOY_ROWS.items():
        (data_dir / f"{split}.tsv").write_text("".join(f"{t}\t{label}\n" for t, label in examples))
    finetuned = str(tmp_path / "finetuned")
    results = run_finetuning("toy", pretrained, finetuned, data_dir=str(data_dir),
                             do_predict=True, train_batch_size=4, learning_rate=3e-3,
                             warmup_proportion=0.0, num_train_epochs=1, max_seq_length=32,
                             verbose=0)
    assert results["num_examples"] == 2 and results["train_steps"] == 2
    assert type(load_finetuned(finetuned)[0].encoder) is PreNormEncoder

    version = export_saved_model(finetuned, str(tmp_path / "export"), check=False)
    served = tf.saved_model.load(version).signatures["serving_default"](
        text=tf.constant(["a red car", "open sky"]))
    labels = [label.decode() for label in served["label"].numpy()]
    assert labels == open(os.path.join(finetuned, "toy_predictions.txt")).read().split()
