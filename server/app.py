"""``streampunct serve``: the websocket server. It only drives the sans-I/O cores.

- ``/v1/punct``: word hypotheses from any recogniser in, punctuation events out.
- ``/v1/asr``: 16 kHz PCM16 audio in; recognised words, punctuation events and caption lines out.
- ``/health``: plain HTTP, JSON status. ``/``: the browser caption page.

Per-connection state lives in one session object per connection; all punctuation work goes through
one :class:`~streampunct.scheduler.Batcher` (many streams, one forward pass), and speech
recognition through one worker thread. A bad message gets an ``error`` message and changes
nothing; an unexpected fault closes that connection alone (1011). On SIGINT or SIGTERM the server
stops accepting streams, finishes the open ones (every word final, ``end`` sent), then exits.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import concurrent.futures
import contextlib
import dataclasses
import functools
import hashlib
import itertools
import json
import logging
import math
import os
import re
import secrets
import signal
import ssl
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from server.guard import LOOPBACK_HOSTS, STREAMS_PER_CLIENT, Access, Limits, Pace, is_loopback
from streampunct import Punctuator, StreamPunctError
from streampunct import protocol as P
from streampunct.asr import SENTENCE_ENDS, Hypothesis, StreamingRecognizer, is_silence
from streampunct.captions import Captioner
from streampunct.flags import add_config_flags, config_from_flags, number_or_off
from streampunct.scheduler import LOAD_WINDOW_S, Batcher, Load
from streampunct.types import SAMPLE_RATE, PunctEvent, Word

PAGE = Path(__file__).parent / "page" / "index.html"

# The live front end's settings (docs/latency.md measures them): a pass once half a second of new
# audio waits and the last pass has ended, on an encoder window of the buffer and 12 s (not 30 s);
# commits when two passes agree (LocalAgreement-2), once a second of audio follows a word, and at
# the end of speech; the provisional words serve as lookahead (final marks 0.36 s sooner on the long
# stream, for 2.4 points of punctuation F1).
ASR_DEFAULTS: dict[str, Any] = {
    "min_chunk_s": 0.5,
    "max_buffer_s": 25.0,
    "confident": None,
    "end_of_speech_s": 0.5,
    "settle_after_s": 1.0,
    "settle_unsure_after_s": 2.0,
    "encoder_pad_s": 12.0,
    "context_s": None,
    "agree_after_s": 0.3,
    "beam_size": 1,
    "prompt": "off",
    "provisional_lookahead": "on",
    "pause_clock": "on",
    "sentence_ends": "whisper",
}
log = logging.getLogger("streampunct.server")


class JsonFormatter(logging.Formatter):
    """Structured logs: one JSON object a line."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        entry.update(getattr(record, "fields", {}))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def _log(level: int, event: str, **fields: Any) -> None:
    log.log(level, event, extra={"fields": fields})


