"""create_pretraining_data as an Apache Beam pipeline (DirectRunner) gives the local tool's files."""

import collections
import json
import os

import pytest
import tensorflow as tf

from kbert.data import create_pretraining_data
from kbert.data import format_instance
from kbert.data import read_pretraining_metadata
from kbert.data import read_vocab
from kbert.data.pretraining import beam_pipeline
from tests import forked_python
from tests.conftest import REPO
from tests.data.conftest import CAESAR_LATIN1
from tests.data.conftest import MOBY_CRLF
from tests.data.conftest import PERSUASION

# The three Gutenberg excerpts (one Latin-1) in chunks of 4000 bytes: 16 chunks,
# 32 tasks, three output files.
CORPUS = [PERSUASION, MOBY_CRLF, CAESAR_LATIN1]
SMALL = dict(max_seq_length=32, max_predictions_per_seq=5, dupe_factor=2, chunk_bytes=4000,
             input_encoding="latin-1")
# What differs between two runs' sidecars besides the runner.
TIMING_KEYS = ("runner", "seconds", "input_mb_per_s", "output_files", "data_file", "flags")


def _records(path):
    return [r.numpy() for r in tf.data.TFRecordDataset(path)]


def _outputs(directory, name, num_files=3):
    return [str(directory / f"{name}-{i}.tfrecord") for i in range(num_files)]


def _without(metadata, keys):
    return {k: v for k, v in metadata.items() if k not in keys}


@pytest.mark.parametrize(
    "mode", [dict(next_sentence="nsp"), dict(next_sentence="sop"), dict(next_sentence="none"),
             dict(next_sentence="nsp", do_whole_word_mask=True)],
    ids=["nsp", "sop", "none", "whole_word"],
)
def test_direct_runner_gives_the_local_records(tmp_path, vocab_file, mode):
    kwargs = dict(SMALL, **mode)
    local = _outputs(tmp_path, "local")
    local_meta = create_pretraining_data(CORPUS, local, vocab_file, num_workers=1, **kwargs)
    beam = _outputs(tmp_path, "beam")
    beam_meta = create_pretraining_data(CORPUS, beam, vocab_file, runner="DirectRunner", **kwargs)

    local_records = [r for path in local for r in _records(path)]
    beam_records = [r for path in beam for r in _records(path)]
    assert len(beam_records) == local_meta["counts"]["instances"] > 200
    assert collections.Counter(beam_records) == collections.Counter(local_records)
    # Stronger than the multiset: each file holds the local tool's records in its order.
    for a, b in zip(local, beam):
        assert open(a, "rb").read() == open(b, "rb").read()

    assert beam_meta["runner"] == "DirectRunner" and local_meta["runner"] == "local"
    assert _without(beam_meta, TIMING_KEYS) == _without(local_meta, TIMING_KEYS)
    for a, b in zip(local, beam):
        local_sidecar, beam_sidecar = (json.load(open(p + ".meta.json")) for p in (a, b))
        assert beam_sidecar["num_instances_in_file"] == local_sidecar["num_instances_in_file"]
        assert beam_sidecar["data_file"] == b
    # Published and nothing else: no part files, work directory or temporary names.
    assert sorted(os.listdir(tmp_path)) == sorted(
        os.path.basename(p) + suffix for p in local + beam for suffix in ("", ".meta.json"))


def test_undecodable_file_fails_naming_it_and_leaves_nothing(tmp_path, vocab_file):
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ValueError, match=r"shakespeare-caesar-head.latin1.txt:119: not valid utf-8"
                                         r".*--input_encoding"):
        create_pretraining_data(CORPUS, _outputs(out, "o"), vocab_file, runner="DirectRunner",
                                **{**SMALL, "input_encoding": "utf-8"})
    assert os.listdir(out) == []
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n\n")
    with pytest.raises(ValueError, match=r"empty.txt.*holds no text"):
        create_pretraining_data(str(empty), _outputs(out, "o"), vocab_file, runner="DirectRunner",
                                **SMALL)
    assert os.listdir(out) == []
    with pytest.raises(ValueError, match=r"--direct_num_wokers: neither a flag of this tool nor"):
        create_pretraining_data(CORPUS, _outputs(out, "o"), vocab_file, runner="DirectRunner",
                                pipeline_args=["--direct_num_wokers=2"], **SMALL)
    assert os.listdir(out) == []


def test_output_ranges_follow_the_round_robin():
    # Two tasks of 3 and 2 records over 2 files: the local tool writes records
    # 0,2 of task 0 and 1 of task 1 to file 0 (task 1 starts at file 1).
    tasks = [
        beam_pipeline.TaskOutput(0, 1, "p1", [0, 10, 15], [1, 1], {}, {}),
        beam_pipeline.TaskOutput(0, 0, "p0", [0, 20, 30], [2, 1], {}, {}),
    ]
    assert beam_pipeline.output_ranges(tasks, 0, 2) == ([("p0", 0, 20), ("p1", 10, 5)], 3)
    assert beam_pipeline.output_ranges(tasks, 1, 2) == ([("p0", 20, 10), ("p1", 0, 10)], 2)


def test_tool_on_worker_processes_matches_the_local_tool(tmp_path, vocab_file):
    # The one multi-process run: two Beam worker processes, as on a cluster.
    out = _outputs(tmp_path, "mp", 2)
    result = forked_python.run(
        [os.path.join(REPO, "tools", "create_pretraining_data.py"),
         f"--input_file={','.join(CORPUS)}", f"--output_file={','.join(out)}",
         f"--vocab_file={vocab_file}", "--dupe_factor=2", "--max_seq_length=32",
         "--max_predictions_per_seq=5", "--chunk_bytes=4000", "--input_encoding=latin-1",
         "--verbose", "--runner=DirectRunner", "--direct_num_workers=2",
         "--direct_running_mode=multi_processing"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    local = _outputs(tmp_path, "local", 2)
    shown = []
    vocab = read_vocab(vocab_file)
    create_pretraining_data(CORPUS, local, vocab_file, num_workers=1, num_verbose_examples=20,
                            example_callback=lambda x: shown.append(format_instance(x, vocab)),
                            **SMALL)
    for a, b in zip(local, out):
        assert open(a, "rb").read() == open(b, "rb").read()
    # --verbose shows the local tool's first 20 instances, read back from the files.
    examples = [block.strip() for block in result.stdout.split("*** Example ***")[1:21]]
    assert len(examples) == 20 and [e.split("\n\n")[0] for e in examples] == shown
    metadata = read_pretraining_metadata(out[0])
    assert metadata["runner"] == "DirectRunner"
    assert metadata["flags"]["runner"] == "DirectRunner" and metadata["flags"]["verbose"] is True
