"""Live streams of ``python -m benchmarks.server_load``: its limits and configurations, the text, the
server's health and memory, and /v1/punct streams at a speaking pace with every word's final event
timed and tallied."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from benchmarks.common import Server, percentile, rss_mb
from benchmarks.lib.speech import speakable
from streampunct.errors import StreamPunctError
from streampunct.text import read_iwslt

RATE = 3.0  # words a second per live stream
WORD_S = 0.25  # a word's length on the stream clock
PUNCT_CONFIG: dict[str, Any] = {"lookahead": 2, "max_delay_ms": 1000}
ASR_CONFIG: dict[str, Any] = {"lookahead": 2, "max_delay_ms": 1000}
LADDER_START = 5
ASR_STAGGER_S = 0.5
CHUNK_S = 0.25  # what streampunct/clients/mic.py and streampunct/clients/file.py send
KILL_WORDS = 50
RSS_SLACK_MB = 5.0  # "a few MB"
HEALTH_WAIT_S = 15.0  # for /health to report 0 streams
STALL_RCVBUF = 4096  # bytes: the stalled reader's socket receive buffer

# When there is no IWSLT text: simple sentences, labelled as IWSLT is.
FALLBACK = [
    ("so today i want to talk about the ocean", "PERIOD"),
    ("when i was a child", "COMMA"),
    ("my father took me to the sea every summer", "PERIOD"),
    ("have you ever seen a whale", "QUESTION"),
    ("it is the largest animal that ever lived", "COMMA"),
    ("and it sings", "PERIOD"),
    ("we know very little about why it sings", "COMMA"),
    ("but we are learning", "PERIOD"),
    ("the people who study them spend years at sea", "PERIOD"),
    ("what do they find", "QUESTION"),
]


def load_text(data: Path) -> tuple[list[str], list[str], str]:
    """Speakable words and labels of IWSLT dev2012 (or of the sentences above), and their source."""
    try:
        words, labels = read_iwslt(data / "iwslt" / "dev2012")
        source = "iwslt dev2012"
    except (OSError, StreamPunctError):
        words, labels = [], []
        for sentence, label in FALLBACK:
            tokens = sentence.split()
            words += tokens
            labels += ["O"] * (len(tokens) - 1) + [label]
        source = "built-in sentences"
    words, labels = speakable(words, labels)
    return words, labels, source


# --- small helpers -------------------------------------------------------------------------------


def stats(xs: list[float]) -> dict[str, float | None]:
    if not xs:
        return {"p50": None, "p95": None, "p99": None, "max": None}
    return {
        "p50": round(percentile(xs, 50), 3),
        "p95": round(percentile(xs, 95), 3),
        "p99": round(percentile(xs, 99), 3),
        "max": round(max(xs), 3),
    }


def health_sync(url: str) -> dict[str, Any]:
    u = urlparse(url)
    http = f"{'https' if u.scheme == 'wss' else 'http'}://{u.netloc}/health"
    try:
        with urllib.request.urlopen(http, timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:  # 503 "failing" has a JSON body too
        return json.loads(e.read() or b"{}") | {"http_status": e.code}


async def health(url: str) -> dict[str, Any]:
    return await asyncio.to_thread(health_sync, url)


async def wait_streams_zero(url: str, timeout: float = HEALTH_WAIT_S) -> tuple[int | None, float]:
    """Poll /health until it reports 0 streams; (the last count seen, seconds waited)."""
    t0 = time.perf_counter()
    streams = None
    while True:
        try:
            streams = (await health(url)).get("streams")
        except OSError:
            streams = None
        if streams == 0 or time.perf_counter() - t0 > timeout:
            return streams, round(time.perf_counter() - t0, 3)
        await asyncio.sleep(0.05)


async def settled_rss(server: Server, wait: float = 0.5) -> float | None:
    """The server's resident memory (None on Ray Serve: the replicas are other processes)."""
    await asyncio.sleep(wait)
    mb = None if server.ray else rss_mb(server.pid)
    return None if mb is None else round(mb, 1)


