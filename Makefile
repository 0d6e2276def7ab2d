# The two set-up commands of the README:
#   make run   installs nsightwrap, checks the machine (doctor) and profiles a small CUDA program:
#              examples/kernels.cu built with nvcc, else the PyTorch example, else a one-kernel
#              driver-API probe; then prints one row per kernel launch
#   make test  installs nsightwrap with its test extras, runs ruff, then the tests (what CI runs)
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

# Four workers on two cores: most tests wait on real processes (hangs on the fakes'
# scaled clock), and four overlap those waits (~78 s for 648 tests on the 2-core CI
# machine; one at a time, `pytest -q`, takes ~220 s).
test: install-test
	$(PYTHON) -m ruff check .
	$(PYTHON) -m pytest -q -n 4 --dist worksteal

test-gpu: install-test
	$(PYTHON) -m pytest -q -m gpu

bench: install
	$(PYTHON) benchmarks/run_overhead.py

clean:
	rm -rf nsightwrap-reports .pytest_cache .hypothesis build *.egg-info
