"""Text handling every part of kbert shares, and pre-training data (`kbert.data.pretraining`).

One `vocab.txt` reader (`read_vocab`), one WordPiece tokenizer construction
(`BertWordpieceTokenizer`), one packer, length bucketing, corpus reading and
vocabulary learning (`build_vocab`).
"""

from kbert.data.bert_wordpiece_tokenizer import BertWordpieceTokenizer
from kbert.data.conll import CONLL2003_LABELS
from kbert.data.conll import read_conll
from kbert.data.glue import GLUE_TASKS
from kbert.data.glue import get_glue_task
from kbert.data.glue import read_glue
from kbert.data.pretraining import PRETRAINING_FEATURE_NAMES
from kbert.data.pretraining import ExampleEncoder
from kbert.data.pretraining import InstanceOptions
from kbert.data.pretraining import TrainingInstance
from kbert.data.pretraining import VocabInfo
from kbert.data.pretraining import create_instances_from_document
from kbert.data.pretraining import create_masked_lm_predictions
from kbert.data.pretraining import create_pretraining_data
from kbert.data.pretraining import format_instance
from kbert.data.pretraining import metadata_path
from kbert.data.pretraining import pretraining_dataset
from kbert.data.pretraining import pretraining_feature_spec
from kbert.data.pretraining import read_pretraining_metadata
from kbert.data.squad import read_squad
from kbert.data.squad_features import squad_features
from kbert.data.squad_postprocessing import postprocess_squad
from kbert.data.text_features import TextFeaturizer
from kbert.data.text_features import classification_dataset
from kbert.data.text_features import token_classification_dataset
from kbert.data.text_files import expand_file_patterns
from kbert.data.tokenization import BertTokenizer
from kbert.data.vocab_builder import build_vocab
from kbert.data.vocabulary import INPUT_TOKENS
from kbert.data.vocabulary import PRETRAINING_TOKENS
from kbert.data.vocabulary import read_vocab
from kbert.data.vocabulary import vocab_sha256
