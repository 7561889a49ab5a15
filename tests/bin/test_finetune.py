"""kbert-finetune end to end on tiny real data, one subprocess per task, plus a clean error."""

import json
import os

import pytest

from tests import forked_python
from tests.conftest import REPO
from tests.finetune_testing import TESTDATA
from tests.finetune_testing import make_tiny_pretrained

FAST = ["run_finetuning.train_batch_size = 4", "run_finetuning.learning_rate = 3e-3",
        "run_finetuning.warmup_proportion = 0.0", "run_finetuning.max_seq_length = 64"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    return make_tiny_pretrained(tmp_path_factory.mktemp("tiny_pretrained"))


def finetune(*flags, gin_params=()):
    command = ["-m", "kbert.bin.finetune", *flags]
    command += [f"--gin_params={p}" for p in [*FAST, *gin_params]]
    env = {**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "2"}
    return forked_python.run(command, cwd=REPO, env=env, timeout=600)


def _check_run(result, model_dir):
    assert result.returncode == 0, result.stderr[-3000:]
    assert "***** results *****" in result.stdout
    for name in ("task_model.keras", "task_config.json", "encoder.weights.h5", "vocab.txt",
                 "bert_config.json", "eval_results.json", "operative_config.gin"):
        assert os.path.exists(os.path.join(model_dir, name)), name
    assert not [n for n in os.listdir(model_dir) if n.endswith((".tmp", ".incomplete"))]
    results = json.load(open(os.path.join(model_dir, "eval_results.json")))
    assert results["train_loss"][-1] < results["train_loss"][0], results["train_loss"]
    assert "run_finetuning.learning_rate = 0.003" in open(
        os.path.join(model_dir, "operative_config.gin")).read()
    return results, json.load(open(os.path.join(model_dir, "task_config.json")))


def test_glue_mrpc_train_eval_predict(pretrained, tmp_path):
    model_dir = str(tmp_path / "mrpc")
    result = finetune("--task=glue", "--task_name=MRPC", f"--init_checkpoint={pretrained}",
                      f"--data_dir={os.path.join(TESTDATA, 'glue', 'MRPC')}",
                      f"--model_dir={model_dir}", "--do_train", "--do_eval", "--do_predict",
                      f"--export_dir={tmp_path / 'export' / 'mrpc'}",
                      gin_params=["run_finetuning.num_train_epochs = 8"])
    results, config = _check_run(result, model_dir)
    # --export_dir writes version 1 of a raw-text SavedModel, as kbert-export does.
    assert os.listdir(tmp_path / "export" / "mrpc") == ["1"]
    assert os.path.isfile(tmp_path / "export" / "mrpc" / "1" / "saved_model.pb")
    assert set(results) >= {"f1", "accuracy", "num_examples"} and results["num_examples"] == 4
    assert (config["model_type"], config["task_name"], config["label_names"],
            config["text_pair"], config["max_seq_length"]) == ("classifier", "mrpc", ["0", "1"],
                                                               True, 64)
    lines = open(os.path.join(model_dir, "predictions.tsv")).read().splitlines()
    assert lines[0] == "index\tprediction"
    assert [line.split("\t")[0] for line in lines[1:]] == ["0", "1"]
    assert all(line.split("\t")[1] in ("0", "1") for line in lines[1:])


def test_ner_conll_train_eval_predict(pretrained, tmp_path):
    model_dir = str(tmp_path / "ner")
    result = finetune("--task=ner", f"--init_checkpoint={pretrained}",
                      f"--data_dir={os.path.join(TESTDATA, 'conll2003')}",
                      f"--model_dir={model_dir}", "--do_train", "--do_eval", "--do_predict",
                      "--nodo_lower_case", f"--export_dir={tmp_path / 'export'}",
                      "--quantize=int8", "--max_quantization_drop=100",
                      gin_params=["run_finetuning.num_train_epochs = 6"])
    results, config = _check_run(result, model_dir)
    assert set(results) >= {"precision", "recall", "f1"}
    # --quantize exports int8, scored against float32 on the dev data the run recorded.
    info = json.load(open(tmp_path / "export" / "1" / "assets.extra" / "kbert_export.json"))
    found = info["quantization"]
    assert (found["format"], found["metric"], found["ok"]) == ("int8", "f1", True)
    assert found["quantized_layers"] == 13  # both blocks' 6 projections and the pooler
    # NER runs the model over windows in a loop: TensorFlow int8 only, no ONNX Runtime model.
    assert "onnxruntime" not in found
    assert not os.path.exists(tmp_path / "export" / "1" / "assets.extra" / "onnxruntime")
    assert found["float32"] == pytest.approx(100 * results["f1"])  # points
    assert (f"int8: f1 float32 {found['float32']:.4f}, int8 {found['quantized']:.4f}, drop "
            f"{found['drop_points']:+.2f} points (limit 100)") in result.stdout
    assert result.stdout.strip().splitlines()[-1] == f"exported to {tmp_path / 'export' / '1'}"
    assert config["model_type"] == "token_classifier" and config["label_names"][0] == "O"
    assert config["do_lower_case"] is False
    # One line per word of test.txt (word, predicted tag), a blank line after each sentence.
    words = [line.split()[0] for line in open(os.path.join(TESTDATA, "conll2003", "test.txt"))
             if line.strip() and not line.startswith("-DOCSTART-")]
    predicted = [line.split("\t") for line in open(os.path.join(model_dir, "predictions.tsv"))
                 .read().splitlines() if line]
    assert [word for word, _ in predicted] == words
    assert all(tag in config["label_names"] for _, tag in predicted)


def test_squad_train_and_predict_official_format(pretrained, tmp_path):
    model_dir = str(tmp_path / "squad")
    sample = os.path.join(TESTDATA, "squad", "xquad_en_sample.json")
    result = finetune("--task=squad", f"--init_checkpoint={pretrained}",
                      f"--train_file={sample}", f"--predict_file={sample}",
                      f"--model_dir={model_dir}", "--do_train", "--do_eval",
                      gin_params=["run_finetuning.num_train_epochs = 2",
                                  "run_finetuning.max_seq_length = 96",
                                  "SquadConfig.doc_stride = 32",
                                  "SquadConfig.max_query_length = 24"])
    results, config = _check_run(result, model_dir)
    assert set(results) >= {"exact_match", "f1"} and results["num_examples"] == 6
    assert (config["model_type"], config["doc_stride"], config["max_query_length"]) == (
        "span_labeler", 32, 24)
    predictions = json.load(open(os.path.join(model_dir, "predictions.json")))
    data = json.load(open(sample, encoding="utf-8"))
    contexts = {qa["id"]: p["context"] for a in data["data"] for p in a["paragraphs"]
                for qa in p["qas"]}
    assert set(predictions) == set(contexts)
    assert all(text and text in contexts[qid] for qid, text in predictions.items())


def test_a_binding_that_moved_into_a_task_config_names_its_new_name(pretrained, tmp_path):
    model_dir = tmp_path / "out"
    result = finetune("--task=squad", f"--init_checkpoint={pretrained}",
                      f"--model_dir={model_dir}", "--do_eval", "--predict_file=x.json",
                      gin_params=["run_finetuning.doc_stride = 32"])
    assert result.returncode == 2, result.stderr
    assert ("run_finetuning.doc_stride is now SquadConfig.doc_stride: bind "
            "`SquadConfig.doc_stride = ...` instead.") in result.stderr
    assert "Traceback" not in result.stderr and not model_dir.exists()


def test_bad_input_is_one_clean_line(pretrained, tmp_path):
    model_dir = tmp_path / "out"
    result = finetune("--task=glue", "--task_name=sst-2", f"--init_checkpoint={pretrained}",
                      f"--data_dir={os.path.join(TESTDATA, 'glue', 'SST-2')}",
                      f"--model_dir={model_dir}", "--do_train",
                      gin_params=["run_finetuning.max_seq_length = 512"])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "finetune.py: error: max_seq_length=512 is larger than the encoder's 96 positions "
        "(max_position_embeddings); pass max_seq_length<=96.")
    assert "Traceback" not in result.stderr and not model_dir.exists()
    result = finetune("--task=glue", "--task_name=sst-2", f"--init_checkpoint={pretrained}",
                      f"--data_dir={os.path.join(TESTDATA, 'glue', 'SST-2')}",
                      f"--model_dir={model_dir}", "--do_train", "--quantize=int8")
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "finetune.py: error: --quantize=int8 quantizes the export: give --export_dir too (or run "
        "kbert-export --quantize on the model_dir later)."]
    assert not model_dir.exists()
    # A format the export would refuse is refused before any training.
    result = finetune("--task=glue", "--task_name=sst-2", f"--init_checkpoint={pretrained}",
                      f"--data_dir={os.path.join(TESTDATA, 'glue', 'SST-2')}",
                      f"--model_dir={model_dir}", "--do_train", "--quantize=bfloat16",
                      f"--export_dir={tmp_path / 'export'}")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(
        "finetune.py: error: --quantize=bfloat16: this CPU has")
    assert not model_dir.exists() and not (tmp_path / "export").exists()


