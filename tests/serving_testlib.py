"""Tiny fine-tuned models of every task, exported once per test process, and a server runner.

Shared by tests/export and tests/serving. Models use a 3003-line cut of the real
bert-base-uncased vocabulary (`testdata/serving_vocab.txt`) so tokenization is
real, and an encoder with enough positions for strided QA windows.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from conftest import REPO
from conftest import tiny_encoder_kwargs

VOCAB = os.path.join(REPO, "tests", "testdata", "serving_vocab.txt")

# name -> (model type, TaskConfig keyword arguments, number of outputs)
TASKS = {
    "sst2": ("classifier", dict(task="glue", task_name="sst-2", label_names=["negative", "positive"],
                                max_seq_length=32), 2),
    "mrpc": ("classifier", dict(task="glue", task_name="mrpc", label_names=["different", "same"],
                                text_pair=True, max_seq_length=16), 2),
    "stsb": ("regressor", dict(task="glue", task_name="sts-b", text_pair=True, max_seq_length=32), 1),
    "ner": ("token_classifier", dict(task="ner", task_name="conll2003",
                                     label_names=["O", "B-LOC", "I-LOC", "B-PER", "I-PER"],
                                     max_seq_length=12), 5),
    "squad": ("span_labeler", dict(task="squad", task_name="squad", max_seq_length=24, doc_stride=5,
                                   max_query_length=6, max_answer_length=4), 0),
}


def vocab_size() -> int:
    with open(VOCAB, encoding="utf-8") as f:
        return len(f.read().split("\n")) - 1


def build_task_model(name: str, seed: int = 0):
    """The Keras task model and TaskConfig of one entry of TASKS."""
    import keras

    from kbert.models import BertClassifier
    from kbert.models import BertEncoder
    from kbert.models import BertSpanLabeler
    from kbert.models import BertTokenClassifier
    from kbert.models import TaskConfig

    model_type, config, outputs = TASKS[name]
    keras.utils.set_random_seed(seed)
    encoder = BertEncoder(**tiny_encoder_kwargs(vocabulary_size=vocab_size(), max_sequence_length=32))
    if model_type in ("classifier", "regressor"):
        model = BertClassifier(encoder, outputs)
    elif model_type == "token_classifier":
        model = BertTokenClassifier(encoder, outputs)
    else:
        model = BertSpanLabeler(encoder)
    return model, TaskConfig(model_type=model_type, **config)


@functools.lru_cache(maxsize=None)
def exported_models() -> dict:
    """Fine-tuned dirs and exports (version 1) of every task plus an embedding model.

    Returns:
        Dict with `root`, and per name: `{"model_dir", "export_dir", "version_dir"}`.
    """
    from kbert.export.saved_model import export_saved_model
    from kbert.models import BertEncoder
    from kbert.models import save_finetuned
    from kbert.models import save_pretrained

    root = tempfile.mkdtemp(prefix="kbert-serving-test-")
    found = {"root": root}
    for index, name in enumerate(TASKS):
        model, task_config = build_task_model(name, seed=index)
        model_dir = os.path.join(root, "finetuned", name)
        save_finetuned(model_dir, model, task_config, VOCAB)
        export_dir = os.path.join(root, "export", name)
        path = export_saved_model(model_dir, export_dir, check=False)
        found[name] = {"model_dir": model_dir, "export_dir": export_dir, "version_dir": path}
    import keras

    keras.utils.set_random_seed(7)
    encoder = BertEncoder(**tiny_encoder_kwargs(vocabulary_size=vocab_size(), max_sequence_length=32))
    model_dir = os.path.join(root, "pretrained", "embed")
    save_pretrained(model_dir, encoder, vocab_file=VOCAB, do_lower_case=True)
    export_dir = os.path.join(root, "export", "embed")
    path = export_saved_model(model_dir, export_dir, max_seq_length=32, check=False)
    found["embed"] = {"model_dir": model_dir, "export_dir": export_dir, "version_dir": path}
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m kbert.bin.serve` in a subprocess, waited on until its ready line."""

    def __init__(self, args: list[str], timeout: float = 120.0):
        self.grpc_port = free_port()
        self.rest_port = free_port()
        self.log = tempfile.NamedTemporaryFile("w+", prefix="kbert-serve-", suffix=".log", delete=False)
        env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "kbert.bin.serve", f"--port={self.grpc_port}",
             f"--rest_api_port={self.rest_port}", *args],
            stdout=subprocess.PIPE, stderr=self.log, text=True, env=env, cwd=REPO)
        deadline = time.monotonic() + timeout
        self.ready_line = ""
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            if line.startswith("kbert-serve: serving"):
                self.ready_line = line.strip()
                break
        if not self.ready_line:
            self.stop()
            raise RuntimeError(f"kbert-serve did not start:\n{self.stderr()[-3000:]}")

    @property
    def grpc_address(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def stderr(self) -> str:
        self.log.flush()
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait; returns the exit code."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        rest = self.process.stdout.read() if self.process.stdout else ""
        self.stdout_tail = rest
        return self.process.returncode


def ready_versions(line: str) -> dict:
    """Parses `kbert-serve: serving a version 1, b version 2,3 on ...` into {name: [versions]}."""
    found = {}
    for name, versions in re.findall(r"(\w+) version ([\d,]+)", line):
        found[name] = [int(v) for v in versions.split(",")]
    return found


def cleanup(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
