"""Renders BENCHMARKS.md and docs/benchmarks/<name>.md from benchmarks/results/*.json.

Nobody edits those Markdown files by hand: a benchmark's script rewrites its result
file (benchmarks/result_file.py) and this script renders the pages from all of them.

    python benchmarks/report.py            # rewrite BENCHMARKS.md and docs/benchmarks/
    python benchmarks/report.py --check    # exit 1 when a page differs from its data

Standard library only (no TensorFlow), so the test suite runs `--check` in well
under a second.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from result_file import AREAS  # noqa: E402
from result_file import REPO  # noqa: E402
from result_file import validate  # noqa: E402

DOCS = os.path.join("docs", "benchmarks")
GENERATED = ("<!-- Rendered by benchmarks/report.py from benchmarks/results/*.json: do not edit; "
             "re-run the benchmark, then `python benchmarks/report.py`. -->")

INTRO = """\
# kbert benchmarks

Each row is one benchmark's current figure, with the reference it was measured against in the
same run, its aim, and the machine and date it ran on. A figure moves only when its benchmark is
re-run: the script rewrites `benchmarks/results/<name>.json` and `python benchmarks/report.py`
renders this page and the detail pages (method, runs, tables) under
[docs/benchmarks/](docs/benchmarks/) (docs/development.md: "Benchmarks"). Earlier figures are in
git's history. Compare ratios, which each script measures within one run, rather than absolute
figures across machines: most ran on a shared 2-core x86-64 VM (24 GiB, no GPU) whose CPU
changed between days (Intel Xeon with AVX-512; AMD EPYC with AVX-512 and AVX512-BF16; AMD EPYC
with AVX2 only). *Quiet* means nothing else ran; *loaded* means other jobs shared the cores.

**Quality figures** say how they were chosen: *clean* (nothing chosen on the split reported)
or *selected on dev* (the kept epoch or settings chosen on the split reported, optimistic by an
amount nobody measured).
"""

AREA_TEXT = {
    "pre-training": "Pre-training speed against keras-hub, quality per wall-clock budget, "
                    "ModernBERT and ELECTRA against BERT, continued pre-training.",
    "pre-training data": "Making pre-training data and vocabularies against google-research/bert "
                         "and Hugging Face `tokenizers`, packing and dynamic masking.",
    "fine-tuning": "Quality at the default settings, heads, distillation and fine-tuning on "
                   "your own files.",
    "retrieval": "Sentence similarity, dense retrieval with re-ranking, and vector index speed.",
    "serving": "kbert-serve's latency and throughput, int8 and bfloat16 exports, batching, "
               "memory and behaviour under abuse.",
    "end to end": "The two commands of the README.",
}
# The headline table's order within an area; benchmarks not named here follow, by name.
ORDER = ("pretraining_throughput", "pretraining_quality", "modernbert_long_inputs",
         "modernbert_throughput", "modernbert_hf_parity", "modernbert_vs_transformers",
         "electra_vs_bert", "continued_pretraining",
         "data_generation", "tokenization", "bpe_tokenization", "beam_generation", "packing",
         "dynamic_masking", "finetuning_quality", "own_data", "keras_tasks", "distillation",
         "ner_crf", "finetuning_packing", "retrieval_quality", "index_speed", "quantization",
         "onnxruntime_int8", "int8_batch_independence", "serving_contention", "int8_matmul",
         "serving_latency", "serving_batching", "serving_embeddings", "serving_memory", "serving_load",
         "demo")


def load_results(results_dir: str) -> list[dict]:
    """Reads every result file, sorted by area then name; raises naming a bad file."""
    results = []
    for path in sorted(glob.glob(os.path.join(results_dir, "*.json"))):
        with open(path, encoding="utf-8") as f:
            try:
                result = json.load(f)
            except json.JSONDecodeError as error:
                raise SystemExit(f"{path}: not JSON ({error})") from None
        problems = validate(result)
        if problems:
            raise SystemExit(f"{path}: " + "; ".join(problems))
        expected = os.path.splitext(os.path.basename(path))[0]
        if result["benchmark"] != expected:
            raise SystemExit(f"{path}: benchmark {result['benchmark']!r} does not match the "
                             f"file name {expected!r}")
        results.append(result)
    def rank(r):
        known = r["benchmark"] in ORDER
        return (AREAS.index(r["area"]), not known,
                ORDER.index(r["benchmark"]) if known else 0, r["benchmark"])
    return sorted(results, key=rank)


def cell(text) -> str:
    """Text safe in one Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def met_text(result: dict) -> str:
    if not result["aim"]:
        return "no aim"
    verdict = {True: "**met**", False: "**not met**", None: "not judged"}.get(result["met"])
    return f"{verdict or cell(result['met'])} ({cell(result['aim'])})"


def machine_text(result: dict, full: bool = False) -> str:
    """`CPU, N cores, quiet`; the table's form drops the CPU's parenthesised details."""
    machine = result["machine"]
    cpu = str(machine.get("cpu", "?"))
    cpu = cpu if full else cpu.split(" (")[0]
    cores = f", {machine['cores']} cores" if machine.get("cores") else ""
    return f"{cpu}{cores}, {result['load']}"


