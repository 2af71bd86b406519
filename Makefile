# The two set-up commands of README.md: `make demo` and `make test`. Each installs what it needs.
PYTHON ?= python3
VENV ?= .venv

# An interpreter that refuses `pip install` into itself (PEP 668: Debian's and Ubuntu's own
# python3 carry an EXTERNALLY-MANAGED marker) gets a project virtual environment in $(VENV);
# any other (pyenv, conda, a venv already active) is used as it is. USE_VENV=1 forces one.
MANAGED := $(shell $(PYTHON) -c "import os, sys, sysconfig; \
  print(int(sys.prefix == sys.base_prefix and os.path.exists(os.path.join( \
  sysconfig.get_path('stdlib'), 'EXTERNALLY-MANAGED'))))" 2>/dev/null)
USE_VENV ?= $(MANAGED)
ifeq ($(USE_VENV),1)
RUN := $(abspath $(VENV))/bin/python
export PATH := $(abspath $(VENV))/bin:$(PATH)
STAMP_DIR := $(VENV)/
INTERPRETER := $(VENV)/bin/python
else
RUN := $(PYTHON)
STAMP_DIR :=
INTERPRETER :=
endif
PIP = $(RUN) -m pip
CORE = $(STAMP_DIR).install-core.stamp
STAMP = $(STAMP_DIR).install.stamp

.PHONY: install demo test lint typecheck bench reports clean

$(VENV)/bin/python:
	@echo "$(PYTHON) is externally managed (PEP 668): using a virtual environment in $(VENV)/"
	$(PYTHON) -m venv $(VENV) || { \
	  echo "hint: Debian/Ubuntu ship venv apart: apt-get install python3-venv"; exit 1; }

# What the demo needs: torch and this package (py-spy comes with it).
$(CORE): pyproject.toml setup.py hangscope/_frscan.c $(INTERPRETER)
	# torch==2.13.0 first: the CPU build (a local wheel on the project machines), so that no
	# other package pulls a CUDA build of torch.
	$(PIP) install -q --disable-pip-version-check "torch==2.13.0"
	$(PIP) install -q --disable-pip-version-check -e ".[torch]"
	# An editable install compiles nothing and PYTHONDONTWRITEBYTECODE (set on the project
	# machines) stops Python caching it: without this every hangscope start compiles ~70 modules.
	$(RUN) -m compileall -q hangscope
	touch $(CORE)

# What the tests need besides: pytest and friends, Chromium, a SLURM cluster of virtual nodes.
$(STAMP): $(CORE)
	$(PIP) install -q --disable-pip-version-check -e ".[torch,test]"
	@command -v chromium >/dev/null 2>&1 || { \
	  command -v apt-get >/dev/null 2>&1 && (apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null) \
	  || echo "warning: chromium not installed; browser tests will be skipped"; }
	# A real SLURM cluster of virtual nodes for tests/test_slurm_live.py (skipped without it).
	@command -v slurmd >/dev/null 2>&1 || { \
	  command -v apt-get >/dev/null 2>&1 && (apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmd slurmctld slurm-client \
	  >/dev/null) || echo "warning: SLURM not installed; SLURM tests will be skipped"; }
	touch $(STAMP)

install: $(STAMP)

demo: $(CORE)
	$(RUN) -m fixtures.demo

# -u: piped into a CI log, pytest's progress would otherwise arrive 8 KiB at a time, and a
# run cut short would not show how far it got. --durations: the slowest tests, where the
# suite's time goes as it grows.
test: $(STAMP)
	$(RUN) -u -m pytest -q -p no:cacheprovider --durations=15

lint: $(STAMP)
	$(RUN) -m ruff check hangscope tests
	$(RUN) -m mypy

bench: $(STAMP)
	$(RUN) bench/bench_fr.py

clean:
	rm -rf .install.stamp .install-core.stamp $(VENV) build *.egg-info .pytest_cache \
	  .mypy_cache .ruff_cache
