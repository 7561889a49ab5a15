"""Fine-tuning: the task-agnostic loop (`run_finetuning`) and what it is built from.

`loop.py` is `run_finetuning`; `training_schedule.py` splits a run into Keras epochs
between dev evaluations; `dev_evaluation.py` scores the dev split and keeps the best
step; `selection_split.py` holds out training examples to choose the kept step on;
`hparam_search.py` is the grid search; `auto_settings.py` the `"auto"` settings;
`outcome_checks.py` the warnings of a run that learned nothing; `finetuned_dir.py` writes
a trained task model as a fine-tuned directory (also for kbert-distill and the preset
models' `save_to_preset`). Distillation trains on the same schedule, evaluation,
selection split and checks.
"""

from kbert.training.finetuning.loop import run_finetuning
