"""Distillation: `run_distillation` trains a small student from a fine-tuned teacher.

`loop.py` is `run_distillation`; `distiller.py` the Keras `Distiller` with kbert's
losses, and the students built from a teacher's blocks.
"""

from kbert.training.distillation.loop import run_distillation
