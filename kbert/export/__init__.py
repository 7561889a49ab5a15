"""Exports: checkpoint interop (TF1, Hugging Face, keras-hub <-> kbert) and SavedModels.

SavedModels with raw-text serving signatures: `export_saved_model(model_dir, export_dir)`
(what `kbert-export` runs), `export_task_model(...)`, `export_embedding_model(...)`,
and `check_ops(...)`.

Checkpoint interop

Readers return a `ConvertedModel`; writers take one:

    load_bert_tf1(checkpoint, ...)    ->  ConvertedModel.save_pretrained(dir)
    load_huggingface(hf_dir)          ->  save_bert_tf1(converted, dir)
    load_keras_hub(preset)            ->  save_keras_hub_preset(converted, dir)
    load_kbert(dir)

`kbert-convert` is the command-line front end (see docs/convert.md).
"""

from kbert.export.atomic_directory import atomic_directory
from kbert.export.atomic_directory import check_output_dir
from kbert.export.bert_tf1 import load_bert_tf1
from kbert.export.bert_tf1 import save_bert_tf1
from kbert.export.converted_model import ConvertedModel
from kbert.export.converted_model import load_kbert
from kbert.export.huggingface import hf_to_tf1_name
from kbert.export.huggingface import load_huggingface
from kbert.export.keras_hub_interop import from_keras_hub
from kbert.export.keras_hub_interop import load_keras_hub
from kbert.export.keras_hub_interop import save_keras_hub_preset
from kbert.export.keras_hub_interop import to_keras_hub
from kbert.export.minilm import minilm_hf_dir
from kbert.export.ops_check import OpsReport
from kbert.export.ops_check import check_ops
from kbert.export.saved_model import export_embedding_model
from kbert.export.saved_model import export_saved_model
from kbert.export.saved_model import export_task_model
from kbert.export.text_preprocessing import TextPreprocessor
from kbert.export.weight_map import weight_names
