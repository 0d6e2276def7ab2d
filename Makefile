# The two set-up commands of the README:
#   make run   installs nsightwrap, checks the machine (doctor) and profiles a small CUDA program:
#              examples/kernels.cu built with nvcc, else the PyTorch example, else a one-kernel
#              driver-API probe; then prints one row per kernel launch
#   make test  installs nsightwrap with its test extras, runs ruff, then the tests (what CI runs)
# They install into a virtual environment of their own, $(VENV) (.venv/ in the checkout, ignored by
# git), made with $(PYTHON) -m venv by devtools/make_venv.sh and reused while it is up to date: Debian's
# and Ubuntu's python3 is externally managed (PEP 668), and pip refuses to install into it. The venv sees
# PYTHON's own packages (PyTorch for the example, and what an offline machine already has) through a .pth
# file that lists their folders (make_venv.sh says why not --system-site-packages). A PYTHON that already runs in a virtual environment is used as it is, e.g.
# `make test PYTHON=venv/bin/python`. pip reads its own variables: on a machine without network,
# `PIP_NO_INDEX=1 PIP_FIND_LINKS=/path/to/wheels make run`.
PYTHON ?= python3
VENV ?= .venv
IN_VENV := $(shell $(PYTHON) -c 'import sys; print(int(sys.prefix != sys.base_prefix))' 2>/dev/null)
ifeq ($(IN_VENV),1)
PY := $(PYTHON)
else
PY := $(VENV)/bin/python
endif

.PHONY: venv install install-test run test test-gpu test-slurm bench clean

venv:
ifneq ($(IN_VENV),1)
	@sh devtools/make_venv.sh "$(PYTHON)" "$(VENV)"
endif

# Editable installs in setuptools' compat mode: the checkout's folder on sys.path by a .pth line, where the
# default mode installs an import finder whose import costs 10-19 ms at every start of Python (issue 20).
# Given through pip's environment, not --config-settings: a pip older than 22.1 (Ubuntu 22.04's venvs) has no
# such option and ignores the variable (the finder, then: slower, not wrong).
EDITABLE := PIP_CONFIG_SETTINGS=editable_mode=compat

install: venv
	$(EDITABLE) $(PY) -m pip install -q -e .

install-test: venv
	$(EDITABLE) $(PY) -m pip install -q -e '.[test]'

run: install
	$(PY) -m nsightwrap doctor
	$(PY) examples/make_run.py

# Six workers on two cores: many tests wait on real processes (hangs on the fakes' scaled clock), and six overlap
# those waits (measured on this shared 2-core machine: -n 4 96 s, -n 5 75-95 s, -n 6 72-89 s, -n 10 98 s; on
# 2026-11-27 -n 8 and -n 6 alternated three times: 68.0/65.9, 68.2/66.7, 65.2/68.7 s, the same wall time with
# 11 % more CPU at -n 8). The suite's cost (issue 20; how tests stay cheap, and what its start costs:
# tests/README.md): 353 s of CPU for 1211 tests at first; 1332 tests now take 65-86 s, 110-156 s of CPU, as the
# machine's speed goes (2026-11-27). Still above the goal of 60 s: most of the CPU left is the tests' own, in the
# workers and in ~2,500 small processes (the fakes, the programs they run, the CLI and its jobs; SQLAlchemy's import
# alone is a third of a `python -m nsightwrap` that opens a store); the workers are forked from a zygote that
# imported their libraries once (tests/zygote.py: 2-4 s less to the first test); ~10 % of the run both cores are
# idle, when all six workers wait at once. A `perf record -a` of a run (2026-11-27, session 16): the interpreter 58 % of
# the samples, the kernel 23 % (page faults, forks and exits of the processes), the garbage collector 6.5 %, idle 7.7 %;
# no single place left. -n 8 against -n 6 once more: 80.4 against 79.1 s, 145.5 against 136.3 s of CPU. Session 17:
# the session's temporary files in memory (tests/conftest.py, three alternated pairs 73.3-77.8 against 80.2-83.3 s)
# and a zygote that imports with its collector off and reads hypothesis's constants once (the first test at 3.8 s,
# not 5.0 s); -n 5, 6 and 7 alternated twice: 81.4/79.4, 73.6/67.3, 66.2/72.8 s. The tree of the session's start
# against its end, alternated three times: 83.3/78.9/85.1 against 75.9/79.8/82.8 s, the machine slow that hour.
# Session 18 (2026-11-28): -n 6, 8 and 10 alternated three times: 71.3/65.5/65.6, 74.2/71.8/61.7, 69.8/70.5/64.5 s;
# -n 6 stays. A fresh clone's `.ci/run` took 61.9-66.5 s in a fast hour.
test: install-test
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n 6 --dist worksteal

test-gpu: install-test
	$(PY) -m pytest -q -m gpu

# The Slurm tests against a real single-node Slurm: devtools/slurm_single_node.sh installs slurm-wlm and
# munge (as root, when missing), starts munged, slurmctld and slurmd in a temporary folder, runs the tests
# marked `slurm`, and stops everything it started.
test-slurm: install-test
	PYTHON=$(PY) bash devtools/slurm_single_node.sh

bench: install
	$(PY) benchmarks/run_overhead.py

clean:
	rm -rf nsightwrap-reports .pytest_cache .hypothesis build *.egg-info
