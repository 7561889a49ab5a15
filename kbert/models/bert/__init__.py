"""BERT (Devlin et al., 2019): the encoder, its MLM + NSP pre-trainer, its config key maps."""

from kbert.models.bert.bert_encoder import BertEncoder
from kbert.models.bert.bert_pretrainer import BertPretrainer
