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

# Four workers on two cores: most tests wait on real processes (hangs on the fakes'
# scaled clock), and four overlap those waits (238 s for 1211 tests on the 2-core CI machine, 2026-11-27;
# ~78 s when there were 648). Two and six workers were measured slower
# (tests/calibrate + tests/cli on the shared 2-core machine: -n 2 95 s, -n 6 99 s, -n 4 70-80 s).
# The suite is CPU-bound (issue 20): 353 s of CPU (289 user + 64 sys) for 1211 tests, then 254 s (209 + 45)
# once child processes started cheaply (tests/conftest.py pytest_configure: the fakes' python3 is this
# interpreter, not a version manager's shim; children keep bytecode; stdlib-only fakes run without site)
# and the command line loaded only the command given (2026-11-27, same machine, 4 workers). Then 304 s of CPU
# (251 + 52; 233 s wall) -> 250 s (202 + 47; 213 s wall) for 1272 tests, the machine shared with other test runs
# both times (load 0.4-7 and 3-7): the tests that read what the store's commands print run them in-process, the
# pytest sessions inside tests start without xdist/benchmark/hypothesis, a failed fake-Slurm job is not waited
# for 15 s, and `hangs` no longer imports the bundle's tool probes (2026-11-27; tests/README.md: fast tests).
# Then 181 s wall (214 + 48 s of CPU) -> 152 s (172 + 43) at 4 workers, 141 s (187 + 45) at six, 1271 tests: the
# engine's logic tested on in-process backends (helpers.ThreadGpus) instead of submitit jobs, and six workers,
# which overlap more of the tests' waits (tests/fallback + calibrate + watch, alternated: -n 4 96, 93 s; -n 5 86 s;
# -n 6 80, 79, 84 s; -n 8 81 s; --dist load at six 94 s; load 1.3-8, 2026-11-27). The CPU of submitit's jobs,
# orphans, is not in these counts (tests/README.md: count it with a subreaper). Counted with one (a per-test
# plugin: the tests' own CPU, their children's, orphans reaped): 298 s (72 in the workers, 226 in children) for
# 1279 tests, 160 s wall -> 257 s (64 + 193) for 1302 tests, 150 s wall, once tests/fallback (121 -> 78-82 s) and the
# other folders (~26 s) were made cheaper and 23 tests added (2026-11-27; `.ci/run`: 143.6 and 140.0 s, 1302 tests).
# Then each start of the venv's Python 48 -> 13.5 ms of CPU (make_venv.sh: no --system-site-packages hooks; the
# compat editable mode), a tree looked up in one pass over /proc, cheaper fakes: the session's start (3de680d, its
# own venv) and this tree side by side, alternated, four pairs on this shared machine: 146.9/128.6, 135.1/141.6,
# 135.5/132.6, 141.7/116.9 s wall (means 139.8 -> 129.9 s), 249/191, 230/227, 239/228, 247/191 s of CPU (means 241
# -> 209 s); the same tree alone 114-135 s (2026-11-27). Still twice the goal of 60 s (issue 20).
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
