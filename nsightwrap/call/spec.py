"""What profile(fn) hands its child: fn by reference, its pickled arguments, and the call's private files."""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from nsightwrap.call.child import CallResult, CallSpec
from nsightwrap.errors import NotProfilable
from nsightwrap.paths import work_dir

__all__ = ["CallFiles", "make_spec", "read_result", "subject"]


def _reference(fn: Callable) -> tuple[str, str, Optional[str]]:
    """Module, qualified name and file by which the child can import fn."""
    target = fn
    while hasattr(target, "__nsightwrap_wrapped__"):
        target = target.__nsightwrap_wrapped__
    name = getattr(target, "__qualname__", None)
    module = getattr(target, "__module__", None)
    if not callable(fn) or name is None or module is None:
        raise NotProfilable(f"{fn!r} is not a function that a child process can import; "
                            "pass a function defined at module level")
    if name == "<lambda>" or "<locals>" in name:
        raise NotProfilable(f"{name} is a lambda or a function defined inside another function; the child "
                            "process imports fn by name, so define it at module level (a top-level def)")
    file = None
    if module == "__main__":
        main = sys.modules.get("__main__")
        file = getattr(main, "__file__", None)
        if not file:
            raise NotProfilable(f"{name} was defined in an interactive session; put it in a file "
                                "(a module or a script) so the child process can import it")
        file = os.path.abspath(file)
    return module, name, file


def make_spec(fn: Callable, args: tuple, kwargs: dict, warmup: int, repeat: int, ranged: bool = True) -> CallSpec:
    """The child's instructions (without its file paths); NotProfilable when fn or its arguments cannot travel.
    ranged: the measured calls marked as a profiler range (CallSpec.ranged)."""
    module, qualname, file = _reference(fn)
    try:
        payload = pickle.dumps((args, kwargs))
    except Exception as e:  # noqa: BLE001
        raise NotProfilable(f"the arguments of {qualname} cannot be pickled ({e}); pass plain data (arrays, "
                            "numbers, paths) and build GPU objects inside fn, or make them picklable") from None
    return CallSpec(module, qualname, file, payload, warmup, repeat, [p for p in sys.path if p], "", ranged=ranged)


def subject(spec: CallSpec) -> str:
    """How a calibration names this call: fn and its arguments (a digest), not its warm-up or repeat."""
    where = f"{spec.module}@{spec.file}" if spec.file else spec.module
    return f"fn:{where}:{spec.qualname}:{hashlib.sha256(spec.args_pickle).hexdigest()[:16]}"


def read_result(path: Path) -> Optional[CallResult]:
    """What a child wrote, or None when it wrote nothing (stopped, or killed)."""
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError):
        return None


@dataclass(frozen=True)
class CallFiles:
    """One profile() call's private folder: the spec, the children's results, the warm-up times."""

    work: Path

    @classmethod
    def create(cls) -> "CallFiles":
        return cls(work_dir("call"))  # one that a SIGKILL leaves is removed by the next run or `cleanup`

    @property
    def spec(self) -> Path:
        return self.work / "spec.pkl"

    @property
    def plain_result(self) -> Path:
        return self.work / "result.pkl"

    @property
    def walk_result(self) -> Path:
        return self.work / "walk-result.pkl"

    @property
    def call_time(self) -> Path:
        return self.work / "call-time.json"

    def write_spec(self, spec: CallSpec) -> None:
        self.spec.write_bytes(pickle.dumps(spec))

    def command(self, result: Path) -> list[str]:
        """The child's command line; it writes its CallResult to `result`."""
        return [sys.executable, "-m", "nsightwrap.call", str(self.spec), str(result)]

    def remove(self) -> None:
        shutil.rmtree(self.work, ignore_errors=True)
