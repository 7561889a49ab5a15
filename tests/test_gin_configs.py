"""Every gin file builds the sizes it names, with parameter counts from a closed form."""

import os

import gin
import pytest

from tests.conftest import REPO
from kbert import configurables

GIN_FILES = sorted(f for f in os.listdir(os.path.join(REPO, "gin")) if f.endswith(".gin"))
# Run settings (not model sizes), included by base.gin.
RUN_SETTINGS = {"pretrain.gin", "finetune.gin", "distill.gin",  # run settings, not model sizes
                "pretrain_budget.gin", "continue_pretraining.gin", "modernbert_pretrain.gin",
                "modernbert_context_extension.gin"}
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


# ELECTRA: the discriminator's L, H, A, I and embedding width E.
ELECTRA_SIZES = {
    "electra_small.gin": (12, 256, 4, 1024, 128),
    "electra_base.gin": (12, 768, 12, 3072, 768),
}


def electra_parameters(L, H, I, E, generator_fraction=0.25, V=30522, P=512, S=2):
    """Discriminator and whole ELECTRA pre-trainer (generator sharing the embeddings)."""
    def encoder(L, H, I, embeddings):
        projection = E * H + H if E != H else 0
        layer = 4 * (H * H + H) + (H * I + I + I * H + H) + 2 * (2 * H)
        return embeddings + projection + L * layer + H * H + H

    embeddings = V * E + P * E + S * E + 2 * E
    G = round(H * generator_fraction)
    discriminator = encoder(L, H, I, embeddings)
    generator = encoder(L, G, 4 * G, 0)  # the embeddings are the discriminator's
    mlm_head = G * E + E + 2 * E + V  # to the tied table's width, LayerNorm, output bias
    rtd_head = H * H + H + H + 1
    return discriminator, discriminator + generator + mlm_head + rtd_head


# Built and counted against Hugging Face's numbers in tests/models/modernbert/.
MODERNBERT_SIZES = {"modernbert_base.gin", "modernbert_large.gin", "modernbert_tiny.gin"}


def test_every_gin_file_is_covered():
    assert GIN_FILES == sorted(set(SIZES) | RUN_SETTINGS | set(ELECTRA_SIZES) | MODERNBERT_SIZES)


def test_distill_gin_binds_every_distillation_hyperparameter_and_takes_a_student_size_file():
    import inspect

    from kbert.training.distillation import loop as distillation

    configurables.parse_gin(["gin/distill.gin", "gin/mini.gin"])
    bound = {name for (_, configurable), values in gin.config._CONFIG.items()
             if configurable.endswith("run_distillation") for name in values}
    hyperparameters = {name for name in inspect.signature(distillation.run_distillation).parameters
                       if name not in distillation.RUNTIME_ARGUMENTS}
    assert bound == hyperparameters
    # The student gin file sizes the student; the teacher's vocabulary and positions win.
    encoder = configurables.BertEncoder(vocabulary_size=99, max_sequence_length=64)
    assert (encoder.num_layers, encoder.hidden_dim, encoder.num_heads, encoder.intermediate_dim,
            encoder.vocabulary_size, encoder.max_sequence_length) == (4, 256, 4, 1024, 99, 64)
    gin.clear_config()


