"""Keras models: the encoder, the pre-trainer and the fine-tuning task models.

Keras only, no file I/O: reading and writing kbert's model directories is
`kbert.checkpoints` (e.g. `kbert.checkpoints.load_encoder(path)`). The
contracts an encoder and a pre-trainer keep are `kbert.models.encoder`;
the encoder architectures are listed once in `kbert.models.registry.ENCODERS`.
"""

from kbert.models.bert_classifier import BertClassifier
from kbert.models.bert_encoder import BertEncoder
from kbert.models.bert_pretrainer import BertPretrainer
from kbert.models.bert_span_labeler import BertSpanLabeler
from kbert.models.bert_task import BertTask
from kbert.models.bert_token_classifier import BertTokenClassifier
from kbert.models.bert_dual_encoder import BertDualEncoder
from kbert.models.bert_sentence_encoder import BertSentenceEncoder
from kbert.models.electra_pretrainer import ElectraPretrainer
from kbert.models.encoder import Encoder
from kbert.models.encoder import Pretrainer
from kbert.models.encoder import encoder_sizes
from kbert.models.modernbert import ModernBertEncoder
from kbert.models.modernbert import ModernBertPretrainer
from kbert.models.registry import ENCODERS
from kbert.models.registry import PRETRAINERS
from kbert.models.registry import encoder_architecture
from kbert.models.registry import get_encoder_class
