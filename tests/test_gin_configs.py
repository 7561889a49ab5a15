"""Every gin file builds the sizes it names, with parameter counts from a closed form."""

import os

import gin
import pytest

from tests.conftest import REPO
from kbert import configurables

GIN_FILES = sorted(f for f in os.listdir(os.path.join(REPO, "gin")) if f.endswith(".gin"))
SIZES = {  # L, H, A, I
    "base.gin": (12, 768, 12, 3072),
    "large.gin": (24, 1024, 16, 4096),
    "medium.gin": (8, 512, 8, 2048),
    "small.gin": (4, 512, 8, 2048),
    "mini.gin": (4, 256, 4, 1024),
    "tiny.gin": (2, 128, 2, 512),
}


def encoder_parameters(L, H, I, V=30522, P=512, S=2):
    embeddings = V * H + P * H + S * H + 2 * H
    attention = 4 * (H * H + H)
    feed_forward = H * I + I + I * H + H
    layer = attention + feed_forward + 2 * (2 * H)
    pooler = H * H + H
    return embeddings + L * layer + pooler


def pretrainer_parameters(L, H, I, V=30522):
    mlm_head = H * H + H + 2 * H + V
    nsp_head = 2 * H + 2
    return encoder_parameters(L, H, I, V) + mlm_head + nsp_head


# Run settings rather than model sizes; tested beside their binaries.
RUN_GIN_FILES = {"finetune.gin"}


def test_every_gin_file_is_covered():
    assert sorted(set(GIN_FILES) - RUN_GIN_FILES) == sorted(SIZES)


def test_closed_form_matches_the_paper():
    assert encoder_parameters(12, 768, 3072) == 109_482_240
    assert pretrainer_parameters(12, 768, 3072) == 110_106_428
    assert encoder_parameters(24, 1024, 4096) == 335_141_888


@pytest.mark.parametrize("gin_file", ["tiny.gin", "mini.gin", "small.gin", "medium.gin"])
def test_gin_file_builds_its_sizes(gin_file):
    L, H, A, I = SIZES[gin_file]
    configurables.parse_gin([f"gin/{gin_file}"])
    pretrainer = configurables.BertPretrainer()
    encoder = pretrainer.encoder
    assert (encoder.num_layers, encoder.hidden_dim, encoder.num_heads, encoder.intermediate_dim) == (L, H, A, I)
    assert encoder.count_params() == encoder_parameters(L, H, I)
    assert pretrainer.count_params() == pretrainer_parameters(L, H, I)


def test_gin_params_override_and_include_from_other_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    configurables.parse_gin(["tiny.gin"], ["BertEncoder.vocabulary_size = 1000",
                                          "BertPretrainer.next_sentence = False"])
    pretrainer = configurables.BertPretrainer()
    assert pretrainer.encoder.vocabulary_size == 1000 and not pretrainer.next_sentence
    assert "BertEncoder.num_layers = 2" in gin.operative_config_str()


def test_missing_gin_file_lists_paths_searched(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"'nope.gin' not found; searched: .*gin/nope.gin"):
        configurables.parse_gin(["nope.gin"])


def test_misspelled_binding_is_named():
    with pytest.raises(ValueError, match="num_layer"):
        configurables.parse_gin(["tiny.gin"], ["BertEncoder.num_layer = 4"])
    with pytest.raises(ValueError, match="BertEncodr"):
        configurables.parse_gin(["tiny.gin"], ["BertEncodr.num_layers = 4"])
