"""The CUPTI trace follower: files that grow, lines cut in two, several processes, dead ones (time injected)."""

from __future__ import annotations

import json
from pathlib import Path

from nsightwrap.calibrate.cupti.trace import GRAPH_LAUNCH, StalledKernel, TraceFollower

S = 1_000_000_000  # ns
CUPTI_OFFSET = 7 * S  # CUPTI's clock runs 7 s ahead of the monotonic one in these traces


def line(**ev) -> bytes:
    return (json.dumps(ev) + "\n").encode()


def write(folder: Path, pid: int, data: bytes) -> None:
    with open(folder / f"trace-{pid}.jsonl", "ab") as f:
        f.write(data)


def init(pid: int, mono_s: float = 0.0) -> bytes:
    return line(ev="init", pid=pid, mono_ns=int(mono_s * S), cupti_ns=int(mono_s * S) + CUPTI_OFFSET, version=1)


def launch(pid: int, corr: int, seq: int, name: str, at_s: float) -> bytes:
    return line(ev="launch", pid=pid, corr=corr, seq=seq, name=name, mono_ns=int(at_s * S))


def kernel(pid: int, corr: int, name: str, start_s: float, end_s: float, graph: int = 0) -> bytes:
    return line(ev="kernel", pid=pid, corr=corr, name=name, start_ns=int(start_s * S) + CUPTI_OFFSET,
                end_ns=int(end_s * S) + CUPTI_OFFSET, graph=graph)


K = "void ns::k<int>(float*, int)"


def follower(tmp_path: Path, now: list, alive=lambda pid: True) -> TraceFollower:
    return TraceFollower(tmp_path, clock=lambda: now[0], alive=alive)


def test_a_line_cut_in_two_is_kept_for_the_next_read(tmp_path):
    now = [10.0]
    f = follower(tmp_path, now)
    whole = init(1) + launch(1, 1, 0, K, 1.0) + kernel(1, 1, K, 1.0, 1.5)
    cut = len(whole) - 20
    write(tmp_path, 1, whole[:cut])
    f.poll()
    assert f.traced and f.kernel_times() == {} and [x.name for x in f.in_flight()] == [K]
    assert f.bad_lines == 0
    write(tmp_path, 1, whole[cut:])
    f.poll()
    assert f.kernel_times() == {K: 0.5} and f.in_flight() == [] and f.bad_lines == 0


def test_kernel_times_keep_the_longest_launch_of_each_name_and_counts(tmp_path):
    f = follower(tmp_path, [0.0])
    write(tmp_path, 1, init(1) + launch(1, 1, 0, K, 1) + kernel(1, 1, K, 1, 1.2) + launch(1, 2, 1, K, 2)
          + kernel(1, 2, K, 2, 4.5) + launch(1, 3, 2, K, 5) + kernel(1, 3, K, 5, 5.1))
    f.poll()
    assert f.kernel_times() == {K: 2.5} and f.launch_count() == 3


def test_several_processes_and_a_file_that_appears_later(tmp_path):
    now = [20.0]
    f = follower(tmp_path, now)
    write(tmp_path, 11, init(11) + launch(11, 1, 0, "a", 1) + kernel(11, 1, "a", 1, 2))
    f.poll()
    write(tmp_path, 12, init(12) + launch(12, 1, 0, "b", 15))
    write(tmp_path, 11, launch(11, 2, 1, "c", 16))
    f.poll()
    assert f.files() == 2 and f.kernel_times() == {"a": 1.0}
    assert [(x.pid, x.name) for x in f.in_flight()] == [(12, "b"), (11, "c")]  # oldest first
    assert f.ages() == [("b", 5.0), ("c", 4.0)]  # on the injected clock
    now[0] = 21.0
    assert f.ages()[0] == ("b", 6.0)


def test_a_process_gone_without_its_exit_line_died(tmp_path):
    alive = {21: True, 22: False, 23: False}
    f = follower(tmp_path, [0.0], alive=lambda pid: alive[pid])
    write(tmp_path, 21, init(21))
    write(tmp_path, 22, init(22) + launch(22, 1, 0, K, 1))
    write(tmp_path, 23, init(23) + line(ev="exit", pid=23, mono_ns=2 * S))
    f.poll()
    assert f.died() == [22]  # 21 runs, 23 said goodbye
    assert [x.pid for x in f.in_flight()] == [22]


