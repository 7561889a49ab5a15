"""Hugging Face ModernBERT -> kbert (`load_huggingface`) and back (`kbert-convert --to=hf`).

Random weights under Hugging Face's names for a tiny config are written with
`safetensors.numpy` next to a `config.json` of each form (the hub's and
transformers 5's) and a byte-level BPE `tokenizer.json`; the converted
directory's encoder and pre-trainer must give the float64 numpy forward pass
of HF's definition (`tests/models/modernbert/numpy_reference.py`), which reads
the HF arrays directly, so a wrong name, transpose or config key fails here.
"""

import json
import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file
from safetensors.numpy import save_file

from kbert import checkpoints
from kbert.models.modernbert.modernbert_config import modernbert_config_to_arguments
from kbert.data import read_tokenizer_json
from kbert.models import ModernBertEncoder
from kbert.models import ModernBertPretrainer
from tests import forked_python
from tests.conftest import REPO
from tests.models.modernbert import numpy_reference as ref

TOKENIZER = os.path.join(REPO, "tests", "testdata", "bpe_tokenizer.json")
# HF rounds the embedding rows up past the tokenizer's tokens; so does this.
V = len(read_tokenizer_json(TOKENIZER).vocabulary) + 3
# 4 blocks, head size 8, window 4 (radius 2) on sequences of 11: the window matters.
H, L, A, I, WINDOW, LENGTH = 32, 4, 4, 37, 4, 11
# Thetas far from the defaults, different for global and local blocks, so a
# swapped or ignored key changes the outputs.
GLOBAL_THETA, LOCAL_THETA = 1000.0, 50.0
ALL_BIASES = dict(norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True)


def _hub_config(**overrides):
    """A `config.json` as the hub's ModernBERT files have it (`global_attn_every_n_layers`)."""
    return {
        "architectures": ["ModernBertForMaskedLM"], "model_type": "modernbert",
        "vocab_size": V, "hidden_size": H, "intermediate_size": I, "num_hidden_layers": L,
        "num_attention_heads": A, "hidden_activation": "gelu", "max_position_embeddings": 64,
        "initializer_range": 0.02, "norm_eps": 1e-5, "norm_bias": False,
        "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
        "embedding_dropout": 0.0, "mlp_dropout": 0.0, "local_attention": WINDOW,
        "global_attn_every_n_layers": 3, "global_rope_theta": GLOBAL_THETA,
        "local_rope_theta": LOCAL_THETA, "classifier_pooling": "mean",
        "classifier_bias": False, "classifier_activation": "gelu", "decoder_bias": True,
        "tie_word_embeddings": True, "pad_token_id": 3, "position_embedding_type": "absolute",
        "transformers_version": "4.48.0", **overrides,
    }


def _transformers5_config(every, **overrides):
    """The same as transformers 5 writes it: `layer_types` and `rope_parameters` only."""
    config = _hub_config(**overrides)
    for key in ("global_attn_every_n_layers", "global_rope_theta", "local_rope_theta"):
        del config[key]
    config["layer_types"] = ["sliding_attention" if i % every else "full_attention"
                             for i in range(L)]
    config["rope_parameters"] = {
        "full_attention": {"rope_type": "default", "rope_theta": GLOBAL_THETA},
        "sliding_attention": {"rope_type": "default", "rope_theta": LOCAL_THETA}}
    config["classifier_pooling"] = "cls"
    config["transformers_version"] = "5.0.0"
    return config


