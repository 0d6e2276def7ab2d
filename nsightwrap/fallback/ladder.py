"""Fallback ladders: ordered rungs of less and less demanding settings.

A ladder is data (profiles/*.yaml at the top of the project, shipped in the
wheel as nsightwrap/profiles/, or a
user's file by path); `Rung.apply` turns the caller's options into the
options of that rung, rewriting what ncu rejects in range replay. Like
tenacity's wait_chain, an empty ladder fails when it is built.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from nsightwrap.errors import LadderError, did_you_mean
from nsightwrap.ncu.catalog import NcuInfo
from nsightwrap.ncu.options import KernelFilter, ProfileOptions
from nsightwrap.status import ALL_RANKS, ONE_RANK, RANGE_MODES, RANK_MODES, REGEX_PREFIX, REPLAY_MODES, ReplayMode
from nsightwrap.store.keys import ProfileKey

__all__ = [
    "Ladder",
    "Rung",
    "builtin_profiles",
    "exclude_kernels",
    "ladder_from_dict",
    "load_ladder",
    "rewrite_for_replay",
]


def _profiles_dir() -> Path:
    """nsightwrap/profiles: in a checkout a link to the project's profiles/, in the wheel a copy of it."""
    return Path(__file__).resolve().parents[1] / "profiles"


PROFILES_DIR = _profiles_dir()
RUNG_KEYS = {"name", "requested", "set", "sections", "metrics", "replay_mode", "extra_args", "stall_timeout", "ranks"}
LADDER_KEYS = {"name", "description", "rungs"}


@dataclass(frozen=True)
class Rung:
    """One choice of what to collect and how to replay."""

    name: str
    requested: bool = False  # "whatever the caller asked for"
    set: Optional[str] = None
    sections: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ()
    replay_mode: Optional[str] = None
    extra_args: tuple[str, ...] = ()
    stall_timeout: Optional[float] = None
    #: "one": ncu wraps one rank of a multi-process job alone (the caller's rank, else `rank`);
    #: "all": every rank; None: as the caller asked. Used only for multi-process jobs.
    ranks: Optional[str] = None

    def apply(self, requested: ProfileOptions, rank: int = 0) -> tuple[ProfileOptions, list[str]]:
        """The caller's options at this rung, and notes on what was rewritten."""
        if self.requested:
            opts = requested
        else:
            opts = requested.replace(
                set=self.set, sections=self.sections, metrics=self.metrics,
                replay_mode=self.replay_mode or requested.replay_mode,
                extra_args=tuple(requested.extra_args) + self.extra_args)
        if self.ranks == ONE_RANK:
            opts = opts.replace(rank=requested.rank if requested.rank is not None else rank)
        elif self.ranks == ALL_RANKS:
            opts = opts.replace(rank=None)
        return rewrite_for_replay(opts)

    def describe(self) -> str:
        if self.requested:
            return "the requested settings" + (", one rank" if self.ranks == ONE_RANK else "")
        return ProfileKey(self.set, self.sections, self.metrics, self.replay_mode or ReplayMode.KERNEL.value,
                          self.ranks or ALL_RANKS).describe()


def rewrite_for_replay(opts: ProfileOptions) -> tuple[ProfileOptions, list[str]]:
    """Drop what ncu rejects in range/app-range replay, and say so."""
    if opts.replay_mode not in RANGE_MODES:
        return opts, []
    notes, changes = [], {}
    if opts.kernel is not None:
        changes["kernel"] = None
        notes.append(f"{opts.replay_mode.value} replay profiles the range the program marks "
                     f"(cudaProfilerStart/Stop or NVTX) instead of kernel filter {opts.kernel.value!r}")
    if opts.kernel_id is not None:
        changes["kernel_id"] = None
        notes.append("kernel_id dropped (not supported in range replay)")
    if opts.import_source:
        changes["import_source"] = None
        notes.append("import_source dropped (not supported in range replay)")
    if opts.profile_from_start is False:
        changes["profile_from_start"] = None
        notes.append("profile_from_start=off dropped (not supported in range replay; ranges start profiling)")
    for name in ("launch_skip", "launch_count"):
        if getattr(opts, name) is not None:
            changes[name] = None
            notes.append(f"{name} dropped (it counts kernel launches, not ranges)")
    return (opts.replace(**changes) if changes else opts), notes


