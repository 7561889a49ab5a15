"""kbert: pre-train, fine-tune and serve BERT encoders with TensorFlow and Keras 3.

The package is layered; each layer imports only the ones before it (docs/architecture.md):
`files` -> `layers` -> `models` -> `data` -> `retrieval` -> `tasks`, `checkpoints` -> `training`,
`export` -> `index`, `presets` -> `configurables` -> `bin`; `data` never imports `models`. After
`import kbert`, the library layers are reachable as `kbert.files`, `kbert.layers`,
`kbert.models`, `kbert.data`, `kbert.retrieval`, `kbert.tasks`, `kbert.checkpoints`,
`kbert.training`, `kbert.export`, `kbert.index`, `kbert.presets` and `kbert.serving`; each is
imported on first use, so a data-generation worker that needs only `kbert.data` never loads
Keras. The Keras task models of `kbert.presets` are also at the top level, named as keras-hub
names them:

>>> classifier = kbert.TextClassifier.from_preset("minilm/", num_classes=2)
>>> classifier.fit(["a gorgeous film", "a dull film"], [1, 0])
"""

import importlib

__version__ = "0.1.0"

_SUBPACKAGES = ("files", "layers", "models", "data", "retrieval", "tasks", "checkpoints", "training",
                "export", "index", "presets", "serving")
# The Keras task models (keras-hub's names), at the top level: `kbert.TextClassifier`.
_PRESET_MODELS = ("TextClassifier", "TokenClassifier", "TextEmbedder", "MaskedLM")


def __getattr__(name: str):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"kbert.{name}")
    if name in _PRESET_MODELS:
        return getattr(importlib.import_module("kbert.presets"), name)
    raise AttributeError(f"module 'kbert' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_SUBPACKAGES, *_PRESET_MODELS})
