"""Hugging Face BERT safetensors -> kbert, checked against a numpy BERT over the HF arrays."""

import json
import os

import keras
import numpy as np
import pytest
from safetensors.numpy import save_file

from tests.checkpoints.bert_reference import BERT_CONFIG, H, L, V, VOCAB
from tests.checkpoints.bert_reference import gelu_erf, gelu_tanh, inputs_with_padding, reference_bert
from tests.checkpoints.bert_reference import tf1_arrays, tf1_to_hf_arrays
from kbert import checkpoints
from kbert.checkpoints import weight_map
from kbert.checkpoints.huggingface_bert import hf_to_tf1_name, tf1_to_hf_name
from kbert.models.bert.bert_config import hf_config_to_arguments

HF_CONFIG = {
    "architectures": ["BertForPreTraining"], "model_type": "bert", "pad_token_id": 0,
    "position_embedding_type": "absolute", "transformers_version": "4.40.0",
    **{k: v for k, v in BERT_CONFIG.items()},
    "hidden_act": "gelu", "layer_norm_eps": 1e-7,
}


def _tokenizer_json(vocab, lowercase):
    # Hugging Face stores the vocabulary as a dict; order it arbitrarily on purpose.
    items = sorted(((token, i) for i, token in enumerate(vocab)), key=lambda item: item[0])
    return {
        "version": "1.0",
        "added_tokens": [{"id": i, "content": t, "special": True} for i, t in enumerate(vocab[:5])],
        "normalizer": {"type": "BertNormalizer", "lowercase": lowercase, "strip_accents": None},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "vocab": dict(items)},
    }


def write_hf_dir(directory, tensors, config=HF_CONFIG, vocab=VOCAB, vocab_txt=False,
                 lowercase=True):
    os.makedirs(directory, exist_ok=True)
    save_file(tensors, os.path.join(directory, "model.safetensors"))
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f)
    if vocab_txt:
        with open(os.path.join(directory, "vocab.txt"), "w") as f:
            f.write("\n".join(vocab) + "\n")
    else:
        with open(os.path.join(directory, "tokenizer.json"), "w") as f:
            json.dump(_tokenizer_json(vocab, lowercase), f)
    return directory


@pytest.fixture(scope="module")
def hf_pretraining(tmp_path_factory):
    """A tiny BertForPreTraining file: `bert.` prefix, heads, tied decoder copy, a buffer."""
    tensors = tf1_to_hf_arrays(tf1_arrays(seed=3), prefix="bert.")
    tensors["bert.embeddings.position_ids"] = np.arange(16, dtype="int64")[None]
    tensors["cls.predictions.decoder.weight"] = tensors["bert.embeddings.word_embeddings.weight"].copy()
    directory = write_hf_dir(str(tmp_path_factory.mktemp("hf")), tensors, lowercase=False)
    return directory, tensors


def _numpy(outputs):
    return {k: keras.ops.convert_to_numpy(v) for k, v in outputs.items()}


def test_hf_pretraining_matches_numpy_reference(hf_pretraining):
    directory, tensors = hf_pretraining
    converted = checkpoints.load_huggingface(directory)
    assert converted.encoder.activation == "gelu_exact"
    assert converted.encoder.layer_norm_epsilon == 1e-7
    assert converted.vocabulary == VOCAB  # extracted from tokenizer.json, ordered by id
    assert converted.do_lower_case is False  # from the tokenizer.json normalizer
    assert converted.skipped == ["bert.embeddings.position_ids", "cls.predictions.decoder.weight"]
    inputs, mask_positions = inputs_with_padding(seed=4)
    expected = reference_bert(tensors, inputs, layout="hf", hf_prefix="bert.", gelu=gelu_erf,
                              eps=1e-7, mask_positions=mask_positions)
    outputs = _numpy(converted.pretrainer({**inputs, "mask_positions": mask_positions}))
    encoded = _numpy(converted.encoder(inputs))
    valid = inputs["padding_mask"].astype(bool)
    np.testing.assert_allclose(encoded["sequence_output"][valid],
                               expected["sequence_output"][valid], atol=1e-5)
    np.testing.assert_allclose(encoded["pooled_output"], expected["pooled_output"], atol=1e-5)
    np.testing.assert_allclose(outputs["mlm"], expected["mlm"], atol=1e-4)
    np.testing.assert_allclose(outputs["nsp"], expected["nsp"], atol=1e-5)
    # The tanh GELU would be measurably off: the activation really comes from the config.
    tanh = reference_bert(tensors, inputs, layout="hf", hf_prefix="bert.", gelu=gelu_tanh, eps=1e-7)
    assert np.abs(tanh["sequence_output"] - expected["sequence_output"])[valid].max() > 1e-4


def test_hf_bert_model_with_vocab_txt(tmp_path):
    tensors = tf1_to_hf_arrays(tf1_arrays(seed=5, heads=False), prefix="")
    config = {**HF_CONFIG, "architectures": ["BertModel"], "hidden_act": "gelu_new"}
    directory = write_hf_dir(str(tmp_path / "hf"), tensors, config=config, vocab_txt=True)
    converted = checkpoints.load_huggingface(directory)
    assert converted.pretrainer is None
    assert converted.encoder.activation == "gelu_approximate"
    assert converted.do_lower_case is True  # guessed: no upper-case tokens
    inputs, _ = inputs_with_padding(seed=6)
    expected = reference_bert(tensors, inputs, layout="hf", gelu=gelu_tanh, eps=1e-7)
    np.testing.assert_allclose(_numpy(converted.encoder(inputs))["pooled_output"],
                               expected["pooled_output"], atol=1e-5)
    converted.save_pretrained(str(tmp_path / "out"))
    assert open(tmp_path / "out" / "vocab.txt").read().split("\n")[:-1] == VOCAB


