"""Benchmark: tools/create_pretraining_data.py throughput and peak memory.

Runs the tool on the shared Gutenberg corpus with the bert-base-uncased vocabulary
and default flags, at dupe_factor 1 and 5 and num_workers 1 and 2, plus a run on
half the corpus to show that memory does not grow with corpus size. Peak RSS is
the largest sum over the tool's process tree (parent + workers), sampled every
0.1 s from /proc. With --original_script=PATH (google-research/bert's
create_pretraining_data.py, run from a temporary copy with tf.compat.v1 shims)
the original is measured too; without it that row is skipped.

    python benchmarks/data_generation.py [--corpus_dir=../shared/data/corpus/gutenberg]
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tree_rss_mb(pid):
    """Sum of RSS of pid and its descendants, from /proc."""
    children = {}
    rss = {}
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
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        total += rss.get(p, 0)
        stack.extend(children.get(p, []))
    return total / 2**20


def run(cmd, env=None):
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, _tree_rss_mb(proc.pid))
        time.sleep(0.1)
    out = proc.stdout.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed:\n{out[-3000:]}")
    return time.time() - start, peak, out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus_dir", default=os.path.join(ROOT, "..", "shared", "data", "corpus", "gutenberg"))
    parser.add_argument("--vocab_file", default=os.path.join(ROOT, "..", "shared", "data", "vocab", "bert-base-uncased-vocab.txt"))
    parser.add_argument("--original_script", default=None)
    parser.add_argument("--original_dupe_factor", type=int, default=1)
    args = parser.parse_args()
    files = sorted(glob.glob(os.path.join(args.corpus_dir, "*.txt")))
    if not files or not os.path.exists(args.vocab_file):
        sys.exit(f"corpus ({args.corpus_dir}) or vocab ({args.vocab_file}) missing")
    size = sum(os.path.getsize(f) for f in files)
    half, acc = [], 0
    for f in files:
        if acc < size / 2:
            half.append(f)
            acc += os.path.getsize(f)
    half_size = acc
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    tmp = tempfile.mkdtemp()
    rows = []
    configs = [(files, size, 1, 1), (files, size, 1, 2), (files, size, 5, 1), (files, size, 5, 2), (half, half_size, 1, 1)]
    # Gutenberg has two Latin-1 files (caesar, chesterton-ball); latin-1 reads the ASCII ones alike.
    for inputs, nbytes, dupe, workers in configs:
        cmd = [sys.executable, os.path.join(ROOT, "tools", "create_pretraining_data.py"),
               f"--input_file={','.join(inputs)}", f"--output_file={tmp}/k-0.tfrecord,{tmp}/k-1.tfrecord",
               f"--vocab_file={args.vocab_file}", f"--dupe_factor={dupe}", f"--num_workers={workers}",
               "--input_encoding=latin-1"]
        seconds, peak, out = run(cmd, env)
        rows.append(("kbert", nbytes, dupe, workers, seconds, peak))
        print(f"kbert  {nbytes / 1e6:5.2f} MB dupe={dupe} workers={workers}: {seconds:6.1f} s "
              f"{nbytes / 1e6 / seconds:6.3f} MB/s peak RSS {peak:6.0f} MiB", flush=True)
    if args.original_script and os.path.exists(args.original_script):
        work = os.path.join(tmp, "orig")
        os.makedirs(work)
        src_dir = os.path.dirname(os.path.abspath(args.original_script))
        for name in ("create_pretraining_data.py", "tokenization.py"):
            text = open(os.path.join(src_dir, name)).read()
            text = text.replace("import tensorflow as tf", "import tensorflow.compat.v1 as tf\ntf.disable_v2_behavior()")
            text = text.replace("tf.flags", "tf.app.flags")
            open(os.path.join(work, name), "w").write(text)
        # The original reads UTF-8 only; give it a UTF-8 copy of the corpus.
        corpus = os.path.join(work, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as out_f:
            for f in files:
                out_f.write(open(f, encoding="latin-1").read().replace("\r\n", "\n") + "\n\n")
        cmd = [sys.executable, os.path.join(work, "create_pretraining_data.py"), f"--input_file={corpus}",
               f"--output_file={tmp}/orig.tfrecord", f"--vocab_file={args.vocab_file}",
               f"--dupe_factor={args.original_dupe_factor}"]
        seconds, peak, _ = run(cmd, env)
        rows.append(("original", size, args.original_dupe_factor, 1, seconds, peak))
        print(f"original {size / 1e6:5.2f} MB dupe={args.original_dupe_factor}: {seconds:6.1f} s "
              f"{size / 1e6 / seconds:6.3f} MB/s peak RSS {peak:6.0f} MiB")
    else:
        print(f"original: skipped (--original_script not given or missing: {args.original_script!r})")
    print("\n| tool | input MB | dupe_factor | num_workers | seconds | input MB/s | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for tool, nbytes, dupe, workers, seconds, peak in rows:
        print(f"| {tool} | {nbytes / 1e6:.2f} | {dupe} | {workers} | {seconds:.1f} | {nbytes / 1e6 / seconds:.2f} | {peak:.0f} |")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
