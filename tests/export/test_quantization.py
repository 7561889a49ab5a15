"""`kbert-export --quantize=int8`: the portable int8 graph, the dev-set guard, and serving.

The int8 layers' arithmetic is tested in tests/layers/test_int8_dense.py.

One tiny SST-2 classifier (32 wide, so its blocks are quantized) with a 48-line dev
set of real vocabulary words is exported float32 and, by the binary with no flag
but `--quantize=int8`, in int8; the other tests read those exports.
"""

import dataclasses
import json
import os
import random
import re
import shutil
import urllib.error
import urllib.request

import numpy as np
import pytest
import tensorflow as tf

from tests import forked_python
from tests import serving_testlib as lib

from kbert.checkpoints import save_finetuned
from kbert.export.quantization import embedding_agreement
from kbert.export.saved_model import export_saved_model
from kbert.export.saved_model import versions

LABELS = ["negative", "positive"]


def test_embedding_agreement_is_100_times_the_mean_cosine_of_matching_rows():
    reference = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]])
    other = np.array([[1.0, 1.0], [0.0, 5.0], [-3.0, -4.0]])
    # cosines: 1/sqrt(2), 1, -1 (worked by hand)
    assert embedding_agreement(reference, other) == pytest.approx(100 * (2 ** -0.5 + 1 - 1) / 3)
    # rows of any shape are flattened; a zero row scores 0, not NaN
    assert embedding_agreement(reference.reshape(3, 1, 2), np.zeros((3, 1, 2))) == 0.0


def test_bfloat16_is_refused_with_what_to_do_instead():
    from kbert.export.numeric_formats import check_quantize

    with pytest.raises(ValueError, match="no bfloat16 units .* Use --quantize=int8"):
        check_quantize("bfloat16", cpu_flags={"avx512f", "avx512_vnni"})
    with pytest.raises(ValueError, match="has avx512_bf16.*no faster than float32.*Use --quantize=int8"):
        check_quantize("bfloat16", cpu_flags={"avx512_bf16"})
    with pytest.raises(ValueError, match="--quantize='int4'; choose one of int8, bfloat16"):
        check_quantize("int4")


