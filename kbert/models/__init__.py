"""Keras models: the encoders, the pre-trainers and the fine-tuning task models.

Keras only, no file I/O: reading and writing kbert's model directories is
`kbert.checkpoints` (e.g. `kbert.checkpoints.load_encoder(path)`). The
contracts an encoder and a pre-trainer keep are `kbert.models.encoder`;
the encoder architectures are listed once, one record each, in
`kbert.models.registry.ARCHITECTURES`, each with its folder
(`kbert.models.bert`, `kbert.models.modernbert`). The task heads
(`BertClassifier`, ...) and `ElectraPretrainer` take any registered encoder.
"""

from kbert.models.architecture import Architecture
from kbert.models.architecture import ConvertedArguments
from kbert.models.architecture import HuggingFaceConfig
from kbert.models.bert import BertEncoder
from kbert.models.bert import BertPretrainer
from kbert.models.bert_classifier import BertClassifier
from kbert.models.bert_span_labeler import BertSpanLabeler
from kbert.models.bert_token_classifier import BertTokenClassifier
from kbert.models.bert_dual_encoder import BertDualEncoder
from kbert.models.bert_sentence_encoder import BertSentenceEncoder
from kbert.models.electra_pretrainer import ElectraPretrainer
from kbert.models.encoder import Encoder
from kbert.models.encoder import Pretrainer
from kbert.models.encoder import encoder_sizes
from kbert.models.masked_lm_pretrainer import MaskedLMPretrainer
from kbert.models.modernbert import ModernBertEncoder
from kbert.models.modernbert import ModernBertPretrainer
from kbert.models.registry import ARCHITECTURES
from kbert.models.registry import ENCODERS
from kbert.models.registry import PRETRAINERS
from kbert.models.registry import architecture_of
from kbert.models.registry import encoder_architecture
from kbert.models.registry import get_architecture
from kbert.models.registry import get_encoder_class
from kbert.models.registry import hugging_face_architecture
from kbert.models.task_model import TaskModel
