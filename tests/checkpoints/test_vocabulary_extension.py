"""`kbert.checkpoints.extend_vocabulary`: new words as single tokens, old ids and rows kept.

A tiny BERT (H=32, L=1) over the first 3000 tokens of bert-base-uncased's
vocabulary with only three `[unusedN]` slots left, so that five new words fill
the slots and append two rows.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tests import forked_python
from tests.conftest import REPO
from kbert.checkpoints import extend_vocabulary
from kbert.checkpoints import load_pretrainer
from kbert.checkpoints import open_model_dir
from kbert.checkpoints import save_pretrained
from kbert.checkpoints import vocabulary_extension as ve
from kbert.data import BertTokenizer
from kbert.data import WordpieceTokenizer
from kbert.data import read_tokenizer_json
from kbert.data.vocab import choose_split_words
from kbert.data.vocab import count_words
from kbert.data.vocab import frequent_split_words
from kbert.data.vocabulary import read_vocab
from kbert.models import BertEncoder
from kbert.models import BertPretrainer

TESTDATA = os.path.join(os.path.dirname(__file__), os.pardir, "testdata")
CORPUS = os.path.join(TESTDATA, "emma_chapter1.txt")
# Words of Emma's first chapter that bert-base-uncased's first 3000 tokens split.
WORDS = ["woodhouse", "weston", "taylor", "emma", "hartfield"]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A pre-trained directory with MLM + NSP heads and random, non-zero output bias."""
    root = tmp_path_factory.mktemp("source")
    tokens = read_vocab(os.path.join(TESTDATA, "serving_vocab.txt"))
    tokens = [t for t in tokens if not ve.UNUSED_TOKEN.fullmatch(t)
              or t in ("[unused0]", "[unused1]", "[unused2]")]
    vocab_file = root / "vocab.txt"
    vocab_file.write_text("\n".join(tokens) + "\n")
    encoder = BertEncoder(vocabulary_size=len(tokens), num_layers=1, num_heads=2, hidden_dim=32,
                          intermediate_dim=37, max_sequence_length=32)
    pretrainer = BertPretrainer(encoder, next_sentence=True)
    bias = pretrainer.masked_lm_head._bias
    bias.assign(np.random.default_rng(0).normal(size=bias.shape).astype("float32"))
    directory = str(root / "model")
    save_pretrained(directory, encoder, vocab_file=str(vocab_file), do_lower_case=True,
                    pretrainer=pretrainer)
    return directory, tokens


@pytest.fixture(scope="module")
def extended(source, tmp_path_factory):
    directory, _ = source
    output = str(tmp_path_factory.mktemp("out") / "extended")
    extension = extend_vocabulary(directory, WORDS + ["Woodhouse", "the"], output,
                                  corpus_files=[CORPUS])
    return output, extension


def _bias(pretrainer):
    return pretrainer.masked_lm_head._bias.numpy()


def test_unused_slots_filled_first_then_rows_appended(source, extended):
    _, tokens = source
    output, extension = extended
    slots = [tokens.index(f"[unused{i}]") for i in range(3)]
    assert [item["id"] for item in extension.added] == slots + [len(tokens), len(tokens) + 1]
    assert [item["slot"] for item in extension.added] == ["unused"] * 3 + ["appended"] * 2
    assert [item["word"] for item in extension.added] == WORDS
    # "Woodhouse" is "woodhouse" once lower-cased, and "the" is a token already.
    assert extension.already_in_vocabulary == ["the"]
    assert (extension.vocabulary_size_before, extension.vocabulary_size_after) == (
        len(tokens), len(tokens) + 2)
    vocabulary = read_vocab(os.path.join(output, "vocab.txt"))
    assert [vocabulary[item["id"]] for item in extension.added] == WORDS
    record = json.load(open(os.path.join(output, ve.EXTENSION_RECORD)))
    assert record["added"] == extension.added


def test_old_rows_bit_identical_and_new_rows_are_piece_means(source, extended):
    directory, tokens = source
    output, extension = extended
    old = load_pretrainer(directory, next_sentence=True)
    new = load_pretrainer(output, next_sentence=True)
    old_rows = old.encoder.token_embedding.embeddings.numpy()
    new_rows = new.encoder.token_embedding.embeddings.numpy()
    new_ids = [item["id"] for item in extension.added]
    kept = np.setdiff1d(np.arange(len(tokens)), new_ids)
    np.testing.assert_array_equal(new_rows[kept], old_rows[kept])
    np.testing.assert_array_equal(_bias(new)[kept], _bias(old)[kept])
    for item in extension.added:
        pieces = [tokens.index(p) for p in item["pieces"]]
        assert len(pieces) > 1
        np.testing.assert_array_equal(
            new_rows[item["id"]], old_rows[pieces].astype(np.float64).mean(0).astype(np.float32))
        np.testing.assert_array_equal(
            _bias(new)[item["id"]], _bias(old)[pieces].astype(np.float64).mean().astype(np.float32))
    # Every other weight (transformer, heads) is copied bit for bit.
    for a, b in zip(old.weights, new.weights):
        if a.shape == b.shape and "token_embedding" not in a.path and "output_bias" not in a.path:
            np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)


