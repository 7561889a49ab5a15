"""Benchmark: tools/create_pretraining_data.py on Apache Beam's DirectRunner against its local pool.

Same input for both (the shared Gutenberg corpus as UTF-8 with LF line ends,
repeated `--repeat` times: 48 MB by default, as in benchmarks/data_generation.py),
bert-base-uncased vocabulary, `--dupe_factor` 5, two output files, two workers
each: the local tool's process pool (`--num_workers=2`) and the DirectRunner with
two worker processes (`--runner=DirectRunner --direct_num_workers=2
--direct_running_mode=multi_processing`), the way a cluster runner runs its
workers. The runs alternate (`--rounds`), so load from other users of the
machine falls on both.

Per run: wall seconds of the tool, CPU seconds of its process tree (sampled from
/proc every 0.05 s), input MB/s, peak RSS and PSS summed over the process tree,
and start-up (a 20-line input) so that the work itself can be told from
imports and worker start: "MB per CPU s" = input MB / (CPU s - start-up CPU s),
which, unlike wall time, barely depends on what else runs on the (shared)
machine. The script checks that both runs wrote the same
files (sha256), and with `--vocab` also runs tools/build_vocab.py both ways on
the 6 MB corpus (30522 tokens) and checks that the vocab.txt files are equal.

    python benchmarks/beam_generation.py [--repeat=8] [--dupe_factor=5] [--rounds=2] [--vocab]

Writes benchmarks/results/beam_generation.json (benchmarks/result_file.py).
"""

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time