class App:
    def __init__(
        self,
        punctuator: Punctuator,
        *,
        access: Access | None = None,
        limits: Limits | None = None,
        secure: bool = False,
        asr_model: str | None = None,
        asr_device: str = "auto",
        asr_options: dict[str, Any] | None = None,
        provisional_lookahead: bool = False,
        pause_clock: bool = False,
    ):
        self.punctuator = punctuator
        self.access = access or Access()
        self.limits = limits or Limits()
        self.secure = secure  # TLS: the page's own origin is https://
        self.asr_model_name = asr_model
        self.asr_device = asr_device
        self.asr_options = asr_options or {}  # StreamingRecognizer's commit settings
        # the recogniser's provisional words as lookahead for the committed ones (never final)
        self.provisional_lookahead = provisional_lookahead
        # in a pause where every word heard is committed, silent chunks move the punctuation clock
        self.pause_clock = pause_clock
        self.batcher = Batcher()
        self.asr_executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr")
        self.asr_load = Load()  # the recognition worker's, in audio seconds
        self._whisper: Any = None
        self._whisper_lock = asyncio.Lock()
        self.active = 0
        self.streams_of: Counter[str | None] = Counter()  # open streams by client address
        self.stopped_at = math.inf  # when SIGTERM (or SIGINT) came
        self.stopping = asyncio.Event()
        self._ids = itertools.count(1)
        self.url = ""  # where it listens, once it does

    async def whisper(self) -> Any:
        async with self._whisper_lock:
            if self._whisper is None:
                from streampunct.asr import load_whisper

                loop = asyncio.get_running_loop()
                t0 = time.perf_counter()
                self._whisper = await loop.run_in_executor(
                    self.asr_executor, load_whisper, self.asr_model_name, self.asr_device
                )
                _log(
                    logging.INFO,
                    "asr_model_loaded",
                    model=self.asr_model_name or "tiny.en",
                    seconds=round(time.perf_counter() - t0, 2),
                )
        return self._whisper

    # --- HTTP ------------------------------------------------------------------------------

    async def health(self) -> Response:
        """``ok``, ``stopping``, or ``failing`` (HTTP 503): after a batch of streams failed as a
        whole (e.g. out of memory), a probe stream must get through the batcher again."""
        body: dict[str, Any] = {"status": "ok", "streams": self.active, "protocol": P.VERSION}
        # how busy each worker is and what it gets done (what a load balancer weighs; new streams
        # are refused past --max-load): the share of the last 5 s it computed, and units a second
        # of computing (None until it has computed)
        for name, load in (("punctuation", self.batcher.load), ("recognition", self.asr_load)):
            capacity = load.capacity()
            body[name] = {"load": round(load.busy(), 3), "capacity": capacity and round(capacity, 1)}
        if self.stopping.is_set():
            body["status"] = "stopping"
        elif self.batcher.faults:
            try:
                probe = self.punctuator.stream(lookahead=1)
                await asyncio.wait_for(self.batcher.push(probe, ["is", "it", "working"]), 10)
                await asyncio.wait_for(self.batcher.finish(probe), 10)
            except Exception as e:
                body.update(status="failing", error=self.batcher.last_fault or f"{type(e).__name__}: {e}")
                return _json_response(HTTPStatus.SERVICE_UNAVAILABLE, body)
        return _json_response(HTTPStatus.OK, body)

    async def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        path = urlparse(request.path).path
        stream = path in ("/v1/punct", "/v1/asr")
        refusal = self.access.refuse(request, self.secure, connection.local_address[1], stream)
        if refusal is not None:
            _log(
                logging.WARNING,
                "refused",
                code=refusal.code,
                host=", ".join(request.headers.get_all("Host"))[:100],
                origin=", ".join(request.headers.get_all("Origin"))[:100],
            )
            response = _json_response(refusal.status, P.Error(refusal.code, refusal.message))
            if refusal.status == HTTPStatus.UNAUTHORIZED:
                response.headers["WWW-Authenticate"] = 'Bearer realm="streampunct"'
            return response
        if path == "/health":
            return await self.health()
        if path in ("/", "/index.html"):
            return page_response()
        if not stream:
            return _json_response(
                HTTPStatus.NOT_FOUND,
                P.Error("not_found", f"no endpoint {path}; try /v1/punct, /v1/asr or /health"),
            )
        if self.stopping.is_set():
            return _json_response(
                HTTPStatus.SERVICE_UNAVAILABLE, P.Error("shutting_down", "the server is shutting down")
            )
        if self.active >= self.limits.max_streams:
            return _json_response(
                HTTPStatus.SERVICE_UNAVAILABLE,
                P.Error(
                    "too_many_streams", f"the server is at its limit of {self.limits.max_streams} streams"
                ),
            )
        if (full := self.client_full(_peer(connection))) is not None:
            return _json_response(HTTPStatus.TOO_MANY_REQUESTS, full)
        if (busy := self.busy(path)) is not None:
            response = _json_response(HTTPStatus.SERVICE_UNAVAILABLE, busy)
            response.headers["Retry-After"] = str(math.ceil(LOAD_WINDOW_S))
            return response
        return None

    def busy(self, path: str) -> P.Error | None:
        """Why the server takes no new stream on ``path`` now (its worker is past ``max_load``), or
        None: a new stream would slow every open one past its bounds."""
        most = self.limits.max_load
        loads = [("punctuation", self.batcher.load, "words")]
        if path == "/v1/asr":
            loads.append(("speech recognition", self.asr_load, "audio seconds"))
        for what, load, unit in loads:
            if most is not None and (busy := load.busy()) >= most:
                capacity = load.capacity()
                about = f" (about {capacity:.0f} {unit} a second)" if capacity else ""
                _log(logging.WARNING, "busy", worker=what, load=round(busy, 3), capacity=capacity)
                message = f"the server's {what} is at {busy:.0%} of its capacity{about}: try again later"
                return P.Error("busy", message)
        return None

    def client_full(self, peer: str | None) -> P.Error | None:
        """Why a client address may open no more streams (it holds its limit), or None."""
        most = self.limits.max_streams_per_client
        if most is None or self.streams_of[peer] < most:
            return None
        message = f"a client may hold {most:g} streams at once: close one first"
        return P.Error("too_many_client_streams", message)

    # --- websockets ------------------------------------------------------------------------

    async def handler(self, connection: ServerConnection) -> None:
        path = urlparse(connection.request.path).path if connection.request else ""
        session_id = f"{next(self._ids):06d}"
        peer = _peer(connection)
        if (full := self.client_full(peer)) is not None:  # its handshakes passed process_request together
            await connection.send(full.to_json())
            await connection.close(1013, "too many streams")
            return
        self.active += 1
        if self.active > self.limits.max_streams:  # handshakes that passed process_request together
            self.active -= 1
            message = f"the server is at its limit of {self.limits.max_streams} streams"
            await connection.send(P.Error("too_many_streams", message).to_json())
            await connection.close(1013, "too many streams")
            return
        self.streams_of[peer] += 1
        _log(logging.INFO, "connect", session=session_id, path=path, peer=peer)
        session: Session = (
            PunctSession(self, connection, session_id)
            if path == "/v1/punct"
            else AsrSession(self, connection, session_id)
        )
        try:
            await session.run()
        except ConnectionClosed as e:
            _log(logging.INFO, "connection_closed", session=session_id, code=e.rcvd.code if e.rcvd else None)
        except Exception:
            stopped = session.stream.n_final if session.stream is not None else None
            log.exception("session_failed", extra={"fields": {"session": session_id, "word": stopped}})
            try:
                message = "the server failed on this stream; it is closed"
                if stopped is not None:
                    message += f" (words before {stopped} are final)"
                await connection.send(P.Error("internal", message, stopped).to_json())
                await connection.close(1011, "internal error")
            except ConnectionClosed:
                pass
        finally:
            self.active -= 1
            self.streams_of[peer] -= 1
            if not self.streams_of[peer]:
                del self.streams_of[peer]
            _log(logging.INFO, "disconnect", session=session_id, words=session.words_in)


