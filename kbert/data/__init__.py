"""Text handling every part of kbert shares, and pre-training data (`kbert.data.pretraining`).

One `vocab.txt` reader (`read_vocab`), the tokenizers (`kbert.data.tokenizers`:
the `Tokenizer` contract, `load_tokenizer`, `WordpieceTokenizer` over
`BertWordpieceTokenizer`, `ByteLevelBpeTokenizer` over `read_tokenizer_json`),
one packer (`TextPreprocessor`), length bucketing, corpus reading,
vocabulary learning and word counting (`kbert.data.vocab`: `build_vocab`,
`count_words`), sequence packing (`pack_window`).
"""

from kbert.data.bucketing import batch_by_length
from kbert.data.bucketing import bucket_boundaries
from kbert.data.packing import PackingConfig
from kbert.data.packing import first_fit_decreasing
from kbert.data.packing import pack_window
from kbert.data.pretraining import PRETRAINING_FEATURE_NAMES
from kbert.data.pretraining import DynamicMasker
from kbert.data.pretraining import ExampleEncoder
from kbert.data.pretraining import InstanceOptions
from kbert.data.pretraining import MaskingConfig
from kbert.data.pretraining import MaskingSchedule
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
from kbert.data.text_datasets import classification_dataset
from kbert.data.text_files import expand_file_patterns
from kbert.data.text_files import split_sentences
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.data.text_preprocessor import check_max_seq_length
from kbert.data.tokenization import BertTokenizer
from kbert.data.tokenizers import BertWordpieceTokenizer
from kbert.data.tokenizers import ByteLevelBpeTokenizer
from kbert.data.tokenizers import TOKENIZER_JSON
from kbert.data.tokenizers import Tokenizer
from kbert.data.tokenizers import TokenizerJson
from kbert.data.tokenizers import WordpieceTokenizer
from kbert.data.tokenizers import load_tokenizer
from kbert.data.tokenizers import read_tokenizer_json
from kbert.data.vocab import build_vocab
from kbert.data.vocabulary import INPUT_TOKENS
from kbert.data.vocabulary import PRETRAINING_TOKENS
from kbert.data.vocabulary import read_vocab
from kbert.data.vocabulary import vocab_sha256
