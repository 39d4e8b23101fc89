"""One session object per connection: it reads the client's messages, drives the sans-I/O cores
(a punctuation stream on the server's :class:`~.host.Host`; on ``/v1/asr``, a caption pipeline too)
and sends what they make. What a session needs of its server is a :class:`Context`. A bad message
gets an ``error`` message and changes nothing; an unexpected fault closes that connection alone
(1011), a stream the host lost ends with ``unavailable`` and ``end``."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from streampunct import StreamPunctError
from streampunct import protocol as P
from streampunct.options import Limits
from streampunct.pipeline import CaptionPipeline, Heard, Recorder
from streampunct.server.guard import Pace
from streampunct.server.host import Host, Recognition, StreamLost
from streampunct.server.logs import log, log_event
from streampunct.server.metrics import Metrics
from streampunct.speech import Hypothesis, StreamingRecognizer
from streampunct.stream import Call, Finish, Push, Revise, Tick
from streampunct.types import SAMPLE_RATE, PunctEvent, Word

T = TypeVar("T")


def _after(start: float, seconds: float | None) -> float:
    return math.inf if seconds is None else start + seconds


class RateLimited(StreamPunctError):
    """A client too far ahead of its rate limit to be slowed."""


@dataclass
class Context:
    """What a server's sessions share: the host of their streams, the limits, the metrics, the open
    sessions (by id), and the server's stop (set on SIGTERM, at ``stopped_at``)."""

    host: Host
    limits: Limits
    metrics: Metrics
    sessions: dict[str, Session]
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    stopped_at: float = math.inf


