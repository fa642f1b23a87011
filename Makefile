# Jobs of the sit-keras project: `make install`, `make test`, `make test-large`,
# `make lint`, `make demo`, `make bench`, `make clean`.
#
# Everything runs in the virtualenv $(VENV), made from $(PYTHON) on first use.
# `make install` is idempotent: it reinstalls only when a requirements file,
# constraints.txt, setup.py or pyproject.toml is newer than $(VENV)/.installed.

PYTHON ?= python3
VENV ?= .venv
PIP_VERSION ?= 26.3
# Installed with --no-deps after the rest: its own pins conflict with TF 2.19
# (see shared/notes/dependencies.md).
TF_AGENTS_VERSION ?= 0.19.0
# Extra arguments for pytest, e.g. `make test PYTEST_ARGS="-k attention -x"`.
PYTEST_ARGS ?=

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

# Keras 2 (tf_keras) behind tf.keras; must be set before TensorFlow is imported.
export TF_USE_LEGACY_KERAS = 1
export TF_CPP_MIN_LOG_LEVEL = 2
export PIP_DISABLE_PIP_VERSION_CHECK = 1

BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
INSTALL_INPUTS := requirements.txt requirements-dev.txt constraints.txt setup.py pyproject.toml

# pytest exits 5 when it collected no test (e.g. no test marked `large` yet):
# report that and count it as success; any other failure stays a failure.
define run_pytest
	status=0; $(BIN)/pytest -q $(1) $(PYTEST_ARGS) || status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests (exit 5); treated as success"; exit 0; fi; \
	exit $$status
endef

.PHONY: install test test-large lint demo bench constraints clean distclean

install: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python $(INSTALL_INPUTS)
	$(BIN)/python -m pip install --upgrade pip==$(PIP_VERSION)
	$(BIN)/python -m pip install -c constraints.txt -r requirements.txt -r requirements-dev.txt
	$(BIN)/python -m pip install --no-deps tf-agents==$(TF_AGENTS_VERSION)
	$(BIN)/python -m pip install --no-deps -e .
	touch $@

test: install
	$(call run_pytest,)

test-large: install
	$(call run_pytest,-m large)

lint: install
	$(BIN)/ruff check .

demo: install
	$(BIN)/sit-demo

bench: install
	$(BIN)/python benchmarks/encoders.py

# Rewrites constraints.txt from the packages installed in $(VENV).
constraints: install
	{ echo "# Full pin of every installed package, transitive ones included; make install passes it to pip with -c."; \
	  echo "# Made by \`make constraints\`: \`pip freeze --all --exclude-editable\` after \`make install\`"; \
	  echo "# (Python $$($(BIN)/python -c 'import platform; print(platform.python_version())'), Linux x86_64),"; \
	  echo "# minus pip (pinned by PIP_VERSION) and tf-agents (installed separately with --no-deps)."; \
	  $(BIN)/pip freeze --all --exclude-editable | grep -v -i -E '^(pip|tf-agents|tf_agents|sit-keras|sit_keras)=='; \
	} > constraints.txt.new
	mv constraints.txt.new constraints.txt
	touch $(STAMP)

clean:
	rm -rf build dist *.egg-info .pytest_cache .hypothesis .ruff_cache
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +

# clean, and remove the virtualenv too.
distclean: clean
	rm -rf $(VENV)
