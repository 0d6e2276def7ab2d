# The two set-up commands of the README:
#   make run   installs nsightwrap, checks the machine (doctor) and profiles a small CUDA program:
#              examples/kernels.cu built with nvcc, else the PyTorch example, else a one-kernel
#              driver-API probe; then prints one row per kernel launch
#   make test  installs nsightwrap with its test extras and runs the tests (what CI runs)
# PYTHON may be any interpreter, e.g. `make test PYTHON=venv/bin/python`.
PYTHON ?= python3

.PHONY: install install-test run test test-gpu bench clean

install:
	$(PYTHON) -m pip install -q -e .

install-test:
	$(PYTHON) -m pip install -q -e '.[test]'

run: install
	$(PYTHON) -m nsightwrap doctor
	$(PYTHON) examples/make_run.py

test: install-test
	$(PYTHON) -m pytest -q

test-gpu: install-test
	$(PYTHON) -m pytest -q -m gpu

bench: install
	$(PYTHON) benchmarks/run_overhead.py

clean:
	rm -rf nsightwrap-reports .pytest_cache .hypothesis build *.egg-info
