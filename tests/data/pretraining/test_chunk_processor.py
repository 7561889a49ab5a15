"""ChunkProcessor: one chunk's work without a pool gives the bytes of a pool run."""

import tensorflow as tf

from kbert.data import create_pretraining_data
from kbert.data import text_files
from kbert.data.pretraining import InstanceOptions
from kbert.data.pretraining.chunk_processor import ChunkProcessor
from kbert.data.pretraining.chunk_processor import ChunkTask
from kbert.data.pretraining.chunk_processor import GenerationConfig

OPTIONS = InstanceOptions(max_seq_length=32, max_predictions_per_seq=5, do_whole_word_mask=True)
DUPES, CHUNK_BYTES = 2, 4000


def test_tasks_processed_here_give_the_pool_runs_file(tmp_path, vocab_file, sentence_corpus):
    out = str(tmp_path / "pool.tfrecord")
    meta = create_pretraining_data(
        sentence_corpus, out, vocab_file, max_seq_length=32, max_predictions_per_seq=5,
        do_whole_word_mask=True, dupe_factor=DUPES, chunk_bytes=CHUNK_BYTES, num_workers=2,
    )
    config = GenerationConfig(
        (sentence_corpus,), (out,), vocab_file, options=OPTIONS, dupe_factor=DUPES,
        chunk_bytes=CHUNK_BYTES, num_verbose_examples=1,
    )
    processor = ChunkProcessor(config)
    chunks = list(text_files.iter_text_chunks(config.input_files, config.chunk_bytes))
    assert len(chunks) >= 4
    results = [
        processor.process(ChunkTask(dupe, index, pieces))
        for dupe in range(DUPES) for index, pieces in enumerate(chunks)
    ]
    with open(out, "rb") as f:
        assert b"".join(r.records for r in results) == f.read()
    assert sum(r.counts["instances"] for r in results) == meta["counts"]["instances"]

    # A task's bytes depend on (seed, dupe, chunk) only, not on what ran before.
    again = ChunkProcessor(config).process(ChunkTask(1, 3, chunks[3]))
    assert again.records == results[len(chunks) + 3].records
    assert results[3].records != again.records  # Dupe 1 masks anew.
    first = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(out))).numpy())
    example = results[0].examples[0]
    assert list(first.features.feature["input_ids"].int64_list.value)[: len(example.token_ids)] == (
        example.token_ids
    )
    # One tokenization for all passes (a Beam worker's way) gives each task's result.
    chunk = [piece.without_data() for piece in chunks[3]]  # Read again from the file.
    passes = list(processor.process_chunk(3, chunk, range(DUPES)))
    assert [r.dupe_index for r in passes] == [0, 1] and all(r.chunk_index == 3 for r in passes)
    for dupe, result in enumerate(passes):
        expected = results[dupe * len(chunks) + 3]
        assert result.records == expected.records and result.group_bounds == expected.group_bounds
        assert result.counts == expected.counts
    # Lines are counted once, in the pass that reads them (as from the pool's token cache).
    assert passes[0].line_counts == results[3].line_counts and passes[0].line_counts["lines"] > 0
    assert passes[1].line_counts == {"lines": 0, "truncated_lines": 0}