@dataclass(frozen=True)
class Ladder:
    """An ordered, non-empty list of rungs."""

    name: str
    rungs: tuple[Rung, ...]
    description: str = ""
    source: str = ""

    def __post_init__(self) -> None:
        if not self.rungs:
            raise LadderError(f"ladder {self.name!r} ({self.source or 'built in code'}) has no rungs; "
                              "give at least one")
        dupes = sorted(n for n, times in Counter(r.name for r in self.rungs).items() if times > 1)
        if dupes:
            raise LadderError(f"ladder {self.name!r}: rung names must be unique, repeated: {', '.join(dupes)}")

    def __len__(self) -> int:
        return len(self.rungs)

    def __getitem__(self, i: int) -> Rung:
        return self.rungs[i]

    def validate(self, info: NcuInfo) -> None:
        """Sets and sections must exist in this ncu."""
        problems = []
        for r in self.rungs:
            if r.set and r.set not in info.set_ids:
                problems.append(f"rung {r.name!r}: unknown set {r.set!r}" + _aside(did_you_mean(r.set, info.set_ids)))
            for s in r.sections:
                if not s.startswith(REGEX_PREFIX) and s not in info.section_ids:
                    problems.append(f"rung {r.name!r}: unknown section {s!r} for this ncu ({info.version})"
                                    + _aside(did_you_mean(s, info.section_ids)))
        if problems:
            raise LadderError(f"ladder {self.name!r} ({self.source}):\n  - " + "\n  - ".join(problems)
                              + "\nRun `ncu --list-sets` / `ncu --list-sections` to see what this ncu offers.")

    def for_processes(self, one_rank_possible: bool) -> "Ladder":
        """This ladder without its one-rank rungs where they cannot run (a single-process program,
        or a launch nsightwrap cannot rewrite); the same ladder if none is left out."""
        if one_rank_possible or not any(r.ranks == ONE_RANK for r in self.rungs):
            return self
        kept = tuple(r for r in self.rungs if r.ranks != ONE_RANK)
        if not kept:
            raise LadderError(f"ladder {self.name!r} has only one-rank rungs (`ranks: one`), which need a "
                              "multi-process launch (torchrun, mpirun, srun); add a rung for the whole program")
        return Ladder(self.name, kept, self.description, self.source)

    @property
    def has_one_rank_rung(self) -> bool:
        return any(r.ranks == ONE_RANK for r in self.rungs)

    def for_request(self, requested: ProfileOptions, info: Optional[NcuInfo] = None) -> "Ladder":
        """This ladder without the rungs that are not less demanding than the request.

        A rung is dropped when it collects at least every section and metric
        of the request in the same replay mode (e.g. `detailed` under a request
        for `basic`, or `basic` itself): stepping there would not step down.
        """
        want = _demand(requested, info)
        kept = [self.rungs[0]] if self.rungs[0].requested else []
        for r in self.rungs:
            if r.requested:
                continue
            opts, _ = r.apply(requested)
            have = _demand(opts, info)
            if have[2] == want[2] and have[0] >= want[0] and have[1] >= want[1] and kept:
                continue
            kept.append(r)
        return Ladder(self.name, tuple(kept), self.description, self.source)


def _aside(hint: str) -> str:
    return f" ({hint})" if hint else ""


def _demand(opts: ProfileOptions, info: Optional[NcuInfo]) -> tuple[frozenset, frozenset, str]:
    sections = set(opts.sections)
    if opts.set and info is not None and opts.set in info.set_ids:
        sections |= set(info.sections_of_set(opts.set))
    elif opts.set:
        sections.add(f"set:{opts.set}")
    if not opts.set and not opts.sections and not opts.metrics:
        known = info is not None and "basic" in info.set_ids
        sections |= set(info.sections_of_set("basic")) if known else {"set:basic"}
    # Profiling one rank alone is another way of profiling, not a smaller collection.
    mode = opts.replay_mode.value + ("/one-rank" if opts.rank is not None else "")
    return frozenset(sections), frozenset(opts.metrics), mode


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise LadderError(f"{where}: expected a list of strings, got {value!r}")


