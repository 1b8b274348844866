# From a fresh clone: `make run` runs the demo (training, attacks, report), `make test` runs the test suite,
# `make docs` builds the documentation site into site/, `make lint` checks formatting and lint rules. Each creates
# .venv when it is missing and installs fedsim with its dev and docs extras into it (offline-capable: torch and
# torchvision come from the local wheel cache).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG ?= configs/demo.yaml
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test docs lint format bench install clean deployment-smoke flower-contract

$(BIN)/python:
	@echo "fedsim: creating the virtual environment $(VENV) (first time only)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Said before the long, quiet step: a first install takes about 4 minutes on two cores (torch, Flower, Ray).
$(STAMP): pyproject.toml | $(BIN)/python
	@echo "fedsim: installing fedsim and its dependencies into $(VENV): about 4 minutes on two cores, first time only"
	$(BIN)/python -m pip install --quiet -e '.[dev,docs]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/fedsim run $(CONFIG) --report

# two workers, each test file on one of them (tests/conftest.py groups them; module fixtures run once); the simulation
# files come first, so the longest ones start early
test: install
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

# The contract of fedsim.core.flower_private (Flower's and Ray's private names) with Flower's nightly release, installed
# beside the project's own Flower into FLOWER_NIGHTLY (it shadows it there only); skipped where the index is unreachable.
FLOWER_NIGHTLY ?= .flower-nightly
flower-contract: install
	@rm -rf $(FLOWER_NIGHTLY)
	@if $(BIN)/python -m pip install --quiet --no-deps --pre --target $(FLOWER_NIGHTLY) flwr-nightly; then \
		PYTHONPATH=$(FLOWER_NIGHTLY) $(BIN)/python -m pytest -q -p no:cacheprovider tests/contract; \
	else \
		echo "flower-contract: skipped (flwr-nightly could not be installed: offline?)"; \
	fi

# Ruff: the formatter's check and the lint rules chosen in pyproject.toml ([tool.ruff]); `make format` applies both.
# mypy: the type checker on fedsim/ and what it imports ([tool.mypy]).
lint: install
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# --strict: a broken link or anchor, or a stale generated page (docs/hooks.py), fails the build.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# The demo's set-up through the deployment engine, for 2 rounds: a SuperLink and one SuperNode per client on
# localhost (insecure, free ports, runtime dependency installation disabled), a man-in-the-middle inverting each
# client's round-1 update (one step on 4 images: what DLG can invert); about two minutes on two idle cores.
# Every process it started is stopped, on Ctrl-C, SIGTERM (`timeout`) or its own death too; the run directory is
# the last line.
deployment-smoke: install
	$(BIN)/python -m fedsim.engine.deployment.local_federation configs/demo.yaml --set federation.rounds=2 \
		--set 'adversary.rounds=[1]' --set adversary.targets=per-client

bench: install
	$(BIN)/python -m bench.overhead

clean:
	rm -rf $(VENV) runs site .pytest_cache
