"""The task models built (and trained) under MirroredStrategy over 2 logical CPUs.

    python tests/presets/mirrored_run.py PRETRAINED_DIR OUT_DIR

Run in a process of its own (the logical devices must be set before
TensorFlow starts). Writes OUT_DIR/result.json: the replicas, whether the
variables are mirrored, the losses, the refusal of a batch the replicas
cannot share, and each model's predictions (a MaskedLM's masked-LM losses, a
TextEmbedder's vectors); saves the classifier to
OUT_DIR/classifier for the test to reload under the default strategy.
(No `jit_compile`: XLA does not run on logical CPU devices.)
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(os.path.dirname(HERE))]  # the repo root

import tensorflow as tf  # noqa: E402

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402

import kbert  # noqa: E402

pretrained, out_dir = sys.argv[1:3]
TEXTS = ["a gorgeous , witty film", "a dull , lifeless film", "witty and gorgeous",
         "lifeless and dull"] * 4
LABELS = ["positive", "negative", "positive", "negative"] * 4

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
keras.utils.set_random_seed(0)
with strategy.scope():
    classifier = kbert.TextClassifier.from_preset(pretrained, max_seq_length=16,
                                                  label_names=["negative", "positive"])
    tagger = kbert.TokenClassifier.from_preset(pretrained, max_seq_length=16)
    mlm = kbert.MaskedLM.from_preset(pretrained, max_seq_length=16)
    embedder = kbert.TextEmbedder.from_preset(pretrained, max_seq_length=16)
result = {"replicas": strategy.num_replicas_in_sync,
          "mirrored": all(isinstance(v.value, tf.distribute.DistributedValues)
                          if hasattr(v, "value") else False
                          for v in classifier.task_model.trainable_variables[:3])}
classifier.compile(learning_rate=2e-2)
history = classifier.fit(TEXTS, LABELS, batch_size=4, epochs=6, verbose=0)
result["classifier_losses"] = history.history["loss"]
result["classifier_predictions"] = classifier.predict(TEXTS[:4]).tolist()
try:
    classifier.fit(TEXTS, LABELS, batch_size=3, verbose=0)
except ValueError as error:
    result["refusal"] = str(error)
classifier.save_to_preset(os.path.join(out_dir, "classifier"))
tagger.compile(learning_rate=1e-2)
history = tagger.fit(TEXTS, [["B-X", "O", "O", "O", "O"], ["O"] * 5, ["O"] * 3, ["O"] * 3] * 4,
                     batch_size=4, epochs=2, verbose=0)
result["tagger_losses"] = history.history["loss"]
result["tagger_first_tags"] = [tag for _, tag in tagger.predict(TEXTS[:1])[0]]
result["mlm_mirrored"] = isinstance(mlm.task_model.trainable_variables[0].value,
                                    tf.distribute.DistributedValues)
mlm.compile(learning_rate=1e-2)
result["mlm_losses"] = mlm.fit(TEXTS, batch_size=4, epochs=2, verbose=0).history["mlm_loss"]
result["embeddings"] = embedder.predict(TEXTS[:4]).tolist()
with open(os.path.join(out_dir, "result.json"), "w", encoding="utf-8") as f:
    json.dump(result, f)
