# `make run` and `make test` do all set-up on a fresh machine: a venv in .venv, then run / test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU wheel of torch for the worker on the embedded `local` host (a plain `torch` may pull a CUDA build).
TORCH_SPEC ?= torch==2.13.0
SWEEP ?= sweeps/smoke.yaml

.PHONY: run test install sshd clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[worker,test]'
	touch $@

install: $(VENV)/.installed

run: install
	$(VENV)/bin/fleetbench run $(SWEEP)

# The fleet tests start real OpenSSH servers; install the server when it is missing and we may.
sshd:
	@if [ ! -x /usr/sbin/sshd ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server >/dev/null; \
		else echo "openssh-server is missing: install it (sudo apt-get install openssh-server)"; fi; \
	fi

test: install sshd
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) runs .pytest_cache
