"""Token classification (NER): a label per word, predicted at its first wordpiece."""

from __future__ import annotations

import keras

from kbert.models.bert_task import BertTask


@keras.saving.register_keras_serializable(package="kbert")
class BertTokenClassifier(BertTask):
    """Encoder + dropout + dense layer over every position of the sequence output.

    The model scores every wordpiece; training and prediction use only the
    first wordpiece of each word (the data gives those positions weight 1 and
    every other position weight 0), as in the BERT paper's NER setup.

    Args:
        encoder: `kbert.models.BertEncoder`.
        num_classes: int. Number of tags.
        dropout: float. Dropout before the output layer. Defaults to 0.1.
        **kwargs: other keyword arguments passed to `keras.Model`.

    Example:

    >>> tagger = kbert.models.BertTokenClassifier(
    ...     kbert.checkpoints.load_encoder("minilm/"), num_classes=9)
    >>> tagger.compile(optimizer=keras.optimizers.AdamW(5e-5))
    >>> logits = tagger.predict(features)  # [batch, sequence, 9]
    """

    _config_keys = ("num_classes", "dropout")

    def __init__(self, encoder, num_classes: int, dropout: float = 0.1, **kwargs):
        self.encoder = encoder
        self._build_output_head(encoder, num_classes, dropout)

        inputs = self._encoder_inputs()
        sequence = encoder(inputs)["sequence_output"]
        outputs = self._output_head(sequence)
        super().__init__(inputs=inputs, outputs=outputs, **kwargs)

        self.num_classes = num_classes
        self.dropout = dropout

    def compile(self, optimizer="auto", loss="auto", *, weighted_metrics="auto", **kwargs):
        """Configures training; "auto" picks AdamW(5e-5), cross-entropy and accuracy.

        Pass the first-wordpiece weights as `sample_weight` so other positions
        count for neither loss nor accuracy.

        Args:
            optimizer: optimizer or "auto".
            loss: loss or "auto".
            weighted_metrics: metrics or "auto" (token accuracy).
            **kwargs: passed to `keras.Model.compile`.
        """
        if optimizer == "auto":
            optimizer = keras.optimizers.AdamW(5e-5, weight_decay=0.01, epsilon=1e-6)
        if loss == "auto":
            loss = keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction="mean_with_sample_weight"
            )
        if weighted_metrics == "auto":
            weighted_metrics = [keras.metrics.SparseCategoricalAccuracy("accuracy")]
        super().compile(optimizer=optimizer, loss=loss, weighted_metrics=weighted_metrics, **kwargs)
