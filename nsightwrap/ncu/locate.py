"""Find ncu: the user's choice first, then the places CUDA installs it."""

from __future__ import annotations

import os
from typing import Mapping

from nsightwrap.watch.locate import DEFAULT_CUDA_ROOT, DEFAULT_NSIGHT_COMPUTE_ROOT, search_tool

__all__ = ["ENV_NCU", "find_ncu"]

ENV_NCU = "NSIGHTWRAP_NCU"

_HINT = (
    "Install NVIDIA Nsight Compute (it ships with the CUDA toolkit), "
    f"or point nsightwrap at ncu: set {ENV_NCU}=/path/to/ncu or pass --ncu /path/to/ncu."
)


def find_ncu(
    explicit: str | None = None,
    env: Mapping[str, str] | None = None,
    *,
    cuda_root: str = DEFAULT_CUDA_ROOT,
    nsight_root: str = DEFAULT_NSIGHT_COMPUTE_ROOT,
) -> str:
    """Absolute path of ncu, tried in the order a user would expect to win.

    Order: ``explicit``, ``$NSIGHTWRAP_NCU``, ``PATH``, ``$CUDA_HOME/bin``,
    ``<cuda_root>/bin``, newest ``<nsight_root>/<version>/ncu``. The two
    roots are parameters only so tests can point them at a temporary folder.
    """
    env = os.environ if env is None else env
    installs = [(os.path.join(nsight_root, "*", "ncu"), lambda p: os.path.basename(os.path.dirname(p)))]
    return search_tool("ncu", explicit, "--ncu", ENV_NCU, env, cuda_root, installs, _HINT)