def test_finished_by_function_core_and_ordinal(tmp_path):
    """The ordinal is which launch of the kernel it is (0: its first), not ncu's launch ID; without one the
    run is never called finished early (the review found an earlier, shorter launch ending it)."""
    f = follower(tmp_path, [0.0])
    write(tmp_path, 1, init(1) + launch(1, 1, 0, K, 1) + kernel(1, 1, K, 1, 2) + launch(1, 2, 1, "other", 2)
          + launch(1, 3, 2, K, 3))
    f.poll()
    assert f.finished(StalledKernel("k", 0))  # as ncu names it, matched on function_core
    assert f.finished(StalledKernel("ns::k<int>", 0))
    assert not f.finished(StalledKernel("k", 1))  # the kernel's second launch is still in flight
    assert not f.finished(StalledKernel("k"))  # which launch is not known: not stopped early
    assert [x.seq for x in f.running(StalledKernel("k"))] == [2]
    assert not f.finished(StalledKernel("other", 0))
    write(tmp_path, 1, kernel(1, 3, K, 3, 9))
    f.poll()
    assert f.finished(StalledKernel("k", 1)) and f.kernel_times()[K] == 6.0


def test_graph_launches_ranges_and_errors(tmp_path):
    f = follower(tmp_path, [5.0])
    write(tmp_path, 1, init(1) + line(ev="graph", pid=1, corr=4, mono_ns=1 * S)
          + line(ev="range", pid=1, api="cuProfilerStart", mono_ns=1 * S))
    write(tmp_path, 2, line(ev="error", pid=2, what="CUPTI_ERROR_NOT_INITIALIZED"))
    f.poll()
    assert [x.name for x in f.in_flight()] == [GRAPH_LAUNCH] and f.ranges
    assert f.errors() == ["process 2: CUPTI_ERROR_NOT_INITIALIZED"] and f.traced  # process 1 is traced
    write(tmp_path, 1, kernel(1, 4, "g1", 2, 3, graph=1))
    f.poll()
    assert f.in_flight() == [] and f.finished(StalledKernel("g1", 0))  # a graph's kernels count as launches


def test_nothing_traced_and_hostile_lines(tmp_path):
    f = follower(tmp_path, [0.0])
    f.poll()  # no file yet
    assert not f.traced
    write(tmp_path, 1, b"not json\n" + line(ev="launch", pid=1) + line(nothing=1) + b"\x00\xff\n")
    f.poll()
    assert not f.traced and f.bad_lines == 4 and f.in_flight() == []


def test_memory_is_bounded_by_kernel_names_not_launches(tmp_path):
    f = follower(tmp_path, [0.0])
    data = init(1) + b"".join(launch(1, i, i, K, i) + kernel(1, i, K, i, i + 0.001) for i in range(2000))
    write(tmp_path, 1, data)
    f.poll()
    assert f.launch_count() == 2000 and len(f.kernel_times()) == 1 and f.in_flight() == []


def test_a_name_ncu_cut_short_matches_the_full_one(tmp_path):
    full = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    f = follower(tmp_path, [0.0])
    write(tmp_path, 1, init(1) + launch(1, 1, 0, full, 1))
    f.poll()
    cut = StalledKernel("ncclDevKernel_AllReduce_Sum_f...")
    assert [x.name for x in f.running(cut)] == [full] and not f.running(StalledKernel("ncclDevKernel_AllReduce"))
    write(tmp_path, 1, kernel(1, 1, full, 1, 2))
    f.poll()
    assert f.finished(StalledKernel(cut.name, 0)) and not f.finished(StalledKernel("ncclDevKernel_AllReduce", 0))


def test_a_kernel_whose_correlation_id_matches_no_launch_ends_its_oldest_launch_of_that_name(tmp_path):
    f = follower(tmp_path, [0.0])
    write(tmp_path, 1, init(1) + launch(1, 1, 0, K, 1) + launch(1, 2, 1, K, 2) + kernel(1, 99, K, 1, 3))
    f.poll()
    assert [x.corr for x in f.in_flight()] == [2]  # not both left in flight for ever


