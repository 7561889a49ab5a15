"""Continued pre-training from a pre-trained directory, an extended one included.

A tiny MLM-only BERT (L=1, H=32, exact GELU, LayerNorm epsilon 1e-6: not the
gin files' numerics) over bert-base-uncased's first 3000 tokens, extended with
five words of Emma's first chapter; pre-training data made from that chapter
with the extended `vocab.txt`, held out: the opening of Moby Dick.
"""

import json
import math
import os

import gin
import keras
import numpy as np
import pytest

from kbert import configurables
from kbert.checkpoints import extend_vocabulary
from kbert.checkpoints import load_pretrainer
from kbert.checkpoints import save_pretrained
from kbert.data import pretraining_dataset
from kbert.data import read_pretraining_metadata
from kbert.data.pretraining import create_pretraining_data
from kbert.data.vocabulary import read_vocab
from kbert.models import BertEncoder
from kbert.models import BertPretrainer
from kbert.training import evaluate_pretrainer
from kbert.training import run_pretraining
from kbert.training.pretraining.state import load_init_checkpoint
from kbert.training.pretraining.state import open_init_checkpoint

TESTDATA = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "testdata")
WORDS = ["woodhouse", "weston", "taylor", "emma", "hartfield"]
SEQ, PREDICTIONS = 32, 5
ENCODER = dict(num_layers=1, num_heads=2, hidden_dim=32, intermediate_dim=37,
               max_sequence_length=SEQ, activation="gelu_exact", layer_norm_epsilon=1e-6)


def _data(text, output, vocab_file, seed=1):
    create_pretraining_data(os.path.join(TESTDATA, text), output, vocab_file,
                            max_seq_length=SEQ, max_predictions_per_seq=PREDICTIONS,
                            dupe_factor=1, next_sentence="none", random_seed=seed,
                            num_workers=1)
    return output


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("continued")
    vocab_file = os.path.join(TESTDATA, "serving_vocab.txt")
    encoder = BertEncoder(vocabulary_size=len(read_vocab(vocab_file)), **ENCODER)
    source = str(root / "source")
    save_pretrained(source, encoder, vocab_file=vocab_file, do_lower_case=True,
                    pretrainer=BertPretrainer(encoder, next_sentence=False))
    extended = str(root / "extended")
    extend_vocabulary(source, WORDS, extended)
    extended_vocab = os.path.join(extended, "vocab.txt")
    return {
        "source": source, "extended": extended,
        "train": _data("emma_chapter1.txt", str(root / "train.tfrecord"), extended_vocab),
        "heldout": _data("melville-moby_dick-head.crlf.txt", str(root / "heldout.tfrecord"),
                         extended_vocab, seed=2),
        "root": root,
    }


@pytest.fixture(autouse=True)
def _clear_gin():
    yield
    gin.clear_config()


def test_gin_takes_sizes_and_numerics_from_the_directory(dirs):
    # The recipe binds no size: the directory gives them all.
    configurables.parse_gin(["continue_pretraining.gin"])
    bound = configurables.encoder_from_directory(dirs["extended"])
    pretrainer = configurables.pretrainer()
    assert pretrainer.next_sentence is False
    assert gin.query_parameter("run_pretraining.masking") == "dynamic"
    assert gin.query_parameter("run_pretraining.learning_rate") == 1e-4
    encoder = pretrainer.encoder
    # The five words went into [unusedN] slots: the size stays the vocabulary's 3003.
    assert bound["vocabulary_size"] == encoder.vocabulary_size == 3003
    for key, value in ENCODER.items():
        assert getattr(encoder, key) == value, key


def test_contradicting_gin_is_one_error_naming_every_key(dirs):
    configurables.parse_gin(["tiny.gin"])
    with pytest.raises(ValueError) as error:
        configurables.encoder_from_directory(dirs["extended"])
    message = str(error.value)
    assert "\n" not in message
    for expected in ("vocabulary_size: directory 3003, gin 30522",
                     "num_layers: directory 1, gin 2",
                     "hidden_dim: directory 32, gin 128", "intermediate_dim: directory 37, gin 512",
                     "max_sequence_length: directory 32, gin 512",
                     "activation: directory 'gelu_exact', gin 'gelu_approximate'",
                     "layer_norm_epsilon: directory 1e-06, gin 1e-12"):
        assert expected in message
    assert "num_heads" not in message and "dropout" not in message


