"""Many streams, one model: their pending work batched into one forward pass per layer.

:func:`run_batch` is the synchronous core: it stages every job's words, computes the stale rows of
all the streams' windows together (:func:`~streampunct.incremental.compute_many`), then lets each
stream decide. :class:`Batcher` is the asyncio front: one worker task takes the jobs that are
waiting, at most one per stream and ``max_batch`` in all, runs them in a worker thread, and wakes
each caller with its events. A job waits for at most the batch in flight plus ``max_wait_ms``
(default 0: no lingering; under load, batches form by themselves while the previous one runs).
Errors in one stream's job (bad input) reach that caller alone.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .errors import InputError
from .incremental import compute_many
from .stream import PunctEvent, PunctStream, Word

__all__ = ["Job", "run_batch", "Batcher"]


@dataclass
class Job:
    """One call on one stream: ``op`` is push, revise, tick or finish."""

    stream: PunctStream
    op: str
    words: Sequence[str | Word] = ()
    index: int = 0
    now: float | None = None
    future: asyncio.Future[list[PunctEvent]] | None = field(default=None, repr=False)


def run_batch(jobs: Sequence[Job]) -> list[list[PunctEvent] | Exception]:
    """Run jobs on distinct streams; one result (events, or the error) per job, in order."""
    if len({id(j.stream) for j in jobs}) != len(jobs):
        raise ValueError("a batch takes at most one job per stream")
    results: list[list[PunctEvent] | Exception | None] = [None] * len(jobs)
    staged = []
    for i, job in enumerate(jobs):
        try:
            if job.op == "push":
                job.stream._stage_push(job.words)
            elif job.op == "revise":
                job.stream._stage_revise(job.index, job.words)
            elif job.op in ("tick", "finish"):
                job.stream._check_open()
            else:
                raise InputError(f"unknown operation {job.op!r}")
            staged.append(i)
        except Exception as e:  # reported to that job's caller only
            results[i] = e
    try:
        compute_many([w for i in staged for w in jobs[i].stream._open_windows()])
    except Exception:  # find the stream(s) at fault: each alone
        for i in list(staged):
            try:
                compute_many(jobs[i].stream._open_windows())
            except Exception as e:
                results[i] = e
                staged.remove(i)
    for i in staged:
        job = jobs[i]
        try:
            results[i] = job.stream.finish() if job.op == "finish" else job.stream._advance(job.now)
        except Exception as e:
            results[i] = e
    return results  # type: ignore[return-value]


class Batcher:
    """The one batching worker behind a server: ``await batcher.push(stream, words)``."""

    def __init__(self, max_batch: int = 64, max_wait_ms: float = 0.0):
        if max_batch < 1 or max_wait_ms < 0:
            raise ValueError("max_batch must be >= 1 and max_wait_ms >= 0")
        self.max_batch = max_batch
        self.max_wait_ms = max_wait_ms
        self._queue: asyncio.Queue[Job] = asyncio.Queue()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="streampunct"
        )
        self._worker: asyncio.Task[None] | None = None
        self.batches = 0  # statistics: batches run and jobs in them
        self.jobs = 0

    async def push(
        self, stream: PunctStream, words: Iterable[str | Word], now: float | None = None
    ) -> list[PunctEvent]:
        return await self._submit(Job(stream, "push", list(words), now=now))

    async def revise(
        self, stream: PunctStream, index: int, words: Iterable[str | Word], now: float | None = None
    ) -> list[PunctEvent]:
        return await self._submit(Job(stream, "revise", list(words), index=index, now=now))

    async def tick(self, stream: PunctStream, now: float) -> list[PunctEvent]:
        return await self._submit(Job(stream, "tick", now=now))

    async def finish(self, stream: PunctStream) -> list[PunctEvent]:
        return await self._submit(Job(stream, "finish"))

    async def close(self) -> None:
        """Finish the jobs already queued, then stop the worker."""
        if self._worker is not None:
            await self._queue.join()
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None
        self._executor.shutdown(wait=True)

    async def _submit(self, job: Job) -> list[PunctEvent]:
        loop = asyncio.get_running_loop()
        if self._worker is None:
            self._worker = loop.create_task(self._run())
        job.future = loop.create_future()
        await self._queue.put(job)
        return await job.future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        held: list[Job] = []  # taken from the queue, waiting for their stream's earlier job
        while True:
            if not held:
                held.append(await self._queue.get())
            batch: list[Job] = []
            streams: set[int] = set()
            waiting: list[Job] = []
            for job in held:
                if id(job.stream) in streams or len(batch) >= self.max_batch:
                    waiting.append(job)
                else:
                    batch.append(job)
                    streams.add(id(job.stream))
            held = waiting
            deadline = loop.time() + self.max_wait_ms / 1000
            while len(batch) < self.max_batch:
                try:
                    if self._queue.empty() and loop.time() < deadline:
                        job = await asyncio.wait_for(self._queue.get(), deadline - loop.time())
                    else:
                        job = self._queue.get_nowait()
                except (asyncio.QueueEmpty, asyncio.TimeoutError):
                    break
                if id(job.stream) in streams:
                    held.append(job)
                else:
                    batch.append(job)
                    streams.add(id(job.stream))
            try:
                results = await loop.run_in_executor(self._executor, run_batch, batch)
            except Exception as e:  # a fault of the batch itself: every caller hears it
                results = [e] * len(batch)
            self.batches += 1
            self.jobs += len(batch)
            for job, result in zip(batch, results):
                assert job.future is not None
                if not job.future.done():
                    if isinstance(result, Exception):
                        job.future.set_exception(result)
                    else:
                        job.future.set_result(result)
                self._queue.task_done()
