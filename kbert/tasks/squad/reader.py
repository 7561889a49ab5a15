"""SQuAD v1.1 / v2.0 JSON reader, with `run_squad.py`'s checks of answer offsets."""

from __future__ import annotations

import dataclasses
import logging

from kbert.files import read_json


@dataclasses.dataclass
class SquadExample:
    """One question about one context.

    Args:
        qas_id: str. The question id (key of `predictions.json`).
        question: str.
        context: str. The paragraph.
        answers: list of str. All gold answer texts (empty when impossible).
        answer_start: int or None. Character offset of the training answer
            (the first one) in `context`; None when impossible or unknown.
        answer_end: int or None. Exclusive character end of that answer.
        is_impossible: bool. SQuAD 2.0: the context holds no answer.
    """

    qas_id: str
    question: str
    context: str
    answers: list[str]
    answer_start: int | None = None
    answer_end: int | None = None
    is_impossible: bool = False


def read_squad(
    path: str, is_training: bool, version_2_with_negative: bool = False
) -> tuple[list[SquadExample], int]:
    """Reads a SQuAD JSON file.

    For training, questions whose answer text does not match the context at
    `answer_start` are skipped and counted (with a warning), as `run_squad.py`
    does; whitespace differences are tolerated. When a training question has
    several answers, the first is used.

    Args:
        path: str. A SQuAD v1.1 or v2.0 JSON file.
        is_training: bool. Training examples need answer offsets.
        version_2_with_negative: bool. Accept `is_impossible` questions.

    Returns:
        `(examples, skipped)`: list of `SquadExample` and the number of
        questions skipped for mismatched answers.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not SQuAD JSON, an impossible question without
            `--version_2_with_negative`, or no usable question.

    Example:

    >>> examples, skipped = kbert.tasks.squad.reader.read_squad("train-v1.1.json", is_training=True)
    """
    data = read_json(path, "SQuAD file")
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise ValueError(f"{path} is not SQuAD JSON: expected {{\"data\": [articles]}}.")
    examples, skipped = [], 0
    for article in data["data"]:
        for paragraph in article.get("paragraphs", []):
            context = paragraph["context"]
            for qa in paragraph["qas"]:
                impossible = bool(qa.get("is_impossible", False))
                if impossible and not version_2_with_negative:
                    raise ValueError(
                        f"{path}: question {qa['id']} is_impossible; pass "
                        "--version_2_with_negative for SQuAD 2.0 data."
                    )
                answers = [] if impossible else [a["text"] for a in qa.get("answers", [])]
                example = SquadExample(qa["id"], qa["question"], context, answers,
                                       is_impossible=impossible)
                if is_training and not impossible:
                    if not qa.get("answers"):
                        raise ValueError(f"{path}: training question {qa['id']} has no answer.")
                    answer = qa["answers"][0]
                    start = int(answer["answer_start"])
                    end = start + len(answer["text"])
                    if " ".join(context[start:end].split()) != " ".join(answer["text"].split()):
                        logging.warning("Could not find answer %r at %d in context of %s; skipped.",
                                        answer["text"], start, qa["id"])
                        skipped += 1
                        continue
                    example.answer_start, example.answer_end = start, end
                examples.append(example)
    if not examples:
        raise ValueError(f"{path} has no usable questions ({skipped} skipped).")
    return examples, skipped


def squad_gold_answers(examples: list[SquadExample]) -> dict[str, list[str]]:
    """Question id -> gold answer texts, for `kbert.tasks.squad.metrics.squad_metrics`."""
    return {example.qas_id: list(example.answers) for example in examples}
