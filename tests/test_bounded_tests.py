"""No test can wait for ever: every subprocess, blocking read and wait in tests/ has a timeout.

Read from the tests' source with `ast`, so a new `subprocess.run(...)` without
`timeout=` fails here rather than hanging CI until its 90 minutes run out.
Besides these, setup.cfg gives every test a 600 s limit (pytest-timeout).
"""

import ast
import configparser
import os

from tests.conftest import REPO

TESTS = os.path.join(REPO, "tests")
# subprocess.<name>(...) and urllib.request.urlopen(...) need timeout=.
SUBPROCESS = {"run", "check_output", "check_call", "call"}
# <anything>.<name>(...) with no timeout: Popen.communicate/wait, Event/Barrier.wait, Thread.join.
METHODS = {"communicate", "wait", "join"}
# A line that says so may read a pipe in a thread whose caller bounds it.
BOUNDED_MARK = "bounded by"


def _unbounded_calls(path):
    source = open(path, encoding="utf-8").read()
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.For):
            iterated = node.iter
            if (isinstance(iterated, ast.Attribute) and iterated.attr == "stdout"
                    and BOUNDED_MARK not in lines[node.lineno - 1]):
                found.append(f"{node.lineno}: for ... in {ast.unparse(iterated)} (blocking read)")
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name, owner = node.func.attr, ast.unparse(node.func.value)
        has_timeout = any(keyword.arg == "timeout" for keyword in node.keywords)
        if has_timeout:
            continue
        if (owner == "subprocess" and name in SUBPROCESS) or name in ("urlopen", "create_connection"):
            found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
        elif name in METHODS and not node.args:  # "sep".join(items) has an argument
            found.append(f"{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_every_subprocess_read_and_wait_in_the_tests_has_a_timeout():
    unbounded = {}
    for root, _, names in os.walk(TESTS):
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                calls = _unbounded_calls(path)
                if calls:
                    unbounded[os.path.relpath(path, REPO)] = calls
    assert not unbounded, f"add timeout= to these calls: {unbounded}"


def test_the_scan_finds_what_it_looks_for(tmp_path):
    path = tmp_path / "sample.py"
    path.write_text("import subprocess\n"
                    "subprocess.run(['true'])\n"
                    "subprocess.run(['true'], timeout=5)\n"
                    "process.wait()\n"
                    "process.wait(timeout=5)\n"
                    "', '.join(names)\n"
                    "for line in process.stdout:\n    pass\n")
    assert sorted(int(call.split(":")[0]) for call in _unbounded_calls(str(path))) == [2, 4, 7]


def test_every_test_has_a_time_limit_by_default(pytestconfig):
    # pytest-timeout (the test extra, pinned in constraints.txt) is loaded, with setup.cfg's limit.
    assert pytestconfig.pluginmanager.hasplugin("timeout")
    assert pytestconfig.getini("timeout") == "600"
    config = configparser.ConfigParser()
    config.read(os.path.join(REPO, "setup.cfg"))
    assert config["tool:pytest"]["timeout"] == "600"
    # thread: a test stuck inside TensorFlow's C++ (where no signal handler runs) is still ended.
    assert config["tool:pytest"]["timeout_method"] == "thread"


def test_the_longest_files_run_first_and_each_still_exists():
    from tests.conftest import LONGEST_FILES

    assert [path for path in LONGEST_FILES if not os.path.isfile(os.path.join(REPO, path))] == []
    assert len(set(LONGEST_FILES)) == len(LONGEST_FILES)
    makefile = open(os.path.join(REPO, "Makefile"), encoding="utf-8").read()
    assert "--dist=loadfile --no-loadscope-reorder" in makefile  # else xdist re-sorts the files