@pytest.mark.slow
def test_hparam_search_prints_its_table_and_writes_the_best_runs_gin_file(pretrained, tmp_path):
    data = os.path.join(TESTDATA, "glue", "MRPC")
    search_dir = tmp_path / "search"
    result = finetune("--task=glue", "--task_name=mrpc", f"--init_checkpoint={pretrained}",
                      f"--data_dir={data}", "--do_train", "--do_eval", f"--model_dir={search_dir}",
                      "--hparam_search", "--search_learning_rates=3e-3,1e-3",
                      "--search_batch_sizes=4", "--search_epochs=2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "***** hyperparameter search (dev f1) *****" in result.stdout
    table = result.stdout.split("(dev f1) *****\n")[1].splitlines()
    assert table[0].split() == ["learning_rate", "batch", "epochs", "f1", "best_step", "minutes"]
    assert [line.split()[-6:-3] for line in table[1:3]] == [["0.003", "4", "2"],
                                                            ["0.001", "4", "2"]]
    searched = json.load(open(search_dir / "eval_results.json"))
    assert "kept the model of step %d of 4" % searched["best_step"] in result.stdout
    assert searched["f1"] == max(row["f1"] for row in searched["hparam_search"])
    # The gin file binds the best run's settings (that it alone trains the same model
    # again, weight for weight: tests/training/finetuning/test_selection.py).
    best = (search_dir / "best_hparams.gin").read_text()
    for key in ("learning_rate", "train_batch_size", "num_train_epochs", "seed"):
        assert f"run_finetuning.{key} = {searched[key]!r}" in best, key


def test_freeze_encoder_and_features_flags_train_only_the_head(pretrained, tmp_path):
    import numpy as np

    from kbert.checkpoints import load_encoder

    model_dir = str(tmp_path / "sst2")
    result = finetune("--task=glue", "--task_name=sst-2", f"--init_checkpoint={pretrained}",
                      f"--data_dir={os.path.join(TESTDATA, 'glue', 'SST-2')}",
                      f"--model_dir={model_dir}", "--do_train", "--do_eval",
                      "--freeze_encoder", "--features=weighted",
                      gin_params=["run_finetuning.num_train_epochs = 4"])
    results, config = _check_run(result, model_dir)
    assert (config["freeze_encoder"], config["features"]) == (True, "weighted")
    before, after = load_encoder(pretrained), load_encoder(model_dir)
    for old, new in zip(before.weights, after.weights):
        np.testing.assert_array_equal(old.numpy(), new.numpy(), err_msg=old.path)

    refused = finetune("--task=squad", f"--init_checkpoint={pretrained}",
                       f"--model_dir={tmp_path / 'squad'}", "--do_eval", "--predict_file=x.json",
                       "--freeze_encoder")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1].endswith(
        "--freeze_encoder: --task=squad has no feature-based mode; it applies to --task=glue, "
        "classification, ner and token_classification.")


def test_compare_with_random_init_fine_tunes_a_never_pretrained_twin_and_prints_both(
        pretrained, tmp_path):
    """Issue 51, item 5: the same run from an encoder of the same shape that was never
    pre-trained (same settings and seed), both dev scores and their difference."""
    model_dir = tmp_path / "mrpc"
    flags = ["--task=glue", "--task_name=MRPC", f"--init_checkpoint={pretrained}",
             f"--data_dir={os.path.join(TESTDATA, 'glue', 'MRPC')}", f"--model_dir={model_dir}"]
    refused = finetune(*flags, "--do_train", "--compare_with_random_init")
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines()[-1].endswith(
        "--compare_with_random_init compares two fine-tuning runs' dev scores: give "
        "--do_train --do_eval too.")
    result = finetune(*flags, "--do_train", "--do_eval", "--compare_with_random_init",
                      gin_params=["run_finetuning.num_train_epochs = 2"])
    assert result.returncode == 0, result.stderr[-3000:]
    ours = json.load(open(model_dir / "eval_results.json"))
    theirs = json.load(open(model_dir / "random_init" / "eval_results.json"))
    comparison = json.load(open(model_dir / "random_init_comparison.json"))
    assert ours["main_metric"] == theirs["main_metric"] == "f1"  # MRPC's
    assert comparison == {"main_metric": "f1", "pretrained": ours["f1"],
                          "random_init": theirs["f1"], "difference": ours["f1"] - theirs["f1"]}
    assert ours["train_steps"] == theirs["train_steps"]  # the same settings
    assert ours["train_loss"] != theirs["train_loss"]  # from other weights
    assert (f"dev f1: pre-trained {ours['f1']:.4f}, never pre-trained {theirs['f1']:.4f} "
            f"(same shape, settings and seed): difference "
            f"{ours['f1'] - theirs['f1']:+.4f}") in result.stdout
    config = (model_dir / "operative_config.gin").read_text()
    assert "run_finetuning.seed = 12345" in config
    assert (model_dir / "random_init" / "operative_config.gin").read_text() == config


