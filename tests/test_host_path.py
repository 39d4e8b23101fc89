"""What an open stream holds on the host, and the host path's benchmark itself
(benchmarks/host_path.py): the model's work for a step lives only while the step runs."""

from __future__ import annotations

import asyncio

import pytest
import torch

from benchmarks.host_path import small_model, trial
from streampunct.engines import WindowPass
from streampunct.server.allocator import cap_arenas, heap, keep_trimmed


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


def test_the_allocator_is_left_alone_where_the_operator_set_it(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert cap_arenas() is False


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
