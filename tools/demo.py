"""`make demo`: a quick tour of kbert on this machine.

For now: `kbert-pretrain --dry_run` for every gin file (exact parameter counts),
then a few `model.fit` steps of the tiny pre-trainer on in-memory data, showing
the loss fall. The full raw-text-to-served-model demo replaces this.
"""

import glob
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def dry_runs() -> None:
    for gin_file in sorted(glob.glob(os.path.join(REPO, "gin", "*.gin"))):
        result = subprocess.run(
            [sys.executable, "-m", "kbert.bin.pretrain", f"--gin_file={gin_file}", "--dry_run"],
            capture_output=True, text=True, cwd=REPO,
        )
        if result.returncode:
            sys.exit(f"demo: dry run of {gin_file} failed:\n{result.stderr}")
        print(f"  {os.path.basename(gin_file):12s} {result.stdout.splitlines()[-1]}")


def tiny_fit(steps: int = 30) -> None:
    import keras
    import numpy as np
    import tensorflow as tf

    from kbert.models import BertEncoder, BertPretrainer

    keras.utils.set_random_seed(0)
    batch, seq, predictions, vocab = 8, 32, 5, 1000
    rng = np.random.default_rng(0)
    features = {
        "token_ids": rng.integers(5, vocab, (batch, seq)).astype("int32"),
        "segment_ids": (np.arange(seq) >= seq // 2).astype("int32")[None].repeat(batch, 0),
        "padding_mask": np.ones((batch, seq), "int32"),
        "mask_positions": np.sort(rng.choice(np.arange(1, seq), (batch, predictions)), -1).astype("int32"),
    }
    labels = {"mlm": rng.integers(5, vocab, (batch, predictions)).astype("int32"),
              "nsp": rng.integers(0, 2, (batch, 1)).astype("int32")}
    weights = {"mlm": np.ones((batch, predictions), "float32"), "nsp": np.ones(batch, "float32")}
    model = BertPretrainer(BertEncoder(vocabulary_size=vocab, num_layers=2, num_heads=2,
                                       hidden_dim=128, intermediate_dim=512, max_sequence_length=128))
    model.compile(optimizer=keras.optimizers.AdamW(1e-3))
    dataset = tf.data.Dataset.from_tensors((features, labels, weights)).repeat()
    history = model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0).history["loss"]
    after = model.evaluate(features, labels, sample_weight=weights, verbose=0, return_dict=True)
    print(f"  tiny pre-trainer, {steps} steps on one batch: loss {history[0]:.3f} -> {after['loss']:.3f}")


def main() -> None:
    start = time.time()
    print("[1/2] kbert-pretrain --dry_run for every gin file")
    dry_runs()
    print("[2/2] model.fit of the tiny pre-trainer on in-memory data")
    tiny_fit()
    print(f"demo done in {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
