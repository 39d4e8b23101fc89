"""The C library's malloc, told to keep a long-running server's memory together.

glibc gives a thread that finds the others' arenas locked an arena of its own, up to eight a core,
and hands an arena's freed memory back to the system only from its top. A server's threads (the
event loop, the batcher's worker, recognition, torch's) allocate tensors of ever-changing shapes:
batches of varied streams, windows that grow in steps. Spread over sixteen arenas on two cores,
the freed pieces never came together again: 20 full-speed ``/v1/punct`` streams took ``serve``
from 460 to 1,671 MB in two minutes. With one arena the same run held at 985 MB, at the same
throughput; ``serve`` also hands the pages that freed memory leaves whole back every 10 s
(docs/soak.md). ``MALLOC_ARENA_MAX`` in the environment still decides where it is set.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
from typing import Any

__all__ = ["ARENAS", "TRIM_EVERY_S", "cap_arenas", "keep_trimmed", "heap"]

ARENAS = 1
TRIM_EVERY_S = 10.0
M_ARENA_MAX = -8  # glibc's mallopt parameter (malloc.h)


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@functools.cache
def _glibc() -> Any:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    if not (hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")):
        return None
    if hasattr(libc, "mallinfo2"):
        libc.mallinfo2.restype = _Mallinfo2
    return libc


def cap_arenas(n: int = ARENAS) -> bool:
    """At most ``n`` malloc arenas from now on; False where ``MALLOC_ARENA_MAX`` is set or the C
    library is not glibc (nothing changed)."""
    libc = _glibc()
    if "MALLOC_ARENA_MAX" in os.environ or libc is None:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, n))


async def keep_trimmed(every_s: float = TRIM_EVERY_S) -> None:
    """Every ``every_s``, hand the pages that freed memory leaves whole back to the system
    (``malloc_trim``), from the holes between live objects as well as from the top; runs until
    cancelled, and at once returns where the C library is not glibc."""
    libc = _glibc()
    if libc is None:
        return
    while True:
        await asyncio.sleep(every_s)
        await asyncio.to_thread(libc.malloc_trim, 0)


def heap() -> dict[str, int] | None:
    """malloc's heap, bytes (glibc's ``mallinfo2``): ``in_use`` by live allocations, ``free`` inside
    the arenas (a heap that grows with ``free`` fragments; with ``in_use``, it holds more), and
    ``mapped``, the large allocations it mmapped apart. None where the C library has no mallinfo2."""
    libc = _glibc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    info = libc.mallinfo2()
    return {"in_use": info.uordblks, "free": info.fordblks, "mapped": info.hblkhd}
