# Two commands for a fresh machine with Python 3.11 (pip and venv included):
#   make run     create .venv if needed, install requirements.txt if it changed, start the app
#                (make run ADDRESS=0.0.0.0 PORT=8080 to serve a class)
#   make test    same set-up, then the import layers, unit tests, app tests and browser tests; stops at the
#                first failing stage

PYTHON ?= python3.11
VENV ?= .venv
ADDRESS ?= 127.0.0.1
PORT ?= 8501

PY := $(VENV)/bin/python
PYTEST := $(PY) -m pytest
# The requirements last installed into the venv: pip runs again only when requirements.txt differs from it.
INSTALLED := $(VENV)/.installed-requirements.txt
APP_TESTS := tests/test_pages.py tests/test_learn_pages.py
BROWSER_TESTS := tests/browser

.PHONY: run test install

run: install
	$(PY) serve.py --server.address $(ADDRESS) --server.port $(PORT)

test: install
	@echo "==> import layers (.importlinter)"
	$(VENV)/bin/lint-imports
	@echo "==> unit tests"
	$(PYTEST) tests --ignore=$(BROWSER_TESTS) $(addprefix --ignore=,$(APP_TESTS))
	@echo "==> app tests"
	$(PYTEST) $(APP_TESTS)
	@echo "==> browser tests"
	$(PYTEST) $(BROWSER_TESTS)
	@echo "==> all test suites passed"

install: $(PY)
	@if cmp -s requirements.txt $(INSTALLED); then \
		echo "==> installing: requirements.txt unchanged since the last install, nothing to do"; \
	else \
		echo "==> installing requirements.txt into $(VENV) (the first time takes minutes: torch is large)"; \
		$(PY) -m pip install --disable-pip-version-check -r requirements.txt && cp requirements.txt $(INSTALLED); \
	fi

$(PY):
	@command -v $(PYTHON) >/dev/null || \
		{ echo "$(PYTHON) not found: install Python 3.11, or run make PYTHON=/path/to/python3.11"; exit 1; }
	@echo "==> installing: creating the virtual environment $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
