"""kbert: pre-train, fine-tune and serve BERT encoders with TensorFlow and Keras 3.

The package is layered; each layer imports only the ones before it (docs/architecture.md):
`files` -> `layers` -> `models` -> `data` -> `retrieval` -> `tasks`, `checkpoints` -> `training`,
`export` -> `index` -> `configurables` -> `bin`; `data` never imports `models`. After
`import kbert`, the library layers are reachable as `kbert.files`, `kbert.layers`,
`kbert.models`, `kbert.data`, `kbert.retrieval`, `kbert.tasks`, `kbert.checkpoints`,
`kbert.training`, `kbert.export`, `kbert.index` and `kbert.serving`; each is imported on first use, so a
data-generation worker that needs only `kbert.data` never loads Keras.
"""

import importlib

__version__ = "0.1.0"

_SUBPACKAGES = ("files", "layers", "models", "data", "retrieval", "tasks", "checkpoints", "training",
                "export", "index", "serving")


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"kbert.{name}")
    raise AttributeError(f"module 'kbert' has no attribute {name!r}")
