"""A toy second encoder architecture, written the way a new one is: its own module, then one registry line.

BERT's layers with the LayerNorm moved before each block's attention and
feed-forward (pre-LayerNorm, as GPT-2 and ModernBERT) and one more after the
last block. Everything else (embeddings, packed rows, pooler, config,
saving) is `BertEncoder`'s; the pre-trainers, task heads, fine-tuning,
export and the pre-trained directory take it through the generic code.
`TOY_ARCHITECTURE` is its record, what the one line in
`kbert.models.registry.ARCHITECTURES` holds: pre-trained by
`BertPretrainer`, with no Hugging Face conversion.
"""

from __future__ import annotations

import keras

from kbert.layers import LayerNormalization
from kbert.models import Architecture
from kbert.models import BertEncoder
from kbert.models import BertPretrainer

# The name its pre-trained directories record (`model_type` in bert_config.json).
ARCHITECTURE = "toy_prenorm"


@keras.saving.register_keras_serializable(package="kbert_tests")
class PreNormEncoder(BertEncoder):
    """BERT with pre-LayerNorm Transformer blocks and a final LayerNorm."""

    def _transformer_block(self, index, block_class, **arguments):
        return block_class(normalize_first=True, name=f"transformer_layer_{index}", **arguments)

    def _final_layer_norm(self, layer_norm_epsilon, dtype):
        return LayerNormalization(epsilon=layer_norm_epsilon, dtype=dtype, name="final_layer_norm")


# Its registry record: `ARCHITECTURES[ARCHITECTURE] = TOY_ARCHITECTURE` is the one line.
TOY_ARCHITECTURE = Architecture(ARCHITECTURE, PreNormEncoder, BertPretrainer)
