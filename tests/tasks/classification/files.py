"""Users' labelled files for the classification tests: the same rows written in every format."""

import csv
import json

import pyarrow as pa
import pyarrow.parquet as pa_parquet

# Support tickets: the class shows in a keyword, so a tiny model learns it in seconds.
KEYWORDS = {"billing": ("refund", "invoice", "charge"), "bug": ("crash", "error", "freeze"),
            "other": ("hello", "thanks", "question")}


def ticket_rows(count: int, seed: int = 0) -> list[dict]:
    """Rows with every shape's columns: `id`, `text`, `label` (one class), `tags` (a list of
    classes), `score` (a float) and `sentence1` / `sentence2` (a pair)."""
    import random

    rng = random.Random(seed)
    rows = []
    for i in range(count):
        label = sorted(KEYWORDS)[i % 3]
        other = rng.choice(sorted(KEYWORDS))
        word = rng.choice(KEYWORDS[label])
        rows.append({"id": f"t-{seed}-{i}", "text": f"{word}, please: {rng.choice('abc')}",
                     "label": label, "tags": sorted({label, other}),
                     "score": round(len(label) + rng.random(), 3),
                     "sentence1": f"{word} now", "sentence2": f"{rng.choice(KEYWORDS[other])}"})
    return rows


def write_rows(path, rows: list[dict]) -> str:
    """Writes `rows` by the path's extension (lists as JSON text in CSV/TSV cells)."""
    path = str(path)
    if path.endswith(".parquet"):
        pa_parquet.write_table(pa.Table.from_pylist(rows), path)
    elif path.endswith((".jsonl", ".json")):
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    else:
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]),
                                    delimiter="\t" if path.endswith(".tsv") else ",")
            writer.writeheader()
            writer.writerows({key: json.dumps(value) if isinstance(value, list) else value
                              for key, value in row.items()} for row in rows)
    return path
