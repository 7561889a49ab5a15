"""Exports: SavedModels with raw-text serving signatures (and checkpoint import)."""

from kbert.export.ops_check import OpsReport
from kbert.export.ops_check import check_ops
from kbert.export.saved_model import export_embedding_model
from kbert.export.saved_model import export_saved_model
from kbert.export.saved_model import export_task_model
from kbert.export.text_preprocessing import TextPreprocessor
