#!/usr/bin/env -S python3 -S
"""A fake CUDA program for the fake ncu; its steps are in tests/fake_ncu/fakeapp.py, imported so that its bytecode
is cached (compiled as a script it cost 1 ms of each of the suite's ~1,500 runs of the program)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fakeapp  # noqa: E402

fakeapp.main(sys.argv[1:])
