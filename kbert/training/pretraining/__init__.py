"""Pre-training: the loop (`run_pretraining`), its settings, state, compiled step, progress and
held-out evaluation (`evaluate_pretrainer`).

`loop.py` drives a run; `settings.py` holds its arguments (`PretrainingSettings`);
`state.py` builds and restores the model, optimizer, input and checkpoint; `step.py`
is the compiled distributed step; `progress.py` writes progress lines, TensorBoard
scalars and `summary.json`; `evaluation.py` evaluates held-out data (the data's
unigram baselines are `kbert.data.pretraining.baselines`).
"""

from kbert.training.pretraining.evaluation import evaluate_pretrainer
from kbert.training.pretraining.loop import run_pretraining
from kbert.training.pretraining.settings import PretrainingSettings
