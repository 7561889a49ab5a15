"""kbert-serve: TF Serving's gRPC and REST protocol in Python, for kbert SavedModels.

The public classes load on first use (as `kbert`'s subpackages do), so that
`kbert.serving.process`, which only starts the binary, never loads TensorFlow
in the process that imports it (`tools/demo.py`).
"""

import importlib

_EXPORTS = {
    "BatchingParameters": "kbert.serving.batching",
    "Limits": "kbert.serving.limits",
    "ModelManager": "kbert.serving.model_manager",
    "ModelServer": "kbert.serving.server",
    "ServingMetrics": "kbert.serving.metrics",
}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'kbert.serving' has no attribute {name!r}")