def test_new_words_are_single_tokens_and_other_text_unchanged(source, extended):
    directory, _ = source
    output, extension = extended
    ids = {item["word"]: item["id"] for item in extension.added}
    text = "Emma rode to Hartfield; Mrs. Weston smiled at Miss Taylor."
    plain = "She was the youngest of the two daughters of a most affectionate father."
    old_python = BertTokenizer(os.path.join(directory, "vocab.txt"))
    new_python = BertTokenizer(os.path.join(output, "vocab.txt"))
    assert new_python.tokenize_to_ids([plain]) == old_python.tokenize_to_ids([plain])
    got = new_python.tokenize_to_ids([text])[0]
    for word in ("emma", "hartfield", "weston", "taylor"):
        assert got.count(ids[word]) == 1
    assert len(got) < len(old_python.tokenize_to_ids([text])[0])
    # The in-graph tokenizer of fine-tuning and serving, from the opened directory.
    old_graph = open_model_dir(directory).preprocessor(32)
    new_graph = open_model_dir(output).preprocessor(32)
    assert new_graph.tokenize(tf.constant([plain])).to_list() == (
        old_graph.tokenize(tf.constant([plain])).to_list())
    assert new_graph.tokenize(tf.constant(["Woodhouse"])).to_list() == [[ids["woodhouse"]]]
    assert new_graph.tokenize(tf.constant([text])).to_list() == [got]


def test_tokens_per_word_measured_before_and_after(source, extended):
    directory, tokens = source
    output, extension = extended
    lines = [line for line in open(CORPUS, encoding="utf-8").read().splitlines() if line.strip()]
    before = count_words(CORPUS, WordpieceTokenizer(tokens, do_lower_case=True))
    # The pieces as pre-training's tokenizer makes them, line by line.
    for vocab_dir, measured in ((directory, extension.tokens_per_word_before),
                                (output, extension.tokens_per_word_after)):
        pieces = BertTokenizer(os.path.join(vocab_dir, "vocab.txt")).tokenize_to_ids(lines)
        assert measured == pytest.approx(sum(map(len, pieces)) / before.num_words, rel=1e-12)
    # At least the pieces the five words no longer take are saved (a new word may also
    # be the longest prefix of another word, saving more).
    saved = sum(before.counts[w] * (len(before.pieces[w]) - 1) for w in WORDS)
    assert saved > 0
    assert extension.tokens_per_word_after <= (before.num_pieces - saved) / before.num_words


def test_frequent_split_words_from_corpus(source):
    _, tokens = source
    counts = count_words(CORPUS, WordpieceTokenizer(tokens, do_lower_case=True))
    words = frequent_split_words(counts, max_new_tokens=5, min_count=2)
    assert len(words) == 5
    assert all(len(counts.pieces[w]) > 1 for w in words)
    frequencies = [counts.counts[w] for w in words]
    assert frequencies == sorted(frequencies, reverse=True)
    # As `grep -oiw WORD | wc -l` counts them: "miss" and "taylor" 12 times each (ties alphabetical), "emma" 7,
    # "weston" 6, "affection" 4; "the" (a token) is never picked.
    assert words == ["miss", "taylor", "emma", "weston", "affection"]


def test_asking_for_more_words_than_pass_the_floor_says_so(source):
    _, tokens = source
    counts = count_words(CORPUS, WordpieceTokenizer(tokens, do_lower_case=True))
    enough = choose_split_words(counts, max_new_tokens=5, min_count=2)
    assert enough.words == ["miss", "taylor", "emma", "weston", "affection"]
    candidates = enough.candidates
    assert candidates == len([w for w, p in counts.pieces.items()
                              if len(p) > 1 and counts.counts[w] >= 2])
    assert enough.report() == [
        f"{candidates} words of the corpus split into several pieces occur at least "
        "--min_count=2 times; adding the 5 most frequent (the least frequent seen 4 times)"]
    # Defect 5: --max_new_tokens=100000 took every candidate down to words seen twice, silently.
    greedy = choose_split_words(counts, max_new_tokens=100000, min_count=2)
    assert len(greedy.words) == candidates < 100000 and greedy.least_count == 2
    report = greedy.report()
    assert len(report) == 2 and report[0].endswith(
        f"adding the {candidates} most frequent (the least frequent seen 2 times)")
    last = ", ".join(repr(word) for word in greedy.words[-3:])
    assert report[1] == (
        f"warning: --max_new_tokens=100000 asked for more words than the {candidates} that "
        f"passed the frequency floor, so all of them are added, down to words seen 2 times "
        f"({last}); a new row learns little from a word seen a few times: raise --min_count to "
        "add only words the corpus shows often, or lower --max_new_tokens.")
    assert choose_split_words(counts, 10, min_count=1000).report()[0].startswith(
        "0 words of the corpus split into several pieces occur at least --min_count=1000 times; "
        "adding the 0 most frequent")