def test_electra_small_gin_builds_its_sizes_and_masking():
    L, H, A, I, E = ELECTRA_SIZES["electra_small.gin"]
    configurables.parse_gin(["gin/electra_small.gin"])
    pretrainer = configurables.pretrainer()
    encoder, generator = pretrainer.encoder, pretrainer.generator
    assert (encoder.num_layers, encoder.hidden_dim, encoder.num_heads, encoder.intermediate_dim,
            encoder.embedding_width) == (L, H, A, I, E)
    assert (generator.num_layers, generator.hidden_dim, generator.num_heads) == (L, H // 4, 1)
    # 13.5M: the paper's ELECTRA-Small discriminator (14M with the generator).
    assert (encoder.count_params(), pretrainer.count_params()) == electra_parameters(L, H, I, E)
    assert encoder.count_params() == 13_548_800
    masking = {name: gin.query_parameter(name) for name in (
        "run_pretraining.masking", "run_pretraining.max_predictions_per_seq",
        "MaskingConfig.mask_token_rate", "MaskingConfig.random_token_rate",
        "run_pretraining.learning_rate", "run_pretraining.train_batch_size")}
    assert masking == {"run_pretraining.masking": "dynamic",
                       "run_pretraining.max_predictions_per_seq": 19,
                       "MaskingConfig.mask_token_rate": 0.85,
                       "MaskingConfig.random_token_rate": 0.0,
                       "run_pretraining.learning_rate": 5e-4,
                       "run_pretraining.train_batch_size": 128}


def test_electra_base_gin_names_base_sizes():
    L, H, A, I, E = ELECTRA_SIZES["electra_base.gin"]
    configurables.parse_gin(["gin/electra_base.gin"])
    sizes = [gin.query_parameter(f"BertEncoder.{name}") for name in (
        "num_layers", "hidden_dim", "num_heads", "intermediate_dim", "embedding_dim")]
    assert sizes == [L, H, A, I, None]  # None: embeddings as wide as hidden_dim (E = H)
    assert gin.query_parameter("ElectraPretrainer.generator_hidden_size") == pytest.approx(1 / 3,
                                                                                          abs=1e-4)


def test_run_settings_are_the_papers_base_recipe():
    configurables.parse_gin(["tiny.gin"])
    settings = {name: gin.query_parameter(f"run_pretraining.{name}") for name in (
        "train_batch_size", "num_train_steps", "num_warmup_steps", "learning_rate",
        "max_seq_length", "max_predictions_per_seq", "optimizer", "dtype_policy", "jit_compile")}
    assert settings == {"train_batch_size": 256, "num_train_steps": 1_000_000,
                        "num_warmup_steps": 10_000, "learning_rate": 1e-4, "max_seq_length": 128,
                        "max_predictions_per_seq": 20, "optimizer": "adamw",
                        "dtype_policy": "float32", "jit_compile": False}


def test_budget_recipe_overlays_a_size_file_and_builds_an_mlm_only_pretrainer():
    # gin/pretrain_budget.gin is an overlay: the size comes from the file before it.
    configurables.parse_gin(["gin/mini.gin", "gin/pretrain_budget.gin"])
    settings = {name: gin.query_parameter(f"run_pretraining.{name}") for name in (
        "masking", "max_predictions_per_seq", "train_batch_size", "learning_rate",
        "num_train_steps", "num_warmup_steps", "max_seq_length")}
    assert settings == {"masking": "dynamic", "max_predictions_per_seq": 40,
                        "train_batch_size": 32, "learning_rate": 1e-3, "num_train_steps": 10000,
                        "num_warmup_steps": 600, "max_seq_length": 128}
    # 30% of 128 tokens fit in the 40 prediction slots.
    assert gin.query_parameter("MaskingConfig.masked_lm_prob") * 128 <= 40
    pretrainer = configurables.BertPretrainer()
    assert not pretrainer.next_sentence
    L, H, A, I = SIZES["mini.gin"]
    assert pretrainer.encoder.count_params() == encoder_parameters(L, H, I)
    gin.clear_config()


def _bound(*names):
    return {name: gin.query_parameter(name) for name in names}


def _reference_name(name):
    value = gin.query_parameter(name)
    return value if value is None else value.selector


def test_modernbert_gin_files_bind_the_papers_recipe():
    configurables.parse_gin(["gin/modernbert_base.gin"])
    assert _bound("run_pretraining.optimizer", "run_pretraining.learning_rate",
                  "run_pretraining.weight_decay_rate", "OptimizerConfig.beta_1",
                  "OptimizerConfig.beta_2", "OptimizerConfig.epsilon",
                  "OptimizerConfig.global_clipnorm", "OptimizerConfig.decoupled_weight_decay",
                  "run_pretraining.masking", "MaskingConfig.masked_lm_prob",
                  "run_pretraining.max_seq_length", "run_pretraining.train_batch_size",
                  "run_pretraining.gradient_accumulation_steps", "BatchSizeWarmup.min_batch_size",
                  "BatchSizeWarmup.warmup_tokens", "StableDecay.decay_shape") == {
        "run_pretraining.optimizer": "stable_adamw", "run_pretraining.learning_rate": 8e-4,
        "run_pretraining.weight_decay_rate": 1e-5, "OptimizerConfig.beta_1": 0.9,
        "OptimizerConfig.beta_2": 0.98, "OptimizerConfig.epsilon": 1e-6,
        "OptimizerConfig.global_clipnorm": None, "OptimizerConfig.decoupled_weight_decay": True,
        "run_pretraining.masking": "dynamic", "MaskingConfig.masked_lm_prob": 0.3,
        "run_pretraining.max_seq_length": 1024, "run_pretraining.train_batch_size": 4608,
        "run_pretraining.gradient_accumulation_steps": 6, "BatchSizeWarmup.min_batch_size": 768,
        "BatchSizeWarmup.warmup_tokens": 50_000_000_000, "StableDecay.decay_shape": "1-sqrt"}
    assert [_reference_name(f"run_pretraining.{name}") for name in (
        "optimizer_config", "stable_decay", "batch_size_warmup", "packing")] == [
        "OptimizerConfig", "StableDecay", "BatchSizeWarmup", "PackingConfig"]
    # 30% of 1,024 tokens fit in the prediction slots.
    assert round(0.3 * 1024) <= gin.query_parameter("run_pretraining.max_predictions_per_seq")
    configurables.parse_gin(["gin/modernbert_large.gin"])
    assert _bound("run_pretraining.learning_rate", "run_pretraining.optimizer") == {
        "run_pretraining.learning_rate": 5e-4, "run_pretraining.optimizer": "stable_adamw"}
    # The context-extension phase: 8,192 tokens, theta 160,000, 3e-4, a 1-sqrt decay to zero.
    configurables.parse_gin(["gin/modernbert_context_extension.gin"])
    assert _bound("ModernBertEncoder.max_sequence_length", "ModernBertEncoder.global_rope_theta",
                  "run_pretraining.max_seq_length", "run_pretraining.learning_rate",
                  "StableDecay.decay_fraction", "run_pretraining.optimizer") == {
        "ModernBertEncoder.max_sequence_length": 8192,
        "ModernBertEncoder.global_rope_theta": 160000.0, "run_pretraining.max_seq_length": 8192,
        "run_pretraining.learning_rate": 3e-4, "StableDecay.decay_fraction": 0.1667,
        "run_pretraining.optimizer": "stable_adamw"}
    assert _reference_name("run_pretraining.batch_size_warmup") is None
    gin.clear_config()


def test_the_budget_recipe_after_a_modernbert_size_puts_back_what_the_papers_recipe_binds():
    configurables.parse_gin(["gin/modernbert_base.gin", "gin/pretrain_budget.gin"])
    assert _bound("run_pretraining.optimizer", "run_pretraining.max_seq_length",
                  "run_pretraining.gradient_accumulation_steps",
                  "run_pretraining.save_checkpoints_steps") == {
        "run_pretraining.optimizer": "adamw", "run_pretraining.max_seq_length": 128,
        "run_pretraining.gradient_accumulation_steps": 1,
        "run_pretraining.save_checkpoints_steps": 1000}
    assert [_reference_name(f"run_pretraining.{name}") for name in (
        "optimizer_config", "stable_decay", "batch_size_warmup", "masking_schedule",
        "packing")] == [None] * 5
    gin.clear_config()


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


def test_runtime_data_cannot_be_bound_with_gin():
    with pytest.raises(ValueError, match="model_dir"):
        configurables.parse_gin(["tiny.gin"], ["run_pretraining.model_dir = '/tmp/x'"])


def test_vocabulary_size_comes_from_the_data_unless_the_user_sets_it(tmp_path):
    from tests.training.pretraining_data import write_pretraining_data

    with_sidecar = write_pretraining_data(str(tmp_path / "a.tfrecord"), num_examples=2,
                                          sidecar={"vocab_size": 99, "max_seq_length": 16})
    configurables.parse_gin(["tiny.gin"])
    assert configurables.vocabulary_size_from_data(with_sidecar, None, ["tiny.gin"], []) == 99
    assert configurables.BertPretrainer().encoder.vocabulary_size == 99
    # A value the user binds is kept (the data checks then compare it with the sidecar).
    configurables.parse_gin(["tiny.gin"], ["BertEncoder.vocabulary_size = 1000"])
    assert configurables.vocabulary_size_from_data(
        with_sidecar, None, ["tiny.gin"], ["BertEncoder.vocabulary_size = 1000"]) is None
    assert gin.query_parameter("BertEncoder.vocabulary_size") == 1000
    own = tmp_path / "mine.gin"
    own.write_text("include 'tiny.gin'\nBertEncoder.vocabulary_size = 500\n")
    configurables.parse_gin([str(own)])
    assert configurables.vocabulary_size_from_data(with_sidecar, None, [str(own)], []) is None
    assert gin.query_parameter("BertEncoder.vocabulary_size") == 500
    # Without a sidecar, the lines of --vocab_file.
    without = write_pretraining_data(str(tmp_path / "b.tfrecord"), num_examples=2)
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(f"w{i}\n" for i in range(77)))
    configurables.parse_gin(["tiny.gin"])
    assert configurables.vocabulary_size_from_data(without, str(vocab), ["tiny.gin"], []) == 77
    assert gin.query_parameter("BertEncoder.vocabulary_size") == 77


def test_gin_file_in_another_directory_is_never_the_repos_file_of_that_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # A mistyped experiment directory: gin/base.gin exists, myexp/base.gin does not.
    with pytest.raises(FileNotFoundError, match=r"^--gin_file=myexp/base.gin: gin file "
                                                r"'myexp/base.gin' not found; searched: "):
        configurables.parse_gin(["myexp/base.gin"])
    # `gin/<name>` still names the repo's file from any working directory.
    configurables.parse_gin(["gin/tiny.gin"])
    assert gin.query_parameter("BertEncoder.num_layers") == 2
    (tmp_path / "myexp").mkdir()
    (tmp_path / "myexp" / "base.gin").write_text("include 'tiny.gin'\nBertEncoder.num_layers = 3\n")
    configurables.parse_gin(["myexp/base.gin"])
    assert gin.query_parameter("BertEncoder.num_layers") == 3
