"""Hugging Face's ModernBERT forward pass in numpy float64, written from `modeling_modernbert.py`.

The reference the Keras model is tested against: `ModernBertModel` (padded
path: key padding mask plus, in local layers, `|i - j| <= local_attention // 2`)
and `ModernBertForMaskedLM`'s head. Weights are read from a Keras
`ModernBertEncoder` / `ModernBertPretrainer` under their Hugging Face names
(`hf_weights`), so this file also records the name mapping.
"""

import math

import numpy as np

_erf = np.vectorize(math.erf)


def hf_weights(encoder, pretrainer=None):
    """The Keras weights as float64 numpy arrays under Hugging Face's names (Linear as `[in, out]`)."""
    weights = {"model.embeddings.tok_embeddings.weight": encoder.token_embedding.embeddings,
               "model.embeddings.norm": encoder.embeddings_layer_norm,
               "model.final_norm": encoder.final_layer_norm}
    for i, layer in enumerate(encoder.transformer_layers):
        prefix = f"model.layers.{i}."
        if layer.attention_layer_norm is not None:
            weights[prefix + "attn_norm"] = layer.attention_layer_norm
        weights[prefix + "attn.Wqkv"] = layer.qkv
        weights[prefix + "attn.Wo"] = layer.attention_output
        weights[prefix + "mlp_norm"] = layer.mlp_layer_norm
        weights[prefix + "mlp.Wi"] = layer.mlp_input
        weights[prefix + "mlp.Wo"] = layer.mlp_output
    if pretrainer is not None:
        head = pretrainer.masked_lm_head
        weights["head.dense"] = head._intermediate_dense
        weights["head.norm"] = head._intermediate_layer_norm
        weights["decoder.bias"] = head._bias
    arrays = {}
    for name, value in weights.items():
        if hasattr(value, "kernel"):  # Dense
            arrays[name + ".weight"] = np.asarray(value.kernel, np.float64)
            arrays[name + ".bias"] = None if value.bias is None else np.asarray(value.bias,
                                                                                np.float64)
        elif hasattr(value, "gamma"):  # LayerNorm
            arrays[name + ".weight"] = np.asarray(value.gamma, np.float64)
            arrays[name + ".bias"] = None if value.beta is None else np.asarray(value.beta,
                                                                                np.float64)
        else:
            arrays[name] = np.asarray(value, np.float64)
    return arrays


def layer_norm(x, w, name, eps):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    y = (x - mean) / np.sqrt(variance + eps) * w[name + ".weight"]
    return y if w[name + ".bias"] is None else y + w[name + ".bias"]


def linear(x, w, name):
    y = x @ w[name + ".weight"]
    return y if w[name + ".bias"] is None else y + w[name + ".bias"]


def gelu(x):
    """HF's `gelu`: the exact erf form."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def rope(x, positions, theta):
    """HF's `apply_rotary_pos_emb` on `x` `[..., length, head_dim]` at `positions` `[length]`."""
    dim = x.shape[-1]
    inv_freq = 1.0 / theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    freqs = positions[:, None].astype(np.float64) * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    return x * np.cos(emb) + rotate_half(x) * np.sin(emb)


def encoder_forward(w, config, token_ids, attention_mask):
    """`ModernBertModel(...).last_hidden_state` for `[batch, length]` ids and mask (1 real)."""
    hidden, heads = config["hidden_dim"], config["num_heads"]
    head_dim, eps = hidden // heads, config["layer_norm_epsilon"]
    batch, length = token_ids.shape
    x = w["model.embeddings.tok_embeddings.weight"][token_ids]
    x = layer_norm(x, w, "model.embeddings.norm", eps)
    positions = np.arange(length)
    minimum = np.finfo(np.float64).min
    key_mask = np.where(attention_mask[:, None, None, :] > 0, 0.0, minimum)
    distance = np.abs(positions[:, None] - positions[None, :])
    window_mask = np.where(distance <= config["local_attention_window"] // 2, 0.0, minimum)
    for i in range(config["num_layers"]):
        prefix = f"model.layers.{i}."
        is_global = i % config["global_attention_every_n_layers"] == 0
        theta = config["global_rope_theta"] if is_global else config["local_rope_theta"]
        h = x if i == 0 else layer_norm(x, w, prefix + "attn_norm", eps)
        qkv = linear(h, w, prefix + "attn.Wqkv").reshape(batch, length, 3, heads, head_dim)
        q, k, v = (qkv[:, :, j].transpose(0, 2, 1, 3) for j in range(3))  # [b, n, t, d]
        q, k = rope(q, positions, theta), rope(k, positions, theta)
        scores = q @ k.transpose(0, 1, 3, 2) * head_dim ** -0.5
        # HF: the sliding-window mask is the padding mask with far keys filled in.
        mask = key_mask if is_global else np.maximum(key_mask + window_mask, minimum)
        scores = scores + mask
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probabilities = scores / scores.sum(-1, keepdims=True)
        attended = (probabilities @ v).transpose(0, 2, 1, 3).reshape(batch, length, hidden)
        x = x + linear(attended, w, prefix + "attn.Wo")
        gelu_input, gate = np.split(linear(layer_norm(x, w, prefix + "mlp_norm", eps), w,
                                           prefix + "mlp.Wi"), 2, axis=-1)
        x = x + linear(gelu(gelu_input) * gate, w, prefix + "mlp.Wo")
    return layer_norm(x, w, "model.final_norm", eps)


def mlm_logits(w, config, sequence_output):
    """`ModernBertForMaskedLM`'s logits from the encoder's output: decoder(norm(gelu(dense(h))))."""
    h = gelu(linear(sequence_output, w, "head.dense"))
    h = layer_norm(h, w, "head.norm", config["layer_norm_epsilon"])
    return h @ w["model.embeddings.tok_embeddings.weight"].T + w["decoder.bias"]


def pooled(config, sequence_output, attention_mask):
    """`ModernBertForSequenceClassification`'s pooling (before its head): cls or masked mean."""
    if config["classifier_pooling"] == "cls":
        return sequence_output[:, 0]
    mask = attention_mask[..., None].astype(np.float64)
    return (sequence_output * mask).sum(1) / mask.sum(1)
