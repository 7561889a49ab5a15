"""Test helpers: tiny checkpoints in the original layouts, and a numpy BERT to check against.

The numpy forward pass is written from the papers/original code, reading the
arrays by their TF1 or Hugging Face names directly, so it shares nothing with
kbert's weight table.
"""

import json
import math
import os

import numpy as np
import pytest

# Tiny sizes (conftest's V, H, L, A, I, P).
V, H, L, A, I, P = 99, 32, 2, 4, 37, 16
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"tok{i}" for i in range(V - 5)]

BERT_CONFIG = {
    "vocab_size": V, "hidden_size": H, "num_hidden_layers": L, "num_attention_heads": A,
    "intermediate_size": I, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1, "max_position_embeddings": P, "type_vocab_size": 2,
    "initializer_range": 0.02,
}


def tf1_arrays(seed=0, num_layers=L, heads=True):
    """Random arrays under google-research/bert's TF1 names and shapes."""
    rng = np.random.default_rng(seed)

    def normal(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype("float32")

    arrays = {
        "bert/embeddings/word_embeddings": normal(V, H),
        "bert/embeddings/position_embeddings": normal(P, H),
        "bert/embeddings/token_type_embeddings": normal(2, H),
        "bert/embeddings/LayerNorm/gamma": 1 + normal(H, scale=0.1),
        "bert/embeddings/LayerNorm/beta": normal(H, scale=0.1),
        "bert/pooler/dense/kernel": normal(H, H),
        "bert/pooler/dense/bias": normal(H, scale=0.1),
    }
    for i in range(num_layers):
        p = f"bert/encoder/layer_{i}/"
        for name in ("query", "key", "value"):
            arrays[p + f"attention/self/{name}/kernel"] = normal(H, H)
            arrays[p + f"attention/self/{name}/bias"] = normal(H, scale=0.1)
        arrays[p + "attention/output/dense/kernel"] = normal(H, H)
        arrays[p + "attention/output/dense/bias"] = normal(H, scale=0.1)
        arrays[p + "attention/output/LayerNorm/gamma"] = 1 + normal(H, scale=0.1)
        arrays[p + "attention/output/LayerNorm/beta"] = normal(H, scale=0.1)
        arrays[p + "intermediate/dense/kernel"] = normal(H, I)
        arrays[p + "intermediate/dense/bias"] = normal(I, scale=0.1)
        arrays[p + "output/dense/kernel"] = normal(I, H)
        arrays[p + "output/dense/bias"] = normal(H, scale=0.1)
        arrays[p + "output/LayerNorm/gamma"] = 1 + normal(H, scale=0.1)
        arrays[p + "output/LayerNorm/beta"] = normal(H, scale=0.1)
    if heads:
        arrays.update({
            "cls/predictions/transform/dense/kernel": normal(H, H),
            "cls/predictions/transform/dense/bias": normal(H, scale=0.1),
            "cls/predictions/transform/LayerNorm/gamma": 1 + normal(H, scale=0.1),
            "cls/predictions/transform/LayerNorm/beta": normal(H, scale=0.1),
            "cls/predictions/output_bias": normal(V, scale=0.1),
            "cls/seq_relationship/output_weights": normal(2, H),
            "cls/seq_relationship/output_bias": normal(2, scale=0.1),
        })
    return arrays


def write_tf1_checkpoint(directory, arrays, config=None, vocab=VOCAB, name="bert_model.ckpt"):
    """Writes a checkpoint as the original TF1 code does (variables + Saver in a graph).

    `config` None writes BERT_CONFIG, False writes no bert_config.json (as
    google-research/electra, whose sizes live in its --hparams).
    """
    import tensorflow as tf

    os.makedirs(directory, exist_ok=True)
    with tf.Graph().as_default():
        variables = [tf.compat.v1.get_variable(name, initializer=value)
                     for name, value in arrays.items()]
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, os.path.join(directory, name), write_meta_graph=False)
    if config is not False:
        with open(os.path.join(directory, "bert_config.json"), "w") as f:
            json.dump(config or BERT_CONFIG, f)
    if vocab is not None:
        with open(os.path.join(directory, "vocab.txt"), "w") as f:
            f.write("\n".join(vocab) + "\n")
    return os.path.join(directory, name)


def tf1_to_hf_arrays(arrays, prefix="bert."):
    """Re-keys TF1 arrays by Hugging Face names ([out, in] Linear weights), by hand."""
    out = {}
    for name, value in arrays.items():
        parts = name.split("/")
        if parts[0] == "bert":
            hf = prefix + ".".join(parts[1:])
        else:
            hf = ".".join(parts)
        hf = hf.replace("layer_", "layer.")
        if hf.endswith("embeddings") and "LayerNorm" not in hf:
            hf += ".weight"
        hf = hf.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if hf.endswith(".kernel"):
            hf, value = hf[: -len(".kernel")] + ".weight", value.T
        hf = {"cls.predictions.output_bias": "cls.predictions.bias",
              "cls.seq_relationship.output_weights": "cls.seq_relationship.weight",
              "cls.seq_relationship.output_bias": "cls.seq_relationship.bias"}.get(hf, hf)
        out[hf] = np.ascontiguousarray(value)
    return out


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu_erf(x):
    return 0.5 * x * (1 + _erf(x / math.sqrt(2)))


def _layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


