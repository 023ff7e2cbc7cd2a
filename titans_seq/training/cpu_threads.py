"""How many threads a CPU run uses: by default, the cores that are free when it starts.

PyTorch starts one thread per core. On a machine that other CPU-bound work shares, those
threads contend with it: each of the many small parallel regions of a training step waits
for a thread that the operating system has descheduled, and a step can take many times
longer than on one thread. A run that finds cores busy when it starts therefore uses only
the free ones (at least one); `train.threads` pins a number instead.
"""

from __future__ import annotations

import contextlib
import os
import time

import torch


def _cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs from /proc/stat, or None where there is none."""
    try:
        with open("/proc/stat") as handle:
            fields = [int(v) for v in handle.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def cores_busy_with_other_work(interval: float = 0.05) -> float | None:
    """Cores that processes other than this one keep busy, measured over `interval`
    seconds; None where the system does not say (no /proc/stat)."""
    before, own_before = _cpu_ticks(), os.times()
    if before is None:
        return None
    time.sleep(interval)
    after, own_after = _cpu_ticks(), os.times()
    busy, total = after[0] - before[0], after[1] - before[1]
    if total <= 0:
        return None
    cores = os.cpu_count() or 1
    own = (own_after.user - own_before.user) + (own_after.system - own_before.system)
    return max(0.0, busy / total * cores - own / interval)


def available_cores() -> int:
    """The cores this process may run on (its affinity where the system has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def threads_for_run(requested: int | str, busy: float | None, cores: int, current: int) -> int:
    """The thread count of a run: `requested` when it is a number; for "auto", the
    current count lowered to the cores that other work leaves free (never below one,
    never raised)."""
    if requested != "auto":
        return int(requested)
    if busy is None:
        return current
    free = max(1, cores - round(busy))
    return max(1, min(current, free))


@contextlib.contextmanager
def cpu_threads(requested: int | str, device: torch.device):
    """Run the block with the thread count `threads_for_run` picks (CPU runs only); the
    previous count is restored after it. Yields (threads, reason): the reason says why the
    count was lowered, or is None."""
    if device.type != "cpu":
        yield torch.get_num_threads(), None
        return
    current = torch.get_num_threads()
    busy = cores_busy_with_other_work() if requested == "auto" else None
    threads = threads_for_run(requested, busy, available_cores(), current)
    reason = None
    if requested == "auto" and threads < current:
        reason = (
            f"other work keeps {busy:.1f} of {available_cores()} cores busy: training with "
            f"{threads} thread(s) instead of {current} (train.threads sets a number)"
        )
    torch.set_num_threads(threads)
    try:
        yield threads, reason
    finally:
        torch.set_num_threads(current)