from data_generation import _tree_memory_mb
from data_generation import prepare_corpus
from data_generation import repeat_corpus
import result_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEAM_ARGS = ["--runner=DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def _tree_pids(pid):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    pids, stack = [], [pid]
    while stack:
        p = stack.pop()
        pids.append(p)
        stack.extend(children.get(p, []))
    return pids


def _cpu_seconds(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def run(cmd, env, log_path):
    """Runs cmd; returns (wall s, CPU s of the tree, peak RSS MiB, peak PSS MiB)."""
    start = time.time()
    cpu = {}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        peak_rss = peak_pss = 0.0
        while proc.poll() is None:
            for pid in _tree_pids(proc.pid):
                seconds = _cpu_seconds(pid)
                if seconds is not None:
                    cpu[pid] = seconds  # The last value seen: a process's CPU only grows.
            rss, pss = _tree_memory_mb(proc.pid)
            peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
            time.sleep(0.05)
    wall = time.time() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed:\n{open(log_path).read()[-3000:]}")
    return wall, sum(cpu.values()), peak_rss, peak_pss


def _digest(paths):
    sha = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                sha.update(block)
    return sha.hexdigest()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus_dir", default=None, help="Default: corpus/gutenberg under --data_dir.")
    parser.add_argument("--vocab_file", default=None,
                        help="Default: vocab/bert-base-uncased-vocab.txt under --data_dir.")
    parser.add_argument("--repeat", type=int, default=8, help="Copies of the corpus (8: 48 MB).")
    parser.add_argument("--dupe_factor", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1, help="Alternating local/Beam pairs.")
    parser.add_argument("--vocab", action="store_true", help="Also compare build_vocab both ways.")
    result_file.add_flags(parser, "beam_generation")
    args = parser.parse_args()
    args.corpus_dir = args.corpus_dir or os.path.join(args.data_dir, "corpus", "gutenberg")
    args.vocab_file = args.vocab_file or os.path.join(args.data_dir, "vocab",
                                                      "bert-base-uncased-vocab.txt")
    if not os.path.isdir(args.corpus_dir) or not os.path.exists(args.vocab_file):
        sys.exit(f"corpus ({args.corpus_dir}) or vocab ({args.vocab_file}) missing")
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    tmp = result_file.work_dir(args, prefix="kbert-beam-generation-")
    try:
        _benchmark(args, env, tmp)
    finally:
        if not args.work_dir:
            shutil.rmtree(tmp)


def _benchmark(args, env, tmp):
    files, tiny = prepare_corpus(args.corpus_dir, tmp)
    big = repeat_corpus(files, tmp, args.repeat)
    size = sum(os.path.getsize(f) for f in big)
    load = os.getloadavg()
    load_start = load[0]
    print(f"cores {os.cpu_count()}, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"corpus {len(big)} files, {size / 1e6:.2f} MB, dupe_factor {args.dupe_factor}", flush=True)
    tool = [sys.executable, os.path.join(ROOT, "tools", "create_pretraining_data.py")]

    def cmd(inputs, dupe, out, beam):
        extra = BEAM_ARGS if beam else ["--num_workers=2"]
        return [*tool, f"--input_file={','.join(inputs)}", f"--output_file={out}",
                f"--vocab_file={args.vocab_file}", f"--dupe_factor={dupe}", *extra]

    startup = {}
    for name, beam in (("local pool", False), ("Beam DirectRunner", True)):
        startup[name] = run(cmd([tiny], 1, f"{tmp}/s.tfrecord", beam), env, f"{tmp}/log")
        print(f"start-up {name}: {startup[name][0]:.1f} s wall, {startup[name][1]:.1f} s CPU, "
              f"peak PSS {startup[name][3]:.0f} MiB", flush=True)
    rows, digests = [], {}
    for _ in range(args.rounds):
        for name, beam in (("local pool", False), ("Beam DirectRunner", True)):
            outputs = [f"{tmp}/{'b' if beam else 'l'}-{i}.tfrecord" for i in range(2)]
            wall, cpu, rss, pss = run(cmd(big, args.dupe_factor, ",".join(outputs), beam), env, f"{tmp}/log")
            digests.setdefault(name, set()).add(_digest(outputs))
            steady = size / 1e6 / max(wall - startup[name][0], 1e-3)
            per_cpu = size / 1e6 / max(cpu - startup[name][1], 1e-3)
            rows.append((name, wall, cpu, size / 1e6 / wall, steady, per_cpu, rss, pss))
            print(f"{name:18s}: {wall:6.1f} s wall, {cpu:6.1f} s CPU, {size / 1e6 / wall:5.2f} MB/s "
                  f"({steady:5.2f} after start-up, {per_cpu:5.2f} per CPU s), peak RSS {rss:5.0f} MiB, "
                  f"PSS {pss:5.0f} MiB", flush=True)
            for path in outputs:
                os.remove(path)
                os.remove(path + ".meta.json")
    load = os.getloadavg()
    print(f"\nload average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    same = len(digests["local pool"] | digests["Beam DirectRunner"]) == 1
    print(f"output files identical (sha256 over both files, every run): {same}")
    print("\n| runner | wall s | CPU s | input MB/s | MB/s after start-up (wall) | MB per CPU s after "
          "start-up | peak RSS MiB | peak PSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, wall, cpu, mbs, steady, per_cpu, rss, pss in rows:
        print(f"| {name} | {wall:.1f} | {cpu:.1f} | {mbs:.2f} | {steady:.2f} | {per_cpu:.2f} | "
              f"{rss:.0f} | {pss:.0f} |")
    mean = {n: [sum(r[i] for r in rows if r[0] == n) / args.rounds for i in range(1, 8)]
            for n in ("local pool", "Beam DirectRunner")}
    local, beam = mean["local pool"], mean["Beam DirectRunner"]
    print(f"\nBeam / local (means over {args.rounds} round(s)): wall {beam[0] / local[0]:.2f}x, "
          f"CPU {beam[1] / local[1]:.2f}x, throughput {beam[2] / local[2]:.2f}x, after start-up "
          f"{beam[3] / local[3]:.2f}x (wall) {beam[4] / local[4]:.2f}x (per CPU s), "
          f"peak PSS {beam[6] / local[6]:.2f}x")
    same_vocab = _vocab(files, env, tmp) if args.vocab else None
    ratio = {"wall": beam[0] / local[0], "cpu": beam[1] / local[1],
             "mb_per_cpu_s_once_started": beam[4] / local[4], "peak_pss": beam[6] / local[6]}
    result_file.write_result(
        args, name="beam_generation", title="Pre-training data on Apache Beam vs the local pool",
        area="pre-training data", load_average_at_start=load_start,
        headline=(f"Beam's DirectRunner writes {'the same' if same else 'DIFFERENT'} files as the "
                  f"local pool, at {ratio['wall']:.2f}x its wall time, {ratio['cpu']:.2f}x CPU, "
                  f"{ratio['peak_pss']:.2f}x peak memory."),
        reference="the local tool's worker pool, same input and workers, alternating in the same run",
        aim="the same output files as the local pool", met=same and same_vocab is not False,
        figures={"beam_over_local": {k: round(v, 2) for k, v in ratio.items()},
                 "same_files_sha256": same, "build_vocab_same_vocab_txt": same_vocab,
                 "runs": [dict(zip(("runner", "wall_s", "cpu_s", "mb_per_s", "mb_per_s_after_start_up",
                                    "mb_per_cpu_s_after_start_up", "peak_rss_mib", "peak_pss_mib"),
                                   [r[0], *(round(v, 2) for v in r[1:])])) for r in rows]},
        method=__doc__.split("\n\n    python")[0].split("\n\n", 1)[1])
    if not same:
        sys.exit("the Beam run's files differ from the local tool's")


def _vocab(files, env, tmp):
    tool = [sys.executable, os.path.join(ROOT, "tools", "build_vocab.py"), f"--input_file={','.join(files)}"]
    size = sum(os.path.getsize(f) for f in files)
    results = {}
    for name, extra in (("local", []), ("Beam DirectRunner", BEAM_ARGS)):
        out = f"{tmp}/vocab-{len(results)}.txt"
        wall, cpu, _, pss = run([*tool, f"--output_file={out}", *extra], env, f"{tmp}/log")
        results[name] = open(out, "rb").read()
        print(f"build_vocab {name:18s} {size / 1e6:.2f} MB: {wall:6.1f} s wall, {cpu:6.1f} s CPU, "
              f"peak PSS {pss:5.0f} MiB", flush=True)
    print(f"vocab.txt identical: {results['local'] == results['Beam DirectRunner']}")
    return results["local"] == results["Beam DirectRunner"]


if __name__ == "__main__":
    main()
