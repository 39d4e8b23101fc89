"""One map spread over worker processes, for the offline jobs that take hours on a few cores
(``train-pauses --workers``, ``benchmarks/e2e.py score --workers``)."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import torch

__all__ = ["in_processes"]


def _start(threads: int, setup: Callable[..., None], args: tuple) -> None:
    torch.set_num_threads(threads)
    setup(*args)


def in_processes(
    fn: Callable[[Any], Any], items: Iterable[Any], workers: int, setup: Callable[..., None], *args: Any
) -> list[Any]:
    """``[fn(item) for item in items]``, in order, computed in ``workers`` spawned processes (no
    torch thread pools forked), each of which first runs ``setup(*args)`` with its share of the
    cores as torch threads. ``fn`` and ``setup`` are module-level functions (they are pickled)."""
    threads = max(1, (os.cpu_count() or 1) // workers)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_start, initargs=(threads, setup, args)
    ) as pool:
        return list(pool.map(fn, items))
