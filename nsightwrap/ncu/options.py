"""Typed profiling options and the pure function that turns them into argv.

One frozen object is validated once (types in ``__post_init__``, against the
installed ncu in :func:`validate`), and :func:`build_argv` only reads it, so
tests compare lists and patch nothing.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from nsightwrap.errors import OptionsError, did_you_mean
from nsightwrap.ncu.catalog import NcuInfo
from nsightwrap.status import RANGE_MODES, REGEX_PREFIX, ReplayMode

__all__ = ["KernelFilter", "ProfileOptions", "build_argv", "validate"]

_KERNEL_NAME_BASES = ("function", "demangled", "mangled")
_CACHE_CONTROL = ("all", "none")
_CLOCK_CONTROL = ("base", "none")
_TARGET_PROCESSES = ("all", "application-only")
_GRAPH_PROFILING = ("node", "graph")
#: The user's spelling of an exact kernel name (bare text is a regex there).
EXACT_PREFIX = "exact:"


def _choice(name: str, value: Any, allowed: Sequence[str], optional: bool = True) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str) or value not in allowed:
        extra = " or None" if optional else ""
        raise OptionsError(f"{name}={value!r} is not allowed; use one of {', '.join(map(repr, allowed))}{extra}.")


def _count(name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionsError(f"{name}={value!r} must be a whole number or None.")
    if value < 0:
        raise OptionsError(f"{name}={value!r} must not be negative.")


def _strings(name: str, value: Any) -> tuple[str, ...]:
    """Accept any sequence of str but not a bare str, which would become one item per letter."""
    if isinstance(value, str):
        raise OptionsError(f"{name} must be a sequence of strings, not the single string {value!r}; "
                           f"write ({value!r},).")
    try:
        items = tuple(value)
    except TypeError:
        raise OptionsError(f"{name}={value!r} must be a sequence of strings.") from None
    for item in items:
        if not isinstance(item, str) or not item:
            raise OptionsError(f"{name} holds {item!r}; every item must be a non-empty string.")
    return items


def control_character(text: str) -> str | None:
    """The first control character in `text` (a newline, a tab, ...), or None.

    A report path holding one cannot be read back from ncu's ``==PROF== Report: PATH`` line
    (a newline cuts it), so the written report would be taken for missing.
    """
    return next((c for c in text if ord(c) < 32 or ord(c) == 127), None)


def _report_name(value: str) -> None:
    bad = control_character(value)
    if bad is not None:
        raise OptionsError(f"export={value!r} holds the control character {bad!r}: ncu names its report on a line "
                           "of its output, which such a character cuts or garbles. Choose a report name without one.")


def _flag(name: str, value: Any, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, bool):
        raise OptionsError(f"{name}={value!r} must be True or False{' or None' if optional else ''}.")


@dataclass(frozen=True)
class KernelFilter:
    """Which kernels ``--kernel-name`` selects; ``base`` says which form of the name is matched."""

    pattern: str
    regex: bool = False
    base: str = "function"

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str) or not self.pattern:
            raise OptionsError(f"KernelFilter.pattern={self.pattern!r} must be a non-empty string.")
        _flag("KernelFilter.regex", self.regex, optional=False)
        _choice("KernelFilter.base", self.base, _KERNEL_NAME_BASES, optional=False)

    @classmethod
    def from_user(cls, text: str, base: str = "function", *, exact: bool = False) -> "KernelFilter":
        """The one reading of a user's kernel text (CLI, profile(fn), sweep, options).

        ``regex:EXPR`` is a regular expression and ``exact:NAME`` an exact
        name; bare text is a regular expression, or, with ``exact=True`` (ncu's
        own ``--kernel-name`` spelling), an exact name.
        """
        if not isinstance(text, str):
            raise OptionsError(f"kernel={text!r} must be a string such as 'regex:^gemm' or 'exact:vec_add'.")
        if text in ("", REGEX_PREFIX, EXACT_PREFIX):  # an empty filter would silently mean "every kernel"
            raise OptionsError(f"kernel={text!r} names no kernel: give a name or pattern (e.g. 'regex:^gemm'), "
                               "or leave the kernel filter out to profile every kernel.")
        if text.startswith(REGEX_PREFIX):
            return cls(text[len(REGEX_PREFIX) :], regex=True, base=base)
        if text.startswith(EXACT_PREFIX):
            return cls(text[len(EXACT_PREFIX) :], regex=False, base=base)
        return cls(text, regex=not exact, base=base)

    @property
    def value(self) -> str:
        return f"{REGEX_PREFIX}{self.pattern}" if self.regex else self.pattern

    def argv(self) -> list[str]:
        base = [] if self.base == "function" else ["--kernel-name-base", self.base]
        return [*base, "--kernel-name", self.value]


@dataclass(frozen=True)
class ProfileOptions:
    """Everything nsightwrap passes to ncu. None means "leave ncu's default"."""

    set: str | None = None
    sections: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    replay_mode: ReplayMode = ReplayMode.KERNEL
    kernel: KernelFilter | None = None
    kernel_id: str | None = None
    launch_skip: int | None = None
    launch_count: int | None = None
    launch_skip_before_match: int | None = None
    #: Not an ncu option: profile rank N of a multi-process launch (torchrun, mpirun, srun) alone,
    #: ncu wrapping that rank only (see nsightwrap.watch.launchers); None profiles the whole program.
    rank: int | None = None
    nvtx: bool = False
    nvtx_include: tuple[str, ...] = ()
    nvtx_exclude: tuple[str, ...] = ()
    profile_from_start: bool | None = None
    cache_control: str | None = None
    clock_control: str | None = None
    target_processes: str | None = None
    graph_profiling: str | None = None
    import_source: bool | None = None
    export: str | None = None
    force_overwrite: bool = False
    extra_args: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        for name in ("sections", "metrics", "nvtx_include", "nvtx_exclude", "extra_args"):
            put(name, _strings(name, getattr(self, name)))

        try:
            put("replay_mode", ReplayMode(self.replay_mode))
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in ReplayMode)
            raise OptionsError(f"replay_mode={self.replay_mode!r} is not allowed; use one of {allowed}.") from None

        if isinstance(self.kernel, str):
            put("kernel", KernelFilter.from_user(self.kernel, exact=True))
        elif self.kernel is not None and not isinstance(self.kernel, KernelFilter):
            raise OptionsError(f"kernel={self.kernel!r} must be a KernelFilter, a string or None.")

        for name in ("set", "kernel_id", "export"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise OptionsError(f"{name}={value!r} must be a non-empty string or None.")
        if self.export is not None:
            _report_name(self.export)

        for name in ("launch_skip", "launch_count", "launch_skip_before_match"):
            _count(name, getattr(self, name))
        _count("rank", self.rank)
        if self.launch_count == 0:
            raise OptionsError("launch_count=0 would profile nothing; use None for no limit.")

        _flag("nvtx", self.nvtx, optional=False)
        _flag("force_overwrite", self.force_overwrite, optional=False)
        _flag("profile_from_start", self.profile_from_start, optional=True)
        _flag("import_source", self.import_source, optional=True)

        _choice("cache_control", self.cache_control, _CACHE_CONTROL)
        _choice("clock_control", self.clock_control, _CLOCK_CONTROL)
        _choice("target_processes", self.target_processes, _TARGET_PROCESSES)
        _choice("graph_profiling", self.graph_profiling, _GRAPH_PROFILING)

    def replace(self, **changes: Any) -> "ProfileOptions":
        """A copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)


