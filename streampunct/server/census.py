"""What a server process holds, counted: the soak's measure of a leak (``benchmarks/soak_events.py``).

Off unless the process starts with ``STREAMPUNCT_CENSUS=1`` in its environment: then ``/debug/census``
(behind the guard, like every path) answers with :func:`census`, and with ``PYTHONTRACEMALLOC=1`` too
it counts the bytes Python's allocations hold. ``STREAMPUNCT_LEAK=connection`` is the soak's control,
never a setting: the server then keeps every closed session, a leak that the soak's rule must catch.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import tracemalloc
from collections import Counter
from typing import Any

from .allocator import arenas, heap, trim

__all__ = ["ENABLED", "LEAKS", "census", "keep"]

ENABLED = os.environ.get("STREAMPUNCT_CENSUS") == "1"
LEAKS = os.environ.get("STREAMPUNCT_LEAK") == "connection"
TOP_LINES = 25  # allocation sites reported, by the bytes they hold
MIN_COUNT = 50  # types with fewer live objects are left out of the census (they cannot hide a leak of hours)
_kept: list[Any] = []


def keep(session: Any) -> None:
    """The control's leak: with ``STREAMPUNCT_LEAK=connection``, a closed session is kept for ever."""
    if LEAKS:
        _kept.append(session)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def census() -> dict[str, Any]:
    """After a full collection: the bytes Python's allocations hold (None unless tracemalloc
    traces) and the lines that allocated the most of them, the live objects by type (those with at least ``MIN_COUNT``), open file descriptors,
    asyncio tasks, threads, malloc's arenas, resident memory before and after ``malloc_trim(0)`` and,
    after it, malloc's heap (bytes in use, free inside it, mapped apart)."""
    gc.collect()
    counts = Counter(map(type, gc.get_objects()))
    types: Counter[str] = Counter()
    for kind, n in counts.items():  # a class may shadow __module__ (a descriptor): str() of it then
        types[f"{kind.__module__}.{kind.__qualname__}"] += n
    rss = _rss_mb()
    trim()
    trimmed = _rss_mb()  # before the snapshot below, which allocates
    malloc = heap()
    try:
        tasks = len(asyncio.all_tasks())
    except RuntimeError:  # no running loop
        tasks = 0
    top = []
    if tracemalloc.is_tracing():  # where the traced bytes were allocated: the lines that hold the most
        stats = tracemalloc.take_snapshot().statistics("lineno")[:TOP_LINES]
        top = [[f"{s.traceback[0].filename}:{s.traceback[0].lineno}", s.size / 2**20, s.count] for s in stats]
    return {
        "traced_mb": tracemalloc.get_traced_memory()[0] / 2**20 if tracemalloc.is_tracing() else None,
        "traced_top": top,
        "objects": {name: n for name, n in sorted(types.items()) if n >= MIN_COUNT},
        "fds": len(os.listdir("/proc/self/fd")),
        "tasks": tasks,
        "threads": threading.active_count(),
        "rss_mb": rss,
        "rss_after_trim_mb": trimmed,
        "arenas": arenas(),
        "heap_mb": None if malloc is None else {k: v / 2**20 for k, v in malloc.items()},
        "kept": len(_kept),
    }
