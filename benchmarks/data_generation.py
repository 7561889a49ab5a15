"""Benchmark: tools/create_pretraining_data.py against google-research/bert's tool.

Both tools get the same input: the shared Gutenberg corpus rewritten as UTF-8
with LF line ends (the original reads UTF-8 only), one file per book, each
ending in a blank line. Vocabulary: bert-base-uncased; default flags
(max_seq_length 128, max_predictions_per_seq 20, masked_lm_prob 0.15, ...).

Per run: wall seconds of the whole process, CPU seconds (user + sys of the
process and its workers), peak RSS and peak PSS summed over the process tree
(sampled every 0.05 s from /proc; PSS splits pages shared by forked workers
fairly, RSS counts them once per process), and input MB/s. Start-up (Python +
TensorFlow imports) is measured separately with a run on 20 lines, and
"processing MB/s" = input MB / (CPU s - start-up CPU s): the work itself, not
the imports that dominate a 6 MB corpus. CPU seconds, unlike wall seconds,
barely depend on what else runs on the machine (it is shared). Throughput
once started ("steady MB/s") = input MB / (wall s - start-up wall s), on the
corpus repeated `--repeat` times (48 MB by default) so that start-up is a
small part: what a user with a large corpus sees, and where kbert's workers
(default: one per core) run in parallel. Ratios kbert/original come from the
same run.

The original is not part of kbert: pass --original_script=PATH to its
create_pretraining_data.py (tokenization.py next to it), made to run under
TF 2 (`tensorflow.compat.v1`, absl flags, `tf.io.gfile`,
`tf.io.TFRecordWriter`); see docs/benchmarks/data_generation.md.

    python benchmarks/data_generation.py --original_script=original_bert/create_pretraining_data.py \
        --original_dupe_factors=1,5 --original_big_dupe_factors=1,5

(`--original_big_dupe_factors=1,5` runs the original on the repeated corpus at
dupe_factor 5 too, about 4 minutes and a few GB: the same-input comparison
for the dupe_factor 5 row.) Writes benchmarks/results/data_generation.json
(benchmarks/result_file.py).
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import result_file  # noqa: E402


def _tree_memory_mb(pid):
    """(RSS, PSS) in MiB summed over pid and its descendants, from /proc."""
    children, rss = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/statm") as f:
                rss[int(entry)] = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            children.setdefault(ppid, []).append(int(entry))
        except (OSError, ValueError, IndexError):
            continue
    total_rss = total_pss = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        total_rss += rss.get(p, 0)
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total_pss += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
        stack.extend(children.get(p, []))
    return total_rss / 2**20, total_pss / 2**20


def run(cmd, env, log_path):
    """Runs cmd; returns (wall s, cpu s, peak RSS MiB, peak PSS MiB, output)."""
    start = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        peak_rss = peak_pss = 0.0
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            rss, pss = _tree_memory_mb(proc.pid)
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            time.sleep(0.05)
    wall = time.time() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = open(log_path).read()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed:\n{out[-3000:]}")
    # wait4's usage includes the workers the tool waited for.
    return wall, usage.ru_utime + usage.ru_stime, peak_rss, peak_pss, out


def marginal_rates(rows):
    """MB/s once started: (big MB - small MB) / (big wall - small wall), per tool and settings.

    Two runs of one tool with the same dupe_factor and workers on two corpus
    sizes pay the same start-up, so their difference measures throughput
    without estimating start-up (which varies by a second between runs).

    Returns:
        `{(tool, dupe_factor, num_workers): MB/s}` for the settings run at two sizes.
    """
    by_settings = {}
    for tool, nbytes, dupe, workers, wall, *_ in rows:
        by_settings.setdefault((tool, dupe, workers), []).append((nbytes, wall))
    rates = {}
    for key, runs in by_settings.items():
        (small, small_wall), (big, big_wall) = min(runs), max(runs)
        if big > small and big_wall > small_wall:
            rates[key] = (big - small) / 1e6 / (big_wall - small_wall)
    return rates


def repeat_corpus(files, work, repeat):
    """The books `repeat` times under new names (a larger corpus of the same text)."""
    out_dir = os.path.join(work, f"x{repeat}")
    os.makedirs(out_dir)
    copies = []
    for i in range(repeat):
        for path in files:
            copy = os.path.join(out_dir, f"{i}-{os.path.basename(path)}")
            shutil.copyfile(path, copy)
            copies.append(copy)
    return copies


def prepare_corpus(corpus_dir, work):
    """UTF-8, LF copies of the books, each ending in a blank line (documents never run on)."""
    files = []
    for path in sorted(glob.glob(os.path.join(corpus_dir, "*.txt"))):
        text = open(path, "rb").read().decode("latin-1")  # Two books are Latin-1; the rest ASCII.
        out = os.path.join(work, os.path.basename(path))
        with open(out, "w", encoding="utf-8", newline="\n") as f:
            f.write(text.replace("\r\n", "\n").rstrip("\n") + "\n\n")
        files.append(out)
    tiny = os.path.join(work, "tiny", "tiny.txt")
    os.makedirs(os.path.dirname(tiny))
    with open(tiny, "w", encoding="utf-8") as f:
        f.write("".join(open(files[0], encoding="utf-8").readlines()[:20]) + "\n")
    return files, tiny


def _cell(value: float, unit: str = "", digits: int = 2) -> str:
    """A figure, or "-" where it is NaN (start-up dominates the run: no rate after start-up)."""
    return "-" if value != value else f"{value:.{digits}f}{unit}"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus_dir", default=None, help="Default: corpus/gutenberg under --data_dir.")
    parser.add_argument("--vocab_file", default=None,
                        help="Default: vocab/bert-base-uncased-vocab.txt under --data_dir.")
    parser.add_argument("--original_script", default=None)
    parser.add_argument("--original_dupe_factors", default="1", help="Comma list, e.g. 1,5.")
    parser.add_argument("--original_big_dupe_factors", default="1",
                        help="Comma list: the original's runs on the repeated corpus (5 takes minutes).")
    parser.add_argument("--kbert_only", action="store_true")
    parser.add_argument("--repeat", type=int, default=8, help="Copies of the corpus for the steady-state runs.")
    result_file.add_flags(parser, "data_generation")
    args = parser.parse_args()
    args.corpus_dir = args.corpus_dir or os.path.join(args.data_dir, "corpus", "gutenberg")
    args.vocab_file = args.vocab_file or os.path.join(args.data_dir, "vocab",
                                                      "bert-base-uncased-vocab.txt")
    if not os.path.isdir(args.corpus_dir) or not os.path.exists(args.vocab_file):
        sys.exit(f"corpus ({args.corpus_dir}) or vocab ({args.vocab_file}) missing")
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    tmp = result_file.work_dir(args, prefix="kbert-data-generation-")
    files, tiny = prepare_corpus(args.corpus_dir, tmp)
    size = sum(os.path.getsize(f) for f in files)
    half, half_size = [], 0
    for f in files:
        if half_size < size / 2:
            half.append(f)
            half_size += os.path.getsize(f)
    big = repeat_corpus(files, tmp, args.repeat)
    big_size = size * args.repeat
    load_before = os.getloadavg()
    print(f"cores {os.cpu_count()}, load average {load_before[0]:.2f} {load_before[1]:.2f} "
          f"{load_before[2]:.2f}; corpus {len(files)} files, {size / 1e6:.2f} MB", flush=True)

    def kbert_cmd(inputs, dupe, workers, out):
        return [sys.executable, os.path.join(ROOT, "tools", "create_pretraining_data.py"),
                f"--input_file={','.join(inputs)}", f"--output_file={out}",
                f"--vocab_file={args.vocab_file}", f"--dupe_factor={dupe}", f"--num_workers={workers}"]

    def original_cmd(inputs, dupe, out):
        return [sys.executable, args.original_script, f"--input_file={','.join(inputs)}",
                f"--output_file={out}", f"--vocab_file={args.vocab_file}", f"--dupe_factor={dupe}"]

    have_original = bool(args.original_script and os.path.exists(args.original_script)) and not args.kbert_only
    startup = {"kbert": run(kbert_cmd([tiny], 1, 1, f"{tmp}/s.tfrecord"), env, f"{tmp}/log")[:2]}
    if have_original:
        startup["original"] = run(original_cmd([tiny], 1, f"{tmp}/so.tfrecord"), env, f"{tmp}/log")[:2]
    for tool, (wall, cpu) in startup.items():
        print(f"start-up {tool}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)

    rows = []

    def record(tool, nbytes, dupe, workers, result):
        wall, cpu, rss, pss, _ = result
        # Both "after start-up" rates are only meaningful where start-up is a small
        # part of the run (its time varies by a second between runs): else NaN, shown "-".
        steady = nbytes / 1e6 / (wall - startup[tool][0]) if wall > 2 * startup[tool][0] else float("nan")
        per_cpu = (nbytes / 1e6 / (cpu - startup[tool][1]) if cpu > 2 * startup[tool][1]
                   else float("nan"))
        rows.append((tool, nbytes, dupe, workers, wall, cpu, nbytes / 1e6 / wall,
                     steady, per_cpu, rss, pss))
        print(f"{tool:8s} {nbytes / 1e6:5.2f} MB dupe={dupe} workers={workers}: {wall:6.1f} s wall "
              f"{cpu:6.1f} s CPU, {nbytes / 1e6 / wall:5.2f} MB/s ({_cell(steady)} steady, "
              f"{_cell(per_cpu)} per CPU s), peak RSS {rss:5.0f} MiB, PSS {pss:5.0f} MiB",
              flush=True)

    if have_original:
        for dupe in [int(d) for d in args.original_dupe_factors.split(",")]:
            record("original", size, dupe, 1, run(original_cmd(files, dupe, f"{tmp}/o.tfrecord"), env, f"{tmp}/log"))
        for dupe in [int(d) for d in args.original_big_dupe_factors.split(",")]:
            record("original", big_size, dupe, 1, run(original_cmd(big, dupe, f"{tmp}/o.tfrecord"), env, f"{tmp}/log"))
    configs = [(files, size, 1, 1), (files, size, 1, 2), (files, size, 5, 1), (files, size, 5, 2),
               (half, half_size, 1, 1), (big, big_size, 1, 1), (big, big_size, 1, 2), (big, big_size, 5, 2)]
    for inputs, nbytes, dupe, workers in configs:
        out = f"{tmp}/k-0.tfrecord,{tmp}/k-1.tfrecord"
        record("kbert", nbytes, dupe, workers, run(kbert_cmd(inputs, dupe, workers, out), env, f"{tmp}/log"))
    load_after = os.getloadavg()
    print(f"\nload average at the end {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print("\n| tool | input MB | dupe_factor | num_workers | wall s | CPU s | input MB/s (wall) | "
          "steady MB/s (wall - start-up) | MB per CPU s after start-up | peak RSS MiB | peak PSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for tool, nbytes, dupe, workers, wall, cpu, mbs, steady, pmbs, rss, pss in rows:
        # "-": start-up is too large a part of this run for the difference to mean anything.
        print(f"| {tool} | {nbytes / 1e6:.2f} | {dupe} | {workers} | {wall:.1f} | {cpu:.1f} | {mbs:.2f} | "
              f"{_cell(steady)} | {_cell(pmbs)} | {rss:.0f} | {pss:.0f} |")
    marginal = marginal_rates(rows)
    if marginal:
        print("\nOnce started (the extra input of the larger corpus over the extra wall time; no "
              "start-up estimate):")
        for (tool, dupe, workers), rate in marginal.items():
            print(f"- {tool} dupe_factor={dupe} num_workers={workers}: {rate:.2f} MB/s")
        for (tool, dupe, workers), rate in marginal.items():
            original = marginal.get(("original", dupe, 1))
            if tool == "kbert" and original:
                print(f"- kbert / original once started, dupe_factor={dupe}, kbert num_workers="
                      f"{workers}: {rate / original:.1f}x")
    originals = {(r[1], r[2]): r for r in rows if r[0] == "original"}
    if originals:
        print("\nkbert / original, same input and dupe_factor, this run:")
        for r in rows:
            o = originals.get((r[1], r[2]))
            if r[0] == "kbert" and o:
                print(f"- {r[1] / 1e6:.0f} MB dupe_factor={r[2]} num_workers={r[3]}: wall {o[4] / r[4]:.1f}x, "
                      f"steady {_cell(r[7] / o[7], 'x', 1)}, per CPU s {_cell(r[8] / o[8], 'x', 1)}, "
                      f"CPU {o[5] / r[5]:.1f}x, peak PSS {r[10] / o[10]:.2f}x")
    else:
        print("\noriginal: skipped (--original_script not given or missing)")
    write(args, rows, marginal, big_size, load_before[0])
    if not args.work_dir:
        shutil.rmtree(tmp)


def write(args, rows: list, marginal: dict, big_size: int, load: float) -> None:
    """The result file: the once-started and end-to-end ratios at dupe_factor 5, 2 workers."""
    def row(tool, dupe, workers=None):
        return next((r for r in rows if r[0] == tool and r[1] == big_size and r[2] == dupe
                     and (workers is None or r[3] == workers)), None)
    ours, original = row("kbert", 5, 2), row("original", 5)
    started = {tool: marginal.get((tool, 5, 2 if tool == "kbert" else 1)) for tool in ("kbert", "original")}
    if original and started["original"]:
        ratio = started["kbert"] / started["original"]
        headline = (f"Once started, {ratio:.1f}x google-research/bert's throughput at dupe_factor 5 "
                    f"({started['kbert']:.2f} vs {started['original']:.2f} MB/s); "
                    f"{original[4] / ours[4]:.1f}x end to end on {big_size / 1e6:.0f} MB.")
        met = ratio >= 20
    else:
        headline = (f"kbert alone (no --original_script): {ours[6]:.2f} MB/s end to end on "
                    f"{big_size / 1e6:.0f} MB at dupe_factor 5, 2 workers.")
        met = None
    columns = ("tool", "input_bytes", "dupe_factor", "workers", "wall_s", "cpu_s", "mb_per_s",
               "steady_mb_per_s", "mb_per_cpu_s", "peak_rss_mib", "peak_pss_mib")
    result_file.write_result(
        args, name="data_generation", title="create_pretraining_data vs google-research/bert",
        area="pre-training data", load_average_at_start=load, headline=headline,
        reference="google-research/bert's create_pretraining_data.py (TF2 import shim), same input "
                  "and vocabulary, same run",
        aim=">= 20x the original's throughput", met=met,
        figures={"once_started_mb_per_s": {f"{t}_dupe{d}_workers{w}": round(v, 3)
                                           for (t, d, w), v in marginal.items()},
                 "runs": [{c: (None if v != v else round(v, 2) if isinstance(v, float) else v)
                           for c, v in zip(columns, r)} for r in rows]},
        method=__doc__.split("\n\n    python")[0])


if __name__ == "__main__":
    main()
