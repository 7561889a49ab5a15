"""BENCHMARKS.md and docs/benchmarks/ are rendered from benchmarks/results/*.json, and match them.

`benchmarks/report.py --check` runs here: a page edited by hand, or a result file changed
without re-rendering, fails the suite. Standard library only (no TensorFlow), well under a second.
"""

import argparse
import ast
import glob
import importlib.util
import json
import os
import shutil
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCHMARKS = os.path.join(REPO, "benchmarks")


def _load(name):
    spec = importlib.util.spec_from_file_location(f"benchmarks_{name}",
                                                  os.path.join(BENCHMARKS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, BENCHMARKS)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(BENCHMARKS)
    return module


report = _load("report")
result_file = _load("result_file")


def test_rendered_pages_match_the_result_files():
    assert report.main(["--check"]) == 0, "run: python benchmarks/report.py"


def test_report_and_result_file_import_only_the_standard_library():
    for name in ("report.py", "result_file.py"):
        tree = ast.parse(open(os.path.join(BENCHMARKS, name), encoding="utf-8").read())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module}
        assert not imported & {"tensorflow", "keras", "keras_hub", "kbert", "numpy"}, name


def _copy_of_repo(tmp_path):
    shutil.copytree(os.path.join(BENCHMARKS, "results"), tmp_path / "benchmarks" / "results")
    assert report.main(["--repo", str(tmp_path)]) == 0
    return tmp_path


def test_check_fails_on_a_hand_edit_and_on_a_page_without_data(tmp_path, capsys):
    repo = _copy_of_repo(tmp_path)
    assert report.main(["--check", "--repo", str(repo)]) == 0
    page = repo / "BENCHMARKS.md"
    page.write_text(page.read_text().replace("| benchmark |", "| Benchmark |"))
    assert report.main(["--check", "--repo", str(repo)]) == 1
    assert "BENCHMARKS.md differs" in capsys.readouterr().out
    assert report.main(["--repo", str(repo)]) == 0
    (repo / "docs" / "benchmarks" / "gone.md").write_text("old\n")
    assert report.main(["--check", "--repo", str(repo)]) == 1
    assert "gone.md has no result file" in capsys.readouterr().out
    assert report.main(["--repo", str(repo)]) == 0
    assert not (repo / "docs" / "benchmarks" / "gone.md").exists()


def test_each_result_is_one_row_with_figure_machine_and_date(tmp_path):
    results = report.load_results(os.path.join(BENCHMARKS, "results"))
    text = open(os.path.join(REPO, "BENCHMARKS.md"), encoding="utf-8").read()
    rows = [line for line in text.splitlines() if line.startswith("| ") and "](docs/benchmarks/" in line]
    assert len(rows) == len(results) == len(glob.glob(os.path.join(BENCHMARKS, "results", "*.json")))
    for result, row in zip(results, rows):
        assert report.cell(result["headline"]) in row and result["date"][:10] in row
        assert row.count(" | ") == 6, row
    assert len(text.splitlines()) <= 300


def test_every_benchmark_script_takes_the_common_flags_and_writes_its_result():
    scripts = sorted(glob.glob(os.path.join(BENCHMARKS, "*.py")))
    helpers = {"report.py", "result_file.py"}
    missing = [os.path.basename(s) for s in scripts if os.path.basename(s) not in helpers
               and ("result_file.add_flags(" not in open(s, encoding="utf-8").read()
                    or "write_result(" not in open(s, encoding="utf-8").read())]
    assert not missing, f"call result_file.add_flags and result_file.write_result in {missing}"


def test_no_path_of_one_machine_in_benchmarks_or_their_pages():
    paths = glob.glob(os.path.join(BENCHMARKS, "*.py")) + glob.glob(
        os.path.join(BENCHMARKS, "results", "*.json")) + glob.glob(
        os.path.join(REPO, "docs", "**", "*.md"), recursive=True) + [
        os.path.join(REPO, "BENCHMARKS.md"), os.path.join(REPO, "README.md")]
    found = [(os.path.relpath(p, REPO), marker) for p in paths
             for marker in ("/work/", "/home/", "/tmp/") if marker in open(p, encoding="utf-8").read()]
    assert not found


def test_write_result_is_atomic_relative_and_validated(tmp_path, monkeypatch):
    target = tmp_path / "bench.json"
    args = argparse.Namespace(result_file=str(target))
    monkeypatch.setattr(sys, "argv", [os.path.join(BENCHMARKS, "packing.py"),
                                      f"--data_dir={os.path.join(os.path.dirname(REPO), 'shared', 'data')}"])
    facts = dict(name="bench", title="t", area="serving", headline="1.5x the reference",
                 reference="r", aim="", met=None, figures={"ratio": 1.5})
    assert result_file.write_result(args, load_average_at_start=0.0, **facts) == str(target)
    result = json.loads(target.read_text())
    assert result["provenance"] == "rerun" and result["load"] == "quiet"
    assert result["command"] == "python benchmarks/packing.py --data_dir=../shared/data"
    assert result["figures"] == {"ratio": 1.5} and not result_file.validate(result)
    assert os.listdir(tmp_path) == ["bench.json"]
    with pytest.raises(ValueError, match="headline has 26 words"):
        result_file.write_result(args, load_average_at_start=9.0,
                                 **{**facts, "headline": "word " * 26})
    assert json.loads(target.read_text()) == result
    assert sorted(os.listdir(tmp_path)) == ["bench.json", "bench.json.invalid"]
    assert result_file.write_result(argparse.Namespace(result_file=""), load_average_at_start=0,
                                    **facts) is None
