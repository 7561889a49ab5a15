"""What a kbert export says of itself: `assets.extra/kbert_export.json`, read for the server.

`kbert-export` writes the file beside the SavedModel (TF Serving ignores it).
Its `serving` record is what the server decides from: the encoder APIs the
version answers (`encoder_apis`: `embeddings` for OpenAI's `/v1/embeddings`,
`rerank` for TEI's `/rerank`) and the length its texts are cut to
(`truncation_length`, None when it reads long texts in windows). Exports made
before the record, and SavedModels kbert did not make, have none: the server
then decides as it did before the record existed (`kbert.serving.encoder_apis`
by the signatures' inputs and outputs, `kbert.serving.token_counts` by
`model_type`).
"""

from __future__ import annotations

import json
import os

EXPORT_INFO = os.path.join("assets.extra", "kbert_export.json")
SERVING_RECORD = "serving"


def read_export_info(version_dir: str) -> dict:
    """The version's `kbert_export.json`, or `{}` when it has none that parses as an object.

    Args:
        version_dir: str. A SavedModel version directory (read as a local path).

    Returns:
        dict.

    Example:

    >>> read_export_info("export/sst2/1")["task_config"]["label_names"]
    ['negative', 'positive']
    """
    try:
        with open(os.path.join(version_dir, EXPORT_INFO), encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return {}
    return info if isinstance(info, dict) else {}


def recorded_serving(info: dict) -> dict | None:
    """The export's `serving` record, or None for an export without one.

    Args:
        info: dict from `read_export_info`.

    Returns:
        dict with `encoder_apis` (list of str) and `truncation_length` (int or
        None), or None.

    Example:

    >>> recorded_serving(read_export_info("export/minilm/1"))
    {'encoder_apis': ['embeddings'], 'truncation_length': 128}
    """
    record = info.get(SERVING_RECORD)
    return record if isinstance(record, dict) else None
