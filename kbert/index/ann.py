"""The approximate back-end: a faiss index (HNSW or IVF) over the document vectors.

Why faiss: measured here beside TF 2.21, faiss-cpu installs as a wheel with
no compiler and reaches recall@10 0.97 at about 530 queries/s on 100k x 384
vectors (HNSW); ScaNN's wheel does not load beside TF 2.21 today, and hnswlib
builds from source (it needs a compiler). It is the optional `ann` extra
(faiss-cpu: `pip install -e '.[ann]'`); the index is persisted with faiss's own
`write_index`/`read_index`.

Defaults follow the corpus size: HNSW (M=32, efConstruction=200,
efSearch=128) below a million vectors, where it is fast and needs no
training; above, IVF-Flat with nlist = 4 sqrt(count) lists (capped so that
each list gets at least 39 training points, faiss's minimum) and nprobe =
nlist / 8, which keeps memory at the vectors themselves.
"""

from __future__ import annotations

import math

import numpy as np

HNSW_DEFAULTS = {"m": 32, "ef_construction": 200, "ef_search": 128}
IVF_SWITCH = 1_000_000
FAISS_TYPES = ("auto", "hnsw", "ivf")


def import_faiss():
    """faiss, or an ImportError saying how to install it."""
    try:
        import faiss
    except ImportError:
        raise ImportError("--backend=faiss needs faiss-cpu: pip install -e '.[ann]' in the kbert "
                          "checkout (or pip install 'faiss-cpu>=1.8').") from None
    return faiss


def faiss_settings(count: int, faiss_type: str = "auto", hnsw_m: int | None = None,
                   ef_construction: int | None = None, ef_search: int | None = None,
                   nlist: int | None = None, nprobe: int | None = None) -> dict:
    """The faiss index type and parameters for `count` vectors, defaults filled in.

    Args:
        count: int. Vectors the index is built on.
        faiss_type: str. `auto` (HNSW below a million vectors, else IVF), `hnsw` or `ivf`.
        hnsw_m, ef_construction, ef_search: HNSW settings (None: defaults).
        nlist, nprobe: IVF settings (None: from `count`).

    Returns:
        dict `type` plus that type's settings, as `index.json` records them.

    Example:

    >>> faiss_settings(100_000)
    {'type': 'hnsw', 'm': 32, 'ef_construction': 200, 'ef_search': 128}
    """
    if faiss_type not in FAISS_TYPES:
        raise ValueError(f"--faiss_type={faiss_type!r}; expected one of {FAISS_TYPES}.")
    if faiss_type == "auto":
        faiss_type = "hnsw" if count < IVF_SWITCH else "ivf"
    if faiss_type == "hnsw":
        settings = {"type": "hnsw", "m": hnsw_m or HNSW_DEFAULTS["m"],
                    "ef_construction": ef_construction or HNSW_DEFAULTS["ef_construction"],
                    "ef_search": ef_search or HNSW_DEFAULTS["ef_search"]}
    else:
        lists = nlist or max(1, min(int(4 * math.sqrt(count)), count // 39))
        settings = {"type": "ivf", "nlist": lists, "nprobe": nprobe or max(1, math.ceil(lists / 8))}
    for key, value in settings.items():
        if key != "type" and value < 1:
            raise ValueError(f"faiss {key}={value}; it must be >= 1.")
    return settings


def build_faiss(vectors: np.ndarray, settings: dict, seed: int = 0):
    """A faiss inner-product index over `vectors` (`[count, dim]` float32) with `settings`."""
    faiss = import_faiss()
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    dimension = vectors.shape[1]
    if settings["type"] == "hnsw":
        index = faiss.IndexHNSWFlat(dimension, settings["m"], faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = settings["ef_construction"]
    else:
        quantizer = faiss.IndexFlatIP(dimension)
        index = faiss.IndexIVFFlat(quantizer, dimension, settings["nlist"], faiss.METRIC_INNER_PRODUCT)
        if len(vectors) < settings["nlist"]:
            raise ValueError(f"IVF with nlist={settings['nlist']} needs at least that many vectors to "
                             f"train; the corpus has {len(vectors)}. Lower --nlist or use --faiss_type=hnsw.")
        index.cp.seed = seed
        index.train(vectors)
    index.add(vectors)
    configure_search(index, settings)
    return index


def configure_search(index, settings: dict) -> None:
    """Sets the search-time parameter (efSearch or nprobe) recorded in `settings`."""
    if settings["type"] == "hnsw":
        index.hnsw.efSearch = settings["ef_search"]
    else:
        index.nprobe = settings["nprobe"]


def write_faiss(index, path: str) -> None:
    """faiss's own writer (the path is inside a version being staged, so it lands atomically)."""
    import_faiss().write_index(index, path)


def read_faiss(path: str, settings: dict):
    """faiss's own reader, with the recorded search parameter applied."""
    index = import_faiss().read_index(path)
    configure_search(index, settings)
    return index


def search_faiss(index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """`(indices, scores)` `[num_queries, k]` best first; -1 where fewer than k were found."""
    scores, indices = index.search(np.ascontiguousarray(queries, dtype=np.float32), k)
    return indices, scores
