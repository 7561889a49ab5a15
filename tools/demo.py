"""`make demo`: raw text to a served model answering, on this machine, in minutes.

Stages (artifacts under demo_output/, each stage starts from a clean directory so
the demo re-runs):

  1. set aside the last tenth of each of four Gutenberg books shipped in demo/data
     as held-out text, and build a WordPiece vocabulary from the rest;
  2. create_pretraining_data on the training and on the held-out text (MLM + NSP
     TFRecords);
  3. kbert-pretrain gin/tiny.gin under MirroredStrategy over two logical CPU
     devices, showing the MLM loss fall and the held-out MLM accuracy beside
     the training one and the data's unigram baseline;
  4. kbert-convert the real all-MiniLM-L6-v2 weights and kbert-finetune them on an
     SST-2 slice, reporting dev accuracy;
  5. kbert-export, kbert-serve on free local ports, three sentences over gRPC with
     serving/client.py and one over REST, then stop the server;
  6. retrieval: 300 sentences of Persuasion embedded by the converted MiniLM into an
     exact kbert-index, served by kbert-serve --index_dir, one question answered over REST.

Where a stage fails the demo stops there, naming the stage.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from kbert.serving import process as serve_process  # noqa: E402 (standard library only: no TensorFlow in this process)

OUT = os.path.join(REPO, "demo_output")
DATA = os.path.join(REPO, "demo", "data")
# C++ start-up chatter of TensorFlow that TF_CPP_MIN_LOG_LEVEL doesn't silence.
NOISE = re.compile(r"^(WARNING: All log messages before absl|[IWE]\d{4} |I0000|W0000|E0000|.*UserWarning|"
                   r"\s+self\.data_adapter|.*cuda_platform|.*oneDNN|.*cudart_stub|.*tensorflow/core/)")
SENTENCES = [
    "a gorgeous , witty and moving film .",
    "the plot is dull and the acting is painfully bad .",
    "one of the best movies i have seen this year .",
]
REST_SENTENCE = "a tedious , joyless mess that wastes its cast ."
SST2_LABELS = {"0": "negative", "1": "positive"}  # GLUE SST-2 label ids


ANSI = re.compile(r"\x1b\[[0-9;]*m")
PROGRESS = re.compile(r"^\s*(\d+)/(\d+) ━")


class StageFailed(Exception):
    pass


def sparse_progress(line: str) -> bool:
    """Keeps one Keras progress-bar line in 25 (and the last), so logs stay readable."""
    match = PROGRESS.match(line)
    return not match or int(match[1]) % 25 == 0 or match[1] == match[2]


def kbert(binary: str) -> list[str]:
    """The command of a kbert binary: its console script in this venv, else `python -m`."""
    script = os.path.join(os.path.dirname(sys.executable), f"kbert-{binary}")
    return [script] if os.path.exists(script) else [sys.executable, "-m", f"kbert.bin.{binary}"]


def _shown(command: list[str]) -> str:
    """The command as a user would type it: repo-relative paths, shell quoting."""
    bin_dir = os.path.dirname(sys.executable) + os.sep
    relative = [c.replace(bin_dir, "").replace(REPO + os.sep, "") for c in command]
    return " ".join(shlex.quote(c) for c in relative)


def run(command: list[str], keep=lambda line: True) -> str:
    """Runs a command, echoing its useful lines indented; returns all its output."""
    shown = _shown(command)
    print(f"  $ {shown}", flush=True)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in process.stdout:
        line = ANSI.sub("", line).replace("\r", "")
        lines.append(line)
        if not NOISE.match(line) and keep(line):
            print(f"    {line.rstrip()}", flush=True)
    if process.wait():
        tail = "".join(line for line in lines[-15:] if not NOISE.match(line))
        raise StageFailed(f"`{shown}` exited with {process.returncode}:\n{tail}")
    return "".join(lines)


def fresh(*names: str) -> list[str]:
    paths = [os.path.join(OUT, name) for name in names]
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
        if os.path.isfile(path):
            os.remove(path)
    return paths


def split_books(heldout_fraction: float = 0.1) -> tuple[int, int]:
    """Writes each book's first 90% to text/train/ and the rest to text/heldout/.

    The cut is at the first blank line after 90% of the lines, so no paragraph
    is split. Returns the lines written to each side.
    """
    (text,) = fresh("text")
    counts = [0, 0]
    for name in sorted(os.listdir(os.path.join(DATA, "gutenberg"))):
        if not name.endswith(".txt"):
            continue
        lines = open(os.path.join(DATA, "gutenberg", name), encoding="utf-8").readlines()
        cut = int(len(lines) * (1 - heldout_fraction))
        while cut < len(lines) and lines[cut].strip():
            cut += 1
        for side, part in enumerate((lines[:cut], lines[cut:])):
            directory = os.path.join(text, ("train", "heldout")[side])
            os.makedirs(directory, exist_ok=True)
            with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
                f.writelines(part)
            counts[side] += len(part)
    return counts[0], counts[1]


def stage_vocabulary() -> str:
    train_lines, heldout_lines = split_books()
    (vocab,) = fresh("vocab.txt")
    run([sys.executable, "tools/build_vocab.py", f"--input_file={OUT}/text/train/*.txt",
         f"--output_file={vocab}", "--vocab_size=8000", "--num_unused=0"])
    size = sum(1 for _ in open(vocab, encoding="utf-8"))
    books = len(os.listdir(os.path.join(OUT, "text", "train")))
    return (f"{heldout_lines} of {train_lines + heldout_lines} lines held out; vocabulary of "
            f"{size} WordPieces from the rest of {books} books")


def stage_pretraining_data() -> str:
    directory, heldout = fresh("pretraining_data", "heldout_data")
    os.makedirs(directory)
    os.makedirs(heldout)
    outputs = ",".join(os.path.join(directory, f"train-{i}-of-2.tfrecord") for i in range(2))
    common = [f"--vocab_file={OUT}/vocab.txt", "--max_seq_length=128",
              "--max_predictions_per_seq=20"]
    run([sys.executable, "tools/create_pretraining_data.py",
         f"--input_file={OUT}/text/train/*.txt", f"--output_file={outputs}", "--dupe_factor=2",
         *common])
    run([sys.executable, "tools/create_pretraining_data.py",
         f"--input_file={OUT}/text/heldout/*.txt",
         f"--output_file={os.path.join(heldout, 'heldout.tfrecord')}", "--dupe_factor=1",
         *common])
    meta = json.load(open(os.path.join(directory, "train-0-of-2.tfrecord.meta.json")))
    counts = meta["counts"]
    heldout_meta = json.load(open(os.path.join(heldout, "heldout.tfrecord.meta.json")))
    return (f"{counts['instances']} training instances in 2 files ({counts['masked_fraction']:.1%} "
            f"of tokens masked, {counts['random_next_fraction']:.1%} random next), "
            f"{heldout_meta['counts']['instances']} held-out instances")


def stage_pretrain() -> str:
    (model_dir,) = fresh("pretrain")
    run(kbert("pretrain") + [
        "--gin_file=gin/tiny.gin",
        # BertEncoder.vocabulary_size comes from the data's sidecar (8,000 here).
        "--gin_params=BertEncoder.max_sequence_length = 128",
        "--gin_params=run_pretraining.train_batch_size = 32",
        "--gin_params=run_pretraining.num_train_steps = 500",
        "--gin_params=run_pretraining.num_warmup_steps = 50",
        "--gin_params=run_pretraining.learning_rate = 2e-3",
        "--gin_params=run_pretraining.save_checkpoints_steps = 100",
        "--gin_params=run_pretraining.log_every_steps = 50",
        "--gin_params=run_pretraining.eval_every_steps = 250",
        f"--input_file={OUT}/pretraining_data/*.tfrecord",
        f"--eval_input_file={OUT}/heldout_data/heldout.tfrecord", f"--model_dir={model_dir}",
        "--strategy=mirrored", "--num_cpu_devices=2", f"--vocab_file={OUT}/vocab.txt",
    ])
    summary = json.load(open(os.path.join(model_dir, "summary.json")))
    held_out = summary["eval_results"]
    return (f"{summary['global_step']} steps, final MLM+NSP loss {summary['loss']:.3f}, "
            f"MLM accuracy {summary['masked_lm_accuracy']:.3f} (training) / "
            f"{held_out['masked_lm_accuracy']:.3f} (held-out; unigram baseline "
            f"{held_out['unigram_masked_lm_accuracy']:.3f}), held-out MLM loss "
            f"{held_out['masked_lm_loss']:.3f} (unigram {held_out['unigram_masked_lm_loss']:.3f}), "
            f"{summary['examples_per_second']:.0f} examples/s")


def stage_finetune() -> str:
    minilm, sst2 = fresh("minilm", "sst2")
    run(kbert("convert") + ["--source=minilm", f"--output_dir={minilm}"])
    run(kbert("finetune") + [
        "--task=glue", "--task_name=SST-2", f"--data_dir={DATA}/sst2",
        f"--init_checkpoint={minilm}", f"--model_dir={sst2}", "--do_train", "--do_eval",
        # One epoch to keep the demo short; on a run that short, google-research/bert's
        # 10% warm-up (18 steps) does as well as the "auto" rule's floor of 20
        # (see BENCHMARKS.md, finetuning_quality).
        "--gin_params=run_finetuning.num_train_epochs = 1",
        "--gin_params=run_finetuning.warmup_proportion = 0.1",
        "--gin_params=run_finetuning.max_seq_length = 64",
    ], keep=sparse_progress)
    results = json.load(open(os.path.join(sst2, "eval_results.json")))
    return f"SST-2 dev accuracy {results['accuracy']:.1%} on {results.get('num_examples', 872)} sentences"


@contextlib.contextmanager
def serving(args: list[str], grpc_port: int, rest_port: int):
    """kbert-serve on the given ports, once its "serving" line came (at most 120 s).

    Stopped at the end of the block with SIGTERM, as an operator would (killed
    if it has not stopped in 30 s); its log (a temporary file) is removed then.
    """
    command = kbert("serve")
    print(f"  $ {_shown(serve_process.server_command(args, grpc_port, rest_port, command))} &")
    try:
        server = serve_process.start_server(args, 120, command=command, grpc_port=grpc_port,
                                      rest_port=rest_port, cwd=REPO,
                                      env={"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"})
    except serve_process.ServerStartError as e:
        if e.returncode is None:
            raise StageFailed("kbert-serve did not become ready in 120 s") from None
        lines = e.tail.rstrip().splitlines()
        shown = "\n".join(f"    {line}" for line in lines[-5:] if not NOISE.match(line))
        raise StageFailed(f"kbert-serve exited with {e.returncode} before it was ready:\n{shown}") from None
    print(f"    {server.ready_line}")
    try:
        yield server
    finally:
        server.stop(timeout_s=30)
        os.remove(server.log_path)


def stage_serve() -> str:
    (export_base,) = fresh("export")
    model_base = os.path.join(export_base, "sst2")
    run(kbert("export") + [f"--model_dir={OUT}/sst2", f"--export_dir={model_base}"])
    grpc_port, rest_port = serve_process.free_port(), serve_process.free_port()
    with serving(["--model_name=sst2", f"--model_base_path={model_base}"], grpc_port, rest_port):
        client = [sys.executable, "serving/client.py", f"--server=127.0.0.1:{grpc_port}",
                  "--model_name=sst2"]
        for sentence in SENTENCES:
            client += ["--text", sentence]
        labels = re.findall(r"^label=(\S+)", run(client), flags=re.M)
        request = urllib.request.Request(
            f"http://127.0.0.1:{rest_port}/v1/models/sst2:predict",
            data=json.dumps({"instances": [{"text": REST_SENTENCE}]}).encode(),
            headers={"Content-Type": "application/json"})
        print(f"  $ curl -d '{{\"instances\": [{{\"text\": \"{REST_SENTENCE}\"}}]}}' "
              f"http://127.0.0.1:{rest_port}/v1/models/sst2:predict")
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.load(response)["predictions"][0]
        print(f"    {json.dumps(answer)}")
        labels.append(answer["label"])
    names = [SST2_LABELS.get(label, label) for label in labels]
    for name, sentence, via in zip(names, SENTENCES + [REST_SENTENCE], ["gRPC"] * 3 + ["REST"]):
        print(f"    {via:4s} {sentence!r} -> {name}")
    return f"{len(names)} sentences answered by kbert-serve over gRPC and REST; server stopped"


RETRIEVAL_QUESTION = "Why did Sir Walter have to let Kellynch Hall?"


def stage_retrieval() -> str:
    """A few hundred sentences of a book in the repo -> an index -> a question answered over REST."""
    corpus, index_dir = fresh("retrieval_corpus.jsonl", "index")
    text = " ".join(open(os.path.join(DATA, "gutenberg", "austen-persuasion.txt"), encoding="utf-8").read().split())
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", text) if 40 <= len(s) <= 400][:300]
    with open(corpus, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"_id": f"persuasion-{i}", "text": s}) + "\n" for i, s in enumerate(sentences))
    # --skip_ops_check: stage 5 already checked this encoder's ops in a fresh process, and
    # that check costs a TensorFlow start-up (the demo is kept short).
    run(kbert("index") + ["build", f"--model_dir={OUT}/minilm", f"--corpus={corpus}",
                          f"--index_dir={index_dir}", "--skip_ops_check", "--max_seq_length=128"])
    rest_port, grpc_port = serve_process.free_port(), serve_process.free_port()
    with serving([f"--index_dir={index_dir}", "--index_name=persuasion"], grpc_port, rest_port):
        body = {"queries": [RETRIEVAL_QUESTION], "top_k": 3}
        print(f"  $ curl -d '{json.dumps(body)}' http://127.0.0.1:{rest_port}/v1/indexes/persuasion:search")
        request = urllib.request.Request(f"http://127.0.0.1:{rest_port}/v1/indexes/persuasion:search",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            answer = json.load(response)
    for doc_id, score, hit in zip(answer["ids"][0], answer["scores"][0], answer["texts"][0]):
        print(f"    {score:.3f} {doc_id}: {hit[:110]}")
    return f"{len(sentences)} sentences indexed; {RETRIEVAL_QUESTION!r} answered over REST; server stopped"


STAGES = [
    ("vocabulary", stage_vocabulary),
    ("pre-training data", stage_pretraining_data),
    ("pre-training", stage_pretrain),
    ("conversion and fine-tuning", stage_finetune),
    ("export and serving", stage_serve),
    ("retrieval", stage_retrieval),
]


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    start = time.time()
    for number, (name, stage) in enumerate(STAGES, 1):
        print(f"\n[{number}/{len(STAGES)}] {name}", flush=True)
        began = time.time()
        try:
            result = stage()
        except (StageFailed, OSError, KeyError, ValueError) as e:
            print(f"\ndemo: stage {number} ({name}) failed: {e}", file=sys.stderr)
            sys.exit(1)
        print(f"  => {result} ({time.time() - began:.0f} s)", flush=True)
    print(f"\ndemo done in {(time.time() - start) / 60:.1f} min; artifacts in "
          f"{os.path.relpath(OUT, os.getcwd())}/: " + ", ".join(sorted(os.listdir(OUT))))


if __name__ == "__main__":
    main()
