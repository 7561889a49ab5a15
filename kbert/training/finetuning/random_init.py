"""The never-pre-trained baseline of a fine-tuning run (`kbert-finetune --compare_with_random_init`).

Whether pre-training helped is the question of every small-budget run: the same
fine-tuning (same task, settings and seed) from an encoder of the same shape whose
weights were never trained. `never_pretrained_directory` writes that encoder as a
pre-trained directory (the same config, tokenizer, case and pooling, freshly
initialised weights), so `run_finetuning` takes it as it takes any other;
`compare_scores` and `format_comparison` put the two dev scores side by side.
"""

from __future__ import annotations

from typing import Any

import keras

from kbert.checkpoints import open_model_dir
from kbert.checkpoints import save_pretrained

RANDOM_INIT_DIR = "random_init"
COMPARISON_FILE = "random_init_comparison.json"


def never_pretrained_directory(init_checkpoint: str, output_dir: str, seed: int) -> str:
    """Writes an encoder of `init_checkpoint`'s shape with initial weights as a directory.

    Args:
        init_checkpoint: str. The pre-trained directory the real run starts from.
        output_dir: str. Where the never-pre-trained directory is written.
        seed: int. Seeds the initialisation (the fine-tuning's `seed`).

    Returns:
        `output_dir`.

    Example:

    >>> never_pretrained_directory("out/mine", "/tmp/random_encoder", seed=12345)
    '/tmp/random_encoder'
    """
    directory = open_model_dir(init_checkpoint, flag="--init_checkpoint")
    keras.utils.set_random_seed(seed)
    encoder = directory.encoder_class(**directory.encoder_config)
    save_pretrained(output_dir, encoder, vocab_file=directory.vocab_file,
                    do_lower_case=directory.do_lower_case,
                    sentence_config=directory.sentence_config)
    return output_dir


def compare_scores(pretrained: dict[str, Any], random_init: dict[str, Any]) -> dict[str, Any]:
    """The two runs' dev scores on the task's main metric, and their difference.

    Args:
        pretrained: `run_finetuning`'s results from the pre-trained directory.
        random_init: its results from the never-pre-trained one.

    Returns:
        dict: `main_metric`, `pretrained`, `random_init`, `difference` (pre-trained minus
        never-pre-trained).

    Example:

    >>> compare_scores({"main_metric": "accuracy", "accuracy": 0.8},
    ...                {"main_metric": "accuracy", "accuracy": 0.7})["difference"]
    0.1...
    """
    metric = pretrained["main_metric"]
    for name, results in (("pre-trained", pretrained), ("never-pre-trained", random_init)):
        if results.get(metric) is None:
            raise ValueError(f"--compare_with_random_init: the {name} run reports no dev "
                             f"{metric} to compare (give the task a dev split).")
    return {"main_metric": metric, "pretrained": pretrained[metric],
            "random_init": random_init[metric],
            "difference": pretrained[metric] - random_init[metric]}


def format_comparison(comparison: dict[str, Any]) -> str:
    """One line: both dev scores and the difference.

    Example:

    >>> format_comparison({"main_metric": "accuracy", "pretrained": 0.8, "random_init": 0.7,
    ...                    "difference": 0.1})
    'dev accuracy: pre-trained 0.8000, never pre-trained 0.7000 (same shape, settings and seed): difference +0.1000'
    """
    return (f"dev {comparison['main_metric']}: pre-trained {comparison['pretrained']:.4f}, "
            f"never pre-trained {comparison['random_init']:.4f} (same shape, settings and "
            f"seed): difference {comparison['difference']:+.4f}")
