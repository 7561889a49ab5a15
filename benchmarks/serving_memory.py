"""Peak memory and time of one long-text request to an exported NER or SQuAD model.

Each measurement is a fresh process that imports only tensorflow and
tensorflow_text (as a server does), loads the SavedModel, warms it up on a short
input, then sends one request whose text (NER) or context (SQuAD) has the given
number of bytes of real English (Project Gutenberg). It reports what the request
added to the process's peak resident memory (`ru_maxrss`), its CPU time and wall
time. The models have all-MiniLM-L6-v2's shape (6 layers, 384 wide, 12 heads,
bert-base-uncased's 30522 pieces) with random weights, which cost the same as
trained ones: NER at `max_seq_length=128`, SQuAD at `run_squad.py`'s 384 with
`SquadConfig`'s defaults.

`--baseline_src` names a source tree of an older kbert (e.g. `git archive <commit>
kbert | tar -x -C old`); its exports are measured in the same run and the
table gives new / old ratios. A process that passes `--cap_gib` of resident
memory is killed and reported as such, so the quadratic old NER graph can be
tried at 1 MB without taking the machine down.

    PYTHONPATH=. python benchmarks/serving_memory.py --baseline_src=old \\
        --ner_sizes=10000,20000,40000,1000000 --squad_sizes=10000,20000,40000

Text comes from `corpus/gutenberg/austen-emma.txt` under --data_dir, or from the
tests' data when that is missing. Writes benchmarks/results/serving_memory.json
(benchmarks/result_file.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import result_file  # noqa: E402

TEST_VOCAB = os.path.join(REPO, "tests", "testdata", "serving_vocab.txt")
TEST_BOOK = os.path.join(REPO, "tests", "testdata", "austen-persuasion-head.txt")

# Builds the two fine-tuned directories and exports them with the kbert on PYTHONPATH.
_EXPORT = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import keras
from kbert.checkpoints import TaskConfig, save_finetuned
from kbert.export.saved_model import export_saved_model
from kbert.models import BertEncoder, BertSpanLabeler, BertTokenClassifier
out, vocab, tokens_per_call = sys.argv[1:4]
if tokens_per_call != "default":
    import kbert.tasks.serving
    kbert.tasks.serving.TOKENS_PER_CALL = int(tokens_per_call)
size = sum(1 for _ in open(vocab, encoding="utf-8"))
shape = dict(vocabulary_size=size, num_layers=6, num_heads=12, hidden_dim=384,
             intermediate_dim=1536, max_sequence_length=512)
labels = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"]
for name in ("ner", "squad"):
    keras.utils.set_random_seed(0)
    encoder = BertEncoder(**shape)
    if name == "ner":
        model = BertTokenClassifier(encoder, len(labels))
        config = TaskConfig(task="ner", task_name="conll2003", model_type="token_classifier",
                            label_names=labels, max_seq_length=128)
    else:
        model = BertSpanLabeler(encoder)
        config = TaskConfig(task="squad", task_name="squad", model_type="span_labeler",
                            text_pair=True, max_seq_length=384,
                            options=dict(doc_stride=128, max_query_length=64, max_answer_length=30))
    save_finetuned(os.path.join(out, "finetuned", name), model, config, vocab)
    export_saved_model(os.path.join(out, "finetuned", name), os.path.join(out, name), version=1,
                       check=False)
import kbert
kbert_file = kbert.__file__
"""

# One request in a fresh process; prints one JSON line.
_REQUEST = r"""
import json, os, resource, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
import tensorflow_text  # noqa: F401
path, kind, text_file = sys.argv[1:4]
with open(text_file, encoding="utf-8") as f:
    text = f.read()
serve = tf.saved_model.load(path).signatures["serving_default"]
def request(text):
    if kind == "ner":
        return serve(text=tf.constant([text]))
    return serve(question=tf.constant(["Who did Emma marry?"]), context=tf.constant([text]))
# A warm-up context of 40 pieces: the old span search failed on windows shorter
# than max_answer_length (30) pieces.
request("warm up " * 20)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
wall, cpu = time.perf_counter(), time.process_time()
outputs = request(text)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
answer = (int(outputs["num_words"].numpy()[0]) if kind == "ner"
          else outputs["answer"].numpy()[0].decode("utf-8", "replace")[:40])
print(json.dumps({"added_mib": (after - before) / 1024, "base_mib": before / 1024,
                  "cpu_s": cpu, "wall_s": wall, "answer": answer}))
"""


def english_text(num_bytes: int, book: str) -> str:
    """`num_bytes` of the book's words, repeated if needed, cut at a word end."""
    with open(book, encoding="utf-8") as f:
        words = f.read().split()
    text, size = [], 0
    while size < num_bytes:
        for word in words:
            size += len(word.encode("utf-8")) + 1
            text.append(word)
            if size >= num_bytes:
                break
    return " ".join(text)[:num_bytes]


def export(src: str, out: str, vocab: str, tokens_per_call: str = "default") -> None:
    env = dict(os.environ, PYTHONPATH=src, TF_CPP_MIN_LOG_LEVEL="3")
    os.makedirs(out, exist_ok=True)
    # cwd=out: `python -c` puts the working directory first on sys.path, and
    # only the tree in PYTHONPATH may provide kbert.
    subprocess.run([sys.executable, "-c", _EXPORT + "\nprint(kbert_file)", out, vocab,
                    tokens_per_call], check=True, env=env, cwd=out)


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


