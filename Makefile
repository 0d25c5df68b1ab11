# `make run` and `make test` do all set-up on a fresh machine: a venv in .venv, then run / test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU wheel of torch for the worker on the embedded `local` host (a plain `torch` may pull a CUDA build).
TORCH_SPEC ?= torch==2.13.0
SWEEP ?= sweeps/smoke.yaml

.PHONY: run test lint install system-deps clean

$(VENV)/.installed: pyproject.toml requirements/host-constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[worker,report,test]'
	# FlashInfer at the hosts' pin, for the FP4 contract tests: it imports on a CPU-only machine with these
	# few dependencies; its full set (CUDA toolkits, cutlass-dsl, ...) is left out with --no-deps.
	$(PY) -m pip install -q -c requirements/host-constraints.txt apache-tvm-ffi requests tqdm nvidia-ml-py
	$(PY) -m pip install -q --no-deps -c requirements/host-constraints.txt flashinfer-python
	touch $@

install: $(VENV)/.installed

run: install
	$(VENV)/bin/fleetbench run $(SWEEP)

# The fleet tests start real OpenSSH servers, the Slurm tests a one-node Slurm (munge, slurmctld,
# slurmd), and the report test opens a page in headless Chromium: install whichever is missing, in one
# apt-get call, when we may.
system-deps:
	@missing=""; \
	[ -x /usr/sbin/sshd ] || missing="$$missing openssh-server"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	[ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] || missing="$$missing slurm-wlm"; \
	[ -x /usr/sbin/munged ] || missing="$$missing munge"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else echo "missing:$$missing (install them: sudo apt-get install$$missing)"; fi; \
	fi

# Wheels of the `minimal` provision profile, for the offline-provisioning test.
WHEELHOUSE := .cache/wheelhouse
$(WHEELHOUSE)/.done: requirements/host-constraints.txt
	$(PY) -m pip download -q --only-binary=:all: -d $(WHEELHOUSE) -c requirements/host-constraints.txt pydantic
	touch $@

# The formatter and the linter (complexity ceiling 31; pyproject.toml [tool.ruff]) before the tests.
lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: install system-deps $(WHEELHOUSE)/.done lint
	FLEETBENCH_TEST_WHEELHOUSE=$(WHEELHOUSE) $(PY) -m pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache
