# The two README commands: `make demo` and `make test`. Both bootstrap .venv from nothing but python3.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PIP    := $(BIN)/python -m pip
EDITABLE := --config-settings editable_mode=compat
MEMBERS := sdk/pyproject.toml proto/pyproject.toml edge/pyproject.toml cloud/pyproject.toml
# Dev-only: the MQTT 5 broker for the demo and tests (no runtime distribution ships it).
DEVBROKER := tools/devbroker
# An application's plugin, installed as a wheel would be (not editable): the entry-point tests run it.
PLUGIN  := tests/plugins/edgefleet-example-plugin
PLUGIN_FILES := $(PLUGIN)/pyproject.toml $(wildcard $(PLUGIN)/src/*/*.py)

.PHONY: demo test lint typecheck bench proto models clean help

help:
	@echo "make demo   run the demo (real COCO detector over a real clip)"
	@echo "make test   run the test suite"
	@echo "make lint | typecheck | bench | proto | models | clean"

$(STAMP): constraints.txt $(MEMBERS) $(DEVBROKER)/pyproject.toml $(PLUGIN_FILES)
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "edgefleet needs Python >= 3.10")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || { echo "error: '$(PYTHON) -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)"; exit 1; }
	$(PIP) install -q --disable-pip-version-check -c constraints.txt setuptools wheel
	$(PIP) install -q --disable-pip-version-check -c constraints.txt --no-build-isolation $(EDITABLE) \
		-e './sdk[cpu,quantize]' -e ./proto -e ./edge -e './cloud[postgres]' -e ./$(DEVBROKER) \
		pytest pytest-timeout hypothesis mypy ruff types-PyYAML grpc-stubs grpcio-tools onnx motmetrics scipy
	$(PIP) install -q --disable-pip-version-check -c constraints.txt --no-build-isolation --no-deps \
		--force-reinstall ./$(PLUGIN)
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python tools/demo/run_demo.py

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Both Pythons the project runs on: 3.10 (JetPack 6 on Jetson) and 3.11.
TYPED := sdk/src edge/src cloud/src $(DEVBROKER)/edgefleet_devbroker.py
typecheck: $(STAMP)
	$(BIN)/mypy --python-version 3.10 $(TYPED)
	$(BIN)/mypy --python-version 3.11 $(TYPED)

bench: $(STAMP)
	$(BIN)/edgefleet bench --json

proto: $(STAMP)
	$(BIN)/python tools/gen-proto

models:
	tools/models/build.sh all

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache demo-out
