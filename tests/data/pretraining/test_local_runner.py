"""The local runner: the same bytes for any number of workers, and with or without the token cache."""

import os
import tempfile

from kbert.data import create_pretraining_data
from tests.data.conftest import MOBY_CRLF
from tests.data.pretraining.test_generator import SMALL


def test_byte_identical_for_any_worker_count(tmp_path, vocab_file, sentence_corpus):
    kwargs = dict(SMALL, chunk_bytes=4000, input_file=[sentence_corpus, MOBY_CRLF])
    outs = {}
    for workers in (1, 2):
        out = [str(tmp_path / f"w{workers}-{i}.tfrecord") for i in range(3)]
        meta = create_pretraining_data(output_file=out, vocab_file=vocab_file, **{**kwargs, "num_workers": workers})
        outs[workers] = [open(p, "rb").read() for p in out]
    assert outs[1] == outs[2]
    assert all(len(b) > 0 for b in outs[1])
    # Several chunks were processed, so workers really split the work.
    assert meta["counts"]["input_bytes"] > 4 * 4000
    other_seed = str(tmp_path / "seed.tfrecord")
    create_pretraining_data(output_file=other_seed, vocab_file=vocab_file, **{**kwargs, "random_seed": 1})
    assert open(other_seed, "rb").read() != b"".join(outs[1])


def test_cached_tokens_give_the_same_output(tmp_path, vocab_file, sentence_corpus, monkeypatch):
    # The token cache goes to a temporary directory; give this run its own, so that
    # other processes generating data on the machine do not count.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    from kbert.data.pretraining import chunk_processor
    from kbert.data.pretraining import local_runner

    kwargs = dict(SMALL, dupe_factor=3, chunk_bytes=4000, input_file=[sentence_corpus, MOBY_CRLF])
    cached = str(tmp_path / "cached.tfrecord")
    loads = []
    load_tokens = chunk_processor._load_tokens
    monkeypatch.setattr(chunk_processor, "_load_tokens", lambda p: loads.append(p) or load_tokens(p))
    meta = create_pretraining_data(output_file=cached, vocab_file=vocab_file, **kwargs)
    num_chunks = len(set(loads))
    assert len(loads) == 2 * num_chunks and num_chunks > 4  # Dupes 1 and 2 of every chunk.

    class NeverCached(set):
        def add(self, item):
            pass

    iter_tasks = local_runner._iter_tasks
    monkeypatch.setattr(
        local_runner, "_iter_tasks",
        lambda files, dupes, size, work_dir, chunks, in_pool: iter_tasks(
            files, dupes, size, work_dir, NeverCached(), in_pool),
    )
    fresh = str(tmp_path / "fresh.tfrecord")
    meta_fresh = create_pretraining_data(output_file=fresh, vocab_file=vocab_file, **kwargs)
    assert len(loads) == 2 * num_chunks  # Every dupe tokenized again this time.
    assert open(cached, "rb").read() == open(fresh, "rb").read()
    assert meta["counts"] == meta_fresh["counts"] and meta["counts"]["lines"] > 500
    assert os.listdir(scratch) == []  # The token cache is removed at the end.
