"""Tiny fine-tuned models of every task, exported once per test run, and a server starter.

Shared by tests/export and tests/serving. Models use a 3003-line cut of the real
bert-base-uncased vocabulary (`testdata/serving_vocab.txt`) so tokenization is
real, and an encoder with enough positions for strided QA windows.
"""

from __future__ import annotations

import atexit
import fcntl
import functools
import json
import os
import re
import shutil
import tempfile

from kbert.serving import process
from tests import conftest as _root_conftest  # tests/conftest.py: tiny sizes live there

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
tiny_encoder_kwargs = _root_conftest.tiny_encoder_kwargs

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
    "squad": ("span_labeler", dict(task="squad", task_name="squad", max_seq_length=24, text_pair=True,
                                   options=dict(doc_stride=5, max_query_length=6,
                                                max_answer_length=4)), 0),
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
    from kbert.checkpoints import TaskConfig

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

    Built once per test run (`built_once`), and read only by the tests.

    Returns:
        Dict with `root`, and per name: `{"model_dir", "export_dir", "version_dir"}`.
    """
    return built_once("serving-exports", _export_models)


def _export_models(root: str) -> dict:
    from kbert.export.saved_model import export_saved_model

    found = {"root": root}
    for index, name in enumerate(TASKS):
        found[name] = export_task(name, root, seed=index)
    model_dir = save_embedding_model(root)
    export_dir = os.path.join(root, "export", "embed")
    path = export_saved_model(model_dir, export_dir, max_seq_length=32, check=False)
    found["embed"] = {"model_dir": model_dir, "export_dir": export_dir, "version_dir": path}
    return found


def save_embedding_model(root: str) -> str:
    """Saves the tests' tiny random pre-trained encoder to `root/pretrained/embed`; returns that dir."""
    import keras

    from kbert.checkpoints import save_pretrained
    from kbert.models import BertEncoder

    keras.utils.set_random_seed(7)
    encoder = BertEncoder(**tiny_encoder_kwargs(vocabulary_size=vocab_size(), max_sequence_length=32))
    model_dir = os.path.join(root, "pretrained", "embed")
    save_pretrained(model_dir, encoder, vocab_file=VOCAB, do_lower_case=True)
    return model_dir


