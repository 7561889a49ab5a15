"""The uses of the encoder, one folder each, and `TASKS`: the one list of them.

`--task` of `kbert-finetune`, gin (`SquadConfig.doc_stride = ...`),
`task_config.json` and `kbert-export` all read `TASKS`; a pre-trained
encoder without a task serves as `encoder_task()`. Adding a task is a new
folder with a `Task` subclass (see `kbert/tasks/base.py` and
docs/architecture.md) and one line here.
"""

from kbert.tasks.base import Evaluation
from kbert.tasks.base import Task
from kbert.tasks.base import TaskData
from kbert.tasks.classification.task import ClassificationConfig
from kbert.tasks.classification.task import ClassificationTask
from kbert.tasks.embedding.task import EmbeddingConfig
from kbert.tasks.embedding.task import EmbeddingTask
from kbert.tasks.glue.task import GlueConfig
from kbert.tasks.glue.task import GlueTask
from kbert.tasks.rerank.task import RerankConfig
from kbert.tasks.rerank.task import RerankTask
from kbert.tasks.retrieval.task import RetrievalConfig
from kbert.tasks.retrieval.task import RetrievalTask
from kbert.tasks.similarity.task import SimilarityConfig
from kbert.tasks.similarity.task import SimilarityTask
from kbert.tasks.squad.task import SquadConfig
from kbert.tasks.squad.task import SquadTask
from kbert.tasks.token_classification.task import NerConfig
from kbert.tasks.token_classification.task import NerTask
from kbert.tasks.token_classification.task import TokenClassificationConfig
from kbert.tasks.token_classification.task import TokenClassificationTask

# Registry: task name -> Task class.
TASKS: dict[str, type[Task]] = {
    "glue": GlueTask,
    "classification": ClassificationTask,
    "ner": NerTask,
    "token_classification": TokenClassificationTask,
    "squad": SquadTask,
    "embedding": EmbeddingTask,
    "similarity": SimilarityTask,
    "retrieval": RetrievalTask,
    "rerank": RerankTask,
}


def get_task(name: str) -> type[Task]:
    """The `Task` class registered as `name`.

    Args:
        name: str. A key of `TASKS`, e.g. `glue`.

    Returns:
        The task class.

    Raises:
        ValueError: no task has that name; the message lists them.

    Example:

    >>> kbert.tasks.get_task("squad").config_class
    <class 'kbert.tasks.squad.task.SquadConfig'>
    """
    if name not in TASKS:
        raise ValueError(f"--task={name!r}; expected one of {tuple(TASKS)}.")
    return TASKS[name]


def encoder_task(sentence_config: dict | None = None, feature_layers: str | None = None) -> Task:
    """The task a pre-trained encoder (a directory without `task_config.json`) serves as.

    Sentence embeddings (the export-only `embedding` task), pooled as the
    directory's `sentence_config.json` says.

    Args:
        sentence_config: dict or None. The directory's recorded pooling; None
            pools by mean and L2-normalises.
        feature_layers: str or None. Blocks of the `features` signature (None:
            the last four).

    Returns:
        The task.

    Example:

    >>> kbert.tasks.encoder_task({"pooling": "cls", "normalize": False}).config.pooling
    'cls'
    """
    return EmbeddingTask.from_sentence_config(sentence_config, feature_layers)


def trainable_tasks() -> tuple[str, ...]:
    """Names of the tasks `kbert-finetune` can train, in registry order."""
    return tuple(name for name, task in TASKS.items() if task.trainable)
