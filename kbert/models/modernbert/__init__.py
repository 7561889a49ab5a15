"""ModernBERT (Warner et al., 2024): the encoder, its block and attention, the MLM pre-trainer, its config key map."""

from kbert.models.modernbert.modernbert_encoder import ModernBertEncoder
from kbert.models.modernbert.modernbert_encoder_layer import ModernBertEncoderLayer
from kbert.models.modernbert.modernbert_masked_lm_head import ModernBertMaskedLMHead
from kbert.models.modernbert.modernbert_pretrainer import ModernBertPretrainer
