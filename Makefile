# pgshovel2 — see README.rst. Ports and folders: scripts/env.sh (override from the environment).
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: install stack-up stack-down stack-status demo test unit lint bench clean

install:
	scripts/install.sh

stack-up: install
	scripts/stack.sh up

stack-down:
	scripts/stack.sh down

stack-status:
	scripts/stack.sh status

demo: stack-up
	$(PY) scripts/demo.py

# The test suite starts its own stack (ports +1000, state in .stack-test) and stops it.
test: install
	$(PY) -m pytest -ra tests

unit: install
	$(PY) -m pytest -ra tests/unit

lint: install
	$(VENV)/bin/ruff check pgshovel2 tests scripts

requirements.txt: setup.py
	scripts/requirements.sh > requirements.txt.new && mv requirements.txt.new requirements.txt

clean: stack-down
	rm -rf .stack .stack-test
