# Jobs of the sit-keras project: `make install`, `make test`, `make test-large`,
# `make test-precision`, `make lint`, `make demo`, `make bench`, `make clean`.
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
# The AttentionNeuron paper's cart-pole dynamics (agents/environments/cartpole_swingup.py), also
# with --no-deps: it asks for `pygame`, which requirements.txt has as pygame-ce (same module).
CARTPOLE_SWINGUP_VERSION ?= 0.1.8
# Extra arguments for pytest, e.g. `make test PYTEST_ARGS="-k attention -x"`.
PYTEST_ARGS ?=
# pytest-xdist workers: one per core, each with one TensorFlow thread (tests/conftest.py);
# `make test PYTEST_WORKERS=0` runs in one process. `--dist loadgroup`: the tests that share a
# module-scoped fixture run on one worker (tests/conftest.py), so it is built once.
PYTEST_WORKERS ?= 2
# The kernel settings `make test-precision` runs the precision-sensitive tests under: oneDNN as
# the host offers it, oneDNN without BF16 / AMX / FP16 instructions, and Eigen's kernels.
PRECISION_SETTINGS := default ONEDNN_MAX_CPU_ISA=AVX512_CORE TF_ENABLE_ONEDNN_OPTS=0

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

# Keras 2 (tf_keras) behind tf.keras; must be set before TensorFlow is imported.
export TF_USE_LEGACY_KERAS = 1
export TF_CPP_MIN_LOG_LEVEL = 2
export PIP_DISABLE_PIP_VERSION_CHECK = 1

BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
INSTALL_INPUTS := requirements.txt requirements-dev.txt constraints.txt setup.py pyproject.toml Makefile

define run_pytest
	$(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=15 $(1) $(PYTEST_ARGS)
endef

# A selection by marker may be empty (pytest exits 5: no test marked `large` yet): report that
# and count it as success. Not for the whole suite, where exit 5 means the tests could not be
# collected (a conftest that fails to import in the xdist workers ends the same way).
define run_pytest_selection
	status=0; $(BIN)/pytest -q -n $(PYTEST_WORKERS) --dist loadgroup --durations=15 $(1) $(PYTEST_ARGS) || status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests (exit 5); treated as success"; exit 0; fi; \
	exit $$status
endef

.PHONY: install test test-large test-precision coverage lint demo bench constraints clean distclean

# The native kernels (sit_keras/native) are compiled for this host's CPU and TensorFlow: built when
# missing, stale (a source is newer) or made on another host (a copied work tree).
NATIVE_SOURCES := $(wildcard sit_keras/native/*.cc sit_keras/native/*.h sit_keras/native/xla/*.cc)
install: $(STAMP)
	if [ -n "$$(find $(NATIVE_SOURCES) -newer sit_keras/native/_kernels.so 2>/dev/null)" ] \
	  || ! $(BIN)/python -m sit_keras.native.build --check > /dev/null 2>&1; then \
	  $(BIN)/python -m sit_keras.native.build; \
	fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python $(INSTALL_INPUTS)
	$(BIN)/python -m pip install --upgrade pip==$(PIP_VERSION)
	$(BIN)/python -m pip install -c constraints.txt -r requirements.txt -r requirements-dev.txt
	$(BIN)/python -m pip install --no-deps tf-agents==$(TF_AGENTS_VERSION) \
	  gymnasium-cartpole-swingup==$(CARTPOLE_SWINGUP_VERSION)
	$(BIN)/python -m pip install --no-deps -e .
	touch $@

test: install
	$(call run_pytest,)

test-large: install
	$(call run_pytest_selection,-m large)

# The default suite with line coverage; the per-folder summary goes to coverage.json
# (benchmarks/coverage_summary.py). Tests that run a console script in a subprocess
# count only for what they import in the test process.
coverage: install
	$(call run_pytest,--cov --cov-report=json:coverage.json --cov-report=term:skip-covered)
	$(BIN)/python benchmarks/coverage_summary.py coverage.json

# The tests marked `precision` under each of PRECISION_SETTINGS, with the largest error / tolerance
# ratio of every mixed-precision symmetry check (reports in .precision/; docs/testing.md).
# On a host with AVX512-FP16, a capped oneDNN dies with an illegal instruction in float16
# depthwise_conv2d_native (a dispatch quirk of the variable), so there the capped run leaves the
# float16 tests out; they run capped on hosts without AVX512-FP16, where the cap changes nothing.
test-precision: install
	mkdir -p .precision
	for setting in $(PRECISION_SETTINGS); do \
	  echo "== $$setting"; rm -f .precision/$$setting.jsonl; select=precision; \
	  if [[ $$setting == ONEDNN_MAX_CPU_ISA=* ]] && grep -qw avx512_fp16 /proc/cpuinfo; then \
	    select="precision and not float16"; echo "(AVX512-FP16 host: float16 tests left out under the cap)"; \
	  fi; \
	  env $$( [ $$setting = default ] || echo $$setting ) $(BIN)/pytest -q -n $(PYTEST_WORKERS) -m "$$select" \
	    --symmetry-report=.precision/$$setting.jsonl $(PYTEST_ARGS) || exit 1; \
	done

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
	  echo "# minus pip (pinned by PIP_VERSION) and tf-agents and gymnasium-cartpole-swingup (installed"; \
	  echo "# separately with --no-deps)."; \
	  $(BIN)/pip freeze --all --exclude-editable \
	    | grep -v -i -E '^(pip|tf-agents|tf_agents|gymnasium-cartpole-swingup|gymnasium_cartpole_swingup|sit-keras|sit_keras)=='; \
	} > constraints.txt.new
	mv constraints.txt.new constraints.txt
	touch $(STAMP)

clean:
	rm -rf build dist *.egg-info .pytest_cache .hypothesis .ruff_cache .precision
	find . -path ./$(VENV) -prune -o -type d -name __pycache__ -exec rm -rf {} +

# clean, and remove the virtualenv too.
distclean: clean
	rm -rf $(VENV)
