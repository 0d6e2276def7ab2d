"""The DataFrame schema of a read report: column names as constants, in one place.

Wide form (the default)
-----------------------
One row per profile result: a kernel launch, or a whole range under range
replay. Identity columns come first, in the order of :data:`IDENTITY_COLUMNS`:

=====================  =======  ==================================================
column                 dtype    meaning
=====================  =======  ==================================================
result                 int      index of the result in the report, across ranges
range                  int      index of the report range holding it (None: CSV)
function               str      function name (``vec_add``)
demangled              str      demangled name (``vec_add(const float *, ...)``)
mangled                str      mangled name (``_Z7vec_addPKfS0_Pfi``; None: CSV)
grid_size              str      ``"(4096, 1, 1)"``, as ncu prints it
grid_x, grid_y, grid_z int      the grid dimensions
block_size             str      ``"(256, 1, 1)"``
block_x/_y/_z          int      the block dimensions
registers_per_thread   int      ``launch__registers_per_thread``
shared_mem_static      int      static shared memory, bytes per block
shared_mem_dynamic     int      dynamic shared memory, bytes per block
device                 int      CUDA device id (``launch__device_id``)
device_name            str      ``"NVIDIA H200"``
compute_capability     str      ``"9.0"``
context                int      CUDA context id
stream                 int      CUDA stream id
process                int      pid of the profiled process
process_name           str      its executable, as recorded by ncu
host                   str      host name, as recorded by ncu
nvtx                   str      NVTX ranges open at the launch, or None (see below)
=====================  =======  ==================================================

Then one column per metric, named as ncu names it, holding the metric's value:
float or int where the metric is numeric (``Int64`` when an integer metric is
missing in some results), ``str`` where it is a string, missing where a result
lacks the metric. An instanced metric gives its aggregate value, as ncu's raw
page does without ``--print-metric-instances``. Integer identity columns are
``Int64`` when some result lacks them (a range result, say).

Units: ``df.attrs["units"]`` maps every metric column (and the identity
columns that have one, see :data:`IDENTITY_UNITS`) to its unit as the report
stores it: ``"ns"``, ``"byte"``, ``"%"``, ``"cycle"``, ``""`` for none. Values
are never rescaled. The mapping is read-only (:class:`SharedAttr`: ``dict(units)``
for a copy to change), so pandas shares it with every frame and column taken
from ``df`` instead of copying it into each. ``df.attrs`` also holds ``"report"`` (the path),
``"reader"`` (``"extras"``, ``"wheel"`` or ``"csv"``, see :mod:`nsightwrap.reports.ncu.module`) and
``"reader_origin"`` (the module file, or the ncu binary for ``"csv"``).

Tidy form (``tidy=True``)
-------------------------
One row per (result, metric) that has a value: :data:`TIDY_IDENTITY_COLUMNS`
then ``metric``, ``value``, ``text``, ``unit`` (:data:`TIDY_COLUMNS`).
``value`` is always float64 (NaN for a metric whose value is a string, such
as ``device__attribute_display_name``); ``text`` holds such string values
(None for numbers). The ``breakdown:*`` items of SpeedOfLight are lists of
metric names, not values: they are kept apart, in ``df.attrs["breakdowns"]``
(name -> a tuple of the metrics it lists; read-only like the units).

NVTX: ``IAction.nvtx_state()`` holds the NVTX state only when the program was
profiled with ``ncu --nvtx``. The ``nvtx`` column then lists, per domain, the
push/pop stack from outermost (``domain@outer/inner``) and each open
start/end range (``domain@range``), joined by ``"; "``; the default domain
(``<default domain>`` to ncu 2025.3.1) has no ``domain@`` prefix:
``outer/step0``. None when there is no state or nothing is open.
"""

from __future__ import annotations

from typing import Any, Mapping

RESULT = "result"
RANGE = "range"
FUNCTION = "function"
DEMANGLED = "demangled"
MANGLED = "mangled"
GRID_SIZE = "grid_size"
GRID_X, GRID_Y, GRID_Z = "grid_x", "grid_y", "grid_z"
BLOCK_SIZE = "block_size"
BLOCK_X, BLOCK_Y, BLOCK_Z = "block_x", "block_y", "block_z"
REGISTERS_PER_THREAD = "registers_per_thread"
SHARED_MEM_STATIC = "shared_mem_static"
SHARED_MEM_DYNAMIC = "shared_mem_dynamic"
DEVICE = "device"
DEVICE_NAME = "device_name"
COMPUTE_CAPABILITY = "compute_capability"
CONTEXT = "context"
STREAM = "stream"
PROCESS = "process"
PROCESS_NAME = "process_name"
HOST = "host"
NVTX = "nvtx"

