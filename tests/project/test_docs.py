"""Issue 23, item 11: the README keeps up with the code.

Every environment variable the package reads, every file under examples/ and every key a ladder
file accepts is named in the README (the keys in its ladder-file section), so that adding one
without a word for the user fails here.
"""

from __future__ import annotations

import ast
import functools
import re

from helpers import ROOT, parsed

from nsightwrap.fallback.ladder import LADDER_KEYS, RUNG_KEYS

PACKAGE = ROOT / "nsightwrap"
README = (ROOT / "README.md").read_text()
#: What reads a variable: os.environ / env / self.env / context.env ... (a mapping named *env*).
_ENV_NAMES = re.compile(r"(^|_)(env|environ)$|^environ")
_ENV_METHODS = {"get", "setdefault", "pop"}
#: Module constants that name variables by convention: X_VAR, X_VARS, ENV_X.
_VAR_CONSTANT = re.compile(r"^(?:[A-Z0-9_]*_VARS?|ENV_[A-Z0-9_]+)$")
_VAR_NAME = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*$")


def _is_env(node: ast.AST) -> bool:
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return bool(_ENV_NAMES.search(name))


def _strings(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [s for n in node.elts for s in _strings(n)]
    return []


class _Reads(ast.NodeVisitor):
    """The variables one module reads: literal keys of env mappings, and constants that name variables."""

    def __init__(self) -> None:
        self.found: set[str] = set()

    def _key(self, node: ast.AST) -> None:
        self.found.update(s for s in _strings(node) if _VAR_NAME.match(s))

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Attribute) and node.args and (
                (f.attr in _ENV_METHODS and _is_env(f.value)) or (f.attr == "getenv")):
            self._key(node.args[0])
        if isinstance(f, ast.Attribute) and f.attr in ("gettempdir", "mkdtemp", "mkstemp", "TemporaryDirectory"):
            self.found.add("TMPDIR")
        if isinstance(f, ast.Attribute) and f.attr == "expanduser":
            self.found.add("HOME")
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if _is_env(node.value) and isinstance(node.ctx, ast.Load):
            self._key(node.slice)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        if any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops) and any(map(_is_env, node.comparators)):
            self._key(node.left)
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            if isinstance(target, ast.Name) and _VAR_CONSTANT.match(target.id):
                self._key(node.value)
        self.generic_visit(node)


@functools.cache  # two tests read it: one scan (0.65 s of CPU) for both
def variables_read() -> frozenset[str]:
    """Every variable the package's Python reads, and its C/C++ (the CUPTI tracer) with getenv."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        reads = _Reads()
        reads.visit(parsed(path))
        found |= reads.found
    for path in (p for p in PACKAGE.rglob("*") if p.suffix in (".c", ".cc", ".cpp", ".cu", ".h")):
        found |= set(re.findall(r"getenv\(\s*\"([A-Z][A-Z0-9_]*)\"", path.read_text()))
    return frozenset(found)


def _section(heading: str) -> str:
    """The README's text under `heading` (any level), up to the next heading of the same or a higher
    level; lines in code blocks are never headings (`# a comment` in a YAML example)."""
    lines, level, kept, fenced = README.splitlines(), None, [], False
    for line in lines:
        fenced ^= line.startswith("```")
        m = None if fenced or line.startswith("```") else re.match(r"(#+) (.*?)\s*$", line)
        if level is None:
            level = len(m[1]) if m and m[2] == heading else None
        elif m and len(m[1]) <= level:
            break
        else:
            kept.append(line)
    assert level is not None, f"README has no section {heading!r}"
    return "\n".join(kept)


def test_the_scan_finds_what_the_package_reads():
    found = variables_read()
    # Read through constants (ENV_NCU, RUNTIME_VAR, RANK_VARS), as literals, and by the standard library.
    assert {"NSIGHTWRAP_NCU", "NSIGHTWRAP_NSYS", "NSIGHTWRAP_STORE", "NSIGHTWRAP_RUNTIME_DIR", "NSIGHTWRAP_CACHE_DIR",
            "XDG_RUNTIME_DIR", "XDG_CACHE_HOME", "CUDA_HOME", "CUDA_VISIBLE_DEVICES", "SLURM_PROCID", "PATH",
            "TMPDIR", "HOME"} <= found
    assert not any(v.startswith("FAKE_") for v in found)  # the fakes' variables are the tests' own


def test_every_environment_variable_read_is_in_the_readme():
    section = _section("Environment variables")
    missing = sorted(v for v in variables_read() if not re.search(rf"`\$?{v}\b", section))
    assert not missing, f"name these in the README's 'Environment variables' section: {missing}"


def test_the_readme_says_which_variables_are_for_tests_only():
    section = _section("Environment variables")
    assert "FAKE_" in section and "tests only" in section


def test_every_example_is_in_the_readme():
    section = _section("Examples")
    files = sorted(p.name for p in (ROOT / "examples").iterdir() if p.is_file() and not p.name.startswith("."))
    assert files
    missing = [f for f in files if f"examples/{f}" not in section]
    assert not missing, f"say in the README's 'Examples' section what these show and how to run them: {missing}"


def test_every_ladder_key_is_in_the_readme():
    section = _section("Ladder files")
    missing = sorted(k for k in RUNG_KEYS | LADDER_KEYS if not re.search(rf"`{k}`|^\s*-?\s*{k}:", section, re.M))
    assert not missing, f"document these ladder keys in the README's 'Ladder files' section: {missing}"


def test_the_readme_ladder_example_loads(tmp_path):
    from nsightwrap.fallback.ladder import load_ladder

    blocks = re.findall(r"```yaml\n(.*?)```", _section("Ladder files"), re.S)
    assert blocks, "the 'Ladder files' section shows an example in a ```yaml block"
    path = tmp_path / "mine.yaml"
    path.write_text(blocks[0])
    ladder = load_ladder(str(path))
    used = {k for r in ladder.rungs for k, v in vars(r).items() if v}
    assert {"set", "sections", "metrics", "replay_mode", "stall_timeout", "ranks", "requested"} <= used


def test_the_readme_says_what_a_sweep_that_found_hangs_exits_with():
    sweep = _section("Fallback ladders and the hang store")
    assert re.search(r"found hangs[^.]*exits? 0|exits? 0[^.]*hang", sweep), "say the sweep's exit code with hangs"
