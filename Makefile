# From a fresh clone: `make run` runs the demo (training, attacks, report), `make test` runs the test suite.
# Both create .venv when it is missing and install fedsim into it (offline-capable here:
# torch and torchvision come from the local wheel cache).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
CONFIG ?= configs/demo.yaml
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: run test bench install clean deployment-smoke

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

run: install
	$(BIN)/fedsim run $(CONFIG) --report

test: install
	$(BIN)/python -m pytest -q

# The quickstart through the deployment engine: a SuperLink and one SuperNode per client on localhost (insecure,
# free ports, runtime dependency installation disabled), a man-in-the-middle inverting round 1's updates;
# every process it started is stopped, and the run directory is the last line.
deployment-smoke: install
	$(BIN)/python -m fedsim.engine.deployment.local_federation configs/quickstart.yaml --set adversary.tap=mitm \
		--set 'adversary.rounds=[1]' --set 'adversary.attacks=[{name: dlg, iterations: 50, restarts: 1}]'

bench: install
	$(BIN)/python -m bench.overhead

clean:
	rm -rf $(VENV) runs .pytest_cache
