# The two set-up commands of README.md: `make demo` and `make test`. Each installs what it needs.
PYTHON ?= python3
PIP = $(PYTHON) -m pip
STAMP = .install.stamp

.PHONY: install demo test lint typecheck bench reports clean

$(STAMP): pyproject.toml
	# torch==2.13.0 first: the CPU build (a local wheel on the project machines), so that no
	# other package pulls a CUDA build of torch.
	$(PIP) install -q --disable-pip-version-check "torch==2.13.0"
	$(PIP) install -q --disable-pip-version-check -e ".[torch,test]"
	# An editable install compiles nothing and PYTHONDONTWRITEBYTECODE (set on the project
	# machines) stops Python caching it: without this every hangscope start compiles ~70 modules.
	$(PYTHON) -m compileall -q hangscope
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

demo: $(STAMP)
	$(PYTHON) -m fixtures.demo

test: $(STAMP)
	$(PYTHON) -m pytest -q -p no:cacheprovider

lint: $(STAMP)
	$(PYTHON) -m ruff check hangscope tests
	$(PYTHON) -m mypy

bench: $(STAMP)
	$(PYTHON) bench/bench_fr.py

clean:
	rm -rf $(STAMP) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
