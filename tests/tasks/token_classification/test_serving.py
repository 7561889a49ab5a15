"""NER serving: whitespace words, windows over long texts, and the `words` signature."""

import numpy as np
import pytest
import tensorflow as tf

from tests import serving_testlib as lib
from kbert.data import TextPreprocessor
from kbert.data.words import split_words
from kbert.tasks import NerConfig
from kbert.tasks import NerTask
from kbert.tasks.token_classification.serving import TokenClassifierServingModule
from kbert.tasks.token_classification.serving import word_windows

LONG_TEXT = lib.TEXTS[3] + " , said O'Neil of the U.S. on 1996-08-22 ."


def _preprocessor(max_seq_length):
    return TextPreprocessor.from_vocab_file(lib.VOCAB, True, max_seq_length)


@pytest.mark.parametrize("stride", [1, 3, 5, 10])
def test_every_word_is_tagged_once_in_its_max_context_window(stride):
    preprocessor = _preprocessor(12)
    texts = [LONG_TEXT, "", "short one"]
    windows = word_windows(preprocessor, split_words(tf.constant(texts)), stride)
    tokenizer = lib.hf_tokenizer()
    example = windows["example"].numpy().tolist()
    token_ids = windows["token_ids"].to_list()
    tagged = windows["tagged"].to_list()
    word = windows["word"].numpy()
    piece_index = windows["piece_index"].to_list()
    word_base = 0
    for row, text in enumerate(texts):
        pieces, first_pieces = [], []
        for w in text.split():
            first_pieces.append(len(pieces))
            pieces += tokenizer.encode(w, add_special_tokens=False).ids
        spans = lib.run_squad_spans(len(pieces), 10, stride)
        mine = [i for i, e in enumerate(example) if e == row]
        assert len(mine) == len(spans)
        for (start, length), index in zip(spans, mine):
            assert token_ids[index] == [lib.CLS] + pieces[start:start + length] + [lib.SEP]
            expected = [start + i in first_pieces and lib.max_context_window(spans, start + i) == index - mine[0]
                        for i in range(length)]
            assert tagged[index] == expected
        # Each word is tagged exactly once, and tags come back to it.
        tagged_words = sorted(word[p] for index in mine for p, t in zip(piece_index[index], tagged[index]) if t)
        assert tagged_words == list(range(word_base, word_base + len(first_pieces)))
        word_base += len(first_pieces)
    assert len(lib.hf_tokenizer().encode(LONG_TEXT).ids) > 3 * 10  # several windows


@pytest.fixture(scope="module")
def module():
    model, config = lib.build_task_model("ner")
    return TokenClassifierServingModule(model, _preprocessor(config.max_seq_length), config.label_names)


def _decoded(outputs):
    num_words = outputs["num_words"].numpy()
    return [([w.decode() for w in outputs["words"].numpy()[i][:n]],
             [t.decode() for t in outputs["tags"].numpy()[i][:n]]) for i, n in enumerate(num_words)]


def test_text_signature_tags_like_the_python_reference_with_windows(module):
    texts = [LONG_TEXT, "", "John lives in Zürich"]
    outputs = module.signatures()["serving_default"](tf.constant(texts))
    expected = lib.reference_ner(module.model, texts, 12, ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"])
    assert _decoded(outputs) == expected
    assert module.window_stride == 5


def test_words_signature_echoes_words_and_tags_them_as_the_text_signature(module):
    signatures = module.signatures()
    rows = [LONG_TEXT.split(), ["John", "lives", "in", "Zürich"], []]
    width = max(len(row) for row in rows) + 2
    padded = [row + [""] * (width - len(row)) for row in rows]
    by_words = _decoded(signatures["words"](tf.constant(padded)))
    by_text = _decoded(signatures["serving_default"](tf.constant([" ".join(row) for row in rows])))
    assert by_words == by_text
    assert [words for words, _ in by_words] == rows


def test_words_signature_keeps_inner_empty_and_pieceless_words(module):
    words = tf.constant([["John", "", "New York", "\x00", "", ""]])
    (got_words, tags), = _decoded(module.signatures()["words"](words))
    # Trailing "" is padding; an inner "" and a word with no pieces get the first tag.
    assert got_words == ["John", "", "New York", "\x00"]
    assert tags[1] == tags[3] == "O"
    assert "" not in tags


def test_window_stride_reaches_the_module_and_survives_task_config():
    task = NerTask(NerConfig(window_stride=3))
    restored = NerTask.from_description(task.describe())
    assert restored.config.window_stride == 3
    model, config = lib.build_task_model("ner")
    module = restored.serving_module(model, _preprocessor(config.max_seq_length))
    assert module.window_stride == 3
    assert NerTask.from_description({"task": "ner", "doc_stride": 128}).config.window_stride is None


def test_serve_ids_is_unchanged_per_position_tagging(module):
    inputs = lib.reference_inputs(["John lives in Zürich"], None, 12)
    outputs = module.signatures()["serve_ids"](**{k: tf.constant(v) for k, v in inputs.items()})
    np.testing.assert_allclose(outputs["logits"].numpy(),
                               np.asarray(module.model(inputs, training=False)), atol=1e-5)


def test_a_long_text_gets_the_served_tags_in_process(module):
    # Evaluation, predictions and kbert-predict read a text longer than one window as the
    # served model does: windows 5 pieces apart, each word from its max-context window.
    task = NerTask(label_names=[t.decode() for t in module.label_names.numpy()])
    texts = [LONG_TEXT, "", "John lives in Zürich"]
    served = _decoded(module.signatures()["serving_default"](tf.constant(texts)))
    examples = task.examples_from_values(texts)
    in_process, _ = task.tag_words(module.model, examples, module.preprocessor, batch_size=4)
    assert in_process == [tags for _, tags in served]
    # Read as training reads it, rows of whole words each alone, the text is tagged otherwise:
    # the comparison above is about the windows.
    rows = task.training_rows(examples[:1], module.preprocessor)
    row_tags, _ = task.tag_words(module.model, rows, module.preprocessor, batch_size=4)
    assert len(rows) >= 3 and sum(row_tags, []) != in_process[0]
