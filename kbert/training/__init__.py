"""Training: optimizers and schedules, distribution strategies, and the generic loops, each in
its own room: `pretraining/`, `finetuning/`, `distillation/` (tasks and their metrics are
`kbert.tasks`)."""

from kbert.training.batch_size_warmup import BatchSizeWarmup
from kbert.training.distillation import run_distillation
from kbert.training.finetuning import run_finetuning
from kbert.training.fused_adamw import FusedAdamW
from kbert.training.interruption import TrainingInterrupted
from kbert.training.optimizer import OptimizerConfig
from kbert.training.optimizer import build_optimizer_state
from kbert.training.optimizer import create_optimizer
from kbert.training.pretraining import evaluate_pretrainer
from kbert.training.pretraining import run_pretraining
from kbert.training.stable_adamw import StableAdamW
from kbert.training.strategy import STRATEGIES
from kbert.training.strategy import create_strategy
from kbert.training.strategy import is_chief
from kbert.training.warmup_linear_decay import WarmupLinearDecay
from kbert.training.warmup_stable_decay import StableDecay
from kbert.training.warmup_stable_decay import WarmupStableDecay