def test_classification_of_your_own_file_without_validation_says_nothing_is_reported(
        pretrained, tmp_path):
    from tests.tasks.classification.files import ticket_rows
    from tests.tasks.classification.files import write_rows

    rows = [{"id": row["id"], "body": row["text"], "queue": row["label"]}
            for row in ticket_rows(30, seed=4)]
    rows[3]["body"] = "refund " * 20  # 140 characters: more pieces than 64
    train = write_rows(tmp_path / "tickets.csv", rows)
    model_dir = str(tmp_path / "tickets")
    result = finetune("--task=classification", f"--train_file={train}",
                      "--text_column_name=body", "--label_column_name=queue",
                      f"--init_checkpoint={pretrained}", f"--model_dir={model_dir}",
                      "--do_train", "--do_eval", gin_params=["run_finetuning.num_train_epochs = 2"])
    results, config = _check_run(result, model_dir)
    assert results["reported_split"] is None and results["selection"]["num_examples"] == 3
    assert (config["text_column_names"], config["label_column_name"]) == (["body"], "queue")
    assert "NOTE: no reported split exists" in result.stdout
    # The three rows held out (seed 12345: rows 0, 12, 24) are all billing.
    assert "(baseline 1.0: the majority class 'billing')" in result.stdout
    assert ("NOTE: 1 of 30 training examples are longer than max_seq_length=64 pieces and were "
            "truncated") in result.stdout
    refused = finetune("--task=classification", f"--train_file={train}",
                       "--text_column_name=body", "--text_column_names=body,queue",
                       f"--init_checkpoint={pretrained}", f"--model_dir={tmp_path / 'x'}",
                       "--do_train")
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1] == (
        "finetune.py: error: --text_column_names=body,queue and --text_column_name=body: give "
        "one of them.")