def _dev_set(path, count=48):
    """`dev.tsv` of sentences of real vocabulary words, with labels."""
    with open(lib.VOCAB, encoding="utf-8") as f:
        words = [w for w in f.read().split("\n") if w.isalpha()]
    rng = random.Random(0)
    rows = [(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))), rng.randint(0, 1))
            for _ in range(count)]
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "dev.tsv"), "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n" + "".join(f"{text}\t{label}\n" for text, label in rows))
    return rows


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    root = tmp_path_factory.mktemp("int8")
    rows = _dev_set(str(root / "SST-2"))
    model, task_config = lib.build_task_model("sst2")
    task_config = dataclasses.replace(task_config, label_names=["0", "1"], dev_data={
        "task_name": "sst-2", "data_dir": str(root / "SST-2"), "predict_file": None})
    model_dir = str(root / "finetuned")
    save_finetuned(model_dir, model, task_config, lib.VOCAB)
    float_dir = export_saved_model(model_dir, str(root / "float"), check=False)
    env = dict(os.environ, PYTHONPATH=lib.REPO, TF_CPP_MIN_LOG_LEVEL="3")
    result = forked_python.run(
        ["-m", "kbert.bin.export", f"--model_dir={model_dir}",
         f"--export_dir={root / 'int8'}", "--quantize=int8"], env=env, cwd=lib.REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return {"root": root, "rows": rows, "model_dir": model_dir, "float": float_dir,
            "int8": str(root / "int8" / "1"), "result": result}


def test_binary_exports_int8_with_no_other_flag_prints_and_records_the_drop(exports):
    result = exports["result"]
    info = json.loads((exports["root"] / "int8" / "1" / "assets.extra" / "kbert_export.json").read_text())
    found = info["quantization"]
    assert (found["format"], found["metric"], found["num_examples"]) == ("int8", "accuracy", 48)
    assert found["data"] == str(exports["root"] / "SST-2") and found["ok"] is True
    # Every Dense/EinsumDense of the two blocks (6 each) and the pooler; not the 2-class output.
    assert found["quantized_layers"] == 13
    assert found["drop_points"] <= found["max_drop_points"] == 1.0
    assert (f"int8: accuracy float32 {found['float32']:.4f}, int8 {found['quantized']:.4f}, drop "
            f"{found['drop_points']:+.2f} points (limit 1) on 48 examples") in result.stdout
    # The int8 graph's matmuls are core ops that run on any CPU (the ops check found no
    # oneDNN-only op), and the export says so.
    assert re.search(r"int8: 13 layers of bert_classifier\w* hold int8 weights; their matmuls sum "
                     r"the int8 products exactly in core TensorFlow ops", result.stderr)
    assert "loads with only tensorflow + tensorflow_text" in result.stderr
    assert "QuantizedMatMul" not in result.stderr and "oneDNN" not in result.stderr
    # The float kernels of the switched layers are not stored: int8 only.
    names = dict(tf.train.list_variables(os.path.join(exports["int8"], "variables", "variables")))
    float_names = dict(tf.train.list_variables(os.path.join(exports["float"], "variables", "variables")))
    assert sum("int8_kernel" in name for name in names) == 13
    assert len(names) == len(float_names) + 2 * 13  # kernel -> int8 kernel, scale, column sum


def test_int8_predictions_agree_with_float32_on_dev_within_the_recorded_drop(exports):
    texts = tf.constant([text for text, _ in exports["rows"]])
    gold = np.array([label for _, label in exports["rows"]])
    outputs = {name: tf.saved_model.load(exports[name]).signatures["serving_default"](text=texts)
               for name in ("float", "int8")}
    accuracy = {name: 100.0 * np.mean(np.argmax(out["logits"].numpy(), -1) == gold)
                for name, out in outputs.items()}
    info = json.loads((exports["root"] / "int8" / "1" / "assets.extra" / "kbert_export.json").read_text())
    # What the export scored is what the SavedModels answer.
    assert info["quantization"]["float32"] == pytest.approx(accuracy["float"])
    assert info["quantization"]["quantized"] == pytest.approx(accuracy["int8"])
    assert accuracy["float"] - accuracy["int8"] <= 1.0
    np.testing.assert_allclose(outputs["int8"]["probabilities"].numpy(),
                               outputs["float"]["probabilities"].numpy(), atol=0.02)


def test_guard_refuses_a_drop_over_the_budget_and_warns_when_asked(exports, caplog, monkeypatch):
    from kbert.export import quantization
    from kbert.export import saved_model

    # The binary's export scored this model, float32 and int8, on this dev set (the
    # tests above check those scores against both SavedModels): the guard gets the
    # same scores again instead of tracing and running both models twice more.
    recorded = json.loads((exports["root"] / "int8" / "1" / "assets.extra" /
                           "kbert_export.json").read_text())["quantization"]
    scored = []

    onnxruntime_score = [recorded["onnxruntime"]["quantized"]]

    def recorded_scores(model_dir, examples, modules, batch_size=32):
        scored.append((len(examples), len(modules)))
        if len(modules) == 2:  # float32 and TensorFlow int8
            return recorded["metric"], [recorded["float32"], recorded["quantized"]]
        return recorded["metric"], onnxruntime_score  # ONNX Runtime int8, float32 reused

    monkeypatch.setattr(quantization, "_task_scores", recorded_scores)
    # The same model converts to the same ONNX model: reuse the binary's (a conversion's child
    # process costs about 13 s, and the tests above check what it writes).
    converted = os.path.join(exports["int8"], "assets.extra", "onnxruntime", "model.int8.onnx")

    def reused_conversion(model, path):
        shutil.copyfile(converted, path)
        return recorded["onnxruntime"]["quantized_layers"]

    monkeypatch.setattr(saved_model, "convert_int8", reused_conversion)
    export_dir = str(exports["root"] / "refused")
    with pytest.raises(ValueError, match=r"drop \+0\.00 points \(OVER --max_quantization_drop=-0\.5\)"
                                         r".* Not exported: pass a larger --max_quantization_drop"):
        export_saved_model(exports["model_dir"], export_dir, check=False, quantize="int8",
                           max_quantization_drop=-0.5)
    # Refused on the SavedModel's own int8 form, before any ONNX model was made.
    assert versions(export_dir) == [] and scored == [(48, 2)]
    # Warned, not refused: both forms are written, each recorded as over the limit.
    path = export_saved_model(exports["model_dir"], export_dir, check=False, quantize="int8",
                              max_quantization_drop=-0.5, quantization_drop_is_error=False)
    assert scored[1:] == [(48, 2), (48, 1), (48, 1)]  # ONNX Runtime at batch 32 and at batch 1
    info = json.loads(open(os.path.join(path, "assets.extra", "kbert_export.json")).read())
    assert info["quantization"]["ok"] is False
    assert (info["quantization"]["onnxruntime"]["ok"], info["quantization"]["onnxruntime"]["written"]) \
        == (False, True)
    assert os.path.exists(os.path.join(path, "assets.extra", "onnxruntime", "model.int8.onnx"))
    assert "OVER --max_quantization_drop=-0.5" in caplog.text
    # Only the ONNX Runtime model over the limit: it is left out, and the export published
    # with the TensorFlow int8 graph that passed (kbert-serve then runs that).
    onnxruntime_score[0] = recorded["float32"] - 2.0
    path = export_saved_model(exports["model_dir"], export_dir, check=False, quantize="int8")
    info = json.loads(open(os.path.join(path, "assets.extra", "kbert_export.json")).read())
    assert info["quantization"]["ok"] is True
    assert info["quantization"]["onnxruntime"]["drop_points"] == pytest.approx(2.0)
    assert (info["quantization"]["onnxruntime"]["ok"], info["quantization"]["onnxruntime"]["written"]) \
        == (False, False)
    assert not os.path.exists(os.path.join(path, "assets.extra", "onnxruntime"))
    assert "Not written: kbert-serve will run the SavedModel's TensorFlow int8 graph" in caplog.text
    # Within the drop, but a text's answer alone differs from its answer in a padded batch of 32
    # by more than MAX_BATCH_DIFFERENCE (1e-4): refused too.
    onnxruntime_score[0] = recorded["float32"]
    monkeypatch.setattr(saved_model, "batch_difference", lambda *args: 2e-4)
    caplog.clear()
    path = export_saved_model(exports["model_dir"], export_dir, check=False, quantize="int8")
    info = json.loads(open(os.path.join(path, "assets.extra", "kbert_export.json")).read())
    onnx = info["quantization"]["onnxruntime"]
    assert (onnx["drop_points"], onnx["batch_difference"], onnx["max_batch_difference"]) == (0.0, 2e-4, 1e-4)
    assert (onnx["ok"], onnx["written"]) == (False, False)
    assert not os.path.exists(os.path.join(path, "assets.extra", "onnxruntime"))
    assert "alone vs in a padded batch 0.0002 (OVER 0.0001)" in caplog.text


def test_a_directory_without_recorded_dev_data_names_the_flag(tmp_path):
    model, task_config = lib.build_task_model("sst2")
    save_finetuned(str(tmp_path / "ft"), model, task_config, lib.VOCAB)
    with pytest.raises(ValueError, match="records no dev data .* pass --quantization_data_dir="):
        export_saved_model(str(tmp_path / "ft"), str(tmp_path / "x"), check=False, quantize="int8")


def _onnxruntime_in_process(version_dir, signature, **inputs):
    """A version's ONNX Runtime path run here: its `before` function, the ONNX model, `after`."""
    from kbert.export.onnxruntime_int8 import OnnxRuntimeModel
    from kbert.export.onnxruntime_int8 import split_function_names

    loaded = tf.saved_model.load(version_dir)
    before, after = (getattr(loaded, name) for name in split_function_names(signature))
    ids = before(**inputs)
    outputs = OnnxRuntimeModel(os.path.join(version_dir, "assets.extra", "onnxruntime",
                                            "model.int8.onnx")).run(ids)
    return after(outputs=tf.constant(outputs), padding_mask=ids["padding_mask"])


def test_int8_export_writes_an_onnxruntime_model_scored_on_dev_like_the_tensorflow_one(exports):
    version = exports["root"] / "int8" / "1"
    manifest = json.loads((version / "assets.extra" / "onnxruntime" / "kbert_onnxruntime.json").read_text())
    assert manifest["model"] == "model.int8.onnx" and manifest["output"] == "outputs"
    assert sorted(manifest["signatures"]) == ["serve_ids", "serving_default"]
    # The 13 matmuls TensorFlow quantizes are in int8; the 2-wide output layer stays float32.
    assert manifest["int8_matmuls"] == 13
    found = json.loads((version / "assets.extra" / "kbert_export.json").read_text())["quantization"]
    onnx = found["onnxruntime"]
    assert (onnx["runtime"], onnx["metric"], onnx["num_examples"]) == ("onnxruntime", "accuracy", 48)
    assert onnx["float32"] == found["float32"] and onnx["quantized_layers"] == 13
    # Scored at batch 32 and at batch 1, and each dev text's logits alone equal its logits
    # inside its padded batch of 32.
    assert onnx["quantized_batch1"] == onnx["quantized"]
    assert onnx["batch_difference"] <= onnx["max_batch_difference"] == 1e-4
    assert f"ONNX Runtime int8 (what kbert-serve runs) {onnx['quantized']:.4f}" in exports["result"].stdout
    # What the export scored is what the ONNX path answers on the dev set.
    texts = tf.constant([text for text, _ in exports["rows"]])
    gold = np.array([label for _, label in exports["rows"]])
    answer = _onnxruntime_in_process(exports["int8"], "serving_default", text=texts)
    assert onnx["quantized"] == pytest.approx(100.0 * np.mean(np.argmax(answer["logits"], -1) == gold))
    assert onnx["drop_points"] <= 1.0
    float32 = tf.saved_model.load(exports["float"]).signatures["serving_default"](text=texts)
    np.testing.assert_allclose(answer["probabilities"], float32["probabilities"].numpy(), atol=0.02)
    # The halves are functions, not signatures: clients (and stock TF Serving) see the same two.
    signatures = tf.saved_model.load(exports["int8"]).signatures
    assert sorted(signatures) == ["serve_ids", "serving_default"]


def test_kbert_serve_answers_the_int8_model_as_in_process(exports):
    from kbert.serving.servable import Servable

    texts = [text for text, _ in exports["rows"][:8]]
    expected = _onnxruntime_in_process(exports["int8"], "serving_default", text=tf.constant(texts))
    server = lib.start_server(["--model_name=sst2", f"--model_base_path={exports['root'] / 'int8'}"])
    try:
        request = urllib.request.Request(
            f"{server.rest_url}/v1/models/sst2:predict", method="POST",
            data=json.dumps({"inputs": {"text": texts}}).encode())
        with urllib.request.urlopen(request, timeout=60) as reply:
            answer = json.loads(reply.read())["outputs"]
        # Token ids outside the vocabulary: 400, as TensorFlow's lookup refuses them
        # (an ONNX Gather would read id -1 from the end of the table).
        bad = urllib.request.Request(
            f"{server.rest_url}/v1/models/sst2:predict", method="POST",
            data=json.dumps({"signature_name": "serve_ids", "inputs": {
                "token_ids": [[2, -1, 3]], "segment_ids": [[0, 0, 0]], "padding_mask": [[1, 1, 1]]}}).encode())
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(bad, timeout=60)
        assert refused.value.code == 400
        assert "token_ids must be in [0, " in json.loads(refused.value.read())["error"]
    finally:
        assert server.stop() == 0
    assert "ONNX Runtime int8 runs serve_ids, serving_default" in server.log_text()
    np.testing.assert_allclose(answer["logits"], expected["logits"].numpy(), atol=1e-6)
    assert answer["label"] == [v.decode() for v in expected["label"].numpy()]
    # --noonnxruntime (use_onnxruntime=False) serves the SavedModel's TensorFlow int8
    # graph, as stock TF Serving does.
    tensorflow_int8 = Servable("sst2", 1, exports["int8"], use_onnxruntime=False)
    assert tensorflow_int8.runtimes == {}
    answer = tensorflow_int8.run("serving_default", {"text": np.array(texts, object)})
    expected = tf.saved_model.load(exports["int8"]).signatures["serving_default"](text=tf.constant(texts))
    np.testing.assert_array_equal(answer["logits"], expected["logits"].numpy())


def test_onnxruntime_intra_op_parallelism_reaches_the_session_and_keeps_the_answers(exports):
    from kbert.serving.batching import BatchingParameters
    from kbert.serving.model_config import ModelConfig
    from kbert.serving.server import ModelServer
    from kbert.serving.servable import Servable

    texts = np.array([text for text, _ in exports["rows"][:8]], object)
    default, one = (Servable("sst2", 1, exports["int8"], onnxruntime_threads=n) for n in (0, 1))
    options = one.functions["serving_default"].session.get_session_options()
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
    # Idle pool threads sleep instead of spinning (they took the cores of a shared CPU).
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    # Per-token int8: a text's logits alone equal its logits in the batch, bit for bit.
    batched = one.run("serving_default", {"text": texts})["logits"]
    np.testing.assert_allclose(batched, default.run("serving_default", {"text": texts})["logits"], atol=1e-6)
    for row in range(len(texts)):
        np.testing.assert_array_equal(one.run("serving_default", {"text": texts[row:row + 1]})["logits"][0],
                                      batched[row])
    # kbert-serve's flag goes through the server to every version it loads; without it, batching's
    # num_batch_threads share the cores.
    configs = [ModelConfig("sst2", str(exports["root"] / "int8"))]
    assert ModelServer(configs, onnxruntime_threads=1).manager.onnxruntime_threads == 1
    batching = BatchingParameters(num_batch_threads=max(1, (os.cpu_count() or 1) // 2))
    assert ModelServer(configs, batching=batching).manager.onnxruntime_threads == \
        (os.cpu_count() or 1) // batching.num_batch_threads
    assert ModelServer(configs).manager.onnxruntime_threads == 0  # ONNX Runtime's choice
    with pytest.raises(ValueError, match=r"--onnxruntime_intra_op_parallelism=-1; it must be 0"):
        ModelServer(configs, onnxruntime_threads=-1)


@pytest.mark.parametrize("name", ["sst2", "mrpc", "stsb", "rerank", "embed"])
def test_split_halves_around_the_model_answer_as_the_whole_signature(name):
    """`after(model(before(inputs)))` equals each split signature, on the float32 model."""
    from kbert.export.serving_modules import encoder_serving_module
    from kbert.export.serving_modules import task_model_serving_module

    if name == "embed":
        module = encoder_serving_module(lib.build_task_model("sst2")[0].encoder, lib.VOCAB, True, 32)
    elif name == "rerank":  # a cross-encoder is a one-output classifier, as STS-B's regressor
        from kbert.tasks.rerank.serving import RerankServingModule

        model, task_config = lib.build_task_model("stsb")
        preprocessor = task_model_serving_module(model, task_config, lib.VOCAB).preprocessor
        module = RerankServingModule(model, preprocessor)
    else:
        model, task_config = lib.build_task_model(name)
        module = task_model_serving_module(model, task_config, lib.VOCAB)
    texts = tf.constant(["a gorgeous , witty film", "dull", "the the the and a word more"])
    text_inputs = {"rerank": {"query": texts, "document": texts[::-1]},
                   "mrpc": {"text": texts, "text_pair": texts[::-1]},
                   "stsb": {"text": texts, "text_pair": texts[::-1]}}.get(name, {"text": texts})
    ids = {"token_ids": tf.constant([[2, 7, 9, 3], [2, 8, 3, 0]]),
           "segment_ids": tf.zeros([2, 4], tf.int32),
           "padding_mask": tf.constant([[1, 1, 1, 1], [1, 1, 1, 0]])}
    split = module.split_signatures()
    signatures = module.signatures()
    expected_split = {"embed": ["embeddings", "serve_ids", "serving_default"]}.get(
        name, ["serve_ids", "serving_default"])
    assert sorted(split) == expected_split
    for signature, (before, after) in split.items():
        inputs = ids if signature == "serve_ids" else text_inputs
        whole = signatures[signature](**inputs)
        encoder_inputs = before(**inputs)
        halves = after(outputs=module.model(encoder_inputs, training=False),
                       padding_mask=encoder_inputs["padding_mask"])
        assert sorted(halves) == sorted(whole)
        for key in whole:
            got, want = halves[key].numpy(), whole[key].numpy()
            if want.dtype.kind == "f":  # one traced graph vs. two: float32 sums reordered
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)
            else:
                np.testing.assert_array_equal(got, want)


def test_an_embedding_model_serves_its_text_signatures_through_onnxruntime(tmp_path):
    from kbert.checkpoints import save_pretrained
    from kbert.serving.servable import Servable

    save_pretrained(str(tmp_path / "pretrained"), lib.build_task_model("sst2")[0].encoder,
                    vocab_file=lib.VOCAB, do_lower_case=True)
    path = export_saved_model(str(tmp_path / "pretrained"), str(tmp_path / "int8"), check=False,
                              quantize="int8", max_seq_length=32)
    found = json.loads(open(os.path.join(path, "assets.extra", "kbert_export.json")).read())
    onnx = found["quantization"]["onnxruntime"]
    assert (onnx["metric"], onnx["float32"], onnx["num_examples"]) == ("embedding_agreement", 100.0, 256)
    assert 99.0 < onnx["quantized"] < 100.0 and onnx["ok"]
    servable = Servable("embed", 1, path)
    # The per-piece `features` signature runs the encoder's layers, not the model: TensorFlow's.
    assert servable.runtimes == {name: "onnxruntime" for name in ("embeddings", "serve_ids",
                                                                   "serving_default")}
    texts = ["a gorgeous , witty film", "dull", "the the the and a word more"]
    answer = servable.run("embeddings", {"text": np.array(texts, object)})
    expected = _onnxruntime_in_process(path, "embeddings", text=tf.constant(texts))
    np.testing.assert_allclose(answer["embedding"], expected["embedding"].numpy(), atol=1e-6)
    np.testing.assert_array_equal(answer["num_tokens"], expected["num_tokens"].numpy())
    # The SavedModel's own signature (TensorFlow int8, what stock TF Serving runs) agrees.
    tensorflow_int8 = tf.saved_model.load(path).signatures["embeddings"](text=tf.constant(texts))
    np.testing.assert_array_equal(answer["num_tokens"], tensorflow_int8["num_tokens"].numpy())
    assert embedding_agreement(tensorflow_int8["embedding"].numpy(), answer["embedding"]) > 99.0


def test_windowed_heads_have_no_split_signatures_and_export_tensorflow_int8_only():
    from kbert.export.serving_modules import task_model_serving_module

    for name in ("ner", "squad"):
        model, task_config = lib.build_task_model(name)
        assert task_model_serving_module(model, task_config, lib.VOCAB).split_signatures() == {}


def test_finetuning_records_where_the_dev_data_is(tmp_path, monkeypatch):
    from kbert.checkpoints import TaskConfig
    from kbert.tasks import TaskData
    from kbert.training.finetuning.loop import _dev_data_record

    monkeypatch.chdir(tmp_path)
    record = _dev_data_record(TaskData("sst-2", "glue/SST-2"))
    assert record == {"task_name": "sst-2", "data_dir": str(tmp_path / "glue" / "SST-2"),
                      "predict_file": None}
    assert _dev_data_record(TaskData("squad", None, "train.json", "gs://b/dev.json"))["predict_file"] \
        == "gs://b/dev.json"
    assert _dev_data_record(TaskData("sst-2")) == {}
    # Kept in task_config.json beside the task's keys, and not handed to the task as a setting.
    config = TaskConfig("glue", "sst-2", "classifier", ["0", "1"], dev_data=record)
    again = TaskConfig.from_dict(json.loads(config.to_json()))
    assert again.dev_data == record and again.options == {}
    assert "dev_data" not in TaskConfig("glue", "sst-2", "classifier").to_dict()


def test_the_ops_check_asks_the_cpu_about_an_earlier_kbert_fused_int8_graph(tmp_path):
    """An int8 export of an earlier kbert holds oneDNN's fused op: refused where it is not exact."""
    from kbert.export.ops_check import check_ops
    from kbert.layers.int8_dense import onednn_int8_problem
    from kbert.layers.int8_dense import onednn_int8_product

    module = tf.Module()
    module.kernel = tf.Variable(np.ones((16, 4), np.int8))
    module.serve = tf.function(lambda x: {"y": onednn_int8_product(x, module.kernel)},
                               input_signature=[tf.TensorSpec([None, 16], tf.float32)])
    tf.saved_model.save(module, str(tmp_path), signatures={"serving_default": module.serve})
    report = check_ops(str(tmp_path))
    assert report.onednn_ops == ["QuantizedMatMulWithBiasAndDequantize"]
    problem = onednn_int8_problem()
    if problem is None:  # a CPU with VNNI or AMX and oneDNN on: served, with a warning
        assert report.ok, report.message()
        assert "exact on this machine, but it fails or answers wrongly on CPUs without VNNI" \
            in report.message()
    else:
        assert not report.ok and report.onednn_problem == problem and not report.error
        assert report.message() == (
            f"{tmp_path} would not serve from a stock tensorflow_model_server: it holds "
            f"QuantizedMatMulWithBiasAndDequantize (an int8 export of an earlier kbert), which "
            f"this machine cannot run: {problem} Export it again with --quantize=int8: int8 "
            "exports now hold arithmetic that runs on any CPU.")