#: Identity columns of the wide form, in order; metric columns follow.
IDENTITY_COLUMNS: tuple[str, ...] = (
    RESULT, RANGE, FUNCTION, DEMANGLED, MANGLED,
    GRID_SIZE, GRID_X, GRID_Y, GRID_Z,
    BLOCK_SIZE, BLOCK_X, BLOCK_Y, BLOCK_Z,
    REGISTERS_PER_THREAD, SHARED_MEM_STATIC, SHARED_MEM_DYNAMIC,
    DEVICE, DEVICE_NAME, COMPUTE_CAPABILITY, CONTEXT, STREAM,
    PROCESS, PROCESS_NAME, HOST, NVTX,
)

#: Units of the identity columns that have one (also put in ``attrs["units"]``).
IDENTITY_UNITS: Mapping[str, str] = {
    REGISTERS_PER_THREAD: "register/thread",
    SHARED_MEM_STATIC: "byte/block",
    SHARED_MEM_DYNAMIC: "byte/block",
}

METRIC, VALUE, TEXT, UNIT = "metric", "value", "text", "unit"
#: Identity columns kept by the tidy form.
TIDY_IDENTITY_COLUMNS: tuple[str, ...] = (RESULT, RANGE, FUNCTION, DEMANGLED)
#: All columns of the tidy form.
TIDY_COLUMNS: tuple[str, ...] = TIDY_IDENTITY_COLUMNS + (METRIC, VALUE, TEXT, UNIT)

#: Identity columns of integers (``Int64`` when some result lacks them).
INT_IDENTITY = frozenset({
    RESULT, RANGE, GRID_X, GRID_Y, GRID_Z, BLOCK_X, BLOCK_Y, BLOCK_Z,
    REGISTERS_PER_THREAD, SHARED_MEM_STATIC, SHARED_MEM_DYNAMIC, DEVICE, CONTEXT, STREAM, PROCESS,
})

#: Identity columns taken from metrics of each result (API path).
IDENTITY_METRICS: Mapping[str, str] = {
    GRID_X: "launch__grid_dim_x",
    GRID_Y: "launch__grid_dim_y",
    GRID_Z: "launch__grid_dim_z",
    BLOCK_X: "launch__block_dim_x",
    BLOCK_Y: "launch__block_dim_y",
    BLOCK_Z: "launch__block_dim_z",
    REGISTERS_PER_THREAD: "launch__registers_per_thread",
    SHARED_MEM_STATIC: "launch__shared_mem_per_block_static",
    SHARED_MEM_DYNAMIC: "launch__shared_mem_per_block_dynamic",
    DEVICE: "launch__device_id",
    DEVICE_NAME: "device__attribute_display_name",
    CONTEXT: "launch__context_id",
    STREAM: "launch__stream_id",
}
CC_MAJOR = "device__attribute_compute_capability_major"
CC_MINOR = "device__attribute_compute_capability_minor"

#: Names ncu gives the default NVTX domain (ncu 2025.3.1: "<default domain>"); the ``nvtx`` column
#: writes its ranges without a ``domain@`` prefix.
DEFAULT_DOMAINS = ("", "<default domain>")


class SharedAttr(dict):
    """A read-only dict for `df.attrs`, which pandas shares instead of copying.

    pandas deep-copies `attrs` into every frame and column it derives (`df[c]`, `df.itertuples()`,
    `df.describe()`), and a full set's units map 2,246 metrics: each column taken cost 1 ms, and
    `itertuples()` over a report of two rows 2.3 s. A value that cannot change is safe to share, so a
    deep copy of this one is itself; `dict(units)` gives a copy to change."""

    def __deepcopy__(self, memo: dict) -> "SharedAttr":
        return self

    def __copy__(self) -> "SharedAttr":
        return self

    def __reduce__(self) -> tuple:
        return dict, (dict(self),)  # a pickled frame loads without nsightwrap (a plain dict there)

    @classmethod
    def fromkeys(cls, keys: Any, value: Any = None) -> "SharedAttr":
        return cls(dict.fromkeys(keys, value))

    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("this attrs entry is read-only (pandas shares it between frames): change dict(...) of it")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _read_only


def dims(x: Any, y: Any, z: Any) -> str | None:
    """``"(x, y, z)"`` as ncu prints a grid or block size; None when one is missing."""
    if x is None or y is None or z is None:
        return None
    return f"({x}, {y}, {z})"
