"""Tiny pre-trained directories of every registered architecture, made once per module run.

BERT and ELECTRA's discriminator read the 3003-piece cut of bert-base-uncased's
vocabulary (`tests/testdata/serving_vocab.txt`), ModernBERT the byte-level BPE
`tests/testdata/bpe_tokenizer.json`, so tokenization is real in every test.
"""

import os

import keras
import pytest

from kbert.checkpoints import save_pretrained
from kbert.models import BertEncoder
from kbert.models import ElectraPretrainer
from kbert.models import ModernBertEncoder
from tests.conftest import REPO
from tests.conftest import tiny_encoder_kwargs
from tests.serving_testlib import VOCAB
from tests.serving_testlib import vocab_size

BPE_TOKENIZER = os.path.join(REPO, "tests", "testdata", "bpe_tokenizer.json")
ARCHITECTURES = ("bert", "electra", "modernbert")


def make_pretrained(architecture: str, directory: str, seed: int = 0) -> str:
    """Writes a tiny pre-trained directory of `architecture` (positions: 64) and returns it."""
    keras.utils.set_random_seed(seed)
    if architecture == "modernbert":
        encoder = ModernBertEncoder(vocabulary_size=1135, num_layers=2, num_heads=2, hidden_dim=16,
                                    intermediate_dim=24, max_sequence_length=64,
                                    local_attention_window=8)
        save_pretrained(directory, encoder, vocab_file=BPE_TOKENIZER)
        return directory
    sizes = tiny_encoder_kwargs(vocabulary_size=vocab_size(), max_sequence_length=64)
    if architecture == "electra":  # the discriminator, saved as kbert-pretrain saves it
        pretrainer = ElectraPretrainer(BertEncoder(**sizes, embedding_dim=16))
        save_pretrained(directory, pretrainer.encoder, vocab_file=VOCAB, do_lower_case=True,
                        pretrainer=pretrainer)
        return directory
    save_pretrained(directory, BertEncoder(**sizes), vocab_file=VOCAB, do_lower_case=True)
    return directory


@pytest.fixture(scope="module")
def pretrained_dirs(tmp_path_factory):
    """architecture -> a tiny pre-trained directory of it."""
    root = tmp_path_factory.mktemp("pretrained")
    return {name: make_pretrained(name, str(root / name), seed=i)
            for i, name in enumerate(ARCHITECTURES)}
