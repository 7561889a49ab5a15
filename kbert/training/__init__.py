"""Training: optimizers, metrics and the pre-training and fine-tuning loops."""