def test_an_error_once_traced_is_trouble_not_a_failed_set_up(tmp_path):
    f = follower(tmp_path, [0.0])
    write(tmp_path, 1, init(1) + line(ev="error", pid=1, what="cuptiSubscribe: CUPTI_ERROR_UNKNOWN"))
    write(tmp_path, 2, init(2) + launch(2, 1, 0, K, 1) + kernel(2, 1, K, 1, 2)
          + line(ev="error", pid=2, what="CUPTI dropped 3 activity records"))
    f.poll()
    assert f.errors() == ["process 1: cuptiSubscribe: CUPTI_ERROR_UNKNOWN"]  # as the real tracer writes it
    assert f.troubles() == ["process 2: CUPTI dropped 3 activity records"] and f.traced


def test_launches_in_flight_are_capped(tmp_path, monkeypatch):
    import nsightwrap.calibrate.cupti.trace as trace

    monkeypatch.setattr(trace, "MAX_IN_FLIGHT", 3)
    f = follower(tmp_path, [0.0])
    write(tmp_path, 1, init(1) + b"".join(launch(1, i, i, K, i) for i in range(5)))
    f.poll()
    assert [x.corr for x in f.in_flight()] == [0, 1, 2] and f.not_kept == 2  # the oldest are kept


def test_a_device_synchronize_ends_the_launches_before_it_whose_records_are_held_back(tmp_path):
    """On the GPU machine a finished kernel's record waited behind a kernel that hung (both in one CUPTI
    buffer), so the evidence said the finished one was in flight too; cuCtxSynchronize's return says it was
    not. Its record, when it comes, still gives its time."""
    f = TraceFollower(tmp_path, clock=lambda: 100.0, alive=lambda pid: True)
    lines = [{"ev": "init", "pid": 7, "mono_ns": 0, "cupti_ns": 0, "version": 1},
             {"ev": "launch", "pid": 7, "corr": 3, "seq": 0, "name": "vec_add(float*)", "mono_ns": 1_000_000_000},
             {"ev": "sync", "pid": 7, "corr": 4, "mono_ns": 1_100_000_000},
             {"ev": "launch", "pid": 7, "corr": 5, "seq": 1, "name": "wait_forever(int*)", "mono_ns": 1_200_000_000}]
    (tmp_path / "trace-7.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    f.poll()
    assert [x.name for x in f.in_flight()] == ["wait_forever(int*)"]
    with open(tmp_path / "trace-7.jsonl", "a") as out:
        out.write(json.dumps({"ev": "kernel", "pid": 7, "corr": 3, "name": "vec_add(float*)", "start_ns": 10,
                              "end_ns": 2_000_010, "graph": 0}) + "\n")
    f.poll()
    assert f.kernel_times() == {"vec_add(float*)": 0.002}
    assert f.finished(StalledKernel("vec_add", 0)) and not f.finished(StalledKernel("wait_forever", 1))


def test_a_note_is_trouble_not_a_failed_set_up(tmp_path):
    """Review: a failed cuptiActivityFlushPeriod (the tracer traces on without it) made the whole traced run
    count as untraced; it is now a "note", kept as trouble."""
    f = follower(tmp_path, [0.0])
    write(tmp_path, 1, init(1) + line(ev="note", pid=1, what="cuptiActivityFlushPeriod: CUPTI_ERROR_X")
          + launch(1, 1, 0, K, 1) + kernel(1, 1, K, 1, 4))
    f.poll()
    assert f.traced and f.errors() == [] and f.troubles() == ["process 1: cuptiActivityFlushPeriod: CUPTI_ERROR_X"]
    assert f.finished(StalledKernel("k", 0))


def test_drain_reads_past_one_polls_budget(tmp_path, monkeypatch):
    """Review: the final read after the run read one budget (4 MiB) a file, so kernel times went missing."""
    import nsightwrap.calibrate.cupti.trace as trace

    monkeypatch.setattr(trace, "READ_BUDGET", 1000)
    f = follower(tmp_path, [0.0])
    write(tmp_path, 1, init(1) + b"".join(launch(1, i, i, f"k{i}(int)", i) + kernel(1, i, f"k{i}(int)", i, i + 1)
                                           for i in range(200)))
    f.poll()
    assert f.launch_count() < 200
    f.drain()
    assert f.launch_count() == 200
