"""SavedModels with raw-text serving signatures, and the TF Serving ops check.

`export_saved_model(model_dir, export_dir)` is what `kbert-export` runs; it asks
the model's task (`kbert.tasks`) for its serving module through
`serving_module(model_dir)` (`kbert.export.serving_modules`, which `kbert-index` uses too). `check_ops(path)` loads
a SavedModel in a fresh process with only tensorflow and tensorflow-text.
Checkpoint conversion (TF1, Hugging Face, keras-hub) is `kbert.checkpoints`.
"""

from kbert.export.ops_check import OpsReport
from kbert.export.ops_check import check_ops
from kbert.export.saved_model import export_embedding_model
from kbert.export.saved_model import export_saved_model
from kbert.export.saved_model import export_task_model
from kbert.export.serving_modules import serving_module