def render_benchmarks(results: list[dict]) -> str:
    """BENCHMARKS.md: the headline table, then one short section per area."""
    lines = [GENERATED, "", INTRO,
             "| benchmark | current figure | reference | aim met? | machine | date | details |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {cell(r['title'])} | {cell(r['headline'])} | {cell(r['reference'])} | "
                     f"{met_text(r)} | {cell(machine_text(r))} | {r['date'][:10]} | "
                     f"[{r['benchmark']}]({DOCS}/{r['benchmark']}.md) |")
    for area in AREAS:
        members = [r for r in results if r["area"] == area]
        if not members:
            continue
        lines += ["", f"## {area[0].upper()}{area[1:]}", "", AREA_TEXT[area], ""]
        for r in members:
            lines.append(f"- [{r['title']}]({DOCS}/{r['benchmark']}.md): `{r['command']}`")
    return "\n".join(lines) + "\n"


def render_value(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)) and all(not isinstance(v, (dict, list)) for v in value):
        return ", ".join(render_value(v) for v in value)
    return cell(json.dumps(value) if isinstance(value, (dict, list)) else value)


def flatten(value, prefix: str = "") -> list[tuple[str, object]]:
    """Nested dicts -> [("a.b", leaf), ...] in order."""
    if isinstance(value, dict):
        rows = []
        for key, inner in value.items():
            rows += flatten(inner, f"{prefix}.{key}" if prefix else str(key))
        return rows
    return [(prefix, value)]


def render_figures(figures) -> list[str]:
    """A dict as a name | value table; a list of dicts as one row each."""
    if isinstance(figures, list) and figures and all(isinstance(row, dict) for row in figures):
        columns = list(dict.fromkeys(key for row in figures for key, _ in flatten(row)))
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        for row in figures:
            values = dict(flatten(row))
            lines.append("| " + " | ".join(render_value(values.get(c, "")) for c in columns) + " |")
        return lines
    rows = flatten(figures)
    if not rows or rows == [("", figures)]:
        return [render_value(figures)]
    return ["| figure | value |", "|---|---|"] + [
        f"| {cell(name)} | {render_value(value)} |" for name, value in rows]


def render_table(table: dict) -> list[str]:
    lines = [f"**{table['title']}**", ""] if table.get("title") else []
    lines += ["| " + " | ".join(cell(c) for c in table["columns"]) + " |",
              "|" + "---|" * len(table["columns"])]
    lines += ["| " + " | ".join(render_value(v) for v in row) + " |" for row in table["rows"]]
    return lines + [""]


def render_detail(r: dict) -> str:
    """docs/benchmarks/<name>.md: the current figure, its facts, method, command and tables."""
    machine = r["machine"]
    facts = [("current figure", r["headline"]), ("reference (same run)", r["reference"]),
             ("aim", met_text(r)), ("how chosen", r["selection"] or "not a quality figure"),
             ("machine", machine_text(r, full=True)), ("date", r["date"]), ("commit", r["commit"]),
             ("provenance", r["provenance"])]
    facts += [(f"machine: {key}", machine[key]) for key in machine
              if key not in ("cpu", "cores") and machine[key] is not None]
    lines = [GENERATED, "", f"# {r['title']}", "",
             f"Script: `{r.get('script', 'benchmarks/' + r['benchmark'] + '.py')}`; "
             f"area: {r['area']}; all benchmarks: [BENCHMARKS.md](../../BENCHMARKS.md).", "",
             "| | |", "|---|---|"]
    lines += [f"| {name} | {render_value(value)} |" for name, value in facts]
    lines += ["", "## Command", "", "```sh", r["command"], "```", ""]
    if r.get("method"):
        lines += ["## Method", "", r["method"].strip(), ""]
    lines += ["## Figures", ""] + render_figures(r["figures"]) + [""]
    for name, part in (r.get("parts") or {}).items():
        lines += [f"### Part: {name}", ""] + render_figures(part) + [""]
    if r.get("tables"):
        lines += ["## Tables", ""]
        for table in r["tables"]:
            lines += render_table(table)
    if r.get("notes"):
        lines += ["## Notes", "", r["notes"].strip(), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def render_all(repo: str) -> dict[str, str]:
    """Every rendered page, by path relative to `repo`."""
    results = load_results(os.path.join(repo, "benchmarks", "results"))
    pages = {"BENCHMARKS.md": render_benchmarks(results)}
    for r in results:
        pages[os.path.join(DOCS, f"{r['benchmark']}.md")] = render_detail(r)
    return pages


def stale_pages(repo: str, pages: dict[str, str]) -> list[str]:
    """Detail pages on disk with no result file behind them."""
    on_disk = glob.glob(os.path.join(repo, DOCS, "*.md"))
    return sorted(os.path.relpath(p, repo) for p in on_disk
                  if os.path.relpath(p, repo) not in pages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="Write nothing; exit 1 when a page differs from its data.")
    parser.add_argument("--repo", default=REPO, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    pages = render_all(args.repo)
    differing = []
    for path, text in pages.items():
        full = os.path.join(args.repo, path)
        current = open(full, encoding="utf-8").read() if os.path.exists(full) else None
        if current == text:
            continue
        differing.append(path)
        if not args.check:
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full + ".incomplete", "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(full + ".incomplete", full)
    stale = stale_pages(args.repo, pages)
    if args.check:
        for path in differing:
            print(f"{path} differs from benchmarks/results/: run python benchmarks/report.py "
                  "(never edit it by hand)")
        for path in stale:
            print(f"{path} has no result file in benchmarks/results/: remove it")
        return 1 if differing or stale else 0
    for path in stale:
        os.remove(os.path.join(args.repo, path))
    print(f"rendered {len(pages)} pages; {len(differing)} changed, {len(stale)} removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
