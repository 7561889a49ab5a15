"""Keras task models with their preprocessor attached: keras-hub's front door on kbert directories.

`from_preset(directory)` opens any kbert model directory (pre-trained,
converted or fine-tuned, of any registered architecture); `fit`, `evaluate`
and `predict` take raw text; `save_to_preset(directory)` writes an ordinary
kbert directory that `kbert-export`, `kbert-serve`, `kbert-predict` and
`kbert-distill` read. Underneath are the tasks' own examples, pipelines,
losses and files (`kbert.tasks`), the ones `kbert-finetune` runs.

They live here rather than in `kbert.models`, which is Keras only and does
no file I/O: opening and saving directories, tokenizing and the tasks sit on
floors above it (docs/architecture.md).

    TextClassifier   single-label, multi-label and regression on texts or text pairs
    TokenClassifier  a tag per word (NER)
    TextEmbedder     sentence vectors, pooled as the directory records
    MaskedLM         continued masked-LM pre-training on raw text
"""

from kbert.presets.masked_lm import MaskedLM
from kbert.presets.preset_model import PresetModel
from kbert.presets.task_preset_model import TaskPresetModel
from kbert.presets.text_classifier import TextClassifier
from kbert.presets.text_embedder import TextEmbedder
from kbert.presets.token_classifier import TokenClassifier