class LoopLag:
    """How late this client's own event loop wakes up (a busy client inflates every latency)."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.05)
            self.worst = max(self.worst, time.perf_counter() - t - 0.05)

    def __enter__(self) -> LoopLag:
        self.task = asyncio.create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()


# --- /v1/punct live streams ----------------------------------------------------------------------


@dataclass
class PunctResult:
    sent: list[float] = field(default_factory=list)  # perf_counter when word j was sent
    finals: dict[int, list[float]] = field(default_factory=dict)  # arrivals of word i's final events
    end: dict[str, Any] | None = None
    close_code: int | None = None
    errors: list[str] = field(default_factory=list)
    failure: str | None = None


async def open_punct(url: str, cfg: dict[str, Any] = PUNCT_CONFIG, **kw: Any) -> ClientConnection:
    ws = await connect(url + "/v1/punct", max_size=2**22, open_timeout=60, **kw)
    await ws.send(json.dumps({"type": "config", "version": 1, **cfg}))
    ready = json.loads(await ws.recv())
    if ready.get("type") != "ready":
        await ws.close()
        raise RuntimeError(f"refused: {ready}")
    return ws


def word_message(text: str, j: int) -> str:
    start = round(j / RATE, 3)
    end = round(start + WORD_S, 3)
    return json.dumps({"type": "words", "words": [{"text": text, "start": start, "end": end}], "now": end})


async def punct_receive(ws: ClientConnection, res: PunctResult) -> None:
    try:
        async for raw in ws:
            t = time.perf_counter()
            msg = json.loads(raw)
            if msg["type"] == "events":
                for e in msg["events"]:
                    if e["final"]:
                        res.finals.setdefault(e["index"], []).append(t)
            elif msg["type"] == "end":
                res.end = msg
            elif msg["type"] == "error":
                res.errors.append(f"{msg['code']}: {msg['message']}")
    except ConnectionClosed:
        pass
    res.close_code = ws.close_code


async def punct_live(
    ws: ClientConnection,
    res: PunctResult,
    words: list[str],
    first: int,
    t0: float,
    offset: float,
    n_words: int,
    stop: asyncio.Event | None = None,
    end_wait: float = 60.0,
) -> PunctResult:
    """Words at 3 a second from ``t0 + offset``, then ``end`` at the next slot (not when ``stop``
    is set: the server is expected to end the stream); waits for the server's ``end``."""
    receiving = asyncio.create_task(punct_receive(ws, res))
    try:
        stopped = False
        for j in range(n_words):
            await asyncio.sleep(max(0.0, t0 + offset + j / RATE - time.perf_counter()))
            if (stop is not None and stop.is_set()) or receiving.done():
                stopped = True
                break
            res.sent.append(time.perf_counter())
            await ws.send(word_message(words[(first + j) % len(words)], j))
        if not stopped and not receiving.done():
            await asyncio.sleep(max(0.0, t0 + offset + n_words / RATE - time.perf_counter()))
            if stop is None or not stop.is_set():
                await ws.send(json.dumps({"type": "end"}))
        await asyncio.wait_for(asyncio.shield(receiving), end_wait)
    except ConnectionClosed:
        await asyncio.wait_for(asyncio.shield(receiving), 10)
    except asyncio.TimeoutError:
        res.failure = f"no end within {end_wait:.0f} s"
    except Exception as e:
        res.failure = f"{type(e).__name__}: {e}"
    finally:
        if not receiving.done():
            receiving.cancel()
        await ws.close()
    if res.failure is None and res.end is None:
        res.failure = f"no end message (closed with {res.close_code})"
    return res


def tally(results: list[PunctResult]) -> dict[str, Any]:
    """Per-word latencies and the words without exactly one final event, over many streams."""
    latencies: list[float] = []
    no_final = several = extra = no_end = miscounted = 0
    errors: list[str] = []
    failures: list[str] = []
    for r in results:
        for j, t in enumerate(r.sent):
            got = r.finals.get(j, [])
            no_final += not got
            several += len(got) > 1
            if got:
                latencies.append(got[0] - t)
        extra += sum(1 for i in r.finals if i >= len(r.sent))
        if r.end is None:
            no_end += 1
        elif r.end.get("words") != len(r.sent):
            miscounted += 1
        errors += r.errors
        if r.failure:
            failures.append(r.failure)
    return {
        "words": sum(len(r.sent) for r in results),
        "lost": no_final + several,
        "no_final": no_final,
        "several_finals": several,
        "finals_for_unsent_words": extra,
        "streams_without_end": no_end,
        "streams_miscounted": miscounted,
        "latency_s": stats(latencies),
        "errors": errors[:10],
        "failures": failures[:10],
        "_latencies": latencies,
    }


def sound(t: dict[str, Any]) -> bool:
    """No word without exactly one final, every stream its right ``end``, no error."""
    return (
        t["lost"] == 0 and t["finals_for_unsent_words"] == 0 and t["streams_without_end"] == 0
        and t["streams_miscounted"] == 0 and not t["errors"] and not t["failures"]
    )  # fmt: skip


async def punct_trial(
    url: str, words: list[str], n: int, seconds: float, first: int = 0, tag: int = 0
) -> dict[str, Any]:
    """``n`` live streams for ``seconds``; their tally."""
    n_words = max(1, int(seconds * RATE))
    opened = await asyncio.gather(*(open_punct(url) for _ in range(n)), return_exceptions=True)
    refused = [o for o in opened if isinstance(o, BaseException)]
    if refused:
        for o in opened:
            if not isinstance(o, BaseException):
                await o.close()
        t = tally([])
        t["failures"] = [f"{len(refused)} of {n} streams did not open: {refused[0]}"]
        t["client_loop_lag_max_ms"] = None
        return t
    t0 = time.perf_counter() + 0.5
    with LoopLag() as lag:
        results = await asyncio.gather(
            *(
                punct_live(
                    ws,
                    PunctResult(),
                    words,
                    first + (tag * 7919 + i * 997) % len(words),
                    t0,
                    i / (RATE * n),
                    n_words,
                    end_wait=max(120.0, 10 * seconds),  # an overloaded server catches up
                )
                for i, ws in enumerate(opened)
                if not isinstance(ws, BaseException)
            )
        )
    t = tally(list(results))
    t["client_loop_lag_max_ms"] = round(1000 * lag.worst, 1)
    return t


async def warm_up(url: str, words: list[str], messages: int = 1, per_message: int = 30) -> None:
    """One stream of a few messages sent at once: the first forward passes of a shape are slow, and
    take memory that stays."""
    ws = await open_punct(url)
    for k in range(messages):
        await ws.send(json.dumps({"type": "words", "words": words[k * per_message : (k + 1) * per_message]}))
    await ws.send(json.dumps({"type": "end"}))
    async for raw in ws:
        if json.loads(raw)["type"] == "end":
            break
    await ws.close()
