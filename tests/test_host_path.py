"""What an open stream holds on the host, and the host path's benchmark itself
(benchmarks/host_path.py): the model's work for a step lives only while the step runs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest
import torch

from benchmarks.host_path import small_model, trial
from streampunct.engines import WindowPass
from streampunct.server.allocator import arenas, heap, keep_trimmed


def test_an_open_stream_holds_kilobytes_not_model_states():
    """600 window-engine streams (the default's windows and word pieces), 40 words each: under the
    100 KB an open stream may hold (5,000 streams in 500 MB). A window pass holds its word pieces
    and then its words' logits, never a layer's rows, keys or values."""
    torch.set_num_threads(1)
    run = trial(small_model(), 600, steps=2, warm=40, engine="auto", max_batch=64)
    assert run["words"] == 1200
    assert run["kb_per_stream"] < 100, run
    assert 0 < run["forward_us_per_word"] and run["host_us_per_word"] > 0
    p = small_model()
    s = p.stream(lookahead=2, engine="window")
    s.push("so we went down to the river and".split())
    passes = list(s._engine.work(0))
    WindowPass.compute_all(passes)
    assert all(w.rows is not None and w.rows.shape == (len(w.pieces), 4) for w in passes)


# Eight threads that each malloc and wait for one another before they end (a thread that ended first
# hands its arena to the next, so the count would depend on scheduling), then the process's arena count
# (after run_with_arena_cap, with "cap").
THREADS = """
import ctypes, sys, threading
from streampunct.server.allocator import arenas, run_with_arena_cap
if sys.argv[1:] == ["cap"]:
    run_with_arena_cap()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
together = threading.Barrier(8)
def work():
    for _ in range(2000):
        libc.free(ctypes.c_void_p(libc.malloc(4096)))
    together.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
print(arenas())
"""


def arenas_after_threads(*args: str, **env: str) -> int:
    environ = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env
    out = subprocess.run([sys.executable, "-c", THREADS, *args], capture_output=True, text=True, env=environ)
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


@pytest.mark.skipif(arenas() is None, reason="not glibc: no arenas to count")
def test_a_server_process_starts_with_its_arenas_capped():
    """Issue 76: ``mallopt`` from a running process changed nothing once threads had arenas, and
    said it did. The command runs itself again with the limit set: eight threads, one arena; left
    alone they take several, and an operator's own ``MALLOC_ARENA_MAX`` decides."""
    assert arenas_after_threads() > 2  # the control: without the cap, threads take arenas
    assert arenas_after_threads("cap") == 1
    assert arenas_after_threads("cap", MALLOC_ARENA_MAX="3") == 3


def test_trimming_runs_until_cancelled():
    async def main() -> bool:
        task = asyncio.create_task(keep_trimmed(0.01))
        await asyncio.sleep(0.05)
        running = not task.done()
        task.cancel()
        return running

    assert asyncio.run(main())


def test_the_c_heap_says_what_live_allocations_hold_and_what_is_free_in_it():
    """The soak's lead on memory that grows: live allocations (in use) or fragments (free)."""
    import numpy as np

    before = heap()
    if before is None:
        pytest.skip("this C library has no mallinfo2")
    held = [np.ones(10_000) for _ in range(100)]  # 8 MB in pieces the heap keeps (under the mmap threshold)
    during = heap()
    assert during is not None and during["in_use"] - before["in_use"] > 7_000_000
    del held
