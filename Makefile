# Two entry points, each doing its own set-up on a fresh machine:
#   make demo   grade the bundled sample submissions with nbgrader and show the grades
#   make test   run the test suite
#   make quick  the tests that start no process (a minute or two): run it after every edit
#   make hub    the course on a JupyterHub on this machine, as root (README, "On a JupyterHub"):
#               sudo make hub HUB_ARGS="--instructor teacher --student alice --student bob"
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test quick setup hub

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python -m tools.demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python -m pytest -q

quick: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/python -m pytest -q -m "not processes"

hub: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/python -m hub $(HUB_ARGS)