def _masked_lm_loss(pretrainer, path, batch_size):
    """The mean masked-LM loss over every masked position of `path`, from the logits."""
    losses, weights = [], []
    for features, labels, sample_weights in pretraining_dataset(
            path, batch_size, SEQ, PREDICTIONS, next_sentence=False,
            is_training=False).as_numpy_iterator():
        logits = keras.ops.convert_to_numpy(
            pretrainer(features, training=False)["mlm"]).astype(np.float64)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        losses.append(-np.take_along_axis(log_probs, labels["mlm"][..., None], -1)[..., 0])
        weights.append(sample_weights["mlm"])
    losses, weights = np.concatenate(losses).ravel(), np.concatenate(weights).ravel()
    return (losses * weights).sum() / weights.sum()


def test_run_starts_at_the_extended_models_loss_and_heldout_loss_falls(dirs, tmp_path):
    from tests.training.pretraining_data import read_losses

    instances = read_pretraining_metadata([dirs["train"]])["counts"]["instances"]
    configurables.parse_gin(["pretrain.gin"], ["BertPretrainer.next_sentence = False",
                                               "BertEncoder.dropout = 0.0"])
    configurables.encoder_from_directory(dirs["extended"])
    lines = []
    # One unshuffled batch holds every instance: the first step's loss is over all of them.
    summary = run_pretraining(
        dirs["train"], str(tmp_path / "run"), configurables.pretrainer,
        init_checkpoint=dirs["extended"], eval_input_file=dirs["heldout"],
        print_fn=lines.append, train_batch_size=instances, max_seq_length=SEQ,
        max_predictions_per_seq=PREDICTIONS, num_train_steps=8, num_warmup_steps=2,
        learning_rate=5e-3, save_checkpoints_steps=8, log_every_steps=1, seed=3,
        shuffle_buffer_size=1)
    assert any("initialised from" in line and "(encoder and pre-training heads)" in line
               for line in lines)
    extended = load_pretrainer(dirs["extended"], next_sentence=False)
    losses, steps = read_losses(str(tmp_path / "run"))
    assert steps[0] == 1
    np.testing.assert_allclose(losses[0], _masked_lm_loss(extended, dirs["train"], instances),
                               rtol=1e-5)
    before = evaluate_pretrainer(extended, dirs["heldout"], batch_size=16)["masked_lm_loss"]
    after = summary["eval_results"]["masked_lm_loss"]
    assert after < before - 0.5, (before, after)
    # The "before" figure: the directory evaluated ahead of the first step, step 0 of the history.
    history = [json.loads(line) for line in open(tmp_path / "run" / "eval_history.jsonl")]
    assert [line["step"] for line in history] == [0, 8]
    assert history[0]["masked_lm_loss"] == pytest.approx(before, rel=1e-5)
    assert [line for line in lines if line.startswith("eval step ")][0].startswith(
        f"eval step 0  masked_lm_loss {before:.4f}")
    # The written directory is the extended model's: its vocabulary and numerics.
    assert read_vocab(str(tmp_path / "run" / "vocab.txt")) == read_vocab(
        os.path.join(dirs["extended"], "vocab.txt"))
    trained = load_pretrainer(str(tmp_path / "run"), next_sentence=False).encoder
    assert (trained.activation, trained.layer_norm_epsilon) == ("gelu_exact", 1e-6)
    assert math.isfinite(after)


def test_the_directorys_pooling_and_tokenizer_are_carried_on(dirs, tmp_path):
    """Issue 51, defect 6: a converted sentence-transformers model's sentence_config.json (and
    its vocab.txt and case) are in the continued run's output, as they were in the input."""
    import shutil

    source = tmp_path / "sentence_model"
    shutil.copytree(dirs["extended"], source)
    pooling = {"pooling": "cls", "normalize": False, "max_seq_length": SEQ}
    (source / "sentence_config.json").write_text(json.dumps(pooling))
    configurables.parse_gin(["pretrain.gin"], ["BertPretrainer.next_sentence = False"])
    configurables.encoder_from_directory(str(source))
    run_pretraining(dirs["train"], str(tmp_path / "run"), configurables.pretrainer,
                    init_checkpoint=str(source), print_fn=lambda _: None, train_batch_size=4,
                    max_seq_length=SEQ, max_predictions_per_seq=PREDICTIONS, num_train_steps=1,
                    num_warmup_steps=0)
    assert json.load(open(tmp_path / "run" / "sentence_config.json")) == json.load(
        open(source / "sentence_config.json"))
    assert open_init_checkpoint(str(tmp_path / "run")).sentence_config == open_init_checkpoint(
        str(source)).sentence_config
    assert (tmp_path / "run" / "vocab.txt").read_text() == (source / "vocab.txt").read_text()
    assert json.load(open(tmp_path / "run" / "tokenizer_config.json")) == {"do_lower_case": True}


