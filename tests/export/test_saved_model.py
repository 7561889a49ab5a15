"""Exported signatures equal the Keras models on the same input; versions publish atomically."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tests import forked_python
from tests import serving_testlib as lib

from kbert.export.saved_model import versions
from kbert.checkpoints import load_encoder
from kbert.checkpoints import load_finetuned


@pytest.fixture(scope="module")
def exported():
    return lib.exported_models()


@pytest.fixture(scope="module")
def signatures(exported):
    loaded = {name: tf.saved_model.load(exported[name]["version_dir"]) for name in list(lib.TASKS) + ["embed"]}
    return {name: model.signatures for name, model in loaded.items()}


def _strings(values):
    return tf.constant([v.encode("utf-8") for v in values])


def test_every_model_has_serving_default_and_serve_ids(signatures):
    for name, model_signatures in signatures.items():
        extra = {"ner": ["words"], "embed": ["features", "embeddings"]}.get(name, [])
        assert sorted(model_signatures) == sorted(["serve_ids", "serving_default", *extra]), name


def test_the_export_records_what_the_server_decides_from(exported):
    """`kbert_export.json`'s `serving` record, from what each task and its serving module state."""
    records = {}
    for name in list(lib.TASKS) + ["embed"]:
        path = os.path.join(exported[name]["version_dir"], "assets.extra", "kbert_export.json")
        records[name] = json.load(open(path))["serving"]
    # Windowed (NER, QA): no truncation length; the others cut texts at their max_seq_length.
    assert records == {
        "sst2": {"encoder_apis": [], "truncation_length": 32},
        "mrpc": {"encoder_apis": [], "truncation_length": 16},
        "stsb": {"encoder_apis": [], "truncation_length": 32},
        "ner": {"encoder_apis": [], "truncation_length": None},
        "squad": {"encoder_apis": [], "truncation_length": None},
        "embed": {"encoder_apis": ["embeddings"], "truncation_length": 32},
    }


