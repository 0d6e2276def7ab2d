"""What the package declares: every library its code imports, at floors that have what it uses."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from helpers import parsed

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "nsightwrap"

#: Import name -> distribution name, where they differ.
DISTRIBUTIONS = {"yaml": "pyyaml", "ncu_report": "ncu-report"}
#: Imported only when present (inside try/except ImportError or looked up by name): never required.
OPTIONAL = {"torch", "cupy", "nvtx",
            "submitit"}  # only for sweep-sections --executor: the `cluster` extra (ImportError says to install it)
#: Imported only by the pytest plugin, which pytest itself loads.
PLUGIN_ONLY = {"pytest"}


def declared() -> dict[str, str]:
    """{distribution (lower case): requirement} from pyproject.toml's `dependencies`."""
    text = (ROOT / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
    assert block, "pyproject.toml has no dependencies list"
    reqs = re.findall(r'^\s*"([^"]+)"', block[1], re.M)
    return {re.split(r"[<>=!~ \[]", r, maxsplit=1)[0].lower(): r for r in reqs}


def third_party_imports() -> dict[str, set[str]]:
    """{top-level module: files importing it} for every import in the package outside the stdlib."""
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(parsed(path)):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if top != "nsightwrap" and top not in sys.stdlib_module_names and top != "__future__":
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_imported_library_is_declared():
    deps = declared()
    missing = {}
    for module, files in third_party_imports().items():
        if module in OPTIONAL:
            continue
        if module in PLUGIN_ONLY and files <= {"nsightwrap/call/pytest_plugin.py"}:
            continue
        if DISTRIBUTIONS.get(module, module).lower() not in deps:
            missing[module] = sorted(files)
    assert missing == {}, f"imported but not in pyproject.toml's dependencies: {missing}"
    for must in ("numpy", "rich", "ncu-report"):
        assert must in deps


def test_ncu_report_floor_has_sections():
    """load_report(sections=) calls IAction.sections(): the ncu-report wheels 2025.3.1 and 2026.2.0
    lack it, 2026.3.0 is the first that has it (checked by unpacking the wheels from PyPI)."""
    floor = re.search(r">=\s*([\d.]+)", declared()["ncu-report"])[1]
    assert tuple(int(x) for x in floor.split(".")) >= (2026, 3)


def test_the_ladders_ship_in_the_wheel():
    # profiles/ lives at the top of the project; nsightwrap/profiles links to it, and the package data
    # names it, so a non-editable `pip install .` carries them (checked by hand: unzip -l of the wheel).
    from pathlib import Path

    import tomllib

    import nsightwrap.fallback.ladder as ladder

    root = Path(__file__).resolve().parents[2]
    link = root / "nsightwrap" / "profiles"
    assert link.is_symlink() and link.resolve() == (root / "profiles").resolve()
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "profiles/*.yaml" in data["nsightwrap"]
    assert ladder.builtin_profiles() == ["deep", "default", "quick"]
