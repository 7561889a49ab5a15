"""A ModernBERT pre-trained from scratch with its own byte-level BPE, fine-tuned and exported.

docs/pretraining.md's journey on a tiny scale: `kbert-vocab build --tokenizer=bpe`
(here the library it runs), the data tool with `--tokenizer_file` (its library),
`kbert-pretrain` (the binary: the encoder's vocabulary size comes from the data's
sidecar), then fine-tuning and export; the exported model tokenizes raw text as
Hugging Face `tokenizers` does with the learned file.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
import tokenizers

from kbert.checkpoints import open_model_dir
from kbert.data import create_pretraining_data
from kbert.data import read_pretraining_metadata
from kbert.data.tokenizers import ByteLevelBpeTokenizer
from kbert.data.vocab import build_bpe_tokenizer
from tests import forked_python
from tests.conftest import REPO
from tests.training.pretraining_data import TESTDATA
from tests.training.pretraining_data import subprocess_env

RECIPE = ['run_pretraining.masking = "dynamic"', "MaskingConfig.masked_lm_prob = 0.3",
          "run_pretraining.packing = @PackingConfig()", "run_pretraining.train_batch_size = 8",
          "run_pretraining.max_seq_length = 64", "run_pretraining.max_predictions_per_seq = 24",
          "run_pretraining.num_train_steps = 4", "run_pretraining.num_warmup_steps = 1",
          "run_pretraining.save_checkpoints_steps = 4", "run_pretraining.log_every_steps = 2",
          "run_pretraining.learning_rate = 1e-3",
          # The paper's scale (gin/modernbert_pretrain.gin) does not fit a batch of 8.
          "run_pretraining.gradient_accumulation_steps = 1", "run_pretraining.batch_size_warmup = None"]


@pytest.mark.slow
def test_bpe_modernbert_pretrains_fine_tunes_and_serves_its_tokenizer(tmp_path):
    from kbert.export.saved_model import export_saved_model
    from kbert.training.finetuning import run_finetuning

    tokenizer_file = str(tmp_path / "bpe" / "tokenizer.json")
    os.makedirs(os.path.dirname(tokenizer_file))
    corpus = [os.path.join(TESTDATA, name) for name in ("austen-persuasion-head.txt",
                                                        "emma_chapter1.txt")]
    assert build_bpe_tokenizer(corpus, tokenizer_file, vocab_size=500)["vocab_size"] == 512
    data = str(tmp_path / "train.tfrecord")
    create_pretraining_data(corpus, data, tokenizer_file=tokenizer_file, dupe_factor=1,
                            max_seq_length=64, max_predictions_per_seq=24, next_sentence="none",
                            masking="dynamic", num_workers=1)
    assert read_pretraining_metadata(data)["vocab_size"] == 512

    model_dir = str(tmp_path / "pretrained")
    result = forked_python.run(
        ["-m", "kbert.bin.pretrain", "--gin_file=gin/modernbert_tiny.gin",
         *(f"--gin_params={p}" for p in RECIPE), f"--input_file={data}",
         f"--model_dir={model_dir}"], cwd=REPO, env=subprocess_env(), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "summary: " in result.stdout and "warning" not in result.stdout  # No NSP data.
    # The pre-trained directory carries the tokenizer the data was made with, byte for byte.
    assert sorted(name for name in os.listdir(model_dir) if name.startswith(("tokenizer",
                                                                              "vocab"))) == [
        "tokenizer.json"]
    assert (open(os.path.join(model_dir, "tokenizer.json"), "rb").read()
            == open(tokenizer_file, "rb").read())
    directory = open_model_dir(model_dir)
    assert isinstance(directory.tokenizer, ByteLevelBpeTokenizer)
    assert directory.encoder_config["vocabulary_size"] == 512

    finetuned = str(tmp_path / "sst2")
    run_finetuning("glue", model_dir, finetuned, task_name="sst-2",
                   data_dir=os.path.join(TESTDATA, "finetune", "glue", "SST-2"),
                   num_train_epochs=1, train_batch_size=4, eval_batch_size=8, max_seq_length=32,
                   learning_rate=1e-3, warmup_proportion=0.0, verbose=0, do_eval=False)
    served = tf.saved_model.load(export_saved_model(finetuned, str(tmp_path / "export"),
                                                    check=False))
    text = "Emma smiled at Mr. Knightley — naïvely"
    reference = tokenizers.Tokenizer.from_file(tokenizer_file)
    ids = reference.encode(text).ids  # [CLS] ... [SEP]: 29 ids, none cut at 32.
    # "ï" (two UTF-8 bytes) is two byte tokens: no merge covers it in 512 ids.
    assert len(ids) == 29 and [reference.id_to_token(i) for i in ids[-5:]] == [
        "Ã", "¯", "ve", "ly", "[SEP]"]
    pad = reference.token_to_id("[PAD]")
    token_ids = tf.constant([ids + [pad] * (32 - len(ids))])  # As the export pads to 32.
    by_ids = served.signatures["serve_ids"](
        token_ids=token_ids, segment_ids=tf.zeros_like(token_ids),
        padding_mask=tf.constant([[1] * len(ids) + [0] * (32 - len(ids))]))
    by_text = served.signatures["serving_default"](text=tf.constant([text]))
    np.testing.assert_allclose(by_text["logits"].numpy(), by_ids["logits"].numpy(), rtol=1e-5,
                               atol=1e-6)