def _peer(connection: ServerConnection) -> str | None:
    """The client's address."""
    return connection.remote_address[0] if connection.remote_address else None


def _json_response(status: HTTPStatus, payload: dict[str, Any] | P.Message) -> Response:
    body = (payload.to_json() if isinstance(payload, P.Message) else json.dumps(payload)).encode()
    return Response(status.value, status.phrase, Headers({"Content-Type": "application/json"}), body)


def page_response() -> Response:
    """The caption page, with its headers (a fresh copy: websockets adds ``Server`` to them)."""
    headers, html = _page()
    return Response(200, "OK", Headers(headers), html)


@functools.cache
def _page() -> tuple[dict[str, str], bytes]:
    """The caption page, with a Content-Security-Policy that admits its own inline script and style
    (by hash) and nothing else: no other scripts, no framing, connections to this server only."""
    html = PAGE.read_bytes()
    digests = {
        kind: " ".join(
            f"'sha256-{base64.b64encode(hashlib.sha256(m).digest()).decode()}'"
            for m in re.findall(rb"<%s>(.*?)</%s>" % (kind, kind), html, re.S)
        )
        for kind in (b"script", b"style")
    }
    csp = (
        f"default-src 'none'; script-src {digests[b'script']}; style-src {digests[b'style']}; "
        "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    headers = {
        "Content-Type": "text/html; charset=utf-8",
        "Content-Security-Policy": csp,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Permissions-Policy": "microphone=(self)",
    }
    return headers, html


def _after(start: float, seconds: float | None) -> float:
    return math.inf if seconds is None else start + seconds


class RateLimited(StreamPunctError):
    """A client too far ahead of its rate limit to be slowed."""