def test_data_of_another_vocabulary_stops_naming_both(dirs, tmp_path):
    # Same text, made with the vocabulary before the extension.
    other = _data("emma_chapter1.txt", str(tmp_path / "old.tfrecord"),
                  os.path.join(dirs["source"], "vocab.txt"))
    configurables.parse_gin(["pretrain.gin"], ["BertPretrainer.next_sentence = False"])
    configurables.encoder_from_directory(dirs["extended"])
    with pytest.raises(ValueError, match=r"old\.tfrecord\.meta\.json\) says the data was made "
                                         r"with the WordPiece .*source/vocab\.txt .* but the "
                                         r"model's tokenizer is the WordPiece .*extended/vocab\.txt"
                                         r" .*, from --init_checkpoint=.*extended: "):
        run_pretraining(other, str(tmp_path / "run"), configurables.pretrainer,
                        init_checkpoint=dirs["extended"], print_fn=lambda _: None,
                        train_batch_size=4, max_seq_length=SEQ,
                        max_predictions_per_seq=PREDICTIONS, num_train_steps=1)
    assert not os.path.exists(tmp_path / "run")


def test_a_directory_without_heads_starts_a_fresh_head_with_a_note(dirs, tmp_path):
    encoder = load_pretrainer(dirs["extended"], next_sentence=False).encoder
    bare = str(tmp_path / "bare")
    save_pretrained(bare, encoder, vocab_file=os.path.join(dirs["extended"], "vocab.txt"),
                    do_lower_case=True)
    configurables.parse_gin(["pretrain.gin"], ["BertPretrainer.next_sentence = False"])
    configurables.encoder_from_directory(bare)
    pretrainer = configurables.pretrainer()
    note = load_init_checkpoint(pretrainer, bare)
    assert note.startswith(f"encoder only: {bare} has no masked-LM head (pretrainer.weights.h5), "
                           "so the head starts fresh")
    for ours, theirs in zip(pretrainer.encoder.get_weights(), encoder.get_weights()):
        np.testing.assert_array_equal(ours, theirs)


def test_init_checkpoint_is_opened_by_open_model_dir_and_needs_no_vocabulary(dirs, tmp_path):
    # The one door's checks and messages, naming the flag.
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=r"--init_checkpoint=.*empty is neither a "
                                                r"fine-tuned directory .*bert_config.json is "
                                                r"missing"):
        open_init_checkpoint(str(empty))
    # Pre-training reads token ids: a directory without a vocabulary continues (its
    # vocabulary then comes from the data's sidecar or --vocab_file, as before).
    encoder = load_pretrainer(dirs["extended"], next_sentence=False).encoder
    ids_only = str(tmp_path / "ids_only")
    save_pretrained(ids_only, encoder)
    opened = open_init_checkpoint(ids_only)
    assert (opened.vocab_file, opened.vocabulary) == (None, [])
    assert type(opened.encoder()) is type(encoder)
    with pytest.raises(ValueError, match=r"ids_only has no vocab.txt or tokenizer.json to "
                                         r"tokenize with"):
        opened.preprocessor(16)
    extended = open_init_checkpoint(dirs["extended"])
    assert extended.vocab_file == os.path.join(dirs["extended"], "vocab.txt")
    assert extended.do_lower_case is True


def test_a_modernbert_context_extension_sets_length_and_theta_but_no_size(tmp_path):
    from kbert.models import ModernBertEncoder

    directory = str(tmp_path / "modernbert")
    encoder = ModernBertEncoder(vocabulary_size=1135, num_layers=3, num_heads=2, hidden_dim=16,
                                intermediate_dim=24, max_sequence_length=64,
                                local_attention_window=8, global_rope_theta=10000.0)
    save_pretrained(directory, encoder,
                    vocab_file=os.path.join(TESTDATA, "bpe_tokenizer.json"))
    # The documented phase: gin/modernbert_context_extension.gin (8,192 tokens, theta 160,000).
    configurables.parse_gin(["modernbert_context_extension.gin"])
    bound = configurables.encoder_from_directory(directory)
    continued = configurables.pretrainer().encoder
    assert (continued.max_sequence_length, continued.global_rope_theta) == (8192, 160000.0)
    assert gin.query_parameter("run_pretraining.max_seq_length") == 8192
    assert "max_sequence_length" not in bound and bound["num_layers"] == 3
    assert (continued.num_layers, continued.hidden_dim, continued.local_attention_window) == (
        3, 16, 8)
    gin.clear_config()
    # A size is still the directory's: one error names it.
    configurables.parse_gin(["continue_pretraining.gin"], ["ModernBertEncoder.num_layers = 4"])
    with pytest.raises(ValueError, match=r"num_layers: directory 3, gin 4"):
        configurables.encoder_from_directory(directory)
