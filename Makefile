# Two commands for a fresh machine with Python 3.11 (pip and venv included):
#   make run     create .venv if needed, install requirements.txt (and requirements-test.txt) if changed, start the app
#                (make run ADDRESS=0.0.0.0 PORT=8080 to serve a class)
#   make test    same set-up plus requirements-cluster.txt (Ray) and requirements-auth.txt (OIDC sign-in), then
#                the import layers, unit tests, app tests, the GPU kit's quick CPU run, the browser tests and the
#                deploy tests (the systemd units; the image built, started and restarted: podman, debootstrap, root);
#                stops at the first failing stage; each stage prints its 15 slowest tests
#   make test-fast            the inner loop: the import layers and the unit tests not marked slow (under 2 minutes)
#   make gpu-check            the GPU acceptance kit on this machine's GPU (docs/gpu-check.md), into $OUT where it is
#                             set, else artifacts/gpu-check; with no .venv and a python3 that has torch (a lent GPU
#                             machine), that python3 runs it and nothing is installed
#   make gpu-check GPU_CHECK_ARGS="--device cpu --quick"     the same kit's wiring on a CPU, in a few minutes
#   make gpu-check PY=python3 any python with torch runs it (nothing is installed then)
#   make gpu-rehearsal        the window's two device commands of docs/gpu-check.md on this CPU as a lent H100 or
#                             H200 runs them: Python 3.12, torch 2.11.0, the kit's wheels, a copy of the carried tree
#                             (not in make test: the first run downloads several GB into .rehearsal/);
#                             REHEARSAL_SLOW_START_S=3 make gpu-rehearsal: every fresh Python process 3 s slower
#   make image                the container image from the Containerfile, with podman (docs/deploy.md): IMAGE names
#                             it; IMAGE_BASE=local builds on a Debian base made here (deploy/local-base.sh, as root)
#                             where no registry is reachable; WHEELS=DIR has pip in the build install only the wheels
#                             this machine's pip puts in DIR (from its cache and indexes), so the build downloads nothing
#   sudo make install-service the systemd service from this checkout (deploy/install-service.sh, docs/deploy.md)

PYTHON ?= python3.11
VENV ?= .venv
ADDRESS ?= 127.0.0.1
PORT ?= 8501

PY := $(VENV)/bin/python
PYTEST := $(PY) -m pytest
# The requirements last installed into the venv: pip runs again only when requirements.txt differs from it.
INSTALLED := $(VENV)/.installed-requirements.txt
# The same for the tests' tools (pytest, Playwright, import-linter), which the container image leaves out.
INSTALLED_TEST := $(VENV)/.installed-requirements-test.txt
# The same for the optional Ray engine, which only `make test` installs (so CI tests the Ray runner).
INSTALLED_CLUSTER := $(VENV)/.installed-requirements-cluster.txt
# The same for the optional sign-in stack (Authlib, httpx2), which only `make test` installs (so CI tests st.login).
INSTALLED_AUTH := $(VENV)/.installed-requirements-auth.txt
APP_TESTS := tests/pages
BROWSER_TESTS := tests/browser
KIT_TESTS := tests/bench/test_gpu_check.py
DEPLOY_TESTS := tests/deploy
UNIT_TESTS := tests --ignore=$(BROWSER_TESTS) --ignore=$(APP_TESTS) --ignore=$(KIT_TESTS) --ignore=$(DEPLOY_TESTS)
DURATIONS := --durations=15
GPU_CHECK_OUT ?= $(or $(OUT),artifacts/gpu-check)
GPU_CHECK_ARGS ?= --device cuda
IMAGE ?= localhost/amp-lab:latest
IMAGE_BASE ?= docker.io/library/python:3.11-slim
LOCAL_BASE := localhost/amp-lab-base:bookworm
IMAGE_CONTEXT ?= .
WHEELS ?=
IMAGE_REQUIREMENTS := requirements.txt requirements-auth.txt

.PHONY: run test test-fast install install-cluster install-auth gpu-check gpu-rehearsal image install-service

run: install
	$(PY) serve.py --server.address $(ADDRESS) --server.port $(PORT)