def ladder_from_dict(data: Any, source: str = "<dict>") -> Ladder:
    if not isinstance(data, dict):
        raise LadderError(f"{source}: a profile is a mapping with `name` and `rungs`, got {type(data).__name__}")
    unknown = set(data) - LADDER_KEYS
    if unknown:
        raise LadderError(f"{source}: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
                          f"allowed: {', '.join(sorted(LADDER_KEYS))}")
    for key in ("name", "description"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise LadderError(f"{source}: {key} must be a string, got {data[key]!r}")
    rungs_data = data.get("rungs")
    if not isinstance(rungs_data, list) or not rungs_data:
        raise LadderError(f"{source}: `rungs` must be a non-empty list (an empty ladder can profile nothing)")
    rungs = []
    for i, rd in enumerate(rungs_data):
        where = f"{source}: rung {i + 1}"
        if not isinstance(rd, dict):
            raise LadderError(f"{where}: expected a mapping, got {rd!r}")
        unknown = set(rd) - RUNG_KEYS
        if unknown:
            bad = sorted(map(str, unknown))
            hints = "; ".join(h for h in (did_you_mean(b, sorted(RUNG_KEYS), n=1) for b in bad) if h)
            raise LadderError(f"{where}: unknown key(s) {', '.join(bad)}" + _aside(hints)
                              + f"; allowed: {', '.join(sorted(RUNG_KEYS))}")
        name = rd.get("name") or f"rung-{i + 1}"
        where = f"{source}: rung {name!r}"
        replay = rd.get("replay_mode")
        if replay is not None and replay not in REPLAY_MODES:
            raise LadderError(f"{where}: replay_mode {replay!r} is not one of " + ", ".join(REPLAY_MODES)
                              + _aside(did_you_mean(str(replay), REPLAY_MODES)))
        stall = rd.get("stall_timeout")
        # YAML reads `yes` as true, and True is an int to Python: seconds must be a real number.
        if stall is not None and (isinstance(stall, bool) or not isinstance(stall, (int, float))
                                  or not math.isfinite(stall) or stall <= 0):  # YAML reads .nan and .inf too
            raise LadderError(f"{where}: stall_timeout must be a number of seconds > 0 and finite, got {stall!r}"
                              + (" (YAML reads yes/no/on/off as true/false)" if isinstance(stall, bool) else ""))
        ranks = rd.get("ranks")
        if ranks is not None and ranks not in RANK_MODES:
            raise LadderError(f"{where}: ranks {ranks!r} is not one of " + ", ".join(RANK_MODES)
                              + " (one: ncu wraps one rank of a multi-process job alone; all: every rank)")
        requested = rd.get("requested", False)
        if not isinstance(requested, bool):
            raise LadderError(f"{where}: requested must be true or false (unquoted), got {requested!r}")
        for key in ("name", "set"):
            if rd.get(key) is not None and not isinstance(rd[key], str):
                raise LadderError(f"{where}: {key} must be a string, got {rd[key]!r}")
        if requested and any(rd.get(k) for k in ("set", "sections", "metrics", "replay_mode")):
            raise LadderError(f"{where}: a `requested` rung takes the caller's settings; "
                              "drop set/sections/metrics/replay_mode")
        rungs.append(Rung(name=str(name), requested=requested, set=rd.get("set"),
                          sections=_strings(rd.get("sections"), where), metrics=_strings(rd.get("metrics"), where),
                          replay_mode=replay, extra_args=_strings(rd.get("extra_args"), where),
                          stall_timeout=float(stall) if stall is not None else None, ranks=ranks))
    return Ladder(str(data.get("name") or Path(source).stem), tuple(rungs), str(data.get("description", "")), source)


def builtin_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))


def load_ladder(name_or_path: str = "default") -> Ladder:
    """A built-in profile by name (default, quick, deep) or a YAML file by path."""
    import yaml  # here, not at the top: a probe's job imports this module (JobShape) and never reads a profile

    path = Path(name_or_path)
    if not (path.suffix in (".yaml", ".yml") or path.exists()):
        path = PROFILES_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            raise LadderError(f"no profile named {name_or_path!r}; built in: {', '.join(builtin_profiles())}"
                              + _aside(did_you_mean(name_or_path, builtin_profiles(), n=1))
                              + "; or give a path to a .yaml file")
    if not path.exists():
        raise LadderError(f"profile file {path} does not exist")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise LadderError(f"{path}: not valid YAML: {e}") from None
    except RecursionError:
        raise LadderError(f"{path}: nested too deeply to be a profile (a profile is a mapping with `name` and "
                          "a list of `rungs`, each a flat mapping)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LadderError(f"profile file {path} cannot be read: {e}; give a readable UTF-8 .yaml file") from None
    return ladder_from_dict(data, str(path))


def exclude_kernels(user: Optional[KernelFilter], names: Sequence[str], prefixes: Sequence[str] = ()
                    ) -> Optional[KernelFilter]:
    """A filter that matches what `user` matches, except the kernels named (exactly) and those whose
    name starts with one of `prefixes` (a family, e.g. every NCCL collective: ``regex:^(?!...|nccl)``)."""
    if not names and not prefixes:
        return user
    alternatives = [f"(?:{'|'.join(re.escape(n) for n in sorted(set(names)))})$"] if names else []
    alternatives += [re.escape(p) for p in sorted(set(prefixes))]
    neg = "|".join(alternatives)
    # The trailing .* makes the pattern right whether ncu searches or matches the whole name.
    if user is None:
        return KernelFilter(f"^(?!{neg}).*", True)
    base = user.pattern if user.regex else f"^{re.escape(user.pattern)}$"
    return KernelFilter(f"^(?!{neg}).*?(?:{base}).*", True, user.base)