def test_hf_names_map_onto_the_weight_table():
    for row in weight_map.weight_names(L, masked_lm=True, next_sentence=True):
        assert hf_to_tf1_name(tf1_to_hf_name(row.tf1_name)) == row.tf1_name
        assert hf_to_tf1_name("bert." + tf1_to_hf_name(row.tf1_name)) == row.tf1_name
    assert hf_to_tf1_name("encoder.layer.11.attention.output.LayerNorm.weight") == \
        "bert/encoder/layer_11/attention/output/LayerNorm/gamma"
    assert hf_to_tf1_name("bert.embeddings.token_type_embeddings.weight") == \
        "bert/embeddings/token_type_embeddings"
    assert hf_to_tf1_name("cls.predictions.transform.dense.weight") == \
        "cls/predictions/transform/dense/kernel"
    assert hf_to_tf1_name("cls.seq_relationship.weight") == "cls/seq_relationship/output_weights"
    assert hf_to_tf1_name("embeddings.LayerNorm.gamma") == "bert/embeddings/LayerNorm/gamma"


def test_hf_config_mapping():
    arguments = hf_config_to_arguments(HF_CONFIG)
    assert arguments == {
        "vocabulary_size": V, "hidden_dim": H, "num_layers": L, "num_heads": 4,
        "intermediate_dim": 37, "activation": "gelu_exact", "dropout": 0.1,
        "max_sequence_length": 16, "num_segments": 2, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-7,
    }
    assert hf_config_to_arguments({**HF_CONFIG, "hidden_act": "gelu_pytorch_tanh"})[
        "activation"] == "gelu_approximate"
    with pytest.raises(ValueError) as error:
        hf_config_to_arguments({**HF_CONFIG, "hidden_act": "silu",
                                "position_embedding_type": "relative_key"}, source="x/config.json")
    assert "x/config.json" in str(error.value)
    assert "hidden_act='silu'" in str(error.value)
    assert "position_embedding_type='relative_key'" in str(error.value)


def test_hf_bad_inputs_name_hf_tensors(tmp_path):
    tensors = tf1_to_hf_arrays(tf1_arrays(seed=7, heads=False), prefix="")
    del tensors["encoder.layer.1.output.dense.bias"]
    tensors["classifier.weight"] = np.zeros((2, H), "float32")
    tensors["encoder.layer.1.intermediate.dense.weight"] = np.zeros((36, H), "float32")
    with pytest.raises(ValueError) as error:
        checkpoints.load_huggingface(write_hf_dir(str(tmp_path / "a"), tensors))
    message = str(error.value)
    assert "1 missing tensor(s): encoder.layer.1.output.dense.bias" in message
    assert ("encoder.layer.1.intermediate.dense.weight (as [in, out]): source has [32, 36], "
            "the model needs [32, 37]") in message
    assert "unknown tensor(s) that kbert would drop: classifier.weight" in message


def test_hf_untied_decoder_and_missing_weights(tmp_path):
    tensors = tf1_to_hf_arrays(tf1_arrays(seed=8), prefix="bert.")
    tensors["cls.predictions.decoder.weight"] = np.ones((V, H), "float32")
    with pytest.raises(ValueError, match="cls.predictions.decoder.weight differs from "
                                         "bert.embeddings.word_embeddings.weight"):
        checkpoints.load_huggingface(write_hf_dir(str(tmp_path / "a"), tensors))
    os.makedirs(tmp_path / "b")
    open(tmp_path / "b" / "pytorch_model.bin", "w").close()
    with open(tmp_path / "b" / "config.json", "w") as f:
        json.dump(HF_CONFIG, f)
    with pytest.raises(FileNotFoundError, match="no model.safetensors.*pytorch_model.bin"):
        checkpoints.load_huggingface(str(tmp_path / "b"))


def test_sharded_safetensors(tmp_path):
    tensors = tf1_to_hf_arrays(tf1_arrays(seed=11, heads=False), prefix="")
    directory = write_hf_dir(str(tmp_path / "hf"), tensors, vocab_txt=True)
    single = checkpoints.load_huggingface(directory)
    os.remove(os.path.join(directory, "model.safetensors"))
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, os.path.join(directory, shard))
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": {k: shard for shard, keys in shards.items() for k in keys}}, f)
    sharded = checkpoints.load_huggingface(directory)
    assert sharded.source.endswith("model.safetensors.index.json")
    for a, b in zip(single.encoder.weights, sharded.encoder.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))


def test_to_hf_writes_only_architectures_with_a_writer(hf_pretraining, tmp_path):
    converted = checkpoints.load_huggingface(hf_pretraining[0])  # BERT's record: read, not written
    with pytest.raises(ValueError, match=r"--to=hf writes modernbert models; .*model.safetensors "
                                         r"is a BertEncoder \(bert\): use --to=kbert, or for "
                                         r"BERT --to=bert_tf1 or --to=keras_hub"):
        checkpoints.save_huggingface(converted, str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")
