"""Training: optimizers, metrics and the pre-training and fine-tuning loops."""

from kbert.training.finetuning import run_finetuning