def _hf_tensors(config, seed=0, head=True):
    """Random float32 tensors under `ModernBertForMaskedLM` (or `ModernBertModel`) names."""
    rng = np.random.default_rng(seed)
    tensors = {}

    def linear(name, out, inputs, bias):
        tensors[name + ".weight"] = rng.normal(0.0, 1.5 / np.sqrt(inputs), (out, inputs))
        if bias:
            tensors[name + ".bias"] = 0.2 * rng.normal(size=out)

    def norm(name):
        tensors[name + ".weight"] = 1.0 + 0.2 * rng.normal(size=H)
        if config["norm_bias"]:
            tensors[name + ".bias"] = 0.2 * rng.normal(size=H)

    prefix = "model." if head else ""
    # The scale tests/models/modernbert's parity test gives its embeddings (1.5 / sqrt(99)).
    tensors[prefix + "embeddings.tok_embeddings.weight"] = rng.normal(0.0, 0.15, (V, H))
    norm(prefix + "embeddings.norm")
    for i in range(L):
        layer = f"{prefix}layers.{i}."
        if i:
            norm(layer + "attn_norm")
        linear(layer + "attn.Wqkv", 3 * H, H, config["attention_bias"])
        linear(layer + "attn.Wo", H, H, config["attention_bias"])
        norm(layer + "mlp_norm")
        linear(layer + "mlp.Wi", 2 * I, H, config["mlp_bias"])
        linear(layer + "mlp.Wo", H, I, config["mlp_bias"])
    norm(prefix + "final_norm")
    if head:
        linear("head.dense", H, H, config["classifier_bias"])
        norm("head.norm")
        tensors["decoder.bias"] = 0.2 * rng.normal(size=V)
    return {name: value.astype(np.float32) for name, value in tensors.items()}


def _reference_weights(tensors):
    """The HF arrays as `numpy_reference` takes them: float64, Linear as `[in, out]`."""
    weights = {}
    for name, value in tensors.items():
        if not name.startswith(("head.", "decoder.", "model.")):
            name = "model." + name
        value = value.astype(np.float64)
        weights[name] = value.T if value.ndim == 2 and "tok_embeddings" not in name else value
    for name in list(weights):
        if name.endswith(".weight"):
            weights.setdefault(name[:-len(".weight")] + ".bias", None)
    return weights


