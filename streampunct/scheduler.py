"""Many streams, one model: their pending work batched into one forward pass per layer.

:func:`run_batch` is the synchronous core: it prepares every job's call on its stream
(:meth:`~streampunct.stream.PunctStream.prepare`), computes the pending work of all the streams
together (:func:`~streampunct.engines.compute_many`), then lets each stream complete its call.
:class:`Batcher` is the asyncio front: one worker task takes the jobs that are waiting and runs
them in a worker thread, and wakes each caller with its events.

Bounds, so that no one stream can starve the others or exhaust memory:

- a push or revision runs as consecutive jobs (slices), as if the recogniser had sent its words in
  messages of that size (the clock ``now`` goes with the last one). A slice aims at ``slice_s``
  (0.25 s) of compute. The cost is in the words a job makes final: a slice takes the words that can
  come before the next one becomes final (the lookahead not yet there), then ``slice_s`` over the
  stream's measured cost a final word (the batches it was in: their seconds over their final words,
  each job counting one more), at most ``max_job_words`` in all; before that cost is known,
  ``FIRST_SLICE`` final words. A message of long words at lookahead 64 costs a hundred times a word
  what one at lookahead 2 does: sliced by words alone, its jobs took 3 s each, and every other
  stream waited that long a batch;
- a batch takes at most one job per stream, ``max_batch`` jobs and about ``max_batch_words`` words;
  a stream's next job joins the queue only once its previous one is done, so every waiting stream
  gets its turn in arrival order.

A job waits for at most the batch in flight plus ``max_wait_ms`` (default 0: no lingering; under
load, batches form by themselves while the previous one runs). Errors in one stream's job reach that
caller alone; an unexpected one is logged here with its traceback and handed on without it, so
that a failed job keeps no frames (and their tensors) alive. :attr:`Batcher.faults` counts the
batches in a row that failed as a whole: a server that can no longer compute says so in its health.

:class:`Load` says how busy a worker is (the share of the last ``LOAD_WINDOW_S`` it computed) and
its capacity (what it got done per second of computing): :attr:`Batcher.load` in words; the server
keeps one for speech recognition too, in audio seconds, and refuses new streams past a load.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from .engines import compute_many
from .errors import InputError, StreamPunctError
from .stream import Call, Finish, PunctStream, Push, Revise, Tick
from .types import PunctEvent, Word

__all__ = ["Job", "run_batch", "Batcher", "Load", "Loads", "lanes_for"]

log = logging.getLogger("streampunct.scheduler")

LOAD_WINDOW_S = 5.0  # the load is the share of this many seconds, the latest, a worker computed
SLICE_S = 0.25  # seconds of compute a job of a long message aims at
FIRST_SLICE = 4  # words of a stream's first job, before its cost a word is known


class Load:
    """How busy one worker is. ``start()`` and ``stop(units)`` around each spell of computing
    (from any one thread at a time); :meth:`busy`: the share of the last ``window_s`` seconds
    spent computing, a spell under way included; :meth:`capacity`: units done per second of
    computing, over the spells that ended in the window (or the last one)."""

    def __init__(self, window_s: float = LOAD_WINDOW_S, clock: Callable[[], float] = time.monotonic):
        self.window_s, self.clock = window_s, clock
        self._spans: deque[tuple[float, float, float]] = deque()  # (start, end, units)
        self._since: float | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        self._since = self.clock()

    def stop(self, units: float) -> None:
        now = self.clock()
        with self._lock:
            if self._since is not None:
                self._spans.append((self._since, now, units))
            self._since = None
            while len(self._spans) > 1 and self._spans[0][1] < now - self.window_s:
                self._spans.popleft()

    def busy(self) -> float:
        now = self.clock()
        start = now - self.window_s
        with self._lock:
            spans = [(a, b) for a, b, _ in self._spans]
            if self._since is not None:
                spans.append((self._since, now))
        return min(1.0, sum(max(0.0, b - max(a, start)) for a, b in spans) / self.window_s)

    def capacity(self) -> float | None:
        with self._lock:
            seconds = sum(b - a for a, b, _ in self._spans)
            units = sum(u for _, _, u in self._spans)
        return units / seconds if seconds > 0 else None

    def seconds_per_unit(self) -> float | None:
        """Seconds of computing a unit takes: the inverse of :meth:`capacity` (recognition's compute ratio)."""
        capacity = self.capacity()
        return 1 / capacity if capacity else None


class Loads(Load):
    """Several lanes' loads as admission reads them: busy, the least busy lane's (where a new stream
    goes: :meth:`Batcher.lane_of`); capacity, their sum."""

    def __init__(self, loads: Sequence[Load]):
        super().__init__()
        self.loads = loads

    def busy(self) -> float:
        return min(load.busy() for load in self.loads)

    def capacity(self) -> float | None:
        known = [c for c in (load.capacity() for load in self.loads) if c is not None]
        return sum(known) if known else None


class _Lane:
    """One batching worker: its queue, its thread and its load (in words)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Job] = asyncio.Queue()
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="streampunct")
        self.load = Load()
        self.worker: asyncio.Task[None] | None = None


@dataclass
class Job:
    """One call on one stream."""

    stream: PunctStream
    call: Call
    future: asyncio.Future[list[PunctEvent]] | None = field(default=None, repr=False)
    submitted: float = 0.0  # time.perf_counter() when the batcher got it

    @property
    def size(self) -> int:
        """Words the job adds (at least 1: a tick or a finish is work too)."""
        return max(1, len(getattr(self.call, "words", ())) + len(getattr(self.call, "tentative", ())))


def run_batch(jobs: Sequence[Job]) -> list[list[PunctEvent] | Exception]:
    """Run jobs on distinct streams; one result (events, or the error) per job, in order."""
    if len({id(j.stream) for j in jobs}) != len(jobs):
        raise InputError("a batch takes at most one job per stream")
    results: list[list[PunctEvent] | Exception | None] = [None] * len(jobs)
    prepared = []
    for i, job in enumerate(jobs):
        try:
            job.stream.prepare(job.call)
            prepared.append(i)
        except Exception as e:  # reported to that job's caller only
            results[i] = e
    try:
        compute_many([w for i in prepared for w in jobs[i].stream.pending()])
    except Exception:  # find the stream(s) at fault: each alone
        for i in list(prepared):
            try:
                compute_many(jobs[i].stream.pending())
            except Exception as e:
                results[i] = e
                prepared.remove(i)
    for i in prepared:
        try:
            results[i] = jobs[i].stream.complete(jobs[i].call)
        except Exception as e:
            results[i] = e
    return results  # type: ignore[return-value]


def lanes_for(device: str) -> int:
    """Batching lanes for a model on ``device``: one a core on a CPU, each computing on one torch
    thread (the forward passes of small batches scale across cores, not across a pass's threads);
    one on an accelerator, whose batches grow instead. Sets torch's threads to match."""
    if device != "cpu":
        return 1
    import torch

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    torch.set_num_threads(1)
    return cores


class Batcher:
    """The batching workers behind a server: ``await batcher.push(stream, words)``. Each of its
    ``lanes`` computes in a thread of its own; a stream keeps the lane it was first given."""

    def __init__(
        self,
        max_batch: int = 64,
        max_wait_ms: float = 0.0,
        max_job_words: int = 32,
        max_batch_words: int = 256,
        slice_s: float = SLICE_S,
        lanes: int = 1,
    ):
        if min(max_batch, max_job_words, max_batch_words, lanes) < 1 or max_wait_ms < 0 or slice_s <= 0:
            raise InputError(
                "max_batch, max_job_words, max_batch_words and lanes must be >= 1, max_wait_ms >= 0, slice_s > 0"
            )
        self.max_batch = max_batch
        self.slice_s = slice_s
        # each stream's cost a final word (seconds), from the batches it was in
        self._cost: weakref.WeakKeyDictionary[PunctStream, float] = weakref.WeakKeyDictionary()
        self.max_wait_ms = max_wait_ms
        self.max_job_words = max_job_words
        self.max_batch_words = max_batch_words
        self.lanes = [_Lane() for _ in range(lanes)]
        self.load: Load = Loads([lane.load for lane in self.lanes])
        self._lane: weakref.WeakKeyDictionary[PunctStream, _Lane] = weakref.WeakKeyDictionary()
        self.batches = 0  # statistics: batches run and jobs in them
        self.jobs = 0
        self.faults = 0  # batches in a row whose every job failed unexpectedly
        self.last_fault: str | None = None
        # told after each batch: its jobs, the words it made final, each job's seconds from its
        # submission to its result (the server's metrics)
        self.on_batch: Callable[[int, int, list[float]], None] | None = None

    async def push(
        self,
        stream: PunctStream,
        words: Iterable[str | Word],
        now: float | None = None,
        tentative: Iterable[str | Word] = (),
    ) -> list[PunctEvent]:
        """``tentative`` (the recogniser's guess after the words) goes with the last job."""
        words, events, i = list(words), [], 0
        while True:
            n = self.slice_words(stream)
            last = i + n >= len(words)
            push = (
                Push(tuple(words[i : i + n]), now, tuple(tentative))
                if last
                else Push(tuple(words[i : i + n]))
            )
            events += await self._submit(Job(stream, push))
            i += n
            if last:
                return events

    def slice_words(self, stream: PunctStream) -> int:
        """Words of the stream's next job: about ``slice_s`` of compute at its cost a final word."""
        cost = self._cost.get(stream)
        finals = FIRST_SLICE if cost is None else int(self.slice_s / cost) if cost > 0 else self.max_job_words
        before = max(0, stream.policy.words - (stream.n_words - stream.n_final))  # none final yet
        return min(self.max_job_words, before + max(1, finals))

    async def revise(
        self, stream: PunctStream, index: int, words: Iterable[str | Word], now: float | None = None
    ) -> list[PunctEvent]:
        words, n = list(words), self.slice_words(stream)
        events = await self._submit(
            Job(stream, Revise(index, tuple(words[:n]), now if len(words) <= n else None))
        )
        if len(words) > n:
            events += await self.push(stream, words[n:], now)
        return events

    async def tick(self, stream: PunctStream, now: float) -> list[PunctEvent]:
        return await self._submit(Job(stream, Tick(now)))

    async def finish(self, stream: PunctStream) -> list[PunctEvent]:
        return await self._submit(Job(stream, Finish()))

    async def run(self, stream: PunctStream, call: Call) -> list[PunctEvent]:
        """Any call, as ``stream.run(call)`` would run it: a push or a revision in slices."""
        if isinstance(call, Push):
            return await self.push(stream, call.words, call.now, call.tentative)
        if isinstance(call, Revise):
            return await self.revise(stream, call.index, call.words, call.now)
        return await self._submit(Job(stream, call))

    async def close(self) -> None:
        """Finish the jobs already queued, then stop the workers."""
        for lane in self.lanes:
            if lane.worker is not None:
                await lane.queue.join()
                lane.worker.cancel()
                try:
                    await lane.worker
                except asyncio.CancelledError:
                    pass
                lane.worker = None
            lane.executor.shutdown(wait=True)

    def lane_of(self, stream: PunctStream) -> _Lane:
        """The stream's lane, kept (its calls in order): when it first came, the least busy (to a
        tenth), then the one with the fewest streams."""
        lane = self._lane.get(stream)
        if lane is None:
            if len(self.lanes) == 1:
                lane = self.lanes[0]
            else:
                counts = collections.Counter(id(lane) for lane in self._lane.values())
                lane = min(self.lanes, key=lambda lane: (round(lane.load.busy(), 1), counts[id(lane)]))
            self._lane[stream] = lane
        return lane

    async def _submit(self, job: Job) -> list[PunctEvent]:
        loop = asyncio.get_running_loop()
        lane = self.lane_of(job.stream)
        if lane.worker is None:
            lane.worker = loop.create_task(self._run(lane))
        job.future = loop.create_future()
        job.submitted = time.perf_counter()
        await lane.queue.put(job)
        return await job.future

    def _fits(self, job: Job, batch: list[Job], streams: set[int], words: int) -> bool:
        if id(job.stream) in streams or len(batch) >= self.max_batch:
            return False
        return not batch or words + job.size <= self.max_batch_words

    async def _run(self, lane: _Lane) -> None:
        loop = asyncio.get_running_loop()
        queue = lane.queue
        held: list[Job] = []  # taken from the queue, waiting for a later batch
        while True:
            if not held:
                held.append(await queue.get())
            batch: list[Job] = []
            streams: set[int] = set()
            words = 0
            waiting: list[Job] = []
            for job in held:
                if self._fits(job, batch, streams, words):
                    batch.append(job)
                    streams.add(id(job.stream))
                    words += job.size
                else:
                    waiting.append(job)
            held = waiting
            deadline = loop.time() + self.max_wait_ms / 1000
            while len(batch) < self.max_batch and words < self.max_batch_words:
                try:
                    if queue.empty() and loop.time() < deadline:
                        job = await asyncio.wait_for(queue.get(), deadline - loop.time())
                    else:
                        job = queue.get_nowait()
                except (asyncio.QueueEmpty, asyncio.TimeoutError):
                    break
                if self._fits(job, batch, streams, words):
                    batch.append(job)
                    streams.add(id(job.stream))
                    words += job.size
                else:
                    held.append(job)
            lane.load.start()
            t0 = time.perf_counter()
            try:
                results = await loop.run_in_executor(lane.executor, run_batch, batch)
            except Exception as e:  # a fault of the batch itself: every caller hears it
                results = [e] * len(batch)
            lane.load.stop(words)
            finals = sum(1 + sum(e.final for e in r) for r in results if not isinstance(r, Exception))
            cost = (time.perf_counter() - t0) / max(1, finals)
            for job in batch:  # a final word's cost in this batch: at once if more, else smoothed
                before = self._cost.get(job.stream)
                self._cost[job.stream] = cost if before is None or cost > before else (before + cost) / 2
            self._deliver(batch, results)
            for _ in batch:
                queue.task_done()
            del results, batch  # nothing of a finished batch stays referenced here

    def _deliver(self, batch: list[Job], results: Sequence[list[PunctEvent] | Exception]) -> None:
        self.batches += 1
        self.jobs += len(batch)
        if self.on_batch is not None:
            now = time.perf_counter()
            finals = sum(e.final for r in results if not isinstance(r, Exception) for e in r)
            self.on_batch(len(batch), finals, [now - job.submitted for job in batch])
        unexpected = [r for r in results if isinstance(r, Exception) and not isinstance(r, StreamPunctError)]
        if unexpected:
            log.error("batch_job_failed", exc_info=unexpected[0])
            self.last_fault = f"{type(unexpected[0]).__name__}: {unexpected[0]}"
        self.faults = self.faults + 1 if len(unexpected) == len(batch) else 0
        for job, result in zip(batch, results):
            assert job.future is not None
            if not job.future.done():
                if isinstance(result, Exception):
                    job.future.set_exception(result.with_traceback(None))
                else:
                    job.future.set_result(result)
            job.future = None
