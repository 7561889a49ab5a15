"""Pre-training and fine-tuning data: features, tokenization, example generation, readers."""

from kbert.data.pretraining_dataset import PRETRAINING_FEATURE_NAMES
from kbert.data.pretraining_dataset import pretraining_dataset
from kbert.data.pretraining_dataset import pretraining_feature_spec
from kbert.data.conll import CONLL2003_LABELS
from kbert.data.conll import read_conll
from kbert.data.glue import GLUE_TASKS
from kbert.data.glue import get_glue_task
from kbert.data.glue import read_glue
from kbert.data.squad import read_squad
from kbert.data.squad_features import squad_features
from kbert.data.squad_postprocessing import postprocess_squad
from kbert.data.text_features import TextFeaturizer
from kbert.data.text_features import classification_dataset
from kbert.data.text_features import token_classification_dataset