class Session:
    """The state of one connection: its configuration and its stream."""

    audio = False
    INPUT = "words"  # what keeps a stream alive: ticks, and messages refused, do not
    DRAIN_QUIET_S = 1.0  # on shutdown: no message for this long, and the client has sent all it had

    def __init__(self, app: App, connection: ServerConnection, session_id: str):
        self.app = app
        self.connection = connection
        self.id = session_id
        self.cfg: P.Config | None = None
        self.stream: Any = None
        self.words_in = 0
        self.started = math.inf  # when the config was taken
        self.last_input: float | None = None  # when words (audio) were last taken

    async def send(self, msg: P.Message) -> None:
        await self.connection.send(msg.to_json())

    async def send_events(self, events: list[PunctEvent]) -> None:
        if events:
            await self.send(P.Events(tuple(events)))

    async def run(self) -> None:
        """Read and answer messages until the stream ends, a limit ends it, or the server stops."""
        limits = self.app.limits
        stop = asyncio.ensure_future(self.app.stopping.wait())
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

    async def take(self, message: str | bytes) -> bool:
        """Answer one message; True once the stream has ended (the connection is closed)."""
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
        cut_off = self.app.stopped_at + self.app.limits.shutdown_grace_s
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
        limits = self.app.limits
        if self.last_input is None:
            return _after(self.started, limits.words_timeout_s)
        return _after(self.last_input, limits.idle_timeout_s)

    async def time_out(self) -> None:
        """A limit of time ran out: no config yet, no input yet or for too long, or the stream is too long."""
        limits = self.app.limits
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
        if wait > self.app.limits.max_wait_s:
            rate.give_back(amount)
            raise RateLimited(
                f"more than {rate.rate:g} {unit} a second (bursts of {rate.burst:g}): this message "
                f"was not taken; the stream is finished"
            )
        if wait:
            await asyncio.sleep(wait)

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
    the session's own runs them in order. A message that would take the words waiting past
    ``max_waiting_words`` is not taken: ``busy``, and the stream goes on."""

    def __init__(self, app: App, connection: ServerConnection, session_id: str):
        super().__init__(app, connection, session_id)
        self.work: collections.deque[tuple[P.Message, int]] = collections.deque()  # taken; replies
        self.wake = asyncio.Event()  # work was queued
        self.done = asyncio.Event()  # no work waits
        self.waiting = 0  # words (a tick: one) taken and not computed yet
        self.taken = 0  # the stream's words once what waits is computed
        self.refused: int | None = None  # told busy: words are taken again from a revise at this index
        self.worker: asyncio.Task[None] | None = None

    async def configure(self, cfg: P.Config) -> None:
        self.stream = self.app.punctuator.stream(cfg.lookahead, cfg.max_delay_ms, cfg.engine)
        limits = self.app.limits
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
        msg = P.read_client(message)
        match msg:
            case P.Words(words) | P.Revise(_, words):
                size = max(1, len(words))
                resent = isinstance(msg, P.Revise) and msg.index == self.refused
                full = self.waiting and self.waiting + size > self.app.limits.max_waiting_words
                if full or (self.refused is not None and not resent):
                    self.refused = self.taken
                    await super().send(P.Error("busy", self.busy_message(), self.taken))  # at once
                    return False
                self.refused = None
                await self.pace(len(words), self.rate, "words")
                if isinstance(msg, P.Revise):
                    self.taken = min(self.taken, msg.index) + len(words)
                else:
                    self.taken += len(words)
                    self.words_in += len(words)
                if words:
                    self.last_input = time.monotonic()
            case P.Tick():
                size = 1
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
            f"{self.app.limits.max_waiting_words}); this message was not taken: resend from word "
            f"{self.taken} as a revise at that index once more words are final"
        )

    async def compute(self) -> None:
        """The compute task: each message taken, in order. Words messages that wait one after another
        are pushed together, as one message would be (its ``now`` the latest): a stream's final
        labels do not depend on when the clock was told (``Lookahead.ahead``), and a stream that
        sends many small messages gets one job a batch, not one a message. A fault closes this
        connection alone."""
        batcher = self.app.batcher
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
                            await self.send_events(await batcher.push(self.stream, list(words), now=now))
                            self.took(words, now)
                        case P.Revise(index, words, now):
                            await self.send_events(
                                await batcher.revise(self.stream, index, list(words), now=now)
                            )
                            self.took(words, now)
                        case P.Tick(now):
                            self.forward(now)
                            await self.send_events(await batcher.tick(self.stream, now))
                            self.clock = now
                        case _:  # a reply, queued behind the work before it
                            await self.send(msg)
                except StreamPunctError as e:  # e.g. revising final words: the stream is unchanged
                    self.taken = self.stream.n_words + self.waiting - size  # what the queue adds
                    await self.send(P.Error("bad_input", str(e)))
                finally:
                    self.waiting -= size
        except ConnectionClosed:
            pass  # the receive loop sees it too
        except Exception:
            final = self.stream.n_final
            log.exception("session_failed", extra={"fields": {"session": self.id, "word": final}})
            with contextlib.suppress(ConnectionClosed):
                message = f"the server failed on this stream; it is closed (words before {final} are final)"
                await self.send(P.Error("internal", message, final))
                await self.connection.close(1011, "internal error")

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
        """Compute the messages taken, then finish the stream."""
        if self.worker is not None and not self.worker.done():
            done = asyncio.ensure_future(self.done.wait())
            await asyncio.wait({done, self.worker}, return_when=asyncio.FIRST_COMPLETED)
            done.cancel()
        if self.worker is not None and self.worker.done():  # it failed, and closed the connection
            await self.connection.wait_closed()
            return
        await self.send_events(await self.app.batcher.finish(self.stream))
        await self.send(P.Finished(self.stream.n_words, reason=reason))


class AsrSession(Session):
    """Audio in; words, events, captions out. The receive loop only queues the audio, so the socket
    is read and the keepalive answered however slow recognition is; a recognition task of the
    session's own runs a pass in the ASR worker whenever enough audio waits. When it falls behind
    real time, the recogniser skips to recent audio (streampunct.asr's catch-up policy) and the
    client gets a ``lag`` message; the connection stays open."""

    audio = True
    INPUT = "audio"

    # Audio waiting beyond this (a sender an hour ahead of recognition): stop reading. Not sooner:
    # a connection that is not read cannot answer its keepalive, and a file sent at full speed
    # (an hour: 230 MB as float32) must not lose its session.
    MAX_WAITING_S = 3600.0

    def __init__(self, app: App, connection: ServerConnection, session_id: str):
        super().__init__(app, connection, session_id)
        self.inbox: list[tuple[np.ndarray, float]] = []  # audio not fed yet, with its arrival time
        self.inbox_samples = 0
        self.backlog = 0  # samples waiting in the recogniser, as of its last pass
        self.wake = asyncio.Event()  # audio arrived, or the stream ends
        self.progress = asyncio.Event()  # a pass ended, or the recognition task did
        self.ending = False  # no more audio: recognise what waits, then stop
        self.received = 0  # samples received: the stream time of the audio's end
        # Stream time up to which no word waits uncommitted (the last pass committed all it heard,
        # and the VAD heard no speech in the audio since): the punctuation stream's clock runs
        # with each silent chunk, so time limits fire on time in a pause. None: speech may wait.
        # Part of deciding at pauses: on with the server's pause_clock.
        self.quiet_until: float | None = None
        self.recognition: asyncio.Task[None] | None = None

    async def configure(self, cfg: P.Config) -> None:
        self.recognizer = StreamingRecognizer(await self.app.whisper(), **self.app.asr_options)
        self.stream = self.app.punctuator.stream(cfg.lookahead, cfg.max_delay_ms, cfg.engine)
        self.captioner = Captioner()
        self.ends: dict[int, float] = {}  # word end times of words not final yet
        limits = self.app.limits
        self.rate = Pace(limits.audio_speed, limits.audio_burst_s)
        self.cfg = cfg
        await self.send(P.Ready.of(self.id, cfg, self.stream.engine))
        self.recognition = asyncio.create_task(self.recognise(), name=f"asr-{self.id}")

    async def run(self) -> None:
        try:
            await super().run()
        finally:
            await self.stop_recognition()

    async def on_message(self, message: str | bytes) -> bool:
        if isinstance(message, bytes):
            if len(message) % 2:
                raise P.ProtocolError("bad_audio", "audio must be 16-bit PCM: an even number of bytes")
            audio = np.frombuffer(message, dtype="<i2").astype(np.float32) / 32768.0
            await self.pace(len(audio) / SAMPLE_RATE, self.rate, "audio seconds")
            self.inbox.append((audio, time.monotonic()))
            self.inbox_samples += len(audio)
            self.received += len(audio)
            if len(audio):
                self.last_input = time.monotonic()
            self.wake.set()
            await self.hear(audio)
            await self.make_room()
            return False
        P.read_client(message, audio=True)  # an end: the only text message after the config
        await self.end()
        return True

    async def make_room(self) -> None:
        """Back-pressure for a sender far ahead of real time (a file sent as fast as possible):
        wait while more than MAX_WAITING_S of audio waits. A live stream does not get here: the
        recogniser skips to recent audio long before (streampunct.asr, ``max_lag_s``)."""
        limit = self.MAX_WAITING_S * SAMPLE_RATE
        while self.inbox_samples + self.backlog > limit and self.recognition and not self.recognition.done():
            self.progress.clear()
            await self.progress.wait()

    async def hear(self, audio: np.ndarray) -> None:
        """A chunk arrived: while quiet, a silent chunk moves the punctuation stream's clock on to
        its end (time limits fire in the pause); a chunk with speech ends the quiet."""
        if self.quiet_until is None:
            return
        if len(audio) and is_silence(audio):
            await self.quiet()
        else:
            self.quiet_until = None

    async def quiet(self) -> None:
        """No word waits uncommitted up to the audio received: the punctuation clock moves there."""
        self.quiet_until = self.received / SAMPLE_RATE
        await self.emit(await self.app.batcher.tick(self.stream, self.quiet_until))

    def feed_inbox(self) -> None:
        """Hand the queued audio to the recogniser: only between passes (it is not thread-safe)."""
        for audio, arrived in self.inbox:
            self.recognizer.feed(audio, now=arrived)
        self.inbox.clear()
        self.inbox_samples = 0
        self.backlog = self.recognizer.unprocessed

    def process(self) -> Hypothesis:
        """One pass, in the ASR worker: the clock is read when the pass starts, not when queued."""
        self.app.asr_load.start()
        hyp = None
        try:
            hyp = self.recognizer.process(now=time.monotonic())
            return hyp
        finally:
            self.app.asr_load.stop(hyp.pass_.new_s if hyp is not None and hyp.pass_ is not None else 0.0)

    async def recognise(self) -> None:
        """The recognition task: a pass whenever enough audio waits; after ``end``, until less than
        a pass waits. Its faults close this connection alone (1011)."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                self.feed_inbox()
                if not self.recognizer.ready():
                    if self.ending:
                        return
                    self.wake.clear()
                    await self.wake.wait()
                    continue
                caught_up = self.recognizer.catch_up(now=time.monotonic())  # told at once, not after a pass
                if caught_up is not None:
                    await self.report(caught_up)
                hyp = await loop.run_in_executor(self.app.asr_executor, self.process)
                self.backlog = self.recognizer.unprocessed
                self.progress.set()
                await self.report(hyp)
        except ConnectionClosed:
            pass  # the receive loop sees it too
        except Exception:
            log.exception("recognition_failed", extra={"fields": {"session": self.id}})
            try:
                message = "speech recognition failed on this stream; it is closed"
                await self.send(P.Error("internal", message, self.stream.n_final))
                await self.connection.close(1011, "internal error")
            except ConnectionClosed:
                pass
        finally:
            self.progress.set()

    async def stop_recognition(self) -> None:
        """However the session ends, its recognition task ends with it; a pass already under way
        in the worker runs to its end and its result is dropped."""
        task = self.recognition
        if task is None:
            return
        if not task.done():
            task.cancel()
        await asyncio.wait([task])
        if not task.cancelled():
            task.exception()  # retrieved: the task reports its own faults

    async def report(self, hyp: Hypothesis) -> None:
        """Send what a pass (or a catch-up) found: the skip first, then the words."""
        if hyp.skipped is not None:
            skip = hyp.skipped
            _log(
                logging.WARNING,
                "asr_lag",
                session=self.id,
                skipped_s=round(skip.seconds, 3),
                start=round(skip.start, 3),
                end=round(skip.end, 3),
            )
            await self.send(P.Lag.over(skip.start, skip.end))
        if hyp.pass_ is not None and log.isEnabledFor(logging.DEBUG):
            p = hyp.pass_
            _log(
                logging.DEBUG,
                "asr_pass",
                session=self.id,
                t=round(time.monotonic(), 4),
                seconds=round(p.seconds, 4),
                buffer_s=round(p.buffer_s, 3),
                new_s=round(p.new_s, 3),
                rtf=round(p.real_time_factor, 3),
                committed=len(hyp.committed),
                provisional=len(hyp.provisional),
                end_of_speech=p.end_of_speech,
            )
        await self.words(hyp.committed, hyp.provisional, hyp.complete_until)
        self.quiet_until = None
        if hyp.pass_ is not None and not hyp.provisional and self.app.pause_clock:
            # every word heard is committed: quiet if nothing was said since the pass's audio
            since = self.recognizer.waiting + [a for a, _ in self.inbox]
            heard = np.concatenate(since) if since else np.zeros(0, dtype=np.float32)
            if not len(heard) or is_silence(heard):
                await self.quiet()

    async def words(self, committed: list[Word], provisional: list[Word], now: float | None = None) -> None:
        """Send the recogniser's words and push the committed ones to the punctuation stream.
        ``now``: stream time up to which every word is committed (the stream's clock for time
        limits); None: all the audio recognised so far."""
        first = self.stream.n_words
        self.captioner.add_words(first, committed)
        if self.recognizer.sentence_ends == "punctuator":  # its final periods trim the buffer
            for i, w in enumerate(committed):
                self.ends[first + i] = w.end or 0.0
        self.words_in += len(committed)
        if now is None:
            now = self.recognizer.processed_until
        guess = provisional if self.app.provisional_lookahead else []
        if log.isEnabledFor(logging.DEBUG):
            _log(
                logging.DEBUG,
                "asr_push",
                session=self.id,
                t=round(time.monotonic(), 4),
                first=first,
                words=len(committed),
                now=round(now, 3),
                tentative=[dataclasses.asdict(w) for w in guess],
            )
        events = await self.app.batcher.push(self.stream, committed, now=now, tentative=guess)
        if committed or provisional:
            await self.send(P.Recognised(first, tuple(committed), tuple(provisional)))
        await self.emit(events)

    async def emit(self, events: list[PunctEvent], flush: bool = False) -> None:
        await self.send_events(events)
        final = [e.index for e in events if e.final]
        if final and log.isEnabledFor(logging.DEBUG):
            _log(
                logging.DEBUG,
                "final_sent",
                session=self.id,
                t=round(time.monotonic(), 4),
                first=final[0],
                last=final[-1],
            )
        for e in events:  # self.ends is empty unless --asr-sentence-ends punctuator
            if e.final:
                end = self.ends.pop(e.index, None)
                if e.label in ("PERIOD", "QUESTION") and end is not None:
                    self.recognizer.sentence_end(end)
        captions = self.captioner.add(events) + (self.captioner.flush() if flush else [])
        for c in captions:
            await self.send(P.Captioned(c))

    async def end(self, reason: str | None = None) -> None:
        """Recognise the audio that waits (the recognition task's last passes), then finish."""
        loop = asyncio.get_running_loop()
        self.ending = True
        self.wake.set()
        if self.recognition is not None:
            await self.recognition
        self.feed_inbox()
        rest = await loop.run_in_executor(self.app.asr_executor, self.recognizer.finish)
        await self.words(rest, [])
        await self.emit(await self.app.batcher.finish(self.stream), flush=True)
        await self.send(P.Finished(self.stream.n_words, round(self.recognizer.duration, 3), reason))


async def run_server(
    app: App,
    host: str,
    port: int,
    ready: asyncio.Event | None = None,
    tls: ssl.SSLContext | None = None,
    standalone: bool = True,
) -> None:
    """Serve until ``app.stopping`` is set, then finish the open streams. ``standalone``: the
    server is the process (it says where it listens on stdout, and SIGINT or SIGTERM stop it);
    else it is embedded in a client's event loop (:func:`embedded`)."""
    async with serve(
        app.handler,
        host,
        port,
        process_request=app.process_request,
        max_size=2**20,
        max_queue=32,
        ping_interval=20,
        server_header="streampunct",  # no versions
        ssl=tls,
    ) as server:
        actual = server.sockets[0].getsockname()[1] if server.sockets else port
        app.url = f"{'wss' if tls else 'ws'}://{host}:{actual}"
        _log(
            logging.INFO,
            "listening",
            url=app.url,
            streams=app.limits.max_streams,
            token=app.access.token is not None,
        )
        if standalone:  # the signals are handled before anyone is told where to connect
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, app.stopping.set)
            print(f"streampunct serving on {app.url}", flush=True)
        if ready is not None:
            ready.set()
        await app.stopping.wait()
        app.stopped_at = time.monotonic()
        _log(logging.INFO, "shutting_down", streams=app.active)
        # Sessions take what their clients sent (a grace period at most), finish their streams
        # and close themselves (another at most: recognising the audio that waits, say).
        while app.active and time.monotonic() < app.stopped_at + 2 * app.limits.shutdown_grace_s:
            await asyncio.sleep(0.1)
        if app.active:
            _log(logging.WARNING, "grace_period_over", streams=app.active)
        server.close()
        await server.wait_closed()
    await app.batcher.close()
    app.asr_executor.shutdown(wait=True)
    _log(logging.INFO, "stopped")


