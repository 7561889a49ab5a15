"""The closing summary of a fine-tuning run: what `kbert-finetune` prints from its results.

Every figure is printed with what it is: a metric beside the baseline a model
that learned nothing reaches (the majority class, or a constant), the split
that chose the kept model, the texts cut at `max_seq_length`, and, when the
run has no dev split, the plain statement that no reported figure exists.
"""

from __future__ import annotations

from typing import Any

from kbert.training.finetuning.hparam_search import format_table

# Results printed in their own lines (or not at all), not as `key = value`.
_OWN_LINES = ("train_loss", "eval_curve", "restarts", "hparam_search", "warnings", "baseline",
              "truncated", "reported_split", "per_class", "per_type", "confusion_matrix",
              "selection")
# Per-class tables: results key -> the first column's heading.
_TABLES = {"per_class": "class", "per_type": "type"}


def summary_lines(results: dict[str, Any], model_dir: str) -> list[str]:
    """The lines `kbert-finetune` prints at the end of a run.

    Args:
        results: dict. What `run_finetuning` returned.
        model_dir: str. Where the run wrote, named in the hyperparameter search's line.

    Returns:
        list of str.

    Example:

    >>> print("\\n".join(summary_lines({"accuracy": 0.91, "baseline": {"accuracy": 0.5,
    ...     "predicts": "the majority class 'billing'"}}, "runs/tickets")))
    ***** results *****
      accuracy = 0.91  (baseline 0.5: the majority class 'billing')
    """
    summary = {key: value for key, value in results.items() if key not in _OWN_LINES}
    if "train_loss" in results:
        summary["final_train_loss"] = round(results["train_loss"][-1], 4)
    lines = ["***** results *****"]
    lines += _metric_lines(summary, results.get("baseline"))
    lines += _class_lines(results)
    selection = results.get("selection")
    if selection is not None:
        lines += _selection_lines(selection, results)
    metric = results.get("main_metric")
    if "hparam_search" in results:
        lines.append(f"***** hyperparameter search (dev {metric}) *****")
        lines.append(format_table(results["hparam_search"], metric))
        lines.append(f"best configuration: {model_dir}/best_hparams.gin")
    for restart in results.get("restarts", []):
        lines.append(f"  restart seed {restart['seed']}: dev {metric} {restart[metric]:.4f} "
                     f"at step {restart['best_step']}")
    if "best_step" in results:
        curve = ", ".join(f"{p['step']}: {p[metric]:.4f}" for p in results["eval_curve"])
        split = "dev" if selection is None or selection["split"] == "dev" else "held-out"
        value = selection[metric] if selection and metric in selection else results[metric]
        lines.append(f"kept the model of step {results['best_step']} of "
                     f"{results['train_steps']}: {split} {metric} {value:.4f} ({split} {metric} "
                     f"by step: {curve})")
    lines += truncation_lines(results.get("truncated"))
    return lines


def truncation_lines(truncated: dict[str, Any] | None) -> list[str]:
    """One line per split whose texts were cut at `max_seq_length` (none when nothing was cut).

    Args:
        truncated: dict or None. `results["truncated"]`: `max_seq_length`, `how`
            (the task's `long_inputs`) and, per split, `truncated` and
            `examples` counts.

    Returns:
        list of str.
    """
    if not truncated:
        return []
    length, how = truncated["max_seq_length"], truncated.get("how", "were truncated")
    names = {"train": "training", "dev": "dev", "test": "test"}
    return [f"NOTE: {counts['truncated']} of {counts['examples']} {names.get(split, split)} "
            f"examples are longer than max_seq_length={length} pieces and {how}; raise "
            "run_finetuning.max_seq_length (up to the encoder's positions: 512 for BERT, 8192 "
            "for ModernBERT) to read them whole."
            for split, counts in truncated.items() if isinstance(counts, dict)]


def _metric_lines(metrics: dict[str, Any], baseline: dict[str, Any] | None) -> list[str]:
    lines = []
    for key, value in sorted(metrics.items()):
        line = f"  {key} = {_rounded(value)}"
        if baseline and isinstance(baseline.get(key), (int, float)):
            line += f"  (baseline {_rounded(baseline[key])}: {baseline['predicts']})"
        lines.append(line)
    return lines


def _class_lines(metrics: dict[str, Any]) -> list[str]:
    """Per-class (or per-type) precision, recall, F1 and support, and the confusion matrix."""
    lines = []
    for key, heading in _TABLES.items():
        table = metrics.get(key)
        if not table:
            continue
        width = max(len(heading), *(len(label) for label in table))
        lines.append(f"  {heading:<{width}}  precision  recall     f1  support")
        for label, row in table.items():
            lines.append(f"  {label:<{width}}  {row['precision']:>9.4f}  {row['recall']:>6.4f}  "
                         f"{row['f1']:.4f}  {row['support']:>7}")
    confusion = metrics.get("confusion_matrix")
    if confusion:
        labels = confusion["labels"]
        width = max(4, *(len(label) for label in labels), *(len(str(count)) for row in
                                                             confusion["matrix"] for count in row))
        lines.append("  confusion matrix (rows: true label, columns: predicted):")
        lines.append("  " + " " * width + " " + " ".join(f"{label:>{width}}" for label in labels))
        for label, row in zip(labels, confusion["matrix"]):
            lines.append(f"  {label:>{width}} " + " ".join(f"{count:>{width}}" for count in row))
    return lines


def _selection_lines(selection: dict[str, Any], results: dict[str, Any]) -> list[str]:
    described = {key: value for key, value in selection.items() if key != "metrics"}
    lines = [f"  selection = {described}"]
    if "metrics" in selection:
        metrics = selection["metrics"]
        lines.append(f"***** held-out selection split ({selection.get('num_examples')} training "
                     "examples): these figures chose the kept model *****")
        scalar = {key: value for key, value in metrics.items() if key not in _OWN_LINES}
        lines += _metric_lines(scalar, metrics.get("baseline"))
        lines += _class_lines(metrics)
    if "reported_split" in results and results["reported_split"] is None:
        lines.append("NOTE: no reported split exists: without --validation_file every figure "
                     "above was used to choose the kept model. Pass --validation_file (a file "
                     "the run never chooses on) for a figure to report.")
    return lines


def _rounded(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value
