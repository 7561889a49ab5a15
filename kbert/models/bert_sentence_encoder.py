"""A sentence encoder: the BERT encoder plus pooling, one vector per text."""

from __future__ import annotations

import keras

from kbert.layers.sentence_pooling import SentencePooling
from kbert.models.task_model import TaskModel


@keras.saving.register_keras_serializable(package="kbert")
class BertSentenceEncoder(TaskModel):
    """Encoder + `SentencePooling`: the three encoder inputs in, `[batch, hidden_dim]` out.

    The tower of bi-encoders (sentence similarity, dense retrieval):
    sentence-transformers' `Transformer -> Pooling (-> Normalize)` stack.
    The output is float32 under mixed precision.

    Args:
        encoder: `kbert.models.BertEncoder`.
        pooling: str. `mean`, `cls` or `max`. Defaults to `mean`.
        normalize: bool. L2-normalise the vectors. Defaults to True.
        **kwargs: other keyword arguments passed to `keras.Model`.

    Example:

    >>> tower = kbert.models.BertSentenceEncoder(kbert.checkpoints.load_encoder("minilm/"))
    >>> tower(inputs).shape
    (3, 384)
    """

    _config_keys = ("pooling", "normalize")

    def __init__(self, encoder, pooling: str = "mean", normalize: bool = True, **kwargs):
        self.encoder = encoder
        self.pooler = SentencePooling(pooling, normalize, dtype=encoder.dtype_policy,
                                      name="sentence_pooling")
        inputs = self._encoder_inputs()
        outputs = self.pooler(encoder(inputs)["sequence_output"], inputs["padding_mask"])
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)
        self.pooling = pooling
        self.normalize = bool(normalize)

    @property
    def dimension(self) -> int:
        """Length of the output vectors."""
        return int(self.encoder.hidden_dim)
