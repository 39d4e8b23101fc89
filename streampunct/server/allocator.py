"""The C library's malloc, told to keep a long-running server's memory together.

glibc gives a thread that finds the others' arenas locked an arena of its own, up to eight a core,
and hands an arena's freed memory back to the system only from its top. A server's threads (the
event loop, the batcher's worker, recognition, torch's) allocate tensors of ever-changing shapes:
batches of varied streams, windows that grow in steps. Spread over sixteen arenas on two cores,
the freed pieces never came together again: 20 full-speed ``/v1/punct`` streams took ``serve``
from 460 to 1,671 MB in two minutes. With one arena the same run held at 985 MB, at the same
throughput; ``serve`` also hands the pages that freed memory leaves whole back every 10 s
(docs/soak.md). glibc reads its arena limit once, when a thread first needs an arena of its own, so
the limit is set before any thread starts: ``serve`` and ``serve-ray`` run themselves again with
``MALLOC_ARENA_MAX`` in the environment (:func:`run_with_arena_cap`), and Ray starts each replica with
it (``ARENA_ENV``); a ``mallopt`` once threads have arenas changes nothing and still says it did.
``MALLOC_ARENA_MAX`` already in the environment decides where it is set.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import os
import sys
from typing import Any

__all__ = [
    "ARENAS",
    "ARENA_ENV",
    "TRIM_EVERY_S",
    "arenas",
    "heap",
    "keep_trimmed",
    "run_with_arena_cap",
    "trim",
]

ARENAS = 1
ARENA_ENV = {"MALLOC_ARENA_MAX": str(ARENAS)}  # the environment a server process starts in
TRIM_EVERY_S = 10.0


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
    if not hasattr(libc, "malloc_trim"):
        return None
    if hasattr(libc, "mallinfo2"):
        libc.mallinfo2.restype = _Mallinfo2
    return libc


def run_with_arena_cap() -> None:
    """Run this process's command again with ``ARENA_ENV`` set (the same process id, files and
    arguments), so that glibc caps its arenas from the first malloc; returns at once where the
    environment sets ``MALLOC_ARENA_MAX`` already or the C library is not glibc. Call it first
    thing, before any thread starts: what ran before it runs again."""
    if "MALLOC_ARENA_MAX" in os.environ or _glibc() is None:
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], {**os.environ, **ARENA_ENV})


def arenas() -> int | None:
    """How many malloc arenas this process has (glibc's ``malloc_info``); None where the C library
    is not glibc."""
    libc = _glibc()
    if libc is None or not hasattr(libc, "malloc_info") or not hasattr(libc, "open_memstream"):
        return None
    libc.open_memstream.restype = ctypes.c_void_p
    buf, size = ctypes.c_void_p(), ctypes.c_size_t()
    stream = ctypes.c_void_p(libc.open_memstream(ctypes.byref(buf), ctypes.byref(size)))
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    info = ctypes.string_at(buf, size.value).decode()
    libc.free(buf)
    return info.count("<heap nr=")


async def keep_trimmed(every_s: float = TRIM_EVERY_S) -> None:
    """Every ``every_s``, hand the pages that freed memory leaves whole back to the system
    (``malloc_trim``), from the holes between live objects as well as from the top; runs until
    cancelled, and at once returns where the C library is not glibc."""
    if _glibc() is None:
        return
    while True:
        await asyncio.sleep(every_s)
        await asyncio.to_thread(trim)


def trim() -> None:
    """Hand the pages that freed memory leaves whole back to the system now (glibc's
    ``malloc_trim(0)``); nothing where the C library is not glibc."""
    if (libc := _glibc()) is not None:
        libc.malloc_trim(0)


def heap() -> dict[str, int] | None:
    """malloc's heap, bytes (glibc's ``mallinfo2``): ``in_use`` by live allocations, ``free`` inside
    the arenas (a heap that grows with ``free`` fragments; with ``in_use``, it holds more), and
    ``mapped``, the large allocations it mmapped apart. None where the C library has no mallinfo2."""
    libc = _glibc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    info = libc.mallinfo2()
    return {"in_use": info.uordblks, "free": info.fordblks, "mapped": info.hblkhd}
