"""How a sentence-transformers model pools: read from its `modules.json` and module folders.

A sentence-transformers directory (such as all-MiniLM-L6-v2's) is a Hugging
Face BERT plus `modules.json`, which lists the modules applied after the
Transformer: `Pooling` (its folder's `config.json` says which of CLS, mean or
max) and optionally `Normalize` (no files: its presence means L2
normalisation). `sentence_bert_config.json` holds the longest input it was
used with. kbert-convert records these as the pre-trained directory's
`sentence_config.json`, so that the similarity and retrieval tasks,
`kbert-export` and `kbert-index` embed text exactly as the model was trained
to.
"""

from __future__ import annotations

import os

from kbert.files import read_json

POOLING = "sentence_transformers.models.Pooling"
NORMALIZE = "sentence_transformers.models.Normalize"
TRANSFORMER = "sentence_transformers.models.Transformer"
# Pooling config key -> kbert pooling mode.
_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls",
          "pooling_mode_max_tokens": "max"}


def read_sentence_transformers_config(hf_dir: str) -> dict | None:
    """The pooling of a sentence-transformers directory, or None when it is a plain BERT.

    Args:
        hf_dir: str. A Hugging Face directory that may hold `modules.json`.

    Returns:
        None without `modules.json`; else a dict `pooling` (`mean`, `cls` or
        `max`), `normalize` (bool), `max_seq_length` (int or None) and
        `source` (`sentence-transformers`).

    Raises:
        ValueError: the modules are ones kbert cannot reproduce (a `Dense`
            projection, several pooling modes at once, mean-sqrt-length
            pooling); the message names the file.

    Example:

    >>> read_sentence_transformers_config(kbert.checkpoints.minilm_hf_dir())
    {'pooling': 'mean', 'normalize': True, 'max_seq_length': 256, 'source': 'sentence-transformers'}
    """
    modules_path = os.path.join(hf_dir, "modules.json")
    if not os.path.exists(modules_path):
        return None
    modules = read_json(modules_path)
    if not isinstance(modules, list):
        raise ValueError(f"{modules_path}: expected a list of modules, got {type(modules).__name__}.")
    pooling, normalize = None, False
    for module in modules:
        kind = module.get("type", "")
        if kind == POOLING:
            pooling = _pooling_mode(os.path.join(hf_dir, module.get("path", ""), "config.json"))
        elif kind == NORMALIZE:
            normalize = True
        elif kind != TRANSFORMER:
            raise ValueError(f"{modules_path} lists {kind}, which kbert does not reproduce; "
                             "only Transformer, Pooling and Normalize modules convert.")
    if pooling is None:
        raise ValueError(f"{modules_path} lists no {POOLING} module; cannot tell how it pools.")
    max_seq_length = None
    settings_path = os.path.join(hf_dir, "sentence_bert_config.json")
    if os.path.exists(settings_path):
        max_seq_length = read_json(settings_path).get("max_seq_length")
    return {"pooling": pooling, "normalize": normalize, "max_seq_length": max_seq_length,
            "source": "sentence-transformers"}


def _pooling_mode(path: str) -> str:
    if not os.path.exists(path):
        raise ValueError(f"{path} is missing; modules.json names a Pooling module there.")
    config = read_json(path)
    chosen = [mode for key, mode in _MODES.items() if config.get(key)]
    others = sorted(key for key, value in config.items()
                    if key.startswith("pooling_mode") and value and key not in _MODES)
    if others or len(chosen) != 1:
        raise ValueError(f"{path}: pooling {sorted(k for k, v in config.items() if k.startswith('pooling_mode') and v)}; "
                         "kbert reproduces exactly one of mean, CLS or max pooling.")
    return chosen[0]
