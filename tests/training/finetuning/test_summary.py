"""The closing summary of kbert-finetune: each figure beside its baseline, tables, what was cut."""

from kbert.training.finetuning.summary import summary_lines


def test_metrics_print_beside_their_baseline_with_per_class_tables_and_the_matrix():
    results = {
        "accuracy": 0.75, "macro_f1": 0.5, "num_examples": 4, "majority_baseline": 0.5,
        "baseline": {"predicts": "the majority class 'a'", "accuracy": 0.5, "macro_f1": 1 / 3},
        "per_class": {"a": {"precision": 1.0, "recall": 0.5, "f1": 2 / 3, "support": 2},
                      "bb": {"precision": 0.5, "recall": 1.0, "f1": 2 / 3, "support": 2}},
        "confusion_matrix": {"labels": ["a", "bb"], "matrix": [[1, 1], [0, 2]]},
        "truncated": {"max_seq_length": 128, "how": "were read as rows of whole words",
                      "train": {"truncated": 3, "examples": 40}},
    }
    lines = summary_lines(results, "runs/x")
    assert lines[:6] == [
        "***** results *****",
        "  accuracy = 0.75  (baseline 0.5: the majority class 'a')",
        "  macro_f1 = 0.5  (baseline 0.3333: the majority class 'a')",
        "  majority_baseline = 0.5",
        "  num_examples = 4",
        "  class  precision  recall     f1  support"]
    assert lines[6:8] == ["  a         1.0000  0.5000  0.6667        2",
                          "  bb        0.5000  1.0000  0.6667        2"]
    assert lines[8:11] == ["  confusion matrix (rows: true label, columns: predicted):",
                           "          a   bb", "     a    1    1"]
    assert lines[-1].startswith("NOTE: 3 of 40 training examples are longer than "
                                "max_seq_length=128 pieces and were read as rows of whole words;")
    # Token classification's per-type table renders the same way.
    typed = summary_lines({"per_type": {"PER": {"precision": 1.0, "recall": 1.0, "f1": 1.0,
                                                "support": 3}}}, "runs/x")
    assert typed[1:] == ["  type  precision  recall     f1  support",
                         "  PER      1.0000  1.0000  1.0000        3"]
