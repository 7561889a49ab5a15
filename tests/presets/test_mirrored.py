"""The task models under MirroredStrategy over two logical CPUs, in a process of their own."""

import json
import os

import numpy as np
import pytest

import kbert
from tests import forked_python
from tests.conftest import REPO
from tests.training.pretraining_data import cpu_only_env

HERE = os.path.dirname(os.path.abspath(__file__))
TEXTS = ["a gorgeous , witty film", "a dull , lifeless film", "witty and gorgeous",
         "lifeless and dull"]


@pytest.mark.slow
def test_built_in_a_strategy_scope_they_train_under_it(pretrained_dirs, tmp_path):
    result = forked_python.run([os.path.join(HERE, "mirrored_run.py"), pretrained_dirs["bert"],
                                str(tmp_path)], cwd=REPO, timeout=600, env=cpu_only_env())
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.load(open(tmp_path / "result.json"))
    assert outcome["replicas"] == 2 and outcome["mirrored"]
    for name in ("classifier_losses", "tagger_losses"):
        losses = outcome[name]
        assert losses[-1] < 0.6 * losses[0], (name, losses)
    assert outcome["refusal"] == (
        "TextClassifier.fit: batch_size=3 is not divisible by the 2 replicas of the distribution "
        "strategy; use a multiple of 2 so that every replica gets the same shape.")
    assert len(outcome["tagger_first_tags"]) == 5  # a tag per word of "a gorgeous , witty film"
    assert outcome["mlm_mirrored"] and np.isfinite(outcome["mlm_losses"]).all()
    assert outcome["mlm_losses"][1] != outcome["mlm_losses"][0]  # the masked-LM head trains
    np.testing.assert_allclose(  # the same vectors as without a strategy
        kbert.TextEmbedder.from_preset(pretrained_dirs["bert"], max_seq_length=16).predict(TEXTS),
        outcome["embeddings"], atol=1e-5)
    # Saved from the mirrored variables, read back under the default strategy.
    again = kbert.TextClassifier.from_preset(str(tmp_path / "classifier"))
    predicted = again.predict(TEXTS)
    np.testing.assert_allclose(predicted, outcome["classifier_predictions"], atol=1e-5)
    assert predicted.argmax(axis=-1).tolist() == [1, 0, 1, 0]
