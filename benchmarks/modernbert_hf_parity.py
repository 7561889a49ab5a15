"""ModernBERT against Hugging Face `transformers` itself, both directions, on random weights.

kbert's tests check its ModernBERT against an independent float64 numpy implementation of
Hugging Face's definition (tests/checkpoints/test_modernbert_import.py). This script checks
it against `transformers`' own `ModernBertForMaskedLM`, where torch and transformers are
installed (neither is a kbert dependency; the three steps may run on different machines):

1. kbert side:  PYTHONPATH=. python benchmarks/modernbert_hf_parity.py prepare --work_dir=W
   A tiny kbert ModernBERT pre-trainer with random weights of a size that makes attention
   and the window matter (4 blocks, global every 3rd, window 4 on 11 tokens, RoPE thetas
   1000 and 50) is saved as a kbert directory and written by `kbert-convert --to=hf` to
   W/kbert_to_hf. Token ids with one padded row go to W/ids.npz; kbert's masked-LM logits
   at every position and its sequence output to W/kbert_outputs.npz.
2. transformers side:  python benchmarks/modernbert_hf_parity.py reference --work_dir=W --out_dir=O
   `ModernBertForMaskedLM.from_pretrained(W/kbert_to_hf)` runs the same ids
   (O/hf_of_kbert.npz). A second, seeded random `ModernBertForMaskedLM` of another config
   (2 global every 2, window 6, its own thetas) is written by `save_pretrained` to
   O/hf_random (transformers' own config.json form and safetensors) with its outputs
   (O/hf_random.npz).
3. kbert side:  PYTHONPATH=. python benchmarks/modernbert_hf_parity.py compare --work_dir=W --out_dir=O
   `kbert-convert --source=hf` reads O/hf_random (the test tokenizer added: the vocabulary
   size is the tokenizer's), and the largest differences at real tokens are printed for
   both directions (sequence output and logits), with the parameter counts, and written to
   benchmarks/results/modernbert_hf_parity.json (benchmarks/result_file.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import result_file  # noqa: E402

TOKENIZER = os.path.join(REPO, "tests", "testdata", "bpe_tokenizer.json")
LENGTH = 11


def _ids(vocabulary_size: int) -> dict:
    rng = np.random.default_rng(0)
    token_ids = rng.integers(5, vocabulary_size, size=(3, LENGTH)).astype("int32")
    padding_mask = np.ones((3, LENGTH), "int32")
    padding_mask[2, 7:] = 0
    token_ids[2, 7:] = 0
    return {"token_ids": token_ids, "padding_mask": padding_mask}


def _kbert_outputs(directory: str, ids: dict) -> dict:
    from kbert import checkpoints

    encoder = checkpoints.load_encoder(directory)
    pretrainer = checkpoints.load_pretrainer(directory)
    ids = {**ids, "segment_ids": np.zeros_like(ids["token_ids"])}  # ModernBERT ignores them
    positions = np.tile(np.arange(LENGTH, dtype="int32"), (len(ids["token_ids"]), 1))
    return {"sequence_output": encoder(ids)["sequence_output"].numpy(),
            "logits": pretrainer({**ids, "mask_positions": positions})["mlm"].numpy(),
            "parameters": np.array(pretrainer.count_params())}


def prepare(work_dir: str) -> None:
    import keras

    from kbert.checkpoints import save_pretrained
    from kbert.data import read_tokenizer_json
    from kbert.models import ModernBertEncoder
    from kbert.models import ModernBertPretrainer
    from tests.models.modernbert.random_weights import randomize

    os.makedirs(work_dir, exist_ok=True)
    vocabulary_size = len(read_tokenizer_json(TOKENIZER).vocabulary) + 3
    keras.utils.set_random_seed(0)
    encoder = ModernBertEncoder(vocabulary_size=vocabulary_size, num_layers=4, num_heads=4,
                                hidden_dim=32, intermediate_dim=37, max_sequence_length=64,
                                local_attention_window=4, global_attention_every_n_layers=3,
                                global_rope_theta=1000.0, local_rope_theta=50.0)
    pretrainer = ModernBertPretrainer(encoder)
    randomize(pretrainer, seed=1)  # large enough that attention and the window matter
    kbert_dir = os.path.join(work_dir, "kbert")
    save_pretrained(kbert_dir, encoder, vocab_file=TOKENIZER, pretrainer=pretrainer)
    _convert(["--source=kbert", f"--kbert_dir={kbert_dir}", "--to=hf",
              f"--output_dir={os.path.join(work_dir, 'kbert_to_hf')}"])
    ids = _ids(vocabulary_size)
    np.savez(os.path.join(work_dir, "ids.npz"), **ids)
    np.savez(os.path.join(work_dir, "kbert_outputs.npz"), **_kbert_outputs(kbert_dir, ids))
    print(f"prepared {work_dir}: {sorted(os.listdir(work_dir))}")


def _convert(flags: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "kbert.bin.convert", "--overwrite", *flags],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": REPO},
                            capture_output=True, text=True, timeout=600)
    if result.returncode:
        sys.exit(result.stderr[-2000:])
    print(result.stdout.strip().splitlines()[-1] if result.stdout.strip() else "converted")


def _hf_outputs(model, ids: dict) -> dict:
    import torch

    with torch.no_grad():
        token_ids = torch.tensor(ids["token_ids"], dtype=torch.long)
        mask = torch.tensor(ids["padding_mask"], dtype=torch.long)
        logits = model(input_ids=token_ids, attention_mask=mask).logits
        hidden = model.model(input_ids=token_ids, attention_mask=mask).last_hidden_state
    return {"sequence_output": hidden.numpy(), "logits": logits.numpy(),
            "parameters": np.array(sum(p.numel() for p in model.parameters()))}


def reference(work_dir: str, out_dir: str) -> None:
    import torch
    import transformers
    from transformers import ModernBertConfig
    from transformers import ModernBertForMaskedLM

    os.makedirs(out_dir, exist_ok=True)
    ids = dict(np.load(os.path.join(work_dir, "ids.npz")))
    model = ModernBertForMaskedLM.from_pretrained(os.path.join(work_dir, "kbert_to_hf"),
                                                  attn_implementation="eager").eval()
    np.savez(os.path.join(out_dir, "hf_of_kbert.npz"), **_hf_outputs(model, ids))

    torch.manual_seed(0)
    config = ModernBertConfig(vocab_size=model.config.vocab_size, hidden_size=32,
                              num_hidden_layers=4, num_attention_heads=4, intermediate_size=37,
                              max_position_embeddings=64, local_attention=6,
                              global_attn_every_n_layers=2, global_rope_theta=500.0,
                              local_rope_theta=20.0, initializer_range=0.3,
                              pad_token_id=0, attn_implementation="eager")
    random_model = ModernBertForMaskedLM(config).eval()
    random_dir = os.path.join(out_dir, "hf_random")
    random_model.save_pretrained(random_dir)
    np.savez(os.path.join(out_dir, "hf_random.npz"), **_hf_outputs(random_model, ids))
    with open(os.path.join(out_dir, "versions.json"), "w") as f:
        json.dump({"torch": torch.__version__, "transformers": transformers.__version__}, f)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: wrote "
          f"{sorted(os.listdir(out_dir))}; hf_random/config.json keys: "
          f"{sorted(json.load(open(os.path.join(random_dir, 'config.json'))))}")


def _report(name: str, ours: dict, reference_outputs: dict, mask: np.ndarray) -> dict:
    """Prints and returns kbert's largest differences from transformers' outputs at real tokens."""
    real = mask == 1
    worst = {}
    for key in ("sequence_output", "logits"):
        difference = float(np.max(np.abs(ours[key][real] - reference_outputs[key][real])))
        scale = float(np.max(np.abs(reference_outputs[key][real])))
        worst[key] = difference
        print(f"  {name}: {key:15s} max |kbert - transformers| at real tokens {difference:.2e} "
              f"(largest value {scale:.2f})")
    print(f"  {name}: parameters kbert {int(ours['parameters']):,}, transformers "
          f"{int(reference_outputs['parameters']):,}")
    return worst


def compare(work_dir: str, out_dir: str) -> dict:
    ids = dict(np.load(os.path.join(work_dir, "ids.npz")))
    versions = json.load(open(os.path.join(out_dir, "versions.json")))
    print(f"reference: transformers {versions['transformers']}, torch {versions['torch']}")
    figures = {"versions": versions}
    figures["kbert_to_transformers"] = _report("kbert -> transformers", dict(np.load(os.path.join(work_dir, "kbert_outputs.npz"))),
                    dict(np.load(os.path.join(out_dir, "hf_of_kbert.npz"))), ids["padding_mask"])
    hf_dir = os.path.join(work_dir, "hf_random")
    shutil.rmtree(hf_dir, ignore_errors=True)
    shutil.copytree(os.path.join(out_dir, "hf_random"), hf_dir)
    shutil.copy(TOKENIZER, os.path.join(hf_dir, "tokenizer.json"))
    converted = os.path.join(work_dir, "hf_random_kbert")
    _convert(["--source=hf", f"--hf_dir={hf_dir}", f"--output_dir={converted}"])
    figures["transformers_to_kbert"] = _report(
        "transformers -> kbert", _kbert_outputs(converted, ids),
        dict(np.load(os.path.join(out_dir, "hf_random.npz"))), ids["padding_mask"])
    figures["largest_abs_difference"] = max(
        value for key in ("kbert_to_transformers", "transformers_to_kbert")
        for value in figures[key].values())
    print(f"largest difference, both directions: {figures['largest_abs_difference']:.2e}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["prepare", "reference", "compare"])
    parser.add_argument("--out_dir")
    result_file.add_flags(parser, "modernbert_hf_parity")
    args = parser.parse_args()
    if not args.work_dir:
        parser.error("--work_dir is required: the three steps share it")
    if args.step == "prepare":
        prepare(args.work_dir)
    elif args.step == "reference":
        reference(args.work_dir, args.out_dir)
    else:
        load = os.getloadavg()[0]
        figures = compare(args.work_dir, args.out_dir)
        worst = figures["largest_abs_difference"]
        result_file.write_result(
            args, name="modernbert_hf_parity", title="ModernBERT parity with transformers",
            area="pre-training", load_average_at_start=load,
            headline=f"kbert and transformers' ModernBERT agree within {worst:.2e} at every real "
                     "token, both conversion directions, float32.",
            reference=f"Hugging Face transformers {figures['versions']['transformers']} "
                      "ModernBertForMaskedLM on the same random weights",
            aim="agreement to float32 round-off in both directions (<= 1e-4)", met=worst <= 1e-4,
            figures=figures, method=__doc__.split("\n\n", 1)[1])


if __name__ == "__main__":
    main()
