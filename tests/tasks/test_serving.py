"""ServingModule: each signature declared once, as a record; the signatures and their halves made from it."""

import numpy as np
import pytest
import tensorflow as tf

from tests import serving_testlib as lib
from tests.conftest import tiny_encoder_kwargs
from kbert.data.text_preprocessor import TextPreprocessor
from kbert.models import BertEncoder
from kbert.tasks import RetrievalConfig
from kbert.tasks import RetrievalTask
from kbert.tasks.serving import Signature
from kbert.tasks.serving import text_spec

TEXTS = tf.constant(["a gorgeous , witty film", "dull"])


def test_a_signature_is_halves_around_the_model_or_a_body():
    def half(*args):
        return {}

    assert Signature([text_spec("text")], before=half, after=half).splits
    assert not Signature([text_spec("text")], body=half).splits
    for wrong in (dict(before=half), dict(after=half), dict(before=half, after=half, body=half), {}):
        with pytest.raises(ValueError, match="either before and after, or a body"):
            Signature([text_spec("text")], **wrong)


def test_records_listed_once_give_the_signatures_and_the_halves_that_split():
    """A retrieval model with separate towers: the query tower's signatures split around it,
    the document tower's stays whole; a record under two names is one function."""
    encoder = BertEncoder(**tiny_encoder_kwargs(vocabulary_size=lib.vocab_size(), max_sequence_length=32))
    model = RetrievalTask(RetrievalConfig(shared_towers=False)).build_model(encoder)
    document_encoder = model.document_tower.encoder
    document_encoder.set_weights([w * 0.5 for w in document_encoder.get_weights()])
    preprocessor = TextPreprocessor.from_vocab_file(lib.VOCAB, True, 16)
    module = RetrievalTask().serving_module(model, preprocessor)
    signatures = module.signatures()
    assert sorted(signatures) == ["document", "embeddings", "query", "serve_ids", "serving_default"]
    assert signatures["query"] is signatures["serving_default"]
    assert module.signatures()["embeddings"] is signatures["embeddings"]  # made once
    split = module.split_signatures()
    assert sorted(split) == ["embeddings", "query", "serve_ids", "serving_default"]
    # One `before` for the text signatures, one `after` for those returning only the embedding.
    assert split["serving_default"][0] is split["embeddings"][0] is split["query"][0]
    assert split["serving_default"][1] is split["serve_ids"][1] is not split["embeddings"][1]
    assert module.truncation_length == 16
    packed = preprocessor.pack([preprocessor.tokenize(TEXTS)])
    for name, tower in (("serving_default", model.query_tower), ("document", model.document_tower)):
        np.testing.assert_allclose(signatures[name](text=TEXTS)["embedding"].numpy(),
                                   tower(packed, training=False).numpy(), atol=1e-6)
    assert not np.allclose(signatures["document"](text=TEXTS)["embedding"].numpy(),
                           signatures["query"](text=TEXTS)["embedding"].numpy(), atol=1e-3)
    usage = signatures["embeddings"](text=TEXTS)
    np.testing.assert_array_equal(usage["num_tokens"].numpy(), packed["padding_mask"].numpy().sum(1))
