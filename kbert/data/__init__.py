"""Pre-training and fine-tuning data: features, tokenization, example generation, readers."""

from kbert.data.pretraining_dataset import PRETRAINING_FEATURE_NAMES
from kbert.data.pretraining_dataset import pretraining_dataset
from kbert.data.pretraining_dataset import pretraining_feature_spec
from kbert.data.metadata import read_pretraining_metadata
