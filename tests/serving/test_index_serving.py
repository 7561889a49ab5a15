"""kbert-serve --index_dir: the search endpoint answers as kbert-index search does; errors are 400s.

One exact index over real sentences is built for the module, searched with the
CLI (`python -m kbert.bin.index search`), then served (as an index and, since an
exact index is a SavedModel, as a model) by one kbert-serve process.
"""

import json
import os
import urllib.error
import urllib.request

import pytest

from kbert.index import build_index
from tests import forked_python
from tests.retrieval_testlib import make_pretrained
from tests.retrieval_testlib import sentences
from tests.serving_testlib import REPO
from tests.serving_testlib import start_server

QUERIES = ["Emma Woodhouse handsome clever", "the loss of her governess", "Mr. Weston"]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("served-index")
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": t}) + "\n"
                              for i, t in enumerate(sentences(30))))
    queries = root / "queries.jsonl"
    queries.write_text("".join(json.dumps({"_id": f"q{i}", "text": q}) + "\n" for i, q in enumerate(QUERIES)))
    index_dir = str(root / "idx")
    build_index([str(corpus)], index_dir, model_dir=make_pretrained(str(root / "pretrained")), check=False)
    run = root / "run.trec"
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    cli = forked_python.run(["-m", "kbert.bin.index", "search", f"--index_dir={index_dir}",
                             f"--queries={queries}", "--top_k=5", f"--output={run}"],
                            env=env, cwd=REPO, timeout=300)
    assert cli.returncode == 0, cli.stderr[-2000:]
    server = start_server([f"--index_dir={index_dir}", "--index_name=emma", "--model_name=emma_model",
                           f"--model_base_path={index_dir}"])
    yield server, run.read_text(), cli.stdout
    server.stop()


def _post(server, path, body):
    request = urllib.request.Request(server.rest_url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def test_served_search_equals_cli_search(served):
    server, run, stdout = served
    assert "3 queries in" in stdout and "queries/s" in stdout
    status, answer = _post(server, "/v1/indexes/emma:search", {"queries": QUERIES, "top_k": 5})
    assert status == 200
    cli = {}
    for line in run.splitlines():
        qid, _, doc, rank, score, tag = line.split()
        cli.setdefault(qid, []).append((doc, float(score)))
    assert tag == "kbert-exact"
    for i, (ids, scores) in enumerate(zip(answer["ids"], answer["scores"])):
        assert ids == [doc for doc, _ in cli[f"q{i}"]]
        assert scores == pytest.approx([s for _, s in cli[f"q{i}"]], abs=1e-5)
    assert answer["texts"][0][0] in sentences(30)


@pytest.mark.parametrize("body, message", [
    ({"queries": []}, "non-empty list"),
    ({"queries": "one"}, "non-empty list"),
    ({"queries": ["a", 3]}, "strings only"),
    ({"queries": ["a"], "top_k": 0}, "'top_k' must be an integer >= 1"),
    ({"text": ["a"]}, '"queries"'),
])
def test_bad_search_requests_get_400_with_a_message(served, body, message):
    status, answer = _post(served[0], "/v1/indexes/emma:search", body)
    assert status == 400 and message in answer["error"]


def test_unknown_index_is_404_and_model_endpoints_keep_working(served):
    server = served[0]
    status, answer = _post(server, "/v1/indexes/nope:search", {"queries": ["a"]})
    assert status == 404 and "'nope'" in answer["error"] and "emma" in answer["error"]
    status, answer = _post(server, "/v1/models/emma_model:predict",
                           {"signature_name": "search", "instances": [{"query": QUERIES[0]}]})
    assert status == 200 and len(answer["predictions"][0]["ids"]) == 10
    cli_first = [line.split()[2] for line in served[1].splitlines() if line.startswith("q0 ")]
    assert answer["predictions"][0]["ids"][:5] == cli_first
    with urllib.request.urlopen(server.rest_url + "/v1/indexes/emma", timeout=30) as response:
        assert json.load(response)["metadata"]["count"] == 30