class Session:
    """The state of one connection: its configuration and its stream."""

    audio = False
    endpoint = "punct"  # its metrics' label
    INPUT = "words"  # what keeps a stream alive: ticks, and messages refused, do not
    DRAIN_QUIET_S = 1.0  # on shutdown: no message for this long, and the client has sent all it had

    def __init__(self, ctx: Context, connection: ServerConnection, session_id: str):
        self.ctx = ctx
        self.connection = connection
        self.id = session_id
        self.cfg: P.Config | None = None
        self.stream: Any = None  # a Stream, once configured
        self.words_in = 0
        self.started = math.inf  # when the config was taken
        self.last_input: float | None = None  # when words (audio) were last taken
        self.gone = asyncio.ensure_future(connection.wait_closed())  # the client has gone (run ends it)

    async def send(self, msg: P.Message) -> None:
        await self.connection.send(msg.to_json())

    async def send_events(self, events: list[PunctEvent]) -> None:
        """A call's events, then the sentences it closed (a stream opened with ``sentences``)."""
        if events:
            await self.send(P.Events(tuple(events)))
        for sentence in self.stream.take_sentences():
            await self.send(P.SentenceClosed(sentence))

    async def run(self) -> None:
        """Read and answer messages until the stream ends, a limit ends it, the server stops, or
        the client goes."""
        limits = self.ctx.limits
        stop = asyncio.ensure_future(self.ctx.stopping.wait())
        opened = time.monotonic()
        try:
            while True:
                now = time.monotonic()
                if self.cfg is None:
                    deadline = _after(opened, limits.config_timeout_s)
                else:
                    deadline = min(self.idle_deadline(), _after(self.started, limits.max_session_s))
                recv = asyncio.ensure_future(self.connection.recv())
                timeout = None if deadline == math.inf else max(0.0, deadline - now)
                done, _ = await asyncio.wait(
                    {recv, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                if recv not in done:
                    recv.cancel()  # safe: websockets keeps the message for the next recv()
                    if stop in done:
                        await self.shut_down()
                    else:
                        await self.time_out()
                    return
                if await self.take(recv.result()):
                    return
        finally:
            stop.cancel()
            self.gone.cancel()

    async def take(self, message: str | bytes) -> bool:
        """Answer one message; True once the stream has ended (the connection is closed), or its
        client has gone: that ends it however far behind its messages are (those waiting are
        dropped, an answer waiting on the rate limit or for room for audio is cut short). A config
        is answered whole: its stream opens."""
        if self.cfg is None:
            return await self.answer(message)
        return await self.unless_gone(self.answer(message)) is not False  # None: gone

    async def answer(self, message: str | bytes) -> bool:
        """Answer one message, the client gone or not; True once the stream has ended."""
        try:
            if self.cfg is None:
                await self.configure(P.Config.from_dict(P.parse(message), audio=self.audio))
                self.started = time.monotonic()
            elif await self.on_message(message):
                await self.connection.close()
                return True
        except RateLimited as e:
            await self.send(P.Error("rate_limited", str(e), self.words_taken()))
            await self.end(reason="rate limit")
            await self.connection.close(1008, "rate limit")
            return True
        except P.ProtocolError as e:
            await self.send(P.Error(e.code, str(e)))
        except StreamPunctError as e:  # e.g. revising final words: the stream is unchanged
            await self.send(P.Error("bad_input", str(e)))
        return False

    async def shut_down(self) -> None:
        """The server stops: take what the client had sent (the messages waiting, until none
        arrives for a moment, for the grace period at most: a live client never pauses), finish
        the stream, close with 1001."""
        cut_off = self.ctx.stopped_at + self.ctx.limits.shutdown_grace_s
        while (left := cut_off - time.monotonic()) > 0:
            try:
                message = await asyncio.wait_for(
                    self.connection.recv(), timeout=min(self.DRAIN_QUIET_S, left)
                )
            except TimeoutError:
                break
            if await self.take(message):
                return
        if self.cfg is not None:  # configured: it has a stream
            await self.end(reason="server shutting down")
        await self.connection.close(1001, "server shutting down")

    def words_taken(self) -> int:
        """The stream's words once all that was taken from the client is computed."""
        return self.stream.n_words

    def idle_deadline(self) -> float:
        """When a configured stream is finished for want of input: ``words_timeout_s`` after the
        config while it has taken none, ``idle_timeout_s`` after the last it took."""
        limits = self.ctx.limits
        if self.last_input is None:
            return _after(self.started, limits.words_timeout_s)
        return _after(self.last_input, limits.idle_timeout_s)

    async def time_out(self) -> None:
        """A limit of time ran out: no config yet, no input yet or for too long, or the stream is too long."""
        limits = self.ctx.limits
        if self.cfg is None:
            message = f"no config message within {limits.config_timeout_s:g} s of connecting"
            await self.send(P.Error("config_timeout", message))
            await self.connection.close(1008, "config timeout")
            return
        if time.monotonic() < self.idle_deadline():
            code, message = "session_too_long", f"a stream may last {limits.max_session_s:g} s at most"
        elif self.last_input is None:
            code, message = "words_timeout", f"no {self.INPUT} {limits.words_timeout_s:g} s after the config"
        else:
            code, message = "idle_timeout", f"no {self.INPUT} for {limits.idle_timeout_s:g} s"
        await self.send(P.Error(code, message + "; the stream is finished", self.words_taken()))
        await self.end(reason=code.replace("_", " "))
        await self.connection.close(1008, code.replace("_", " "))

    async def pace(self, amount: float, rate: Pace, unit: str) -> None:
        """Slow a client that sends faster than its limit; refuse one too far ahead (RateLimited)."""
        wait = rate.wait(amount)
        if wait > self.ctx.limits.max_wait_s:
            rate.give_back(amount)
            raise RateLimited(
                f"more than {rate.rate:g} {unit} a second (bursts of {rate.burst:g}): this message "
                f"was not taken; the stream is finished"
            )
        if wait:
            await asyncio.sleep(wait)

    async def unless_gone(self, awaitable: Coroutine[Any, Any, T]) -> T | None:
        """Await ``awaitable`` unless the client goes first (its connection closes): then it is
        cancelled (not started, if the client had gone), and None. A session whose client has gone
        computes nothing more for it."""
        task = asyncio.ensure_future(awaitable)
        try:
            if not self.gone.done():
                await asyncio.wait({task, self.gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not task.done():  # gone, or this wait was cancelled: the task goes too
                task.cancel()
                await asyncio.wait([task])
        return None if task.cancelled() else task.result()

    async def failed(self, what: str, who: str) -> None:
        """A task of this session (``what``) failed: logged and counted, the client told where the
        stream stopped, the connection closed (1011); other sessions go on."""
        final = self.stream.n_final
        log.exception(f"{what}_failed", extra={"fields": {"session": self.id, "word": final}})
        self.ctx.metrics.failed.labels(self.endpoint).inc()
        with contextlib.suppress(ConnectionClosed):
            message = f"{who} failed on this stream; it is closed (words before {final} are final)"
            await self.send(P.Error("internal", message, final))
            await self.connection.close(1011, "internal error")

    async def lost(self, error: StreamLost) -> None:
        """The host lost the stream's state (serve-ray: its encoder replica stopped): logged and
        counted, the client told where the stream stopped (``unavailable``), the stream ended there
        (``end``), the connection closed (1013: a new stream may be served)."""
        final = self.stream.n_final
        cause = type(error.__cause__).__name__
        log_event(logging.WARNING, "stream_lost", session=self.id, word=final, cause=cause)
        self.ctx.metrics.failed.labels(self.endpoint).inc()
        with contextlib.suppress(ConnectionClosed):
            message = f"{error}; words before {final} are final, the others are lost: open a new stream"
            await self.send(P.Error("unavailable", message, final))
            await self.send(P.Finished(final, reason="stream lost"))
            await self.connection.close(1013, "stream lost")

    async def configure(self, cfg: P.Config) -> None:
        raise NotImplementedError

    async def on_message(self, message: str | bytes) -> bool:
        """Handle one message after the config; True once the stream has ended."""
        raise NotImplementedError

    async def end(self, reason: str | None = None) -> None:
        raise NotImplementedError


class PunctSession(Session):
    """Words in, events out. The receive loop only takes the messages (paced, in a queue), so the
    socket is read and the keepalive answered however far behind the batcher is; a compute task of
    the session's own runs them in order, and answers a ``sync`` in its turn. A message that would
    take the words waiting past ``max_waiting_words`` is not taken: ``busy``, and the stream goes on."""

    def __init__(self, ctx: Context, connection: ServerConnection, session_id: str):
        super().__init__(ctx, connection, session_id)
        self.work: collections.deque[tuple[P.Message, int]] = collections.deque()  # taken; replies
        self.wake = asyncio.Event()  # work was queued
        self.done = asyncio.Event()  # no work waits
        self.waiting = 0  # words (a tick: one) taken and not computed yet
        self.taken = 0  # the stream's words once what waits is computed
        self.refused: int | None = None  # told busy: words are taken again from a revise at this index
        self.worker: asyncio.Task[None] | None = None

    async def configure(self, cfg: P.Config) -> None:
        self.stream = await self.ctx.host.open(cfg.lookahead, cfg.max_delay_ms, cfg.engine, cfg.sentences)
        limits = self.ctx.limits
        self.rate = Pace(limits.words_per_s, limits.words_burst)
        self.clock = -math.inf  # the recogniser's: the latest now or word time taken
        self.cfg = cfg
        await self.send(P.Ready.of(self.id, cfg, self.stream.engine, limits.max_waiting_words))
        self.worker = asyncio.create_task(self.compute(), name=f"punct-{self.id}")

    async def run(self) -> None:
        try:
            await super().run()
        finally:
            if self.worker is not None:  # a job under way runs to its end; its events are dropped
                self.worker.cancel()
                await asyncio.wait([self.worker])

    async def on_message(self, message: str | bytes) -> bool:
        try:
            msg = P.read_client(message)
        except P.ProtocolError:  # a bad message costs as a word does: a flood of them is slowed
            await self.pace(1, self.rate, "messages")
            raise
        match msg:
            case P.Words(words) | P.Revise(_, words):
                size = max(1, len(words))  # an empty message costs as a word does
                resent = isinstance(msg, P.Revise) and msg.index == self.refused
                full = self.waiting and self.waiting + size > self.ctx.limits.max_waiting_words
                if full or (self.refused is not None and not resent):
                    self.refused = self.taken
                    await super().send(P.Error("busy", self.busy_message(), self.taken))  # at once
                    return False
                self.refused = None
                await self.pace(size, self.rate, "words")
                if isinstance(msg, P.Revise):
                    self.taken = min(self.taken, msg.index) + len(words)
                else:
                    self.taken += len(words)
                    self.words_in += len(words)
                if words:
                    self.last_input = time.monotonic()
                self.took(words, msg.now)
            case P.Tick(now):
                await self.pace(1, self.rate, "messages")
                self.forward(now)
                self.clock = now
                last = self.work[-1][0] if self.work else None
                if isinstance(last, P.Tick) and last.now <= now:  # the later clock says it all
                    self.work[-1] = (msg, 1)
                    return False
                size = 1
            case P.Sync():  # answered by the compute task, after the work before it
                await self.pace(1, self.rate, "messages")
                size = 0
            case P.End():
                await self.end()
                return True
        self.waiting += size
        self.queue(msg, size)
        return False

    def queue(self, msg: P.Message, size: int) -> None:
        self.work.append((msg, size))
        self.done.clear()
        self.wake.set()

    async def send(self, msg: P.Message) -> None:
        """Replies go in the order of the messages: one to a message that came after work still
        waiting (an error, say) goes behind that work, unless the compute task sends it."""
        if (self.waiting or self.work) and asyncio.current_task() is not self.worker:
            self.queue(msg, 0)
        else:
            await super().send(msg)

    def words_taken(self) -> int:
        return self.taken

    def busy_message(self) -> str:
        return (
            f"the server is behind: {self.waiting} words of this stream wait to be computed (at most "
            f"{self.ctx.limits.max_waiting_words}); this message was not taken: resend from word "
            f"{self.taken} as a revise at that index once more words are final"
        )

    async def compute(self) -> None:
        """The compute task: each message taken, in order. Words messages that wait one after another
        are pushed together, as one message would be (its ``now`` the latest): a stream's final
        labels do not depend on when the clock was told (``Lookahead.ahead``), and a stream that
        sends many small messages gets one job a batch, not one a message. A fault closes this
        connection alone; a lost stream ends the session (:meth:`lost`)."""
        host = self.ctx.host
        try:
            while True:
                while not self.work:
                    self.done.set()
                    self.wake.clear()
                    await self.wake.wait()
                msg, size = self.work.popleft()
                while isinstance(msg, P.Words) and self.work and isinstance(more := self.work[0][0], P.Words):
                    size += self.work.popleft()[1]
                    nows = [t for t in (msg.now, more.now) if t is not None]
                    msg = P.Words(msg.words + more.words, max(nows, default=None))
                try:
                    match msg:
                        case P.Words(words, now):
                            await self.send_events(await host.run(self.stream, Push(words, now)))
                        case P.Revise(index, words, now):
                            await self.send_events(await host.run(self.stream, Revise(index, words, now)))
                        case P.Tick(now):
                            await self.send_events(await host.run(self.stream, Tick(now)))
                        case P.Sync(ident):
                            await self.send(P.Synced(ident, self.stream.n_words, self.stream.n_final))
                        case _:  # a reply, queued behind the work before it
                            await self.send(msg)
                except StreamLost as e:
                    await self.lost(e)
                    return
                except StreamPunctError as e:  # e.g. revising final words: the stream is unchanged
                    self.taken = self.stream.n_words + self.waiting - size  # what the queue adds
                    await self.send(P.Error("bad_input", str(e)))
                finally:
                    self.waiting -= size
        except ConnectionClosed:
            pass  # the receive loop sees it too
        except Exception:
            await self.failed("session", "the server")

    def took(self, words: tuple[Word, ...], now: float | None) -> None:
        """The stream took these words (a revision's too): its clock has reached their times and ``now``."""
        self.clock = max([self.clock, *(t for t in (now, *(w.time for w in words)) if t is not None)])

    def forward(self, now: float) -> None:
        """A tick: the recogniser's clock runs forward; one behind the stream's is refused."""
        if now < self.clock:
            raise P.ProtocolError(
                "bad_input",
                f"a tick at {now:g} s is behind the stream's clock, {self.clock:g} s (its latest now or "
                "word time): the recogniser's clock runs forward",
            )

    async def end(self, reason: str | None = None) -> None:
        """Compute the messages taken, then finish the stream; a client that has gone meanwhile
        (it sent ``end`` and hung up) has its work dropped at once (``run`` stops the compute task)."""
        await self.unless_gone(self._end(reason))

    async def _end(self, reason: str | None) -> None:
        if self.worker is not None and not self.worker.done():
            done = asyncio.ensure_future(self.done.wait())
            try:
                await asyncio.wait({done, self.worker}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                done.cancel()
        if self.worker is not None and self.worker.done():  # it failed, and closed the connection
            await self.connection.wait_closed()
            return
        try:
            events = await self.ctx.host.run(self.stream, Finish())
        except StreamLost as e:
            await self.lost(e)
            return
        await self.send_events(events)
        await self.send(P.Finished(self.stream.n_words, reason=reason))


class AsrSession(Session):
    """Audio in; words, events, captions out, through a :class:`~streampunct.pipeline.CaptionPipeline`.
    The receive loop only hands the audio to the pipeline, so the socket is read and the keepalive
    answered however slow recognition is; a recognition task of the session's own runs a pass in
    the ASR worker whenever enough audio waits. When it falls behind real time, the recogniser
    skips to recent audio (streampunct.speech.recognizer's catch-up policy) and the client gets a ``lag``
    message; the connection stays open. What recognition finds is punctuated by a third task, in
    order, so that reading the socket never waits on the batcher, and recognition only once two
    passes' words wait for it (else captions would fall minutes behind an overloaded batcher). The
    sessions share the one ASR worker in turns: each has at most one pass queued there."""

    audio = True
    endpoint = "asr"
    INPUT = "audio"

    # Audio waiting for recognition, at most (float32: 3.8 MB a minute): a stream's 300 s (19 MB);
    # past SERVER_WAITING_S of every stream's together (115 MB), a stream holding more than FAIR_S.
    # Beyond, the session stops reading its socket until recognition catches up (the sender is
    # slowed by TCP; its keepalive is not judged meanwhile: its pongs wait behind its audio).
    MAX_WAITING_S = 300.0
    SERVER_WAITING_S = 1800.0
    FAIR_S = 30.0

    def __init__(self, ctx: Context, recognition: Recognition, connection: ServerConnection, session_id: str):
        super().__init__(ctx, connection, session_id)
        self.speech = recognition  # the server's speech recognition worker
        self.wake = asyncio.Event()  # audio arrived, or the stream ends
        self.progress = asyncio.Event()  # a pass ended, or the recognition task did
        self.ending = False  # no more audio: recognise what waits, then stop
        self.listening = False  # the recognition task waits for audio: all it was given is recognised
        self.recognition: asyncio.Task[None] | None = None
        self.outbox: collections.deque[Heard | list[Call]] = collections.deque()  # to punctuate, in order
        self.posted = asyncio.Event()  # something was put in the outbox
        self.settled = asyncio.Event()  # the outbox is empty and nothing is being punctuated
        self.settled.set()
        self.punctuation: asyncio.Task[None] | None = None
        self.recorder: Recorder | None = None

    async def configure(self, cfg: P.Config) -> None:
        speech = self.speech
        recognizer = StreamingRecognizer(await speech.model(), speech.options)
        self.pipeline = CaptionPipeline(recognizer, speech.front_end)
        self.stream = await self.ctx.host.open(cfg.lookahead, cfg.max_delay_ms, cfg.engine, cfg.sentences)
        if speech.record is not None:
            path = speech.record / f"{self.id}.jsonl"
            self.recorder = Recorder(path, cfg.lookahead, cfg.max_delay_ms, self.stream.engine)
        limits = self.ctx.limits
        self.rate = Pace(limits.audio_speed, limits.audio_burst_s)
        self.cfg = cfg
        await self.send(P.Ready.of(self.id, cfg, self.stream.engine))
        self.recognition = asyncio.create_task(self.recognise(), name=f"asr-{self.id}")
        self.punctuation = asyncio.create_task(self.punctuate(), name=f"asr-punct-{self.id}")

    async def run(self) -> None:
        try:
            await super().run()
        finally:
            await self.stop_recognition()
            if self.recorder is not None:
                self.recorder.close()

    async def on_message(self, message: str | bytes) -> bool:
        if isinstance(message, bytes):
            if len(message) % 2:
                raise P.ProtocolError("bad_audio", "audio must be 16-bit PCM: an even number of bytes")
            audio = np.frombuffer(message, dtype="<i2").astype(np.float32) / 32768.0
            await self.pace(len(audio) / SAMPLE_RATE, self.rate, "audio seconds")
            if len(audio):
                self.last_input = time.monotonic()
            calls = self.pipeline.feed(audio, self.speech.clock())
            self.listening = False
            self.wake.set()
            self.post(calls)
            await self.make_room()
            return False
        P.read_client(message, audio=True)  # an end: the only text message after the config
        await self.end()
        return True

    async def make_room(self) -> None:
        """Back-pressure for a sender far ahead of real time (a file sent as fast as possible):
        wait while more than MAX_WAITING_S of audio waits. A live stream does not get here: the
        recogniser skips to recent audio long before (streampunct.speech.recognizer, ``max_lag_s``)."""
        timeout = getattr(self.connection, "ping_timeout", None)
        try:
            while self.too_much_waiting() and self.recognition and not self.recognition.done():
                if timeout is not None:
                    self.connection.ping_timeout = None
                self.progress.clear()
                await self.progress.wait()
        finally:
            if timeout is not None:
                self.connection.ping_timeout = timeout

    def too_much_waiting(self) -> bool:
        """This stream's audio waiting is past its bound, or every stream's is past the server's
        and this one holds more than its fair part."""
        mine = self.pipeline.waiting / SAMPLE_RATE
        if mine > self.MAX_WAITING_S:
            return True
        if mine <= self.FAIR_S:
            return False
        everyone = sum(
            s.pipeline.waiting for s in self.ctx.sessions.values() if isinstance(s, AsrSession) and s.cfg
        )
        return everyone / SAMPLE_RATE > self.SERVER_WAITING_S

    def process(self) -> Hypothesis:
        """One pass, in the ASR worker: the clock is read when the pass starts, not when queued."""
        self.speech.load.start()
        hyp = None
        try:
            hyp = self.pipeline.recognise(now=self.speech.clock())
            return hyp
        finally:
            self.speech.load.stop(hyp.pass_.new_s if hyp is not None and hyp.pass_ is not None else 0.0)

    async def recognise(self) -> None:
        """The recognition task: a pass whenever enough audio waits; after ``end``, until less than
        a pass waits. Its faults close this connection alone (1011)."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                if len(self.outbox) > 1:  # punctuation is behind: no pass before it catches up
                    await self.settled.wait()  # (the recogniser then skips what is too late to caption)
                if not self.pipeline.ready():
                    if self.ending:
                        return
                    self.listening = True
                    self.wake.clear()
                    await self.wake.wait()
                    continue
                caught_up = self.pipeline.catch_up(now=self.speech.clock())  # told at once, not after a pass
                if caught_up is not None:
                    self.post(caught_up)
                hyp = await loop.run_in_executor(self.speech.executor, self.process)
                self.progress.set()
                self.post(self.pipeline.heard(hyp))
        except Exception:
            await self.failed("recognition", "speech recognition")
        finally:
            self.progress.set()

    def post(self, item: Heard | list[Call]) -> None:
        """What recognition found, or the calls audio made (a tick in silence), to punctuate in
        order; a tick after a tick replaces it (the later clock says it all)."""
        last = self.outbox[-1] if self.outbox else None
        if isinstance(item, list) and not item:
            return
        if isinstance(item, list) and isinstance(last, list) and _ticks(item) and _ticks(last):
            self.outbox[-1] = item
        else:
            self.outbox.append(item)
        self.settled.clear()
        self.posted.set()

    async def punctuate(self) -> None:
        """The punctuation task: what was posted, in order, through the batcher; its events, the
        words and the captions sent. Its faults close this connection alone (1011)."""
        try:
            while True:
                while not self.outbox:
                    self.settled.set()
                    self.posted.clear()
                    await self.posted.wait()
                item = self.outbox.popleft()
                if isinstance(item, Heard):
                    await self.report(item)
                else:
                    await self.run_calls(item)
        except ConnectionClosed:
            pass  # the receive loop sees it too
        except StreamLost as e:
            await self.lost(e)
        except Exception:
            await self.failed("punctuation", "punctuation")
        finally:
            self.settled.set()

    async def stop_recognition(self) -> None:
        """However the session ends, its recognition and punctuation tasks end with it; a pass
        already under way in the worker runs to its end and its result is dropped."""
        for task in (self.recognition, self.punctuation):
            if task is None:
                continue
            if not task.done():
                task.cancel()
            await asyncio.wait([task])
            if not task.cancelled():
                task.exception()  # retrieved: the task reports its own faults

    async def report(self, heard: Heard) -> None:
        """Send what a pass (or a catch-up, or the end) found: the skip first, then the words with
        the events their push made, then what the pipeline's other calls make."""
        if heard.skipped is not None:
            skip = heard.skipped
            log_event(
                logging.WARNING,
                "asr_lag",
                session=self.id,
                skipped_s=round(skip.seconds, 3),
                start=round(skip.start, 3),
                end=round(skip.end, 3),
            )
            self.ctx.metrics.skipped.inc(skip.seconds)
            await self.send(P.Lag.over(skip.start, skip.end, self.compute_ratio()))
        p = heard.hypothesis.pass_
        if p is not None and p.guard is not None:
            self.ctx.metrics.guarded.labels(p.guard).inc()
            log_event(
                logging.WARNING, "asr_guard", session=self.id, guard=p.guard, buffer_s=round(p.buffer_s, 3)
            )
        if p is not None and log.isEnabledFor(logging.DEBUG):
            log_event(
                logging.DEBUG,
                "asr_pass",
                session=self.id,
                t=round(time.monotonic(), 4),
                seconds=round(p.seconds, 4),
                buffer_s=round(p.buffer_s, 3),
                new_s=round(p.new_s, 3),
                rtf=round(p.real_time_factor, 3),
                committed=len(heard.committed),
                provisional=len(heard.provisional),
                end_of_speech=p.end_of_speech,
            )
        self.words_in += len(heard.committed)
        await self.run_calls(heard.calls, heard)

    def compute_ratio(self) -> float | None:
        """The stream's recognition seconds per audio second, lately (StreamingRecognizer.compute_ratio)."""
        ratio = self.pipeline.recognizer.compute_ratio
        return None if ratio is None else round(ratio, 3)

    async def run_calls(self, calls: tuple[Call, ...] | list[Call], heard: Heard | None = None) -> None:
        """The pipeline's calls through the batcher, each one's events sent (with the recognised
        words after their push's) and handed back to the pipeline for captions."""
        for call in calls:
            if self.recorder is not None:
                self.recorder.add(call, self.pipeline.received / SAMPLE_RATE)
            events = await self.ctx.host.run(self.stream, call)
            if isinstance(call, Push) and heard is not None and (heard.committed or heard.provisional):
                ratio = self.compute_ratio()
                await self.send(P.Recognised(heard.first, heard.committed, heard.provisional, ratio))
            await self.send_events(events)
            for caption in self.pipeline.punctuated(events, call):
                await self.send(P.Captioned(caption))

    async def end(self, reason: str | None = None) -> None:
        """Recognise the audio that waits (the recognition task's last passes), punctuate it, then
        finish; a client that has gone meanwhile stops it at once (``run`` stops the tasks)."""
        await self.unless_gone(self._end(reason))

    async def _end(self, reason: str | None) -> None:
        loop = asyncio.get_running_loop()
        self.ending = True
        self.wake.set()
        if self.recognition is not None:
            await self.recognition
        self.post(await loop.run_in_executor(self.speech.executor, self.pipeline.finish))
        await self.settled.wait()
        if self.punctuation is not None and self.punctuation.done():  # it failed, and closed the connection
            return
        duration = round(self.pipeline.recognizer.duration, 3)
        await self.send(P.Finished(self.stream.n_words, duration, reason))


def _ticks(calls: list[Call]) -> bool:
    return all(isinstance(c, Tick) for c in calls)
