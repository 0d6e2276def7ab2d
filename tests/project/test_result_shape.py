"""Every result answers the same three questions: status, exit_code, to_dict() (STYLE 18).

The status words and their exit codes come from one place, nsightwrap.status.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import json
import pkgutil
from pathlib import Path
from typing import Any, Iterator

import pytest
from helpers import parsed

import nsightwrap
from nsightwrap.call.result import ProfileResult
from nsightwrap.fallback.ladder import load_ladder
from nsightwrap.fallback.result import LadderResult, Step
from nsightwrap.ncu.allowance import Calibration
from nsightwrap.ncu.attempt import Attempt, KernelResult
from nsightwrap.ncu.progress import Stall
from nsightwrap.nsys.run import NsysRun
from nsightwrap.status import CRASHED, ERROR, EXIT_CODES, HANG, OK, TIMEOUT

#: Classes with a `status` that are not results, and why.
NOT_RESULTS = {
    "nsightwrap.watch.rules.Verdict": "a rule's reason to stop a run; the Attempt or NsysRun it ends is the result",
    "nsightwrap.cli.preflight.Check": "one line of doctor's report (ok/warn/fail), not a run's verdict",
    "nsightwrap.diagnose.verdict.WalkView": "what triage's verdict reads of a walk; the TriageResult is the result",
}


def _modules() -> Iterator[Any]:
    for info in pkgutil.walk_packages(nsightwrap.__path__, "nsightwrap."):
        if info.name.endswith("__main__"):
            continue
        yield importlib.import_module(info.name)


def _has_status(cls: type) -> bool:
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    return "status" in fields or isinstance(inspect.getattr_static(cls, "status", None), property)


@functools.cache
def _classes() -> tuple[type, ...]:
    """Every public class of the package, found by importing every module: once, by the tests that ask (not at
    collection, where each of xdist's workers imported the whole package for it: issue 20)."""
    found = {}
    for module in _modules():
        for name, cls in vars(module).items():
            if inspect.isclass(cls) and cls.__module__ == module.__name__ and not name.startswith("_"):
                found[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return tuple(found[k] for k in sorted(found))


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _results() -> list[type]:
    return [c for c in _classes() if _has_status(c) and _name(c) not in NOT_RESULTS]


def test_the_walk_finds_the_results():
    names = {c.__qualname__ for c in _results()}
    assert {"Attempt", "NsysRun", "ProfileResult", "Calibration", "LadderResult"} <= names


def test_every_result_has_status_exit_code_and_to_dict():
    lacking = [f"{_name(c)}.{what}" for c in _results() for what, has in (
        ("exit_code", isinstance(inspect.getattr_static(c, "exit_code", None), property)),
        ("to_dict", callable(getattr(c, "to_dict", None)))) if not has]
    assert lacking == []


def test_no_to_json_returns_a_dict():
    """A dict is to_dict(); to_json(), where there is one, gives the JSON text."""
    assert any(hasattr(c, "to_json") for c in _classes())  # else this checks nothing
    wrong = {_name(c): r for c in _classes() if hasattr(c, "to_json")
             for r in [inspect.signature(c.to_json).return_annotation] if r not in (str, "str")}
    assert wrong == {}, "name them to_dict"


def _attempt(status: str = HANG) -> Attempt:
    stall = Stall("k", 9, "0%..", 10.0, 3.0, 11.0, True, True) if status == HANG else None
    return Attempt(status=status, reason="r", command=("ncu", "app", "--token=s3cret"), returncode=None,
                   kernels=(KernelResult("k", 9, 10),), stall=stall, report=None, report_complete=False,
                   elapsed_s=12.0, stop=None, warnings=(), errors=(), notes=(), log="",
                   started_at="2026-11-27T00:00:00+00:00", cookie="c")


def _nsys(status: str) -> NsysRun:
    return NsysRun(status=status, reason="r", command=("nsys", "profile", "app"), argv=("app",),
                   report=Path("r.nsys-rep"), returncode=0, elapsed_s=1.0, log="", stop=None, cookie="c", nsys="nsys")


def _profile_result(status: str) -> ProfileResult:
    ladder = load_ladder("quick")
    walk = LadderResult(ladder, steps=[Step("main", ladder.rungs[0], 0, attempt=_attempt(status))],
                        unprofiled=["k"] if status == HANG else [])
    return ProfileResult(walk, calibration_s=0.5, stall_timeout=3.0, value_error="no value", calibration_source="x")


SAMPLES = [
    *(pytest.param(_attempt, s, id=f"Attempt-{s}") for s in (OK, HANG, TIMEOUT)),
    *(pytest.param(_nsys, s, id=f"NsysRun-{s}") for s in (OK, HANG, ERROR)),
    *(pytest.param(lambda s: Calibration.failed(s, "r", "plain run"), s, id=f"Calibration-{s}") for s in (TIMEOUT,
                                                                                                          CRASHED)),
    pytest.param(lambda s: Calibration("plain run", bound_s=1.0), OK, id="Calibration-ok"),
    *(pytest.param(_profile_result, s, id=f"ProfileResult-{s}") for s in (OK, HANG)),
]


@pytest.mark.parametrize("make,status", SAMPLES)
def test_status_exit_code_and_to_dict_agree(make, status):
    result = make(status)
    doc = result.to_dict()
    assert result.status == doc["status"] == status
    assert result.exit_code == doc["exit_code"] == EXIT_CODES[status]
    json.dumps(doc)  # plain types only
    assert "s3cret" not in json.dumps(doc)


def test_profile_result_carries_its_attempts_and_calibration():
    doc = _profile_result(HANG).to_dict()
    assert doc["hangs"] == [["k", load_ladder("quick").rungs[0].name]] and doc["unprofiled"] == ["k"]
    assert [a["status"] for a in doc["attempts"]] == [HANG]
    assert (doc["calibration_s"], doc["stall_timeout"], doc["has_value"]) == (0.5, 3.0, False)


PACKAGE = Path(nsightwrap.__file__).parent


def _word(node: ast.AST) -> bool:
    """A string spelled out, or a choice between such strings."""
    if isinstance(node, ast.IfExp):
        return _word(node.body) or _word(node.orelse)
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _spelled(tree: ast.AST) -> Iterator[int]:
    """Lines that spell a status word out (`x.status == "ok"`, `{"status": "error"}`) or look an exit code up
    with a default of their own (`EXIT_CODES.get`), in code (docstrings show users the words)."""
    for node in ast.walk(tree):
        compared = isinstance(node, ast.Compare) and getattr(node.left, "attr", "") == "status" and any(
            _word(c) for c in node.comparators)
        keyed = isinstance(node, ast.Dict) and any(
            isinstance(k, ast.Constant) and k.value == "status" and _word(v) for k, v in zip(node.keys, node.values))
        looked_up = (isinstance(node, ast.Attribute) and node.attr == "get"
                     and getattr(node.value, "id", "") == "EXIT_CODES")
        if compared or keyed or looked_up:
            yield node.lineno


def test_status_words_come_from_the_vocabulary():
    offenders = [f"{p.relative_to(PACKAGE.parent)}:{line}" for p in sorted(PACKAGE.rglob("*.py"))
                 if p.name != "status.py" for line in _spelled(parsed(p))]
    assert offenders == [], "use the constants of nsightwrap.status"


def test_the_check_sees_spelled_words():
    code = 'a.status != "hang"\nd = {"status": "error" if c else "ok"}\nEXIT_CODES.get(s, 1)\nd = {"status": OK}\n'
    assert list(_spelled(ast.parse(code))) == [1, 2, 3]
