"""What a server's sessions compute on: the :class:`Host` of their punctuation streams, which each
server implements (``serve``'s :class:`LocalHost`; serve-ray's encoder replicas,
:class:`~streampunct.server.cluster.ClusterHost`), and ``/v1/asr``'s speech :class:`Recognition`."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from streampunct import Punctuator, StreamPunctError
from streampunct.options import FrontEndOptions, RecognizerOptions
from streampunct.scheduler import Batcher, Load, lanes_for
from streampunct.stream import Call, Finish, Push
from streampunct.types import PunctEvent, Sentence

from .logs import log_event
from .metrics import Metrics

__all__ = ["StreamLost", "Stream", "Host", "LocalHost", "Recognition"]

PROBE_S = 10.0  # a health probe's stream gets this long for each of its calls


class StreamLost(StreamPunctError):
    """The host holds the stream's state no more (serve-ray: its encoder replica stopped): the
    stream's final words stand, the others are lost. The message is the client's: no internals."""


class Stream(Protocol):
    """What a session reads of its punctuation stream, wherever the stream lives."""

    @property
    def engine(self) -> str: ...
    @property
    def n_words(self) -> int: ...
    @property
    def n_final(self) -> int: ...
    def take_sentences(self) -> list[Sentence]: ...


class Host(Protocol):
    """Where a server's punctuation streams live and are computed. A call the stream refuses raises
    a StreamPunctError and changes nothing; a call on a stream whose state is gone, :class:`StreamLost`."""

    @property
    def load(self) -> Load:
        """The load of the punctuation worker a new stream would go to (as :meth:`check` last read it)."""
        ...

    @property
    def lanes(self) -> int:
        """Punctuation workers, each computing its streams."""
        ...

    async def open(self, lookahead: int, max_delay_ms: float | None, engine: str, sentences: bool) -> Stream:
        """A new stream."""
        ...

    async def run(self, stream: Any, call: Call) -> list[PunctEvent]:
        """One call on a stream, as ``stream.run(call)`` would run it; cancelling it drops its work."""
        ...

    async def close(self, stream: Any) -> None:
        """Forget a stream, however its session ended (finished, or its client gone)."""
        ...

    async def check(self) -> str | None:
        """Read the host's state anew: None while it computes streams, else why it cannot (a sentence
        for the client)."""
        ...

    def report_to(self, metrics: Metrics) -> None:
        """Count what the host computes in the server's metrics."""
        ...

    async def stop(self) -> None:
        """Finish the work queued, after the last session."""
        ...


class LocalHost:
    """``serve``'s: the punctuator's streams in this process, computed by one Batcher (its lanes)."""

    def __init__(self, punctuator: Punctuator, batcher: Batcher | None = None):
        self.punctuator = punctuator
        self.batcher = batcher or Batcher(lanes=lanes_for(punctuator.device.type))
        self.load = self.batcher.load
        self.lanes = len(self.batcher.lanes)

    async def open(self, lookahead: int, max_delay_ms: float | None, engine: str, sentences: bool) -> Stream:
        return self.punctuator.stream(lookahead, max_delay_ms, engine, sentences=sentences)

    async def run(self, stream: Any, call: Call) -> list[PunctEvent]:
        return await self.batcher.run(stream, call)

    async def close(self, stream: Any) -> None:
        """Nothing to do: the stream goes with its session, and its work with the session's tasks."""

    async def check(self) -> str | None:
        """After a batch of streams failed as a whole (e.g. out of memory), a probe stream must get
        through the batcher again."""
        if not self.batcher.faults:
            return None
        try:
            probe = await self.open(1, None, "auto", False)
            await asyncio.wait_for(self.run(probe, Push(("is", "it", "working"))), PROBE_S)
            await asyncio.wait_for(self.run(probe, Finish()), PROBE_S)
        except Exception as e:
            return self.batcher.last_fault or f"{type(e).__name__}: {e}"
        return None

    def report_to(self, metrics: Metrics) -> None:
        self.batcher.on_batch = metrics.observe_batch

    async def stop(self) -> None:
        await self.batcher.close()


class Recognition:
    """``/v1/asr``'s speech recognition: one worker thread, whose passes every stream shares in turns,
    the model it loads once (at the first stream, or :meth:`model` at the start), and its settings.
    ``record``: a folder, where each stream's punctuation calls are written (pipeline.Recorder);
    ``clock``: the audio's arrival and the passes' start, for the recogniser's lag."""

    def __init__(
        self,
        model_name: str | None = None,
        device: str = "auto",
        options: RecognizerOptions | None = None,
        front_end: FrontEndOptions | None = None,
        record: Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.model_name, self.device = model_name, device
        self.options = options or RecognizerOptions()
        self.front_end = front_end or FrontEndOptions()
        self.record, self.clock = record, clock
        self.executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr")
        self.load = Load()  # the worker's, in audio seconds
        self._model: Any = None
        self._lock = asyncio.Lock()

    async def model(self) -> Any:
        """The speech model, loaded in the worker the first time."""
        async with self._lock:
            if self._model is None:
                from streampunct.speech import load_whisper

                loop = asyncio.get_running_loop()
                t0 = time.perf_counter()
                self._model = await loop.run_in_executor(
                    self.executor, load_whisper, self.model_name, self.device
                )
                log_event(
                    logging.INFO,
                    "asr_model_loaded",
                    model=self.model_name or "tiny.en",
                    seconds=round(time.perf_counter() - t0, 2),
                )
        return self._model

    def stop(self) -> None:
        self.executor.shutdown(wait=True)