def _write_hf_dir(directory, config, tensors, tokenizer=True):
    os.makedirs(directory)
    save_file(tensors, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if tokenizer:
        shutil.copy(TOKENIZER, os.path.join(directory, "tokenizer.json"))
    return str(directory)


def _inputs():
    rng = np.random.default_rng(7)
    token_ids = rng.integers(1, V, size=(3, LENGTH)).astype("int32")
    padding_mask = np.ones((3, LENGTH), "int32")
    padding_mask[1, 8:] = 0
    padding_mask[2, 5:] = 0
    token_ids[padding_mask == 0] = 3
    return {"token_ids": token_ids, "segment_ids": np.zeros_like(token_ids),
            "padding_mask": padding_mask}


# (config, what the reference computes with: every n-th layer global, pooling)
FORMS = {
    "hub": (_hub_config(), 3, "mean"),
    "transformers5_all_biases": (_transformers5_config(2, **ALL_BIASES), 2, "cls"),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_converted_directory_computes_hugging_face_model(form, tmp_path):
    config, every, pooling = FORMS[form]
    tensors = _hf_tensors(config, seed=len(form))
    hf_dir = _write_hf_dir(tmp_path / "hf", config, tensors)
    out = str(tmp_path / "kbert")
    converted = checkpoints.load_huggingface(hf_dir)
    assert "heads: masked LM\n" in converted.summary()
    converted.save_pretrained(out)

    saved = json.load(open(os.path.join(out, "bert_config.json")))
    assert {k: saved[k] for k in ("model_type", "vocabulary_size", "num_layers", "hidden_dim",
                                  "num_heads", "intermediate_dim", "local_attention_window",
                                  "global_attention_every_n_layers", "global_rope_theta",
                                  "local_rope_theta", "classifier_pooling", "norm_bias")} == {
        "model_type": "modernbert", "vocabulary_size": V, "num_layers": L, "hidden_dim": H,
        "num_heads": A, "intermediate_dim": I, "local_attention_window": WINDOW,
        "global_attention_every_n_layers": every, "global_rope_theta": GLOBAL_THETA,
        "local_rope_theta": LOCAL_THETA, "classifier_pooling": pooling,
        "norm_bias": config["norm_bias"]}
    assert sorted(os.listdir(out)) == ["bert_config.json", "encoder.weights.h5",
                                       "pretrainer.weights.h5", "tokenizer.json"]
    assert open(os.path.join(out, "tokenizer.json"), "rb").read() == open(TOKENIZER, "rb").read()

    encoder = checkpoints.load_encoder(out)
    pretrainer = checkpoints.load_pretrainer(out)
    assert type(encoder) is ModernBertEncoder and type(pretrainer) is ModernBertPretrainer
    assert pretrainer.dense_bias == config["classifier_bias"]
    inputs = _inputs()
    mask_positions = np.array([[0, 3, 10], [1, 4, 7], [0, 2, 4]], "int32")  # real tokens
    outputs = encoder(inputs)
    logits = pretrainer({**inputs, "mask_positions": mask_positions})["mlm"].numpy()

    weights = _reference_weights(tensors)
    reference_config = {"hidden_dim": H, "num_heads": A, "num_layers": L,
                        "layer_norm_epsilon": 1e-5, "local_attention_window": WINDOW,
                        "global_attention_every_n_layers": every,
                        "global_rope_theta": GLOBAL_THETA, "local_rope_theta": LOCAL_THETA,
                        "classifier_pooling": pooling}
    expected = ref.encoder_forward(weights, reference_config, inputs["token_ids"],
                                   inputs["padding_mask"])
    real = inputs["padding_mask"] == 1
    np.testing.assert_allclose(outputs["sequence_output"].numpy()[real], expected[real],
                               atol=1e-5)
    np.testing.assert_allclose(outputs["pooled_output"].numpy(),
                               ref.pooled(reference_config, expected, inputs["padding_mask"]),
                               atol=1e-5)
    expected_logits = ref.mlm_logits(weights, reference_config,
                                     np.take_along_axis(expected, mask_positions[..., None], 1))
    np.testing.assert_allclose(logits, expected_logits, atol=1e-5)
    # The thetas matter at these sizes: HF's model with the default ones differs.
    defaults = ref.encoder_forward(weights, {**reference_config, "global_rope_theta": 160000.0,
                                             "local_rope_theta": 10000.0},
                                   inputs["token_ids"], inputs["padding_mask"])
    assert np.abs(defaults[real] - expected[real]).max() > 1e-3


def _convert(*flags):
    env = {**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return forked_python.run(["-m", "kbert.bin.convert", *flags], cwd=REPO, env=env, timeout=300)


def test_round_trip_to_hugging_face_is_bit_identical(tmp_path):
    # With the head (ModernBertForMaskedLM names) through kbert-convert --to=hf ...
    config = _transformers5_config(3, classifier_bias=True, mlp_bias=True)
    tensors = _hf_tensors(config, seed=3)
    hf_dir = _write_hf_dir(tmp_path / "hf", config, tensors)
    checkpoints.load_huggingface(hf_dir).save_pretrained(str(tmp_path / "kbert"))
    result = _convert("--source=kbert", f"--kbert_dir={tmp_path / 'kbert'}", "--to=hf",
                      f"--output_dir={tmp_path / 'back'}")
    assert result.returncode == 0, result.stderr
    assert f"wrote hf model to {tmp_path / 'back'}" in result.stdout
    back = load_file(str(tmp_path / "back" / "model.safetensors"))
    assert sorted(back) == sorted(tensors)
    for name, value in tensors.items():
        assert back[name].dtype == np.float32
        np.testing.assert_array_equal(back[name], value, err_msg=name)
    written = json.load(open(tmp_path / "back" / "config.json"))
    assert modernbert_config_to_arguments(written) == modernbert_config_to_arguments(config)
    assert written["architectures"] == ["ModernBertForMaskedLM"]
    assert written["pad_token_id"] == read_tokenizer_json(TOKENIZER).token_id("[PAD]")
    assert (open(tmp_path / "back" / "tokenizer.json", "rb").read()
            == open(TOKENIZER, "rb").read())

    # ... and without it (ModernBertModel names, no `model.` prefix), in Python.
    config = _hub_config(architectures=["ModernBertModel"], norm_bias=True)
    tensors = _hf_tensors(config, seed=4, head=False)
    converted = checkpoints.load_huggingface(_write_hf_dir(tmp_path / "hf2", config, tensors))
    assert converted.pretrainer is None
    converted.save_pretrained(str(tmp_path / "kbert2"))
    assert "pretrainer.weights.h5" not in os.listdir(tmp_path / "kbert2")
    assert type(checkpoints.load_pretrainer(str(tmp_path / "kbert2"))) is ModernBertPretrainer
    checkpoints.save_huggingface(checkpoints.load_kbert(str(tmp_path / "kbert2")),
                                 str(tmp_path / "back2"))
    back = load_file(str(tmp_path / "back2" / "model.safetensors"))
    assert sorted(back) == sorted(tensors)
    for name, value in tensors.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)


def _error(tmp_path, config, tensors, **kwargs):
    hf_dir = _write_hf_dir(tmp_path / "hf", config, tensors)
    with pytest.raises(ValueError) as error:
        checkpoints.load_huggingface(hf_dir, **kwargs)
    message = str(error.value)
    assert "\n" not in message
    return message, hf_dir


def test_unsupported_options_are_named(tmp_path):
    config = _transformers5_config(3, hidden_activation="silu")
    config["rope_parameters"]["full_attention"] = {"rope_type": "linear", "factor": 2.0,
                                                   "rope_theta": 1000.0}
    config["layer_types"][2] = "full_attention"
    message, hf_dir = _error(tmp_path, config, _hf_tensors(_hub_config()))
    assert message == (
        f"{hf_dir}/config.json: cannot convert this ModernBERT config: layer_types="
        '["full_attention", "sliding_attention", "full_attention", "full_attention"] '
        "(kbert's ModernBertEncoder has 4 layers, 'full_attention' at 0, n, 2n, ... and "
        "'sliding_attention' elsewhere); rope_parameters.full_attention="
        '{"rope_type": "linear", "factor": 2.0, "rope_theta": 1000.0} (only rope_type '
        "'default' with a rope_theta); hidden_activation='silu' (supported: ['gelu', "
        "'gelu_new', 'gelu_pytorch_tanh', 'relu', 'tanh']).")
    # The two forms must agree where a file has both.
    config = _hub_config(global_attn_every_n_layers=2,
                         layer_types=_transformers5_config(3)["layer_types"])
    with pytest.raises(ValueError, match="global_attn_every_n_layers=2 disagrees with "
                                         r"layer_types \[\"full_attention\""):
        modernbert_config_to_arguments(config)


def test_missing_unknown_and_misshapen_tensors_are_named(tmp_path):
    tensors = _hf_tensors(_hub_config())
    del tensors["model.layers.2.mlp.Wo.weight"], tensors["head.norm.weight"]
    tensors["classifier.weight"] = np.zeros((2, H), np.float32)
    config = _hub_config(intermediate_size=I - 1)
    message, hf_dir = _error(tmp_path, config, tensors)
    assert message == (
        f"{hf_dir}/model.safetensors: cannot convert to kbert's ModernBERT: missing tensor(s) "
        "['head.norm.weight', 'model.layers.2.mlp.Wo.weight']; unknown tensor(s) "
        "['classifier.weight'] (pass --ignore_unknown_tensors (ignore_unknown=True) to convert "
        "without them); " + "; ".join(
            f"model.layers.{i}.mlp.{name} has shape {shape} but {hf_dir}/config.json needs "
            f"{needed}" for i in range(L) for name, shape, needed in (
                ("Wi.weight", [2 * I, H], [2 * (I - 1), H]), ("Wo.weight", [H, I], [H, I - 1]))
            if (i, name) != (2, "Wo.weight")) + ".")


def test_unknown_tensors_can_be_left_out_and_untied_decoder_is_refused(tmp_path):
    config = _hub_config()
    tensors = {**_hf_tensors(config), "classifier.weight": np.zeros((2, H), np.float32)}
    converted = checkpoints.load_huggingface(_write_hf_dir(tmp_path / "a", config, tensors),
                                             ignore_unknown=True)
    assert converted.skipped == ["classifier.weight"]

    tensors = _hf_tensors(config)
    tensors["decoder.weight"] = tensors["model.embeddings.tok_embeddings.weight"] + 1.0
    message, hf_dir = _error(tmp_path, config, tensors)
    assert message == (f"{hf_dir}/model.safetensors: decoder.weight differs from "
                       "model.embeddings.tok_embeddings.weight; kbert's masked-LM head ties "
                       "them as ModernBERT does, so it can't reproduce this model.")
