"""Finding nsys: the same search order as ncu (``watch.locate.search_tool``), plus Nsight Compute's own copy."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

from nsightwrap.watch.locate import DEFAULT_CUDA_ROOT, DEFAULT_NSIGHT_COMPUTE_ROOT, search_tool

ENV_NSYS = "NSIGHTWRAP_NSYS"

DEFAULT_SYSTEMS_ROOT = "/opt/nvidia/nsight-systems"

_HINT = (
    "Install NVIDIA Nsight Systems (https://developer.nvidia.com/nsight-systems; the CUDA toolkit's "
    "nsight-systems package, or the copy inside Nsight Compute at host/target-linux-x64/nsys), "
    f"or point nsightwrap at nsys: set {ENV_NSYS}=/path/to/nsys or pass nsys=/path/to/nsys."
)


def find_nsys(
    explicit: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    *,
    cuda_root: str = DEFAULT_CUDA_ROOT,
    systems_root: str = DEFAULT_SYSTEMS_ROOT,
    compute_root: str = DEFAULT_NSIGHT_COMPUTE_ROOT,
) -> str:
    """Absolute path of nsys.

    Order: ``explicit``, ``$NSIGHTWRAP_NSYS``, ``PATH``, ``$CUDA_HOME/bin``,
    ``<cuda_root>/bin``, newest ``<systems_root>/<version>/bin/nsys``, and
    last the copy inside Nsight Compute, newest
    ``<compute_root>/<version>/host/target-linux-x64/nsys`` (it may lack its
    importer's libdw.so.1: see `profile_nsys`). The roots are parameters
    only so tests can point them at a temporary folder.
    """
    env = os.environ if env is None else env
    installs = [(os.path.join(systems_root, "*", "bin", "nsys"), lambda p: Path(p).parents[1].name),
                (os.path.join(compute_root, "*", "host", "target-linux-x64", "nsys"),
                 lambda p: Path(p).parents[2].name)]
    return search_tool("nsys", explicit, "nsys=", ENV_NSYS, env, cuda_root, installs, _HINT)


def bundled_with_ncu(nsys: str) -> bool:
    """True for the nsys copy shipped inside Nsight Compute (its importer may not start)."""
    parts = Path(nsys).parts
    return "target-linux-x64" in parts and any("nsight-compute" in p for p in parts)