def _on_off(value: bool) -> str:
    return "on" if value else "off"


def build_argv(ncu_path: str, options: ProfileOptions, command: Sequence[str],
               log_file: str | None = None) -> list[str]:
    """``[ncu, options..., extra_args..., command...]`` in a fixed order, so
    the same options always give the same list (reproducible records, exact
    test comparisons). ``log_file``: where ncu writes its own output
    (``--log-file``), apart from the program's. ``options.rank`` is not
    ncu's: the engine rewrites the launch around this list
    (nsightwrap.watch.launchers.wrap_one_rank)."""
    if isinstance(command, str):
        raise OptionsError(f"command must be a list of arguments, not the string {command!r}.")
    command = list(command)
    if not command:
        raise OptionsError("command is empty: give the program to profile and its arguments.")
    o = options
    argv = [ncu_path]
    if o.set is not None:
        argv += ["--set", o.set]
    for section in o.sections:
        argv += ["--section", section]
    if o.metrics:
        argv += ["--metrics", ",".join(o.metrics)]
    argv += ["--replay-mode", o.replay_mode.value]
    if o.kernel is not None:
        argv += o.kernel.argv()
    if o.kernel_id is not None:
        argv += ["--kernel-id", o.kernel_id]
    if o.launch_skip is not None:
        argv += ["--launch-skip", str(o.launch_skip)]
    if o.launch_count is not None:
        argv += ["--launch-count", str(o.launch_count)]
    if o.launch_skip_before_match is not None:
        argv += ["--launch-skip-before-match", str(o.launch_skip_before_match)]
    if o.nvtx or o.nvtx_include or o.nvtx_exclude:
        argv.append("--nvtx")
    for item in o.nvtx_include:
        argv += ["--nvtx-include", item]
    for item in o.nvtx_exclude:
        argv += ["--nvtx-exclude", item]
    if o.profile_from_start is not None:
        argv += ["--profile-from-start", _on_off(o.profile_from_start)]
    if o.cache_control is not None:
        argv += ["--cache-control", o.cache_control]
    if o.clock_control is not None:
        argv += ["--clock-control", o.clock_control]
    if o.target_processes is not None:
        argv += ["--target-processes", o.target_processes]
    if o.graph_profiling is not None:
        argv += ["--graph-profiling", o.graph_profiling]
    if o.import_source is not None:
        argv += ["--import-source", _on_off(o.import_source)]
    if o.export is not None:
        argv += ["--export", o.export]
    if o.force_overwrite:
        argv.append("--force-overwrite")
    if log_file is not None:
        argv += ["--log-file", log_file]
    return [*argv, *o.extra_args, *command]