test: install install-cluster install-auth
	@echo "==> import layers (.importlinter)"
	$(VENV)/bin/lint-imports
	@echo "==> unit tests"
	$(PYTEST) $(UNIT_TESTS) $(DURATIONS)
	@echo "==> app tests"
	$(PYTEST) $(APP_TESTS) $(DURATIONS)
	@echo "==> GPU kit, quick run on the CPU (python -m bench.gpu_check --device cpu --quick)"
	rm -rf artifacts/gpu-check-cpu
	$(PY) -m bench.gpu_check --out artifacts/gpu-check-cpu --device cpu --quick
	GPU_CHECK_OUT=artifacts/gpu-check-cpu $(PYTEST) $(KIT_TESTS) $(DURATIONS)
	@echo "==> browser tests"
	$(PYTEST) $(BROWSER_TESTS) $(DURATIONS)
	@echo "==> deploy tests: the systemd units, and the image built, started, training and restarted"
	$(PYTEST) $(DEPLOY_TESTS) $(DURATIONS)
	@echo "==> all test suites passed"

test-fast: install install-cluster install-auth
	@echo "==> import layers (.importlinter)"
	$(VENV)/bin/lint-imports
	@echo "==> unit tests not marked slow"
	$(PYTEST) $(UNIT_TESTS) -m "not slow" $(DURATIONS)

# The kit's python, where nothing is installed first: PY given on the command line, or else, without the project's
# .venv, python3 when it imports torch (a lent GPU machine: no python3.11, no package index). Otherwise the .venv,
# installed first as for make run. Asked only for gpu-check, so no other target pays for importing torch.
ifneq ($(filter gpu-check,$(MAKECMDGOALS)),)
KIT_PY := $(if $(filter command line,$(origin PY)),$(PY),$(if $(wildcard $(PY)),,$(shell \
	python3 -c 'import torch' >/dev/null 2>&1 && echo python3)))
endif

gpu-check: $(if $(KIT_PY),,install)
	$(or $(KIT_PY),$(PY)) -m bench.gpu_check --out $(GPU_CHECK_OUT) $(GPU_CHECK_ARGS)

# The .venv is only for downloading the wheels at its versions (bench/gpu_wheels.sh) when .gpu-wheels/ is missing.
gpu-rehearsal: install
	bench/gpu_rehearsal.sh

# With WHEELS, this machine's Python 3.11 fetches the image's wheels first, again only when the requirements changed.
image:
ifeq ($(IMAGE_BASE),local)
	@podman image exists $(LOCAL_BASE) || deploy/local-base.sh $(LOCAL_BASE)
endif
ifneq ($(WHEELS),)
	@mkdir -p $(WHEELS)
	@cat $(IMAGE_REQUIREMENTS) | cmp -s - $(WHEELS)/.requirements || { \
		echo "==> the image's wheels into $(WHEELS), from this machine's pip"; \
		$(PYTHON) -m pip download -qq --disable-pip-version-check -d $(WHEELS) $(addprefix -r ,$(IMAGE_REQUIREMENTS)) \
			&& cat $(IMAGE_REQUIREMENTS) >$(WHEELS)/.requirements; }
endif
	podman build --format docker --build-arg BASE=$(if $(filter local,$(IMAGE_BASE)),$(LOCAL_BASE),$(IMAGE_BASE)) \
		$(if $(WHEELS),--volume $(abspath $(WHEELS)):/wheels:ro --build-arg PIP_OPTIONS="--no-index --find-links /wheels") \
		--tag $(IMAGE) --file $(IMAGE_CONTEXT)/Containerfile $(IMAGE_CONTEXT)

install-service:
	deploy/install-service.sh

# $(call install_once,FILE,STAMP,WHAT): pip-install FILE into the venv unless it is unchanged since the last
# install (STAMP is the copy kept then); WHAT says what it brings.
define install_once
	@if cmp -s $(1) $(2); then \
		echo "==> installing: $(1) unchanged since the last install, nothing to do"; \
	else \
		echo "==> installing $(1) ($(3)) into $(VENV)"; \
		$(PY) -m pip install --disable-pip-version-check -r $(1) && cp $(1) $(2); \
	fi
endef

install: $(PY)
	$(call install_once,requirements.txt,$(INSTALLED),the app; the first time takes minutes: torch is large)
	$(call install_once,requirements-test.txt,$(INSTALLED_TEST),the tests' tools: pytest and Playwright and import-linter)

install-cluster: install
	$(call install_once,requirements-cluster.txt,$(INSTALLED_CLUSTER),Ray)

install-auth: install
	$(call install_once,requirements-auth.txt,$(INSTALLED_AUTH),Authlib and httpx2: OIDC sign-in)

$(PY):
	@command -v $(PYTHON) >/dev/null || \
		{ echo "$(PYTHON) not found: install Python 3.11, or run make PYTHON=/path/to/python3.11"; exit 1; }
	@echo "==> installing: creating the virtual environment $(VENV) with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)
