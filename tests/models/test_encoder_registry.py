"""A second encoder architecture needs its own folder and one registry line: it pre-trains, fine-tunes, exports."""

import json
import os
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import tiny_encoder_kwargs
from tests.conftest import tiny_inputs
from tests.finetune_testing import character_vocabulary
from tests.models.test_packed_rows import INSTANCES
from tests.models.test_packed_rows import _alone
from tests.models.test_packed_rows import _packed
from tests.models.toy_encoder import ARCHITECTURE
from tests.models.toy_encoder import PreNormEncoder
from tests.models.toy_encoder import TOY_ARCHITECTURE
from tests.tasks.toy_task import ToyTask
from tests.training.pretraining_data import write_pretraining_data
from kbert import tasks
from kbert.checkpoints import load_encoder
from kbert.checkpoints import load_finetuned
from kbert.export import export_saved_model
from kbert.layers import BertMaskedLMHead
from kbert.layers import FastMaskedLMHead
from kbert.models import ARCHITECTURES
from kbert.models import BertClassifier
from kbert.models import ENCODERS
from kbert.models import PRETRAINERS
from kbert.models import BertEncoder
from kbert.models import BertPretrainer
from kbert.models import ElectraPretrainer
from kbert.models import ModernBertEncoder
from kbert.models import MaskedLMPretrainer
from kbert.models import ModernBertPretrainer
from kbert.models import encoder_architecture
from kbert.models import encoder_sizes
from kbert.models import hugging_face_architecture
from kbert.models.modernbert import ModernBertMaskedLMHead
from kbert.training import run_finetuning
from kbert.training import run_pretraining

MODERNBERT = dict(vocabulary_size=99, num_layers=2, num_heads=4, hidden_dim=32, intermediate_dim=37,
                  local_attention_window=4)
TOY_ROWS = {"train": [("a red car", 1), ("a fast car", 0), ("blue sky", 1), ("open sky", 0)] * 2,
            "dev": [("green grass", 1), ("tall grass", 0)],
            "test": [("a red car", 1), ("open sky", 0)]}


def _toy_encoder(**overrides):
    return PreNormEncoder(**tiny_encoder_kwargs(vocabulary_size=len(character_vocabulary()),
                                                max_sequence_length=32, **overrides))


def test_the_registry_lists_bert_and_names_the_unknown():
    assert list(ARCHITECTURES) == ["bert", "modernbert"]
    assert all(name == record.name for name, record in ARCHITECTURES.items())
    assert ENCODERS == {"bert": BertEncoder, "modernbert": ModernBertEncoder}
    assert PRETRAINERS == {"bert": BertPretrainer, "modernbert": ModernBertPretrainer}
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
    monkeypatch.setitem(ARCHITECTURES, ARCHITECTURE, TOY_ARCHITECTURE)  # the one registry line
    assert ENCODERS[ARCHITECTURE] is PreNormEncoder  # the views follow the records
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


def test_each_record_names_its_classes_and_hugging_face_side():
    bert, modernbert = ARCHITECTURES["bert"], ARCHITECTURES["modernbert"]
    assert (bert.pretrainer, bert.head_variants) == (BertPretrainer, ({},))
    assert modernbert.head_variants == ({}, {"dense_bias": True})
    assert bert.hugging_face.model_types == ("bert",) and bert.hugging_face.from_arguments is None
    assert modernbert.hugging_face.model_types == ("modernbert",)
    assert hugging_face_architecture("modernbert") is modernbert
    # Another model_type goes to BERT's key map, which names it.
    assert hugging_face_architecture("roberta") is bert
    with pytest.raises(ValueError, match=r"model_type='roberta' \(only 'bert' is supported\)"):
        bert.hugging_face.to_arguments({"model_type": "roberta"}, "config.json")
    assert TOY_ARCHITECTURE.hugging_face is None  # an architecture need not convert


def test_pretrainers_and_heads_are_siblings_on_neutral_bases():
    assert MaskedLMPretrainer in BertPretrainer.__mro__
    assert MaskedLMPretrainer in ModernBertPretrainer.__mro__
    assert BertPretrainer not in ModernBertPretrainer.__mro__
    assert FastMaskedLMHead in ModernBertMaskedLMHead.__mro__
    assert BertMaskedLMHead not in ModernBertMaskedLMHead.__mro__
    # Both run their own constructor: their heads, NSP only for BERT.
    bert = BertPretrainer(BertEncoder(**tiny_encoder_kwargs()))
    modernbert = ModernBertPretrainer(ModernBertEncoder(**MODERNBERT))
    assert type(bert.masked_lm_head) is BertMaskedLMHead and bert.next_sentence
    assert type(modernbert.masked_lm_head) is ModernBertMaskedLMHead
    assert not modernbert.next_sentence and modernbert.next_sentence_head is None
    assert modernbert.progress_labels == {"masked_lm_accuracy": "mlm_acc"}


# The names `.keras` files hold; files written before the classes moved must keep loading.
SAVED_NAMES = {
    "kbert>BertEncoder": BertEncoder, "kbert>BertPretrainer": BertPretrainer,
    "kbert>ModernBertEncoder": ModernBertEncoder,
    "kbert>ModernBertPretrainer": ModernBertPretrainer,
    "kbert>ModernBertMaskedLMHead": ModernBertMaskedLMHead,
    "kbert>BertMaskedLMHead": BertMaskedLMHead, "kbert>BertClassifier": BertClassifier,
    "kbert>ElectraPretrainer": ElectraPretrainer,
}
# Module paths before the architecture records (issue 47): what older files name.
OLD_MODULES = {"kbert.models.bert.bert_encoder": "kbert.models.bert_encoder",
               "kbert.models.bert.bert_pretrainer": "kbert.models.bert_pretrainer"}


def test_saved_names_stay_and_files_naming_the_old_modules_load(tmp_path):
    for name, cls in SAVED_NAMES.items():
        assert keras.saving.get_registered_name(cls) == name
        assert keras.saving.get_registered_object(name) is cls
    keras.utils.set_random_seed(0)
    pretrainer = BertPretrainer(BertEncoder(**tiny_encoder_kwargs()))
    new_file = str(tmp_path / "new.keras")
    pretrainer.save(new_file)
    with zipfile.ZipFile(new_file) as archive:
        files = {name: archive.read(name) for name in archive.namelist()}
    config = files["config.json"].decode()
    for new, old in OLD_MODULES.items():
        assert f'"module": "{new}"' in config
        config = config.replace(f'"module": "{new}"', f'"module": "{old}"')
    old_file = str(tmp_path / "old.keras")
    with zipfile.ZipFile(old_file, "w") as archive:
        for name, content in {**files, "config.json": config.encode()}.items():
            archive.writestr(name, content)
    loaded = keras.saving.load_model(old_file, compile=False)
    inputs = {**tiny_inputs(), "mask_positions": np.array([[1, 2]] * 3, "int32")}
    assert type(loaded) is BertPretrainer
    np.testing.assert_array_equal(loaded(inputs)["mlm"], pretrainer(inputs)["mlm"])
