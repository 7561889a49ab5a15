"""kbert: pre-train, fine-tune and serve BERT encoders with TensorFlow and Keras 3.

The package is layered; each layer imports only the ones before it:
`layers` -> `models` -> `training` / `export` -> `configurables` -> `bin`.
`data` stands apart and never imports `models`.
"""

__version__ = "0.1.0"
