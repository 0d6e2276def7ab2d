"""profile(fn) on a callable whose kernel hangs under ncu: a hung result, in seconds.

The kernel spins on a host-mapped flag the host sets after the launch (see
cupy_hang_under_ncu.py). Your process stays alive; nothing is left running.

    python examples/profile_hang.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import nsightwrap  # noqa: E402


def spin():
    import cupy_hang_under_ncu

    return cupy_hang_under_ncu.main(60.0)


if __name__ == "__main__":
    result = nsightwrap.profile(spin, profile="quick", stall_timeout=5.0, timeout=120.0)
    print(result.summary())
    print("hung:", result.hung, result.hangs)