def test_errors_leave_nothing_behind(source, tmp_path):
    directory, tokens = source
    output = str(tmp_path / "out")
    words_file = tmp_path / "words.txt"
    words_file.write_text("woodhouse\nmy ocardial\n")
    with pytest.raises(ValueError, match=r"words\.txt:2: 'my ocardial' contains whitespace"):
        ve.read_words_file(str(words_file))
    with pytest.raises(ValueError, match="'covid-19' is 3 words"):
        extend_vocabulary(directory, ["covid-19"], output)
    with pytest.raises(ValueError, match=r"4 new words but --max_new_tokens=3"):
        extend_vocabulary(directory, WORDS[:4], output, max_new_tokens=3)
    with pytest.raises(ValueError, match=r"4 new words but .* has 3 free \[unusedN\] slots"):
        extend_vocabulary(directory, WORDS[:4], output, append_rows=False)
    assert os.listdir(tmp_path) == ["words.txt"]


def test_bpe_directory_is_refused(tmp_path):
    spec = read_tokenizer_json(os.path.join(TESTDATA, "bpe_tokenizer.json"))
    encoder = BertEncoder(vocabulary_size=len(spec.vocabulary), num_layers=1, num_heads=2,
                          hidden_dim=8, intermediate_dim=8, max_sequence_length=8)
    directory = str(tmp_path / "bpe")
    save_pretrained(directory, encoder, vocab_file=os.path.join(TESTDATA, "bpe_tokenizer.json"))
    with pytest.raises(ValueError, match="byte-level BPE .* supports WordPiece vocab.txt "
                                         "directories only"):
        extend_vocabulary(directory, ["word"], str(tmp_path / "out"))
    assert not os.path.exists(tmp_path / "out")


def test_extended_directory_fine_tunes_and_serves_new_words_as_single_tokens(extended, tmp_path):
    from kbert.export.saved_model import export_saved_model
    from kbert.training.finetuning import run_finetuning

    output, extension = extended
    model_dir = str(tmp_path / "sst2")
    run_finetuning("glue", output, model_dir, task_name="sst-2",
                   data_dir=os.path.join(TESTDATA, "finetune", "glue", "SST-2"),
                   num_train_epochs=1, train_batch_size=4, eval_batch_size=8, max_seq_length=32,
                   learning_rate=1e-3, warmup_proportion=0.0, verbose=0, do_eval=False)
    served = tf.saved_model.load(export_saved_model(model_dir, str(tmp_path / "export"),
                                                    check=False))
    text = "Emma smiled at Hartfield."
    ids = BertTokenizer(os.path.join(output, "vocab.txt")).tokenize_to_ids([text])[0]
    vocabulary = read_vocab(os.path.join(output, "vocab.txt"))
    new_ids = {item["word"]: item["id"] for item in extension.added}
    assert ids[0] == new_ids["emma"] and new_ids["hartfield"] in ids
    assert new_ids["hartfield"] >= len(vocabulary) - 2  # an appended row
    token_ids = tf.constant([[vocabulary.index("[CLS]")] + ids + [vocabulary.index("[SEP]")]])
    by_ids = served.signatures["serve_ids"](
        token_ids=token_ids, segment_ids=tf.zeros_like(token_ids),
        padding_mask=tf.ones_like(token_ids))
    by_text = served.signatures["serving_default"](text=tf.constant([text]))
    np.testing.assert_allclose(by_text["logits"].numpy(), by_ids["logits"].numpy(), rtol=1e-5,
                               atol=1e-6)


def test_cli_bad_words_file_is_one_line_and_writes_nothing(source, tmp_path):

    directory, _ = source
    words_file = tmp_path / "words.txt"
    words_file.write_text("woodhouse\nmy ocardial\n")
    output = tmp_path / "out"
    result = forked_python.run(
        ["-m", "kbert.bin.vocab", "extend", f"--model_dir={directory}",
         f"--words_file={words_file}", f"--output_dir={output}"],
        timeout=120, env={**os.environ, "PYTHONPATH": REPO}, cwd=REPO)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"vocab.py: error: --words_file={words_file}:2: 'my ocardial' contains whitespace; a "
        "vocabulary token is one word (BERT splits text at whitespace before WordPiece): put "
        "one word a line."]
    assert sorted(os.listdir(tmp_path)) == ["words.txt"]


def test_cli_says_how_many_words_passed_the_floor_before_anything_else(source, tmp_path):
    directory, _ = source
    output = tmp_path / "out"
    # --noappend_rows with 3 free slots refuses the words, after the report: nothing written.
    result = forked_python.run(
        ["-m", "kbert.bin.vocab", "extend", f"--model_dir={directory}", f"--corpus={CORPUS}",
         "--max_new_tokens=100000", "--noappend_rows", f"--output_dir={output}"],
        timeout=120, env={**os.environ, "PYTHONPATH": REPO}, cwd=REPO)
    assert result.returncode == 2
    lines = result.stdout.strip().splitlines()
    assert lines[0].endswith("occur at least --min_count=2 times; adding the "
                             f"{lines[0].split()[0]} most frequent (the least frequent seen 2 "
                             "times)")
    assert lines[1].startswith("warning: --max_new_tokens=100000 asked for more words than the ")
    assert "free [unusedN] slots and --noappend_rows" in result.stderr
    assert os.listdir(tmp_path) == []
