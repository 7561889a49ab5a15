"""Helpers shared by the fine-tuning tests: a tiny pre-trained directory over a character vocabulary."""

import os
import string

from tests.conftest import REPO
from tests.conftest import tiny_encoder_kwargs

TESTDATA = os.path.join(REPO, "tests", "testdata", "finetune")
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def character_vocabulary() -> list[str]:
    """Specials, then every printable character as a word start and as `##` continuation.

    WordPiece over it splits any ASCII text into characters, so tiny tests
    run on real text without a real vocabulary.
    """
    characters = [c for c in string.printable if not c.isspace()]
    return SPECIAL + characters + ["##" + c for c in characters]


def make_tiny_pretrained(directory, max_sequence_length=96, do_lower_case=True, seed=0):
    """Writes a tiny pre-trained directory (encoder, vocab.txt, tokenizer_config.json)."""
    import keras

    from kbert.models import BertEncoder
    from kbert.checkpoints import save_pretrained

    keras.utils.set_random_seed(seed)
    vocabulary = character_vocabulary()
    os.makedirs(directory, exist_ok=True)
    vocab_file = os.path.join(directory, "vocab.txt")
    with open(vocab_file, "w", encoding="utf-8") as f:
        f.write("\n".join(vocabulary) + "\n")
    encoder = BertEncoder(**tiny_encoder_kwargs(vocabulary_size=len(vocabulary),
                                                max_sequence_length=max_sequence_length))
    save_pretrained(directory, encoder, vocab_file=vocab_file, do_lower_case=do_lower_case)
    return str(directory)


def count_train_step_traces(monkeypatch) -> list:
    """Records each trace of Keras' `train_step` (it runs as Python only while traced).

    Returns:
        The list the traces append to: the class name of each traced model.
    """
    import keras

    traces = []
    original = keras.Model.train_step

    def traced(self, data):
        traces.append(type(self).__name__)
        return original(self, data)

    monkeypatch.setattr(keras.Model, "train_step", traced)
    return traces
