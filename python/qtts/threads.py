"""Thread-count defaults: physical cores in this process's affinity mask.

ggml's spin barriers collapse when threads outnumber cores (measured: 100x slower on 2
cores with its default of 4), and SMT siblings only add contention for memory-bound decoding.
"""
from __future__ import annotations

import os
from pathlib import Path


def available_cpus() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def physical_cores() -> int:
    cpus = available_cpus()
    cores: set[tuple[str, str]] = set()
    for cpu in cpus:
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(((topo / "physical_package_id").read_text().strip(), (topo / "core_id").read_text().strip()))
        except OSError:
            return len(cpus)
    return max(1, len(cores))


def resolve_threads(n_threads: int | None) -> int:
    """None -> physical cores; an explicit count is capped at the CPUs we may run on."""
    if n_threads is None:
        return physical_cores()
    if not isinstance(n_threads, int) or isinstance(n_threads, bool) or n_threads < 1:
        raise ValueError(f"n_threads must be a positive integer, got {n_threads!r}")
    return min(n_threads, len(available_cpus()))