@contextlib.asynccontextmanager
async def embedded(
    model: str | None = None, asr_model: str | None = None, device: str = "auto"
) -> AsyncIterator[tuple[str, str]]:
    """A server in this event loop, on a free loopback port with a random token, for the clients
    run without ``--url``: the same sessions as ``streampunct serve``, with its defaults. Yields
    its URL and token; stops it (every stream finished) on leaving."""
    punctuator = await asyncio.to_thread(lambda: Punctuator.load(model, device=device).prepare())
    token = secrets.token_urlsafe(16)
    app = App(
        punctuator,
        access=Access(token),
        asr_model=asr_model,
        asr_device=device,
        asr_options=asr_options(),
        provisional_lookahead=ASR_DEFAULTS["provisional_lookahead"] == "on",
        pause_clock=ASR_DEFAULTS["pause_clock"] == "on",
    )
    ready = asyncio.Event()
    server = asyncio.create_task(run_server(app, "127.0.0.1", 0, ready, standalone=False))
    waiting = asyncio.create_task(ready.wait())
    await asyncio.wait({server, waiting}, return_when=asyncio.FIRST_COMPLETED)
    if server.done():  # it failed to start: say why
        waiting.cancel()
        server.result()
    try:
        yield app.url, token
    finally:
        app.stopping.set()
        await server