def measure(saved_model: str, kind: str, text_file: str, cap_gib: float, timeout: float) -> dict:
    """One request in a fresh process, killed past `cap_gib` resident or `timeout` seconds."""
    process = subprocess.Popen([sys.executable, "-I", "-c", _REQUEST, saved_model, kind, text_file],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    start, peak = time.monotonic(), 0
    while process.poll() is None:
        peak = max(peak, _rss_kib(process.pid))
        if peak > cap_gib * 2**20 or time.monotonic() - start > timeout:
            process.kill()
            process.wait()
            why = f"> {cap_gib:g} GiB" if peak > cap_gib * 2**20 else f"> {timeout:g} s"
            return {"killed": f"killed at {peak / 2**20:.1f} GiB resident after "
                              f"{time.monotonic() - start:.0f} s ({why})"}
        time.sleep(0.05)
    out, err = process.communicate()
    if process.returncode:
        return {"killed": f"exit {process.returncode}: {err.strip().splitlines()[-1:]}"}
    return json.loads(out.strip().splitlines()[-1])


def _row(kind: str, size: int, label: str, result: dict, reference: dict | None) -> str:
    if "killed" in result:
        return f"| {kind} | {size} | {label} | {result['killed']} | | | | | |"
    ratios = ["-", "-"]
    if reference is not None and reference is not result:
        ratios = ["old failed"] * 2 if "killed" in reference else [
            f"{result[key] / max(reference[key], 1e-9):.2f}" for key in ("added_mib", "cpu_s")]
    answer = result["answer"]
    answer = f"{answer} words" if kind == "ner" else repr(answer)
    return (f"| {kind} | {size} | {label} | {answer} | {result['added_mib']:.0f} | "
            f"{result['cpu_s']:.2f} | {result['wall_s']:.2f} | {ratios[0]} | {ratios[1]} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline_src", default="", help="Source tree of the kbert to compare with.")
    parser.add_argument("--ner_sizes", default="10000,20000,40000,1000000")
    parser.add_argument("--squad_sizes", default="10000,20000,40000")
    parser.add_argument("--tokens_per_call", default="",
                        help="Also export the new code with these TOKENS_PER_CALL values, e.g. 2048,8192.")
    parser.add_argument("--cap_gib", type=float, default=4.0,
                        help="Kill a measurement past this much resident memory.")
    parser.add_argument("--timeout", type=float, default=900.0, help="Seconds per measurement.")
    result_file.add_flags(parser, "serving_memory")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    vocab = os.path.join(args.data_dir, "vocab", "bert-base-uncased-vocab.txt")
    book = os.path.join(args.data_dir, "corpus", "gutenberg", "austen-emma.txt")
    if not os.path.exists(vocab):
        vocab, book = TEST_VOCAB, TEST_BOOK
    work = os.path.abspath(result_file.work_dir(args, prefix="kbert-serving-memory-"))
    variants = {"new": (REPO, "default")}
    variants.update({f"new@{n}": (REPO, n) for n in args.tokens_per_call.split(",") if n})
    if args.baseline_src:
        variants["old"] = (os.path.abspath(args.baseline_src), "default")
    for label, (src, tokens_per_call) in variants.items():
        if not os.path.exists(os.path.join(work, label, "squad", "1")):
            export(src, os.path.join(work, label), vocab, tokens_per_call)
    print(f"vocab {vocab}, text from {book}, cap {args.cap_gib:g} GiB; exports in {work}")
    print("| model | bytes | export | words tagged / answer | added peak MiB | CPU s | wall s "
          "| peak / old | CPU / old |")
    print("|---|---:|---|---|---:|---:|---:|---:|---:|")
    rows = []
    for kind, sizes in (("ner", args.ner_sizes), ("squad", args.squad_sizes)):
        for size in [int(s) for s in sizes.split(",") if s]:
            text_file = os.path.join(work, f"text-{size}.txt")
            with open(text_file, "w", encoding="utf-8") as f:
                f.write(english_text(size, book))
            results = {label: measure(os.path.join(work, label, kind, "1"), kind, text_file,
                                      args.cap_gib, args.timeout) for label in variants}
            for label, result in results.items():
                print(_row(kind, size, label, result, results.get("old")), flush=True)
                rows.append({"model": kind, "bytes": size, "export": label, **result})
    write(args, rows, load)


def write(args, rows: list[dict], load: float) -> None:
    """The result file: what one request adds to peak memory, per model, with this code."""
    new = [r for r in rows if r["export"] == "new"]
    parts = []
    for kind, name in (("ner", "NER texts"), ("squad", "QA contexts")):
        done = [r for r in new if r["model"] == kind and "added_mib" in r]
        if done:
            parts.append(f"{name} of {min(r['bytes'] for r in done):,}-{max(r['bytes'] for r in done):,} "
                         f"bytes add {min(r['added_mib'] for r in done):.0f}-"
                         f"{max(r['added_mib'] for r in done):.0f} MiB")
    killed = [r for r in new if "killed" in r]
    result_file.write_result(
        args, name="serving_memory", title="Serving memory of long NER and QA requests",
        area="serving", load_average_at_start=load,
        headline="One request in a fresh process: " + "; ".join(parts)
                 + (f"; {len(killed)} killed." if killed else "."),
        reference="the --baseline_src export, same inputs, alternating in the same run"
                  if args.baseline_src else "none given (--baseline_src)",
        aim="memory bounded whatever the request's length", met=not killed,
        figures=rows, method=__doc__.split("\n\n    PYTHONPATH")[0])


if __name__ == "__main__":
    main()
