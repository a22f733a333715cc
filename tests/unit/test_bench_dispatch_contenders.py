"""bench_dispatch's contender plumbing (no broker): runtime_x2 is the runtime in twice the processes on
its own topics, the argument lists are checked before anything runs, and /proc CPU sampling counts a
process tree."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import threading
import time
from typing import Any

import pytest

from bench import cputime
from bench.bench_dispatch import CONTENDERS, OWN_TOPICS, PHASES, RATIOS, _job_of, _names, _rss_plan
from turnledger.topology import Topics


def _args(processes: int = 1) -> argparse.Namespace:
    return argparse.Namespace(partitions=2, batch_max_records=500, batch_max_ms=100, processes=processes)


def test_runtime_x2_is_the_runtime_job_with_twice_the_processes() -> None:
    topics = Topics("bench-x.")
    runtime = _job_of(_args(), "runtime", "b:1", topics, "bench-x.raw-out")
    x2 = _job_of(_args(), "runtime_x2", "b:1", topics, "bench-x.raw-out")
    assert (runtime.kind, runtime.processes) == ("runtime", 1)
    assert (x2.kind, x2.processes) == ("runtime", 2)
    assert {**x2.__dict__, "processes": 1} == runtime.__dict__
    assert _job_of(_args(2), "runtime_x2", "b:1", topics, "o").processes == 4
    assert _job_of(_args(2), "raw", "b:1", topics, "o").processes == 1


def test_runtime_x2_drains_topics_of_its_own_and_is_compared_with_the_runtime() -> None:
    assert OWN_TOPICS == ("runtime_x2",)
    assert ("runtime_x2", "runtime") in RATIOS
    assert CONTENDERS[-1] == "runtime_x2"


def test_names_keep_the_declared_order_and_refuse_unknown_ones() -> None:
    assert _names("runtime_x2,raw", CONTENDERS) == ("raw", "runtime_x2")
    assert _names("rss", PHASES) == ("rss",)
    assert _names("", PHASES) == ()
    with pytest.raises(argparse.ArgumentTypeError, match="runtime_x3"):
        _names("raw,runtime_x3", CONTENDERS)


def _spin(cpu_s: float, spun: Any, release: Any) -> None:
    """Burn `cpu_s` of CPU (not of wall time: the box is shared), then stay alive until released."""
    while time.process_time() < cpu_s:
        pass
    spun.set()
    release.wait(30)


def test_tree_cpu_counts_a_busy_child_while_it_lives() -> None:
    ctx = mp.get_context("fork")
    spun, release = ctx.Event(), ctx.Event()
    before = cputime.tree_cpu_s(os.getpid())
    child = ctx.Process(target=_spin, args=(0.5, spun, release))
    child.start()
    try:
        assert child.pid is not None
        assert child.pid in cputime.descendants(os.getpid())
        assert spun.wait(60)
        assert cputime.process_cpu_s(child.pid) >= 0.45  # clock ticks: 10 ms
        assert cputime.tree_cpu_s(os.getpid()) - before >= 0.45
    finally:
        release.set()
        child.join(30)
    assert cputime.process_cpu_s(child.pid) == 0.0  # reaped: nothing left to read


def test_cores_divide_cpu_by_wall_time() -> None:
    start = cputime.CpuSample(
        at_s=10.0,
        contender_s=1.0,
        broker_s=2.0,
        machine_s=100.0,
        steal_s=5.0,
        broker_threads_s={"requests": 1.0, "jit": 0.5, "gc": 0.2},
    )
    end = cputime.CpuSample(
        at_s=14.0,
        contender_s=3.0,
        broker_s=3.0,
        machine_s=106.0,
        steal_s=5.4,
        broker_threads_s={"requests": 1.6, "jit": 0.7, "gc": 0.1, "other": 0.2},
    )
    assert cputime.cores(start, end) == pytest.approx(
        {
            "contender": 0.5,
            "broker": 0.25,
            "machine": 1.5,
            "steal": 0.1,
            "broker_requests": 0.15,
            "broker_jit": 0.05,
            "broker_gc": 0.0,  # a thread gone between the samples took its seconds with it
            "broker_other": 0.05,
        }
    )


@pytest.mark.parametrize(
    ("comm", "family"),
    [
        ("data-plane-kafk", "requests"),
        ("C2 CompilerThre", "jit"),
        ("C1 CompilerThre", "jit"),
        ("G1 Conc#0", "gc"),
        ("G1 Refine#0", "gc"),
        ("GC Thread#1", "gc"),
        ("VM Thread", "gc"),
        ("group-coordinat", "other"),
        ("kafka-log-clean", "other"),
        ("TxnMarkerSender", "other"),
    ],
)
def test_broker_threads_are_grouped_by_what_they_do(comm: str, family: str) -> None:
    assert cputime.thread_family(comm) == family


def test_threads_cpu_reads_each_threads_name_and_time() -> None:
    """A thread named like the JVM's C2 compiler, burning CPU in this process, counts as "jit"."""
    busy = threading.Event()

    def spin() -> None:
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass
        busy.set()
        release.wait(30)

    release = threading.Event()
    thread = threading.Thread(target=spin)
    thread.start()
    try:
        assert busy.wait(60)
        with open(f"/proc/self/task/{thread.native_id}/comm", "w") as comm:
            comm.write("C2 CompilerThread0")  # Linux keeps the first 15 characters
        spent = cputime.threads_cpu_s(os.getpid())
        assert spent["jit"] >= 0.25  # clock ticks: 10 ms
        assert cputime.threads_cpu_s(2**22 + 1) == {}  # above Linux's PID_MAX_LIMIT: no such process
    finally:
        release.set()
        thread.join(30)


def test_the_rss_plan_takes_an_optional_state_cache_size() -> None:
    assert _rss_plan("100000:sqlite,2000:memory:500") == [(100_000, "sqlite", None), (2_000, "memory", 500)]
    assert _rss_plan("") == []
    for bad in ("100000", "100000:disk", "x:sqlite", "10:sqlite:big"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected conversations"):
            _rss_plan(bad)
