"""CPU seconds of a process tree and of the whole machine, read from /proc (Linux only).

A contender's throughput alone cannot say why two processes do not go twice as fast on a small
box. Sampling CPU over the same interval can: cores used by the contender (with the children of
`turnledger process --processes N`), by the broker, and by the machine as a whole (other users'
load included), so a run shows whether it was CPU-bound and who had the cores.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
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


def machine_busy_s() -> float:
    """CPU seconds spent not idle (idle and iowait excluded) by all cores since boot."""
    first = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    ticks = [int(v) for v in first[:8]]  # user nice system idle iowait irq softirq steal
    return (sum(ticks) - ticks[3] - ticks[4]) / TICKS


@dataclass(frozen=True)
class CpuSample:
    at_s: float  # time.monotonic()
    contender_s: float
    broker_s: float
    machine_s: float


def sample(at_s: float, contender_pid: int, broker_pid: int | None) -> CpuSample:
    broker = process_cpu_s(broker_pid) if broker_pid else 0.0
    return CpuSample(at_s, tree_cpu_s(contender_pid), broker, machine_busy_s())


def cores(start: CpuSample, end: CpuSample) -> dict[str, float]:
    """Cores used on average between two samples: contender tree, broker, whole machine."""
    wall = max(end.at_s - start.at_s, 1e-9)
    return {
        "contender": (end.contender_s - start.contender_s) / wall,
        "broker": (end.broker_s - start.broker_s) / wall,
        "machine": (end.machine_s - start.machine_s) / wall,
    }
