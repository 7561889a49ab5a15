"""Pre-training data: the MLM + NSP example generator, its TFRecord encoding and sidecar, and the reader.

`create_pretraining_data` (what `tools/create_pretraining_data.py` runs) turns raw
text into google-research/bert's TFRecords; `pretraining_dataset` reads them back
as `(features, labels, sample_weights)` for `model.fit`.
"""

from kbert.data.pretraining.dataset import PRETRAINING_FEATURE_NAMES
from kbert.data.pretraining.dataset import pretraining_dataset
from kbert.data.pretraining.dataset import pretraining_feature_spec
from kbert.data.pretraining.dynamic_masking import DynamicMasker
from kbert.data.pretraining.dynamic_masking import MaskingConfig
from kbert.data.pretraining.dynamic_masking import MaskingSchedule
from kbert.data.pretraining.generator import create_pretraining_data
from kbert.data.pretraining.generator import format_instance
from kbert.data.pretraining.instances import InstanceOptions
from kbert.data.pretraining.instances import TrainingInstance
from kbert.data.pretraining.instances import VocabInfo
from kbert.data.pretraining.instances import create_instances_from_document
from kbert.data.pretraining.instances import create_masked_lm_predictions
from kbert.data.pretraining.metadata import list_data_files
from kbert.data.pretraining.metadata import metadata_path
from kbert.data.pretraining.metadata import read_pretraining_metadata
from kbert.data.pretraining.tf_example import ExampleEncoder
