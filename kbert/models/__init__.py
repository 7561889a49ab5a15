"""Keras models: the encoder, the pre-trainer and the fine-tuning task models."""

from kbert.models.bert_classifier import BertClassifier
from kbert.models.bert_config import read_bert_config
from kbert.models.bert_config import write_bert_config
from kbert.models.bert_encoder import BertEncoder
from kbert.models.bert_pretrainer import BertPretrainer
from kbert.models.bert_span_labeler import BertSpanLabeler
from kbert.models.bert_task import BertTask
from kbert.models.bert_token_classifier import BertTokenClassifier
from kbert.models.pretrained import load_encoder
from kbert.models.pretrained import load_pretrainer
from kbert.models.pretrained import read_tokenizer_config
from kbert.models.pretrained import save_pretrained
from kbert.models.finetuned import TaskConfig
from kbert.models.finetuned import load_finetuned
from kbert.models.finetuned import read_task_config
from kbert.models.finetuned import save_finetuned