class _Names:
    """Reads weights by TF1 (`kernel` [in, out]) or Hugging Face (`weight` [out, in]) names."""

    def __init__(self, w, layout, prefix=""):
        self.w, self.layout, self.prefix = w, layout, prefix

    def get(self, tf1, hf):
        return self.w[tf1] if self.layout == "tf1" else self.w[hf]

    def dense(self, x, tf1, hf):
        if self.layout == "tf1":
            return x @ self.w[tf1 + "/kernel"] + self.w[tf1 + "/bias"]
        return x @ self.w[hf + ".weight"].T + self.w[hf + ".bias"]

    def norm(self, x, tf1, hf, eps):
        if self.layout == "tf1":
            return _layer_norm(x, self.w[tf1 + "/gamma"], self.w[tf1 + "/beta"], eps)
        return _layer_norm(x, self.w[hf + ".weight"], self.w[hf + ".bias"], eps)


def reference_bert(w, inputs, layout="tf1", hf_prefix="", num_heads=A, gelu=gelu_tanh,
                   eps=1e-12, mask_positions=None):
    """BERT forward pass in float64 numpy. Returns sequence, pooled, and head outputs."""
    w = {k: v.astype("float64") for k, v in w.items()}
    n = _Names(w, layout)
    p = hf_prefix
    ids, seg, mask = inputs["token_ids"], inputs["segment_ids"], inputs["padding_mask"]
    seq = ids.shape[1]
    x = (n.get("bert/embeddings/word_embeddings", p + "embeddings.word_embeddings.weight")[ids]
         + n.get("bert/embeddings/position_embeddings",
                 p + "embeddings.position_embeddings.weight")[:seq]
         + n.get("bert/embeddings/token_type_embeddings",
                 p + "embeddings.token_type_embeddings.weight")[seg])
    x = n.norm(x, "bert/embeddings/LayerNorm", p + "embeddings.LayerNorm", eps)
    if "bert/embeddings_project/kernel" in w:  # google-research/electra's narrower embeddings
        x = n.dense(x, "bert/embeddings_project", None)
    batch, _, hidden = x.shape
    head_dim = hidden // num_heads
    bias = (1.0 - mask[:, None, None, :]) * -1e9
    layer = 0
    while f"bert/encoder/layer_{layer}/output/dense/kernel" in w or \
            f"{p}encoder.layer.{layer}.output.dense.weight" in w:
        t, h = f"bert/encoder/layer_{layer}/", f"{p}encoder.layer.{layer}."

        def heads(y):
            return y.reshape(batch, seq, num_heads, head_dim).transpose(0, 2, 1, 3)

        q = heads(n.dense(x, t + "attention/self/query", h + "attention.self.query"))
        k = heads(n.dense(x, t + "attention/self/key", h + "attention.self.key"))
        v = heads(n.dense(x, t + "attention/self/value", h + "attention.self.value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = (scores / scores.sum(-1, keepdims=True)) @ v
        context = context.transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        attention = n.dense(context, t + "attention/output/dense", h + "attention.output.dense")
        x = n.norm(x + attention, t + "attention/output/LayerNorm", h + "attention.output.LayerNorm", eps)
        inner = gelu(n.dense(x, t + "intermediate/dense", h + "intermediate.dense"))
        x = n.norm(x + n.dense(inner, t + "output/dense", h + "output.dense"),
                   t + "output/LayerNorm", h + "output.LayerNorm", eps)
        layer += 1
    outputs = {"sequence_output": x}
    if "bert/pooler/dense/kernel" in w or p + "pooler.dense.weight" in w:  # ELECTRA has none
        outputs["pooled_output"] = np.tanh(n.dense(x[:, 0], "bert/pooler/dense", p + "pooler.dense"))
    if mask_positions is not None:
        gathered = np.take_along_axis(x, mask_positions[:, :, None], axis=1)
        y = gelu(n.dense(gathered, "cls/predictions/transform/dense",
                         "cls.predictions.transform.dense"))
        y = n.norm(y, "cls/predictions/transform/LayerNorm", "cls.predictions.transform.LayerNorm", eps)
        embeddings = n.get("bert/embeddings/word_embeddings", p + "embeddings.word_embeddings.weight")
        outputs["mlm"] = y @ embeddings.T + n.get("cls/predictions/output_bias", "cls.predictions.bias")
        outputs["nsp"] = (outputs["pooled_output"]
                          @ n.get("cls/seq_relationship/output_weights", "cls.seq_relationship.weight").T
                          + n.get("cls/seq_relationship/output_bias", "cls.seq_relationship.bias"))
    return outputs


def inputs_with_padding(seed=0, batch=3, seq=7):
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(5, V, size=(batch, seq)).astype("int32")
    segment_ids = np.zeros((batch, seq), "int32")
    segment_ids[:, seq // 2:] = 1
    padding_mask = np.ones((batch, seq), "int32")
    padding_mask[0, -2:] = 0
    token_ids[0, -2:] = 0
    mask_positions = np.array([[1, 3]] * batch, "int32")
    return {"token_ids": token_ids, "segment_ids": segment_ids,
            "padding_mask": padding_mask}, mask_positions


@pytest.fixture(scope="module")
def tf1_source(tmp_path_factory):
    """A tiny google-research/bert checkpoint (heads and Adam slots included) and its arrays."""
    arrays = tf1_arrays(seed=0)
    # A pre-training checkpoint also holds optimizer state, which conversion skips.
    extra = {"global_step": np.array(7, "int64"),
             "bert/pooler/dense/kernel/adam_m": np.zeros((H, H), "float32")}
    checkpoint = write_tf1_checkpoint(str(tmp_path_factory.mktemp("tf1")), {**arrays, **extra})
    return checkpoint, arrays


@pytest.fixture(scope="module")
def converted_tf1(tf1_source):
    from kbert.checkpoints import load_bert_tf1

    return load_bert_tf1(tf1_source[0])
