# The two set-up commands of README.md: `make demo` and `make test`. Each installs what it needs:
# demo only hangscope and torch; test also the test tools, Chromium and SLURM (their tests are
# skipped without them).
#
# PEP 668: a distribution's own interpreter (Debian's /usr/bin/python3) refuses `pip install`.
# Where PYTHON is one, everything goes into the project's virtual environment $(VENV_DIR) instead
# (made with PYTHON, said on every run); VENV=1 asks for it with any interpreter.
PYTHON ?= python3
VENV_DIR ?= .venv
TESTS ?=
MANAGED := $(shell $(PYTHON) -c 'import os, sys, sysconfig; print(int(sys.prefix == sys.base_prefix and os.path.isfile(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))))' 2>/dev/null)
ifneq ($(filter 1,$(MANAGED) $(VENV)),)
PY := $(abspath $(VENV_DIR))/bin/python
STAMPS := $(VENV_DIR)/
WHERE = @echo "hangscope: using the virtual environment $(abspath $(VENV_DIR)) ($(PYTHON) is externally managed, PEP 668, or VENV=1); run hangscope as $(VENV_DIR)/bin/hangscope"
else
PY := $(PYTHON)
STAMPS :=
WHERE = @true
endif
PIP = $(PY) -m pip
PIP_INSTALL = $(PIP) install -q --disable-pip-version-check
DEMO_STAMP = $(STAMPS).install-demo.stamp
STAMP = $(STAMPS).install.stamp

.PHONY: install demo test lint typecheck bench reports clean

$(abspath $(VENV_DIR))/bin/python:
	@echo "hangscope: $(PYTHON) is externally managed (PEP 668) or VENV=1: making the virtual environment $(abspath $(VENV_DIR))"
	$(PYTHON) -m venv $(VENV_DIR)

# What the demo needs: hangscope and torch. torch==2.13.0 first: the CPU build (a local wheel
# on the project machines), so that no other package pulls a CUDA build of torch.
$(DEMO_STAMP): pyproject.toml $(filter-out $(PYTHON),$(PY))
	$(WHERE)
	$(PIP_INSTALL) "torch==2.13.0"
	$(PIP_INSTALL) -e ".[torch]"
	# An editable install compiles nothing and PYTHONDONTWRITEBYTECODE (set on the project
	# machines) stops Python caching it: without this every hangscope start compiles ~70 modules.
	$(PY) -m compileall -q hangscope
	touch $(DEMO_STAMP)

# What the tests need besides: pytest and friends, Chromium for the report's browser tests, and
# a real SLURM cluster of virtual nodes for tests/test_slurm_live.py.
$(STAMP): $(DEMO_STAMP)
	$(PIP_INSTALL) -e ".[torch,test]"
	@command -v chromium >/dev/null 2>&1 || { \
	  command -v apt-get >/dev/null 2>&1 && (apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
	  || echo "warning: chromium not installed; browser tests will be skipped"; }
	@command -v slurmd >/dev/null 2>&1 || { \
	  command -v apt-get >/dev/null 2>&1 && (apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmd slurmctld slurm-client \
	  >/dev/null) || echo "warning: SLURM not installed; SLURM tests will be skipped"; }
	touch $(STAMP)

install: $(STAMP)

demo: $(DEMO_STAMP)
	$(WHERE)
	$(PY) -m fixtures.demo

# TESTS: a subset (`make test TESTS=tests/test_cli.py`); all of them by default.
test: $(STAMP)
	$(WHERE)
	$(PY) -m pytest -q -p no:cacheprovider $(TESTS)

lint: $(STAMP)
	$(PY) -m ruff check hangscope tests
	$(PY) -m mypy

bench: $(STAMP)
	$(PY) bench/bench_fr.py

clean:
	rm -rf .install.stamp .install-demo.stamp $(VENV_DIR) build *.egg-info .pytest_cache \
	  .mypy_cache .ruff_cache