def asr_options(
    *,
    chunk_s: float = ASR_DEFAULTS["min_chunk_s"],
    buffer_s: float = ASR_DEFAULTS["max_buffer_s"],
    confident: float | None = ASR_DEFAULTS["confident"],
    end_of_speech_s: float | None = ASR_DEFAULTS["end_of_speech_s"],
    prompt: str = ASR_DEFAULTS["prompt"],
    settle_after_s: float | None = ASR_DEFAULTS["settle_after_s"],
    settle_unsure_after_s: float | None = ASR_DEFAULTS["settle_unsure_after_s"],
    encoder_pad_s: float | None = ASR_DEFAULTS["encoder_pad_s"],
    context_s: float | None = ASR_DEFAULTS["context_s"],
    agree_after_s: float | None = ASR_DEFAULTS["agree_after_s"],
    beam_size: int = ASR_DEFAULTS["beam_size"],
    sentence_ends: str = ASR_DEFAULTS["sentence_ends"],
) -> dict[str, Any]:
    """StreamingRecognizer's settings from the server's ``--asr-*`` flags."""
    return {
        "min_chunk_s": chunk_s,
        "trim_after_s": buffer_s / 2,
        "max_buffer_s": buffer_s,
        "confident": confident,
        "end_of_speech_s": end_of_speech_s,
        "prompt": prompt == "on",
        "settle_after_s": settle_after_s,
        "settle_unsure_after_s": settle_unsure_after_s,
        "encoder_pad_s": encoder_pad_s,
        "context_s": context_s,
        "agree_after_s": agree_after_s,
        "beam_size": beam_size,
        "sentence_ends": sentence_ends,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="streampunct serve", description="Run the streampunct websocket server."
    )
    ap.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)"
    )
    ap.add_argument("--port", type=int, default=8765, help="port (0: any free port)")
    ap.add_argument(
        "--model", default=None, help="punctuation model: default, base (shipped) or a checkpoint folder"
    )
    ap.add_argument("--device", default="auto", help="cpu, cuda, ... (default: cuda if present)")
    ap.add_argument(
        "--asr-model", default=None, help="tiny.en (default), base, or a CTranslate2 Whisper folder"
    )
    ap.add_argument(
        "--preload-asr",
        action="store_true",
        help="load the speech model at start, not at the first /v1/asr stream",
    )
    ap.add_argument(
        "--asr-chunk-s",
        type=float,
        default=ASR_DEFAULTS["min_chunk_s"],
        help="new audio (s) that starts a recognition pass, once the last one has ended (default %(default)s)",
    )
    ap.add_argument(
        "--asr-buffer-s",
        type=float,
        default=ASR_DEFAULTS["max_buffer_s"],
        help="most audio (s) the recogniser re-transcribes: past half of it, the buffer is trimmed at a "
        "committed sentence end; past all of it, at the last committed word (default %(default)s)",
    )
    ap.add_argument(
        "--asr-confident",
        type=number_or_off,
        default=ASR_DEFAULTS["confident"],
        help="commit a word on first sight at this recogniser probability (0 to 1, or off: only when two "
        "passes agree; default %(default)s)",
    )
    ap.add_argument(
        "--asr-end-of-speech-s",
        type=number_or_off,
        default=ASR_DEFAULTS["end_of_speech_s"],
        help="silence (s) after the last word that commits the recogniser's whole guess (or off; "
        "default %(default)s)",
    )
    ap.add_argument(
        "--asr-agree-after-s",
        type=number_or_off,
        default=ASR_DEFAULTS["agree_after_s"],
        help="audio (s) the earlier of two agreeing passes must have heard after a word for their agreement "
        "to commit it: a word cut at the end of a pass is misread alike by the next (or off; default "
        "%(default)s)",
    )
    ap.add_argument(
        "--asr-settle-after-s",
        type=number_or_off,
        default=ASR_DEFAULTS["settle_after_s"],
        help="audio (s) heard after a word that commits it even where two passes disagree on it (or off; "
        "default %(default)s)",
    )
    ap.add_argument(
        "--asr-settle-unsure-after-s",
        type=number_or_off,
        default=ASR_DEFAULTS["settle_unsure_after_s"],
        help="the same for a word the recogniser gives a probability under 0.5 (or off: as "
        "--asr-settle-after-s; default %(default)s)",
    )
    ap.add_argument(
        "--asr-encoder-pad-s",
        type=number_or_off,
        default=ASR_DEFAULTS["encoder_pad_s"],
        help="Whisper's encoder reads the buffer and this much silence (s) instead of 30 s: faster passes "
        "(or off; default %(default)s)",
    )
    ap.add_argument(
        "--asr-context-s",
        type=number_or_off,
        default=ASR_DEFAULTS["context_s"],
        help="hold a word agreed on until a pass has heard this much audio (s) after it, and commit it as "
        "that pass wrote it: a mark written at the end of what was heard is taken back (or off; "
        "default %(default)s)",
    )
    ap.add_argument(
        "--asr-sentence-ends",
        choices=SENTENCE_ENDS,
        default=ASR_DEFAULTS["sentence_ends"],
        help="whose sentence ends trim the recogniser's buffer: Whisper's own marks, or streampunct's final "
        "periods (as before 2026-11-27; default %(default)s)",
    )
    ap.add_argument(
        "--asr-beam",
        type=int,
        default=ASR_DEFAULTS["beam_size"],
        help="beams each recognition pass decodes with (1: greedy; default %(default)s)",
    )
    switches = (  # on/off flags: (flag, ASR_DEFAULTS key, help)
        ("--asr-prompt", "prompt", "each recognition pass sees the committed text before its audio as "
         "Whisper's prompt"),
        ("--provisional-lookahead", "provisional_lookahead", "on /v1/asr, the recogniser's provisional "
         "words serve as lookahead for the committed words before them (their marks become final "
         "sooner); never final themselves"),
        ("--pause-clock", "pause_clock", "on /v1/asr, in a pause where every word heard is committed, "
         "each silent chunk received moves the punctuation clock on, so that time limits fire on time "
         "(off: only recognition passes move it)"),
    )  # fmt: skip
    for flag, key, text in switches:
        ap.add_argument(
            flag, choices=("on", "off"), default=ASR_DEFAULTS[key], help=f"{text} (default %(default)s)"
        )
    security = ap.add_argument_group("access (docs/protocol.md, Security)")
    security.add_argument(
        "--token",
        default=os.environ.get("STREAMPUNCT_TOKEN"),
        help="a shared secret every stream must present: `Authorization: Bearer TOKEN`, or ?token=TOKEN "
        "from a browser (default: $STREAMPUNCT_TOKEN; unset: no token)",
    )
    security.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a web origin (https://example.org) whose pages may open streams, besides this server's "
        "own page; repeatable; * allows any (default: only the server's own page)",
    )
    security.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a name clients reach this server by (its Host header), besides the --host address and "
        f"{', '.join(LOOPBACK_HOSTS)}; repeatable; any other is refused (DNS rebinding)",
    )
    security.add_argument("--certfile", help="TLS certificate chain (PEM): serve wss:// and https://")
    security.add_argument("--keyfile", help="TLS private key (PEM), with --certfile")
    per_client = {"type": number_or_off, "default": argparse.SUPPRESS}  # absent: by --host
    add_config_flags(
        ap.add_argument_group("limits (docs/protocol.md, Security)"),
        Limits,
        max_streams_per_client=per_client,
    )
    ap.add_argument("--log-level", default="info")
    args = ap.parse_args(argv)
    if bool(args.certfile) != bool(args.keyfile):
        ap.error("--certfile and --keyfile go together")
    if args.asr_beam < 1:
        ap.error(f"--asr-beam must be 1 or more, not {args.asr_beam}")

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])
    logging.getLogger("faster_whisper").setLevel(logging.WARNING)
    try:
        punctuator = Punctuator.load(args.model, device=args.device).prepare()  # fails here, not in a stream
        tls = None
        if args.certfile:
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            tls.load_cert_chain(args.certfile, args.keyfile)
        access = Access(
            args.token or None, tuple(args.allow_origin), (*LOOPBACK_HOSTS, args.host, *args.allow_host)
        )
        limits = config_from_flags(args, Limits)
        if "max_streams_per_client" not in args and not is_loopback(args.host):
            limits = dataclasses.replace(limits, max_streams_per_client=STREAMS_PER_CLIENT)

        async def start() -> None:
            options = asr_options(
                chunk_s=args.asr_chunk_s,
                buffer_s=args.asr_buffer_s,
                confident=args.asr_confident,
                end_of_speech_s=args.asr_end_of_speech_s,
                prompt=args.asr_prompt,
                settle_after_s=args.asr_settle_after_s,
                settle_unsure_after_s=args.asr_settle_unsure_after_s,
                encoder_pad_s=args.asr_encoder_pad_s,
                context_s=args.asr_context_s,
                agree_after_s=args.asr_agree_after_s,
                beam_size=args.asr_beam,
                sentence_ends=args.asr_sentence_ends,
            )
            app = App(
                punctuator,
                access=access,
                limits=limits,
                secure=tls is not None,
                asr_model=args.asr_model,
                asr_device=args.device,
                asr_options=options,
                provisional_lookahead=args.provisional_lookahead == "on",
                pause_clock=args.pause_clock == "on",
            )
            if args.preload_asr:
                await app.whisper()
            await run_server(app, args.host, args.port, tls=tls)

        asyncio.run(start())
    except StreamPunctError as e:
        print(f"streampunct serve: error: {e}", file=sys.stderr)
        return 2
    except ssl.SSLError as e:
        print(
            f"streampunct serve: error: cannot use {args.certfile} and {args.keyfile}: {e}", file=sys.stderr
        )
        return 2
    except OSError as e:
        print(
            f"streampunct serve: error: cannot listen on {args.host}:{args.port}: {e.strerror or e}",
            file=sys.stderr,
        )
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
