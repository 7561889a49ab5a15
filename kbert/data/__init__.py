"""Pre-training and fine-tuning data: features, tokenization, example generation, readers."""

from kbert.data.pretraining_dataset import PRETRAINING_FEATURE_NAMES
from kbert.data.pretraining_dataset import pretraining_dataset
from kbert.data.pretraining_dataset import pretraining_feature_spec
from kbert.data.pretraining_examples import InstanceOptions
from kbert.data.pretraining_examples import TrainingInstance
from kbert.data.pretraining_examples import VocabInfo
from kbert.data.pretraining_examples import create_instances_from_document
from kbert.data.pretraining_examples import create_masked_lm_predictions
from kbert.data.pretraining_metadata import metadata_path
from kbert.data.pretraining_metadata import read_pretraining_metadata
from kbert.data.pretraining_writer import create_pretraining_data
from kbert.data.pretraining_writer import format_instance
from kbert.data.text_files import expand_file_patterns
from kbert.data.tf_example import ExampleEncoder
from kbert.data.tokenization import BertTokenizer
from kbert.data.tokenization import load_vocab
from kbert.data.tokenization import vocab_sha256
from kbert.data.vocab import build_vocab