def _unknown(kind: str, bad: str, known: Sequence[str], list_flag: str) -> str:
    hint = did_you_mean(bad, known)
    hint = f" {hint[0].upper()}{hint[1:]}" if hint else ""
    return f"unknown {kind} {bad!r}.{hint} Run `ncu {list_flag}` to see all."


def _check_regex(what: str, expression: str) -> tuple[re.Pattern[str] | None, str | None]:
    try:
        return re.compile(expression), None
    except re.error as exc:
        return None, f"{what} {REGEX_PREFIX}{expression!r} is not a valid regular expression ({exc})."


def validate(options: ProfileOptions, info: NcuInfo) -> None:
    """Catch what ncu would reject, before a launch that may take minutes.

    Unknown sets matter most: ncu 2025.3.1 does not reject ``--set typo``, it
    profiles nothing and exits 0. All problems are reported together so one
    edit can fix them all.
    """
    o = options
    problems: list[str] = []

    if o.set is not None and o.set not in info.set_ids:
        problems.append(_unknown("section set", o.set, info.set_ids, "--list-sets"))

    for section in o.sections:
        if section.startswith(REGEX_PREFIX):
            expression = section[len(REGEX_PREFIX) :]
            compiled, error = _check_regex("section", expression)
            if error:
                problems.append(error)
            elif compiled is not None and not any(compiled.search(s) for s in info.section_ids):
                problems.append(
                    f"section {section!r} matches no section id. Run `ncu --list-sections` to see all."
                )
        elif section not in info.section_ids:
            problems.append(_unknown("section", section, info.section_ids, "--list-sections"))

    if o.kernel is not None and o.kernel.regex:
        _, error = _check_regex("kernel name", o.kernel.pattern)
        if error:
            problems.append(error)

    # Checked against ncu 2025.3.1 on /bin/true: in range and app-range
    # replay it refuses (rc 1, "Option X is not supported during range
    # replay.") --kernel-name, --kernel-id, --import-source on and
    # --profile-from-start off, but accepts --import-source off and
    # --profile-from-start on (its defaults), so only those values are errors.
    if o.replay_mode in RANGE_MODES:
        mode = o.replay_mode.value
        fix = "; use replay_mode 'kernel' or 'application' to keep it."
        if o.kernel is not None:
            problems.append(f"ncu does not accept --kernel-name in {mode} replay: drop kernel{fix}")
        if o.kernel_id is not None:
            problems.append(f"ncu does not accept --kernel-id in {mode} replay: drop kernel_id{fix}")
        if o.import_source:
            problems.append(f"ncu does not accept --import-source on in {mode} replay: drop import_source{fix}")
        if o.profile_from_start is False:
            problems.append(
                f"ncu does not accept --profile-from-start off in {mode} replay: "
                f"drop profile_from_start (set it to None){fix}"
            )

    # ncu: "Graph-based profiling is only supported with kernel replay."
    if o.graph_profiling == "graph" and o.replay_mode is not ReplayMode.KERNEL:
        problems.append(
            f"graph_profiling='graph' needs kernel replay, not {o.replay_mode.value!r}: "
            "use replay_mode 'kernel' or drop graph_profiling."
        )

    if problems:
        if len(problems) == 1:
            raise OptionsError(f"Profiling options rejected: {problems[0]}")
        listed = "\n".join(f"  - {p}" for p in problems)
        raise OptionsError(f"Profiling options rejected ({len(problems)} problems):\n{listed}")
