"""CPU seconds of a process tree and of the whole machine, read from /proc (Linux only).

A contender's throughput alone cannot say why two processes do not go twice as fast on a small
box. Sampling CPU over the same interval can: cores used by the contender (with the children of
`turnledger process --processes N`), by the broker, and by the machine as a whole (other users'
load included), so a run shows whether it was CPU-bound and who had the cores.

The broker's CPU is also split by what its threads do (`BROKER_THREADS`: the JVM names its threads,
and Linux keeps the first 15 characters as each task's `comm`), because on a 2-core box the
broker's JIT compiler and garbage collector can take as much as its request handling; and the
machine's steal time (cores the hypervisor gave to other guests) is reported apart.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """utime + stime of one process (0.0 once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state is fields[0], utime fields[11]
    return (int(fields[11]) + int(fields[12])) / TICKS


def descendants(pid: int) -> list[int]:
    """`pid` and every live descendant, from /proc/<pid>/task/<tid>/children."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            tasks = list(Path(f"/proc/{p}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
    return out


def tree_cpu_s(pid: int) -> float:
    return sum(process_cpu_s(p) for p in descendants(pid))


BROKER_THREADS: tuple[tuple[str, str], ...] = (
    ("data-plane-kafk", "requests"),  # the listener's network threads and request handlers
    ("C1 CompilerThre", "jit"),
    ("C2 CompilerThre", "jit"),
    ("G1 ", "gc"),  # G1 Conc#n, G1 Refine#n, G1 Service, G1 Main Marker
    ("GC Thread", "gc"),  # parallel workers of G1 and of the parallel collector
    ("VM Thread", "gc"),  # safepoint operations, the serial collector's pauses among them
)
"""A broker thread's `comm` prefix → what it does; any other thread is "other" (the group and
transaction coordinators, the controller, the log cleaner, timers)."""
BROKER_FAMILIES = ("requests", "jit", "gc", "other")


def thread_family(comm: str) -> str:
    return next((family for prefix, family in BROKER_THREADS if comm.startswith(prefix)), "other")


def threads_cpu_s(pid: int) -> dict[str, float]:
    """CPU seconds of a process's live threads by family (`thread_family`); {} once it is gone. A
    thread that ended between two samples takes its seconds with it, so a family's difference can
    only undercount."""
    spent: defaultdict[str, float] = defaultdict(float)
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return {}
    for task in tasks:
        try:
            comm = (task / "comm").read_text().rstrip("\n")
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        spent[thread_family(comm)] += (int(fields[11]) + int(fields[12])) / TICKS
    return dict(spent)


def _cpu_ticks() -> list[int]:
    first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    return [int(v) for v in first[:8]]  # user nice system idle iowait irq softirq steal


def machine_busy_s() -> float:
    """CPU seconds spent not idle (idle and iowait excluded) by all cores since boot, steal included."""
    ticks = _cpu_ticks()
    return (sum(ticks) - ticks[3] - ticks[4]) / TICKS


def machine_steal_s() -> float:
    """CPU seconds the hypervisor ran other guests while this one wanted the cores, since boot."""
    return _cpu_ticks()[7] / TICKS


@dataclass(frozen=True)
class CpuSample:
    at_s: float  # time.monotonic()
    contender_s: float
    broker_s: float
    machine_s: float
    steal_s: float = 0.0
    broker_threads_s: dict[str, float] = field(default_factory=dict)


def sample(at_s: float, contender_pid: int, broker_pid: int | None) -> CpuSample:
    broker = process_cpu_s(broker_pid) if broker_pid else 0.0
    threads = threads_cpu_s(broker_pid) if broker_pid else {}
    return CpuSample(at_s, tree_cpu_s(contender_pid), broker, machine_busy_s(), machine_steal_s(), threads)


def cores(start: CpuSample, end: CpuSample) -> dict[str, float]:
    """Cores used on average between two samples: contender tree, broker, whole machine (busy,
    and of it stolen), and the broker's by thread family (`broker_requests`, `broker_jit`, ...)."""
    wall = max(end.at_s - start.at_s, 1e-9)
    used = {
        "contender": (end.contender_s - start.contender_s) / wall,
        "broker": (end.broker_s - start.broker_s) / wall,
        "machine": (end.machine_s - start.machine_s) / wall,
        "steal": (end.steal_s - start.steal_s) / wall,
    }
    for family in BROKER_FAMILIES:
        spent = end.broker_threads_s.get(family, 0.0) - start.broker_threads_s.get(family, 0.0)
        used[f"broker_{family}"] = max(spent, 0.0) / wall
    return used