def built_once(name: str, build) -> dict:
    """`build(root)`'s result, built once per test run even across pytest-xdist workers.

    Under pytest, `tests/conftest.py` names a directory the whole run shares
    (`KBERT_TESTS_SHARED_DIR`, removed with the run's temporary directory): the
    first process to ask builds there under a file lock and records the result
    as JSON; the others wait on the lock and read it. Outside pytest (the
    benchmarks), it builds in a fresh temporary directory removed at exit.

    Args:
        name: the build's directory name.
        build: `root -> dict of JSON values` (paths under `root`).

    Returns:
        What `build` returned.
    """
    shared = os.environ.get(SHARED_DIR_VARIABLE)
    if not shared:
        root = tempfile.mkdtemp(prefix=f"kbert-{name}-")
        atexit.register(shutil.rmtree, root, ignore_errors=True)
        return build(root)
    root = os.path.join(shared, name)
    record = root + ".json"
    with open(root + ".lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not os.path.exists(record):
            shutil.rmtree(root, ignore_errors=True)  # a build that died half-way
            os.makedirs(root)
            with open(record + ".tmp", "w", encoding="utf-8") as f:
                json.dump(build(root), f)
            os.replace(record + ".tmp", record)
    with open(record, encoding="utf-8") as f:
        return json.load(f)


# Set by tests/conftest.py for the whole run; inherited by pytest-xdist workers.
SHARED_DIR_VARIABLE = _root_conftest.SHARED_DIR_VARIABLE


def export_task(name: str, root: str, seed: int = 0) -> dict:
    """Builds, saves and exports (version 1) one entry of TASKS under `root`.

    Returns:
        `{"model_dir", "export_dir", "version_dir"}`.
    """
    from kbert.checkpoints import save_finetuned
    from kbert.export.saved_model import export_saved_model

    model, task_config = build_task_model(name, seed=seed)
    model_dir = os.path.join(root, "finetuned", name)
    save_finetuned(model_dir, model, task_config, VOCAB)
    export_dir = os.path.join(root, "export", name)
    path = export_saved_model(model_dir, export_dir, check=False)
    return {"model_dir": model_dir, "export_dir": export_dir, "version_dir": path}


@functools.lru_cache(maxsize=None)
def exported_squad_defaults() -> dict:
    """A SQuAD model exported with `SquadConfig`'s defaults and `run_squad.py`'s 384 pieces.

    `TASKS["squad"]` exports with a short `max_answer_length` to keep windows
    small; this one has `max_answer_length=30`, `doc_stride=128` and
    `max_query_length=64`, the settings a user gets without asking.

    Returns:
        Dict of `model_dir`, `export_dir`, `version_dir`.
    """
    import dataclasses

    import keras

    from kbert.checkpoints import TaskConfig
    from kbert.checkpoints import save_finetuned
    from kbert.export.saved_model import export_saved_model
    from kbert.models import BertEncoder
    from kbert.models import BertSpanLabeler
    from kbert.tasks import SquadConfig

    def build(root: str) -> dict:
        keras.utils.set_random_seed(11)
        encoder = BertEncoder(**tiny_encoder_kwargs(vocabulary_size=vocab_size(),
                                                    max_sequence_length=384))
        config = TaskConfig(task="squad", task_name="squad", model_type="span_labeler",
                            text_pair=True, max_seq_length=384,
                            options=dataclasses.asdict(SquadConfig()))
        model_dir = os.path.join(root, "finetuned")
        save_finetuned(model_dir, BertSpanLabeler(encoder), config, VOCAB)
        export_dir = os.path.join(root, "export")
        path = export_saved_model(model_dir, export_dir, check=False)
        return {"model_dir": model_dir, "export_dir": export_dir, "version_dir": path}

    return built_once("squad-defaults", build)


def start_server(args: list[str], timeout_s: float = 120.0):
    """`kbert-serve` of this checkout on free ports, TensorFlow quiet; waited on until ready.

    Returns:
        A `kbert.serving.process.ServerProcess`.
    """
    return process.start_server(args, timeout_s, cwd=REPO,
                                env={"PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "3"})


def ready_versions(line: str) -> dict:
    """Parses `kbert-serve: serving a version 1, b version 2,3 on ...` into {name: [versions]}."""
    found = {}
    for name, versions in re.findall(r"(\w+) version (\d+(?:,\d+)*)", line):
        found[name] = [int(v) for v in versions.split(",")]
    return found


def cleanup(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


# ---- Reference implementations (Hugging Face `tokenizers` + numpy + the Keras model) ----
# Independent of kbert's in-graph preprocessing, so agreement is evidence for both.

def hf_tokenizer():
    from tokenizers import BertWordPieceTokenizer

    return BertWordPieceTokenizer(VOCAB, lowercase=True)


CLS, SEP = 101, 102


def _pad(rows: list[list[int]], segments: list[list[int]]) -> dict:
    import numpy as np

    length = max(len(r) for r in rows)
    token_ids = np.zeros((len(rows), length), "int32")
    segment_ids = np.zeros((len(rows), length), "int32")
    padding_mask = np.zeros((len(rows), length), "int32")
    for i, (row, seg) in enumerate(zip(rows, segments)):
        token_ids[i, :len(row)] = row
        segment_ids[i, :len(seg)] = seg
        padding_mask[i, :len(row)] = 1
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def truncate_seq_pair(a: list, b: list, max_length: int) -> None:
    """google-research/bert's `_truncate_seq_pair`, verbatim in behaviour."""
    while len(a) + len(b) > max_length:
        if len(a) > len(b):
            a.pop()
        else:
            b.pop()


def reference_inputs(texts, pairs, max_seq_length) -> dict:
    tokenizer = hf_tokenizer()
    rows, segments = [], []
    for i, text in enumerate(texts):
        a = tokenizer.encode(text, add_special_tokens=False).ids
        if pairs is None:
            a = a[:max_seq_length - 2]
            rows.append([CLS] + a + [SEP])
            segments.append([0] * (len(a) + 2))
        else:
            b = tokenizer.encode(pairs[i], add_special_tokens=False).ids
            truncate_seq_pair(a, b, max_seq_length - 3)
            rows.append([CLS] + a + [SEP] + b + [SEP])
            segments.append([0] * (len(a) + 2) + [1] * (len(b) + 1))
    return _pad(rows, segments)


def _word_spans(encoding):
    """Char span of every word of an encoding, and the word of every piece."""
    spans = {}
    for word, (start, end) in zip(encoding.word_ids, encoding.offsets):
        low, high = spans.get(word, (start, end))
        spans[word] = (min(low, start), max(high, end))
    return spans


def run_squad_spans(num_pieces: int, max_tokens: int, stride: int) -> list[tuple[int, int]]:
    """run_squad.py's `doc_spans` loop: `(start, length)` of each window."""
    spans, start = [], 0
    while True:
        length = min(max_tokens, num_pieces - start)
        spans.append((start, length))
        if start + length >= num_pieces:
            return spans
        start += min(length, stride)


def max_context_window(spans, position):
    """run_squad.py's `_check_is_max_context`: the window where `position` has most context."""
    best, best_index = None, None
    for index, (start, length) in enumerate(spans):
        if position < start or position > start + length - 1:
            continue
        score = min(position - start, start + length - 1 - position) + 0.01 * length
        if best is None or score > best:
            best, best_index = score, index
    return best_index


def numpy_viterbi(scores, starts, transitions, ends):
    """The best tag sequence of `scores` `[time, tags]` under a linear-chain CRF, in numpy."""
    import numpy as np

    if not len(scores):
        return []
    delta, pointers = starts + scores[0], []
    for step in scores[1:]:
        candidates = delta[:, None] + transitions
        pointers.append(candidates.argmax(axis=0))
        delta = candidates.max(axis=0) + step
    path = [int((delta + ends).argmax())]
    for pointer in reversed(pointers):
        path.append(int(pointer[path[-1]]))
    return path[::-1]


def reference_ner(model, texts, max_seq_length, label_names, window_stride=None):
    """Words split by `str.split()` and tokenized one by one, as fine-tuning sees CoNLL words;
    windows `window_stride` pieces apart, each word tagged where its first piece has most context
    (with a CRF: each word's scores from that window, then Viterbi over the text's words)."""
    import numpy as np

    crf = getattr(model, "crf_layer", None)
    crf_scores = None if crf is None else [np.asarray(s, "float64") for s in crf.scores()]

    tokenizer = hf_tokenizer()
    budget = max_seq_length - 2
    stride = window_stride or budget // 2
    results = []
    for text in texts:
        words = text.split()
        pieces, first_pieces = [], []
        for word in words:
            ids = tokenizer.encode(word, add_special_tokens=False).ids
            first_pieces.append(len(pieces) if ids else None)
            pieces += ids
        spans = run_squad_spans(len(pieces), budget, stride)
        logits = []
        for start, length in spans:
            window = pieces[start:start + length]
            inputs = _pad([[CLS] + window + [SEP]], [[0] * (length + 2)])
            logits.append(np.asarray(model(inputs, training=False))[0])
        tags, word_scores = [], []
        for first in first_pieces:
            if first is None:
                tags.append(label_names[0])
                continue
            index = max_context_window(spans, first)
            word_scores.append(logits[index][first - spans[index][0] + 1])
            tags.append(label_names[int(np.argmax(word_scores[-1]))])
        if crf_scores is not None:
            best = iter(numpy_viterbi(np.asarray(word_scores, "float64"), *crf_scores))
            tags = [label_names[0] if first is None else label_names[next(best)]
                    for first in first_pieces]
        results.append((words, tags))
    return results


def reference_squad(model, question, context, config):
    """run_squad.py's windows and max-context rule, exhaustive best span."""
    import numpy as np

    tokenizer = hf_tokenizer()
    options = config.options
    q = tokenizer.encode(question, add_special_tokens=False).ids[:options["max_query_length"]]
    encoding = tokenizer.encode(context, add_special_tokens=False)
    doc = encoding.ids
    spans = run_squad_spans(len(doc), config.max_seq_length - len(q) - 3, options["doc_stride"])
    best_window = [max_context_window(spans, position) for position in range(len(doc))]

    best = (-np.inf, None)
    for index, (s, n) in enumerate(spans):
        row = [CLS] + q + [SEP] + doc[s:s + n] + [SEP]
        inputs = _pad([row], [[0] * (len(q) + 2) + [1] * (n + 1)])
        outputs = model(inputs, training=False)
        start_logits = np.asarray(outputs["start_logits"])[0]
        end_logits = np.asarray(outputs["end_logits"])[0]
        offset = len(q) + 2
        for i in range(n):
            if best_window[s + i] != index:
                continue
            for j in range(i, min(n, i + options["max_answer_length"])):
                score = float(start_logits[offset + i] + end_logits[offset + j])
                if score > best[0]:
                    best = (score, (s + i, s + j))
    if best[1] is None:
        return "", 0, 0, -1e9
    spans_by_word = _word_spans(encoding)
    first = spans_by_word[encoding.word_ids[best[1][0]]][0]
    last = spans_by_word[encoding.word_ids[best[1][1]]][1]
    return context[first:last], first, last, best[0]


def reference_embedding(encoder, texts, max_seq_length):
    import numpy as np

    inputs = reference_inputs(texts, None, max_seq_length)
    sequence = np.asarray(encoder(inputs, training=False)["sequence_output"], "float64")
    mask = inputs["padding_mask"][:, :, None].astype("float64")
    mean = (sequence * mask).sum(1) / mask.sum(1)
    return mean / np.linalg.norm(mean, axis=-1, keepdims=True)


TEXTS = ["A gorgeous, witty film from Paris!", "bad", "Naïve café crème in Zürich",
         "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"]
PAIRS = ["It was made in France.", "it is very good", "", "short"]
QUESTION = "Where was the film made?"
CONTEXT = ("The film was made in Paris , a gorgeous city in France . It was made in 1999 by a man "
           "from the city , who said that the city was the best place for it .")
