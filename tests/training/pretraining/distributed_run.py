"""Runs tiny pre-training under a distribution strategy in its own process.

    python distributed_run.py mirrored DATA OUT_DIR        # 2 logical CPUs
    TF_CONFIG=... python distributed_run.py multi_worker DATA OUT_DIR
    EVAL_INPUT_FILE=HELDOUT python distributed_run.py mirrored DATA OUT_DIR  # and evaluate
    ELECTRA_INPUT_FILE=DATA2 python distributed_run.py mirrored DATA OUT_DIR
        # then an ElectraPretrainer on DATA2, packed: OUT_DIR/electra, result_electra.json

Writes OUT_DIR/result_<task>.json with the final step and a checksum of the
weights; the per-step losses are in OUT_DIR/model, for tests to compare with the
default strategy.
(The ELECTRA run shares the process: one TensorFlow start-up and one strategy
for both models.)
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(os.path.dirname(os.path.dirname(HERE)))]  # the repo root: tests.*

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

mode, data_file, out_dir = sys.argv[1:4]
if mode == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

from tests.conftest import tiny_encoder_kwargs  # noqa: E402
from tests.finetune_testing import character_vocabulary  # noqa: E402
from tests.training.pretraining_data import RUN  # noqa: E402

from kbert.models import BertEncoder, BertPretrainer, ElectraPretrainer  # noqa: E402
from kbert.training import create_strategy, run_pretraining  # noqa: E402

if mode == "mirrored":
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    task = "0"
else:
    strategy = create_strategy("multi_worker_mirrored")
    task = str(json.loads(os.environ["TF_CONFIG"])["task"]["index"])
built = []


def build(model="bert"):
    # One layer (as test_step.py's default-strategy runs): a strategy
    # treats every layer alike, and each replica's step is traced, so a layer
    # less is seconds less.
    if model == "electra":
        # Its tests' data are tokenized with the character vocabulary.
        built.append(ElectraPretrainer(BertEncoder(**tiny_encoder_kwargs(
            dropout=0.0, num_layers=1, embedding_dim=16,
            vocabulary_size=len(character_vocabulary())))))
    else:
        built.append(BertPretrainer(BertEncoder(**tiny_encoder_kwargs(dropout=0.0, num_layers=1))))
    return built[-1]


settings = {**RUN, "num_train_steps": int(os.environ.get("STEPS", 6)),
            "print_fn": lambda line: None}  # the tests read the losses from the model dirs
if mode == "mirrored":
    # A global batch the replicas cannot share is refused before anything is built.
    try:
        run_pretraining(data_file, os.path.join(out_dir, "refused"), build, strategy,
                        **{**settings, "train_batch_size": 7})
        refusal = None
    except ValueError as e:
        refusal = str(e)
evaluation = {}
if os.environ.get("EVAL_INPUT_FILE"):
    # Held-out evaluation every 2 steps must not change training.
    evaluation = dict(eval_input_file=os.environ["EVAL_INPUT_FILE"], eval_every_steps=2,
                      eval_batch_size=6)
summary = run_pretraining(data_file, os.path.join(out_dir, "model"), build, strategy,
                          **settings, **evaluation)
weights = np.concatenate([w.ravel() for w in built[0].get_weights()])
result = {"replicas": strategy.num_replicas_in_sync, "global_step": summary["global_step"],
          "checksum": float(np.abs(weights).sum()), "first_weights": weights[:50].tolist()}
if mode == "mirrored":
    result["refusal"] = refusal
with open(os.path.join(out_dir, f"result_{task}.json"), "w") as f:
    json.dump(result, f)

if os.environ.get("ELECTRA_INPUT_FILE"):
    from kbert.data import PackingConfig  # noqa: E402

    # Its tests' data, masked anew in every batch, in packed rows: the loss
    # normalizers (masked slots, real tokens) then differ between replicas.
    summary = run_pretraining(os.environ["ELECTRA_INPUT_FILE"], os.path.join(out_dir, "electra"),
                              lambda: build("electra"), strategy, masking="dynamic",
                              packing=PackingConfig(max_instances_per_row=3, window_size=32),
                              **settings)
    with open(os.path.join(out_dir, "result_electra.json"), "w") as f:
        json.dump({"replicas": strategy.num_replicas_in_sync,
                   "global_step": summary["global_step"]}, f)