def test_the_saved_model_holds_the_variables_by_path_not_the_keras_object_graph(exported):
    """TF walks every tracked object at save and load; the module tracks the model's
    variables (by Keras path) and its tables, not the layers, lists and dicts around them."""
    from tensorflow.core.protobuf import saved_model_pb2

    model, _, _ = load_finetuned(exported["sst2"]["model_dir"])
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(exported["sst2"]["version_dir"], "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    nodes = saved.meta_graphs[0].object_graph_def.nodes
    # The root, its variables dict, one node per variable, the preprocessor's few
    # objects, the signatures' functions: no node per layer (tracking the Keras model
    # made 560 nodes of this model's 49 variables).
    assert len(model.variables) < len(nodes) < len(model.variables) + 40
    names = [name for name, _ in tf.train.list_variables(
        os.path.join(exported["sst2"]["version_dir"], "variables", "variables"))]
    assert sum(name.startswith("model_variables/") for name in names) == len(model.variables)
    # Keras paths ("/" escaped as ".S"), readable in the checkpoint.
    assert "model_variables/pooled_dense.Skernel/.ATTRIBUTES/VARIABLE_VALUE" in names


@pytest.mark.parametrize("name", ["sst2", "mrpc", "stsb"])
def test_classifier_and_regressor_text_signature_equals_keras(exported, signatures, name):
    model, config, _ = load_finetuned(exported[name]["model_dir"])
    pairs = lib.PAIRS if config.text_pair else None
    inputs = {"text": _strings(lib.TEXTS)}
    if pairs:
        inputs["text_pair"] = _strings(pairs)
    outputs = signatures[name]["serving_default"](**inputs)
    reference = lib.reference_inputs(lib.TEXTS, pairs, config.max_seq_length)
    logits = np.asarray(model(reference, training=False))
    if config.model_type == "regressor":
        assert sorted(outputs) == ["score"]
        np.testing.assert_allclose(outputs["score"].numpy(), logits[:, 0], atol=1e-5)
    else:
        assert sorted(outputs) == ["label", "logits", "probabilities"]
        np.testing.assert_allclose(outputs["logits"].numpy(), logits, atol=1e-5)
        np.testing.assert_allclose(outputs["probabilities"].numpy(),
                                   tf.nn.softmax(logits).numpy(), atol=1e-5)
        expected = [config.label_names[i] for i in logits.argmax(-1)]
        assert [label.decode() for label in outputs["label"].numpy()] == expected
    ids_outputs = signatures[name]["serve_ids"](**{k: tf.constant(v) for k, v in reference.items()})
    key = "score" if config.model_type == "regressor" else "logits"
    np.testing.assert_allclose(ids_outputs[key].numpy(), outputs[key].numpy(), atol=1e-5)


def _check_ner_outputs(outputs, expected):
    num_words = outputs["num_words"].numpy().tolist()
    assert num_words == [len(words) for words, _ in expected]
    assert outputs["words"].shape == (len(expected), max(num_words)) == outputs["tags"].shape
    for i, (words, tags) in enumerate(expected):
        assert [w.decode() for w in outputs["words"].numpy()[i][:num_words[i]]] == words
        assert [t.decode() for t in outputs["tags"].numpy()[i][:num_words[i]]] == tags
        assert all(t == b"" for t in outputs["tags"].numpy()[i][num_words[i]:])
        assert all(w == b"" for w in outputs["words"].numpy()[i][num_words[i]:])


def test_ner_signature_tags_words_like_keras(exported, signatures):
    model, config, _ = load_finetuned(exported["ner"]["model_dir"])
    texts = ["John lives in Zürich , Switzerland", "", lib.TEXTS[3],
             "U.S. troops left\u00a0on 1996-08-22 , O'Neil said .\n"]
    outputs = signatures["ner"]["serving_default"](text=_strings(texts))
    expected = lib.reference_ner(model, texts, config.max_seq_length, config.label_names)
    _check_ner_outputs(outputs, expected)
    # Whitespace-separated words, as CoNLL has them, each returned as sent.
    assert expected[3][0] == ["U.S.", "troops", "left", "on", "1996-08-22", ",", "O'Neil", "said", "."]
    # 14 words, 30 pieces: five windows of 10 pieces 5 apart, and every word has a tag.
    assert outputs["num_words"].numpy()[2] == 14
    assert b"" not in outputs["tags"].numpy()[2].tolist()
    reference = lib.reference_inputs(texts[:1], None, config.max_seq_length)
    ids = signatures["ner"]["serve_ids"](**{k: tf.constant(v) for k, v in reference.items()})
    np.testing.assert_allclose(ids["logits"].numpy(), np.asarray(model(reference, training=False)), atol=1e-5)


def test_ner_words_signature_tags_pre_split_words_like_keras(exported, signatures):
    model, config, _ = load_finetuned(exported["ner"]["model_dir"])
    rows = [["U.S.", "troops", "left", "on", "1996-08-22", "."], lib.TEXTS[3].split(), ["Zürich"]]
    width = max(len(row) for row in rows)
    padded = [[w.encode("utf-8") for w in row] + [b""] * (width - len(row)) for row in rows]
    outputs = signatures["ner"]["words"](words=tf.constant(padded))
    expected = lib.reference_ner(model, [" ".join(row) for row in rows], config.max_seq_length,
                                 config.label_names)
    assert [words for words, _ in expected] == rows
    _check_ner_outputs(outputs, expected)


# Runs in a fresh process that imports only tensorflow and tensorflow_text, as a
# server would; prints one JSON line.
_PEAK_MEMORY_SCRIPT = r"""
import json, os, resource, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
import tensorflow_text  # noqa: F401
path, text_file = sys.argv[1:3]
with open(text_file, encoding="utf-8") as f:
    text = f.read()
serve = tf.saved_model.load(path).signatures["serving_default"]
serve(text=tf.constant(["warm up"]))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
outputs = serve(text=tf.constant([text]))
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tags = outputs["tags"].numpy()[0]
print(json.dumps({"before_kib": before, "after_kib": after,
                  "num_words": int(outputs["num_words"].numpy()[0]),
                  "untagged": int(sum(tag == b"" for tag in tags))}))
"""

# Bound on what a 1 MB NER request may add to a warmed-up process's peak
# resident memory. The tiny test model adds about 100 MiB (linear: strings,
# pieces and windows of the text, plus one bounded model call); gathering the
# text once per word, as NER serving used to, needs about 180k words x 1 MB.
ONE_MB_NER_PEAK_BOUND_MIB = 512


def test_one_megabyte_ner_request_is_answered_in_bounded_memory(exported, tmp_path):
    sources = ["austen-persuasion-head.txt", "emma_chapter1.txt"]
    text = " ".join(open(os.path.join(lib.REPO, "tests", "testdata", name), encoding="utf-8").read()
                    for name in sources)
    text = (text + " ") * (1_000_000 // len(text.encode("utf-8")) + 1)
    text = text.encode("utf-8")[:1_000_000].decode("utf-8", "ignore")
    text_file = tmp_path / "one_mb.txt"
    text_file.write_text(text, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-I", "-c", _PEAK_MEMORY_SCRIPT, exported["ner"]["version_dir"], str(text_file)],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["num_words"] == len(text.split()) > 170_000
    assert found["untagged"] == 0
    added_mib = (found["after_kib"] - found["before_kib"]) / 1024
    assert added_mib < ONE_MB_NER_PEAK_BOUND_MIB, found


def test_squad_signature_strides_windows_like_run_squad(exported, signatures):
    model, config, _ = load_finetuned(exported["squad"]["model_dir"])
    questions = [lib.QUESTION, "Who?", "What?"]
    contexts = [lib.CONTEXT, "Paris , France", ""]
    outputs = signatures["squad"]["serving_default"](question=_strings(questions), context=_strings(contexts))
    assert len(lib.hf_tokenizer().encode(lib.CONTEXT).ids) > config.max_seq_length  # several windows
    for i, (question, context) in enumerate(zip(questions, contexts)):
        answer, start, end, score = lib.reference_squad(model, question, context, config)
        assert outputs["answer"].numpy()[i].decode() == answer
        assert outputs["start_char"].numpy()[i] == start
        assert outputs["end_char"].numpy()[i] == end
        np.testing.assert_allclose(outputs["score"].numpy()[i], score, atol=1e-5, rtol=1e-6)
        assert context[start:end] == answer
    assert outputs["answer"].numpy()[0] != b""


def test_default_settings_squad_and_ner_load_in_kbert_serve(exported):
    """kbert-serve warms every signature up on a two-word input before serving a version:
    windows shorter than max_answer_length=30, and the `words` signature."""
    from kbert.serving.servable import Servable

    squad = Servable("squad", 1, lib.exported_squad_defaults()["version_dir"])
    outputs = squad.run("serving_default", {"question": np.array([b"who?"], object),
                                            "context": np.array([b"Emma"], object)})
    assert outputs["answer"].tolist() == [b"Emma"]
    ner = Servable("ner", 1, exported["ner"]["version_dir"])
    assert sorted(ner.functions) == ["serve_ids", "serving_default", "words"]
    outputs = ner.run("words", {"words": np.array([[b"EU", b"rejects", b""]], object)})
    assert outputs["num_words"].tolist() == [2]


def test_embedding_signature_is_normalised_mean_of_encoder(exported, signatures):
    encoder = load_encoder(exported["embed"]["model_dir"], dropout=0.0)
    outputs = signatures["embed"]["serving_default"](text=_strings(lib.TEXTS))
    expected = lib.reference_embedding(encoder, lib.TEXTS, 32)
    np.testing.assert_allclose(outputs["embedding"].numpy(), expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(outputs["embedding"].numpy(), axis=-1), 1.0, atol=1e-6)
    # `embeddings` (what /v1/embeddings runs) adds the pieces read to the same vectors.
    with_usage = signatures["embed"]["embeddings"](text=_strings(lib.TEXTS))
    np.testing.assert_array_equal(with_usage["embedding"].numpy(), outputs["embedding"].numpy())
    reference = lib.reference_inputs(lib.TEXTS, None, 32)
    assert with_usage["num_tokens"].numpy().tolist() == reference["padding_mask"].sum(axis=1).tolist()


def test_features_signature_gives_the_encoder_layers_and_each_piece_word(exported, signatures):
    encoder = load_encoder(exported["embed"]["model_dir"], output_all_layers=True)
    outputs = signatures["embed"]["features"](text=_strings(lib.TEXTS))
    inputs = lib.reference_inputs(lib.TEXTS, None, 32)
    layers = encoder(inputs, training=False)["encoder_outputs"]
    # The default layers: -1, -2 of this 2-layer encoder, last first.
    expected = np.stack([np.asarray(layers[1]), np.asarray(layers[0])], axis=2)
    num_tokens = outputs["num_tokens"].numpy()
    assert num_tokens.tolist() == inputs["padding_mask"].sum(axis=1).tolist()
    for row, n in enumerate(num_tokens):
        assert outputs["token_ids"].numpy()[row, :n].tolist() == inputs["token_ids"][row, :n].tolist()
        np.testing.assert_allclose(outputs["features"].numpy()[row, :n], expected[row, :n],
                                   atol=1e-5)
        words = lib.TEXTS[row].split()
        pieces = [len(lib.hf_tokenizer().encode(w, add_special_tokens=False).ids) for w in words]
        want = [-1] + [i for i, count in enumerate(pieces) for _ in range(count)][:30] + [-1]
        assert outputs["word_ids"].numpy()[row, :n].tolist() == want


def test_feature_layers_choose_the_features_signature_blocks(exported, tmp_path):
    from kbert.export.saved_model import export_saved_model

    model_dir = exported["embed"]["model_dir"]
    path = export_saved_model(model_dir, str(tmp_path / "first"), check=False, feature_layers="0")
    outputs = tf.saved_model.load(path).signatures["features"](text=_strings(lib.TEXTS))
    encoder = load_encoder(model_dir, output_all_layers=True)
    inputs = lib.reference_inputs(lib.TEXTS, None, 32)
    first_block = np.asarray(encoder(inputs, training=False)["encoder_outputs"][0])
    assert outputs["features"].shape[2] == 1
    for row, n in enumerate(outputs["num_tokens"].numpy()):
        np.testing.assert_allclose(outputs["features"].numpy()[row, :n, 0], first_block[row, :n],
                                   atol=1e-5)
    assert json.load(open(os.path.join(path, "assets.extra", "kbert_export.json")))[
        "feature_layers"] == [0]


def test_feature_layers_out_of_range_or_on_a_finetuned_model_are_refused(exported, tmp_path):
    from kbert.export.saved_model import export_saved_model

    with pytest.raises(ValueError, match=r"--feature_layers=-1,-3: layer\(s\) \[-3\] out of range"):
        export_saved_model(exported["embed"]["model_dir"], str(tmp_path / "bad"), check=False,
                           feature_layers="-1,-3")
    assert not os.path.exists(tmp_path / "bad") or not os.listdir(tmp_path / "bad")
    with pytest.raises(ValueError, match="--feature_layers applies to embedding exports only"):
        export_saved_model(exported["sst2"]["model_dir"], str(tmp_path / "sst2"), check=False,
                           feature_layers="-1")


def test_versions_count_up_and_existing_version_is_refused(exported, tmp_path):
    from kbert.export.saved_model import export_saved_model

    export_dir = str(tmp_path / "sst2")
    os.makedirs(os.path.join(export_dir, "7"))
    os.makedirs(os.path.join(export_dir, ".8.tmp-abc"))  # someone's unfinished export: ignored
    path = export_saved_model(exported["sst2"]["model_dir"], export_dir, check=False)
    assert path == os.path.join(export_dir, "8")
    assert versions(export_dir) == [7, 8]
    assert sorted(os.listdir(path)) == ["assets", "assets.extra", "fingerprint.pb", "saved_model.pb",
                                        "variables"]
    assert sorted(os.listdir(os.path.join(path, "assets.extra"))) == ["kbert_export.json", "tf_serving_warmup_requests",
                                                                       "vocab.txt"]
    with pytest.raises(ValueError, match="already exists"):
        export_saved_model(exported["sst2"]["model_dir"], export_dir, version=8, check=False)
    assert sorted(os.listdir(export_dir)) == [".8.tmp-abc", "7", "8"]  # nothing half-written left


def test_the_export_writes_tf_servings_warm_up_requests_for_its_text_signatures(exported, signatures):
    from tensorflow_serving.apis import prediction_log_pb2

    from kbert.export.warmup_requests import SHORT_TEXT
    from kbert.export.warmup_requests import WARMUP_FILE
    from kbert.export.warmup_requests import long_text

    expected = {"sst2": ["serving_default"], "mrpc": ["serving_default"], "squad": ["serving_default"],
                "ner": ["serving_default"],  # not `words` ([batch, words]) nor serve_ids (ids)
                "embed": ["embeddings", "features", "serving_default"]}
    for name, names in expected.items():
        path = os.path.join(exported[name]["version_dir"], "assets.extra", WARMUP_FILE)
        records = [prediction_log_pb2.PredictionLog.FromString(raw)
                   for raw in tf.data.TFRecordDataset(path).as_numpy_iterator()]
        assert [r.predict_log.request.model_spec.signature_name for r in records] == names, name
        length = json.load(open(os.path.join(exported[name]["version_dir"], "assets.extra",
                                             "kbert_export.json")))
        length = length.get("max_seq_length") or length["task_config"]["max_seq_length"]
        for record in records:
            request = record.predict_log.request
            function = signatures[name][request.model_spec.signature_name]
            _, specs = function.structured_input_signature
            assert sorted(request.inputs) == sorted(specs)
            inputs = {key: tf.make_ndarray(value) for key, value in request.inputs.items()}
            for value in inputs.values():
                assert value.tolist() == [SHORT_TEXT.encode(), long_text(length).encode()]
                assert len(value[1].split()) == length  # as long as the model reads at once
            function(**{key: tf.constant(value) for key, value in inputs.items()})  # each one runs


def test_the_exports_tokenize_function_is_its_tokenizer_beside_the_signatures(exported, signatures):
    loaded = tf.saved_model.load(exported["sst2"]["version_dir"])
    assert "tokenize" not in signatures["sst2"]  # stock TF Serving's clients do not see it
    texts = [*lib.TEXTS, " ".join(["word"] * 40)]  # the last is longer than the 32 pieces sst2 reads
    tokens = {key: value.numpy() for key, value in loaded.tokenize(text=tf.constant(texts)).items()}
    tokenizer = lib.hf_tokenizer()
    for row, text in enumerate(texts):
        encoding = tokenizer.encode(text)  # not truncated, as TEI's /tokenize
        count = tokens["num_tokens"][row]
        assert count == len(encoding.ids) and tokens["token_ids"][row, :count].tolist() == encoding.ids
        assert (tokens["token_ids"][row, count:] == -1).all()
        assert tokens["special"][row, :count].tolist() == [True] + [False] * (count - 2) + [True]
        assert [tokens["texts"][row, 0], tokens["texts"][row, count - 1]] == [b"[CLS]", b"[SEP]"]
        assert tokens["starts"][row, 0] == tokens["ends"][row, count - 1] == -1
        raw = text.encode("utf-8")
        for column in range(1, count - 1):
            start, end = tokens["starts"][row, column], tokens["ends"][row, column]
            assert tokens["texts"][row, column] == raw[start:end]


def test_kbert_export_binary_checks_ops_in_a_fresh_process(exported, tmp_path):
    """Exports with the binary; its ops check loads with only tensorflow + tensorflow_text."""
    export_dir = str(tmp_path / "sst2")
    env = dict(os.environ, PYTHONPATH=lib.REPO, TF_CPP_MIN_LOG_LEVEL="3")
    result = forked_python.run(
        ["-m", "kbert.bin.export", f"--model_dir={exported['sst2']['model_dir']}",
         f"--export_dir={export_dir}"], env=env, cwd=lib.REPO, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().endswith(f"wrote {export_dir}/1")
    # The check ran in a fresh `python -I` process importing only tensorflow + tensorflow_text.
    assert ("loads with only tensorflow + tensorflow_text" in result.stderr
            and "tensorflow-text ops: FastBertNormalize, FastWordpieceTokenizeWithOffsets, NormalizeUTF8;" in result.stderr
            and "signatures: serve_ids, serving_default." in result.stderr), result.stderr[-2000:]
    assert os.listdir(export_dir) == ["1"]
    # TensorFlow's start-up notices and SavedModel INFO lines stay out: one line, the ops check.
    assert not any(word in result.stderr for word in ("oneDNN", "cuInit", "cudart", "InitializeLog",
                                                      "fingerprint", "Sharding callback"))
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_ops_check_reports_ops_outside_tensorflow(tmp_path):
    from kbert.export.ops_check import check_ops

    # A graph whose op no library registers, as a model built with custom ops would be.
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.meta_graphs.add().graph_def.node.add(name="x", op="KbertNoSuchOp")
    (tmp_path / "saved_model.pb").write_bytes(proto.SerializeToString())
    report = check_ops(str(tmp_path))
    assert not report.ok
    assert report.unknown_ops == ["KbertNoSuchOp"]
    assert "ops outside tensorflow and tensorflow_text: KbertNoSuchOp" in report.message()


def test_export_of_a_directory_that_is_neither_says_so(tmp_path):
    from kbert.export.saved_model import export_saved_model

    with pytest.raises(FileNotFoundError, match="neither a fine-tuned directory"):
        export_saved_model(str(tmp_path), str(tmp_path / "out"))
