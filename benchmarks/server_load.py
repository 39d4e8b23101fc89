"""Load and faults on loopback: a real `streampunct serve`, many live streams, and clients that misbehave.

    python benchmarks/server_load.py                                  # everything (about 15 minutes)
    python benchmarks/server_load.py --sections punct --streams 5,10 --seconds 15
    python benchmarks/server_load.py --quick                          # a tiny version of all (< 30 s)
    python benchmarks/server_load.py --docs-only                      # the docs tables from the results

Each section runs against fresh servers (`benchmarks/common.py`'s ``start_server``: `streampunct
serve` on a free loopback port, its log in a temporary file) with their default limits (200 words
a second per /v1/punct connection, 10x real time per /v1/asr connection, a 10 s shutdown grace),
except the number of streams, raised above the largest N tried. The text is IWSLT dev2012
(``--data``), or a few built-in sentences where it is missing.

``punct``: N concurrent /v1/punct streams (lookahead 2, ``max_delay_ms`` 1000), each sending one
word every 1/3 s, starts staggered over the first 1/3 s; word j spans j/3 .. j/3 + 0.25 s on the
stream's clock and is sent, with ``now`` at its end, at t0 + offset + j/3. After ``--seconds`` each
stream sends ``end`` at its next slot. A word's latency is the time from the moment it was sent to
the moment its final event arrived. Every word must get exactly one final event (``lost`` counts
those with none or several: must be 0) and every stream its ``end`` (with the number of words
sent). A run passes when, besides, its p99 latency is at most ``--bound-s`` (1.5 s: the lookahead's
0.67 s plus margin). N goes 5, 10, 20, 40, ... up to the first failure (or ``--max-streams``),
then bisects between the last pass and the first failure down to 10 % of N; ``--streams 10,20``
runs just those. One short warm-up stream comes first; the server's RSS is read after each run,
and the client's own event-loop lag is kept (a busy client would inflate every latency).

``asr``: N concurrent /v1/asr streams of espeak-ng speech (``--asr-seconds``, the text read as in
the soak, cached there; skipped with a note without espeak-ng or a recogniser) sent as the mic
client sends it, 16 kHz PCM16 in 0.25 s chunks at real time (``streampunct.clients.file.stream_file`` at speed
1: chunk i at t0 + i * 0.25 s), starts staggered over 0.5 s, after a 5 s warm-up stream.
N = 1, 2, 3, ... until a stream gets a ``lag`` message (recognition fell behind and skipped audio)
or a committed word lacks exactly one final event (or ``--asr-max-streams``). A committed word
that ends at e seconds of audio is due at t0 + e: its latency is the arrival of its final event on
that clock minus e.

``faults`` (a and c on one server; b on fresh ones):

a. killed clients: ``--kills`` times a /v1/punct stream takes 50 words (one a message), and once
   the first events came its connection is cut without a close frame (``transport.abort()``);
   then once a /v1/asr stream mid-audio (once its first words came; not in ``--quick``). After
   each, ``/health`` must report 0 streams (within 15 s), the server's RSS must not grow more than
   ``RSS_SLACK_MB`` from the 5th kill (the first in ``--quick``) to the last, and a stream
   afterwards must work.
b. SIGTERM mid-stream: ``--sigterm-streams`` /v1/punct streams at 3 words a second for
   ``--sigterm-seconds``; they stop sending, and the server gets SIGTERM. Every word sent must get
   exactly one final event, every stream ``end`` with ``"reason": "server shutting down"`` (and a
   1001 close), the server must exit with status 0. The time from the signal to its exit is kept.
   b2 (not in ``--quick``): the same, but the clients keep talking after the signal, as live
   recognisers do, until the server ends their streams (at most ``--keep-talking-cap-s``, then
   they end them themselves): the server must end every stream itself and exit within its
   shutdown bound (twice the 10 s grace), every word sent before the signal final.
c. stalled reader: a client with a small socket receive buffer and no compression sends its
   config, reads ``ready``, then sends words at 90 % of the server's rate limit (20 a message)
   for ``--stall-seconds`` and never reads again. Beside it a neighbour stream runs at 3 words a
   second; the same neighbour ran alone just before. The server's RSS (and the kernel's queues on
   that connection, /proc/net/tcp) is sampled every ``--rss-every-s``; it must level off (at most
   ``RSS_SLACK_MB`` of growth over the second half; judged for stalls of 20 s or more). The
   neighbour's p99 latency is compared with its run alone; the words the server took from the
   stalled client come from its ``disconnect`` log line.

Writes benchmarks/results/server_load.json (``--quick``: server_load_quick.json), each section
with the machine it ran on and its command (sections not run are kept from the file); prints the
tables; ``--docs`` writes them into docs/protocol.md between ``<!-- server_load -->`` and
``<!-- /server_load -->``. Exits with status 1 when a word lacked exactly one final event, a stream
failed or a fault check failed (a latency bound missed, or lag at the last N, is a measurement,
not a failure).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).parent))
from common import (  # noqa: E402
    CACHE,
    RESULTS,
    Server,
    machine,
    make_speech,
    percentile,
    rss_mb,
    speakable,
    start_server,
    write_json,
)
from websockets.asyncio.client import ClientConnection, connect  # noqa: E402
from websockets.exceptions import ConnectionClosed, InvalidStatus  # noqa: E402

from streampunct import protocol as P  # noqa: E402
from streampunct.errors import StreamPunctError  # noqa: E402
from streampunct.scheduler import LOAD_WINDOW_S  # noqa: E402
from streampunct.server.guard import Limits  # noqa: E402
from streampunct.text import read_iwslt  # noqa: E402

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs" / "protocol.md"
MARKERS = ("<!-- server_load -->", "<!-- /server_load -->")

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


class Servers:
    """The servers of the sections, by name (punct, asr, faults, sigterm, sigterm_keep_talking),
    each a fresh `streampunct serve` started in a thread (it loads its models), when first asked
    for or ahead of time."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.starting: dict[str, asyncio.Future[Server]] = {}

    def flags(self, name: str) -> list[str]:
        a = self.args
        flags = ["--device", a.device, *a.model_args]
        if name == "punct":
            explicit = punct_ns(a)
            most = (max(explicit) if explicit else a.max_streams) + 8
            if a.ray:  # serve-ray: the punctuation model alone; the limit is a session replica's
                return [
                    "--device",
                    a.device,
                    *a.punct_model_args,
                    "--max-streams",
                    str(most),
                ]  # Ray may send all to one
            flags += ["--max-streams", str(most)]
        elif name == "asr":
            flags += ["--preload-asr", "--max-streams", str(a.asr_max_streams + 8)]
        return flags

    def start(self, *names: str) -> None:
        for name in names:
            if name not in self.starting:
                ray = self.args.ray if name == "punct" else None
                self.starting[name] = asyncio.ensure_future(
                    asyncio.to_thread(start_server, *self.flags(name), ray=ray)
                )

    async def get(self, name: str) -> Server:
        self.start(name)
        server = await self.starting[name]
        print(f"{name}: server {server.url} (pid {server.pid}, log {server.log})", flush=True)
        return server

    async def close(self) -> None:
        """Stop every server still running (each is stopped by its section as a rule)."""
        for future in self.starting.values():
            try:
                server = await future
            except Exception:
                continue
            await asyncio.to_thread(server.stop)


def punct_ns(args: argparse.Namespace) -> list[int] | None:
    return [int(x) for x in args.streams.split(",")] if args.streams else None


async def section_punct(args: argparse.Namespace, servers: Servers, words: list[str]) -> dict[str, Any]:
    explicit = punct_ns(args)
    server = await servers.get("punct")
    runs: list[dict[str, Any]] = []
    status = None
    try:
        await warm_up(server.url, words)
        rss_start = await settled_rss(server, 0.2)

        async def run(n: int) -> bool:
            t = await punct_trial(server.url, words, n, args.seconds, tag=len(runs))
            t.pop("_latencies")
            left, waited = await wait_streams_zero(server.url)
            p99 = t["latency_s"]["p99"]
            row = {
                "streams": n,
                **t,
                "sound": sound(t),
                "passed": sound(t) and p99 is not None and p99 <= args.bound_s,
                "streams_open_after": left,
                "server_rss_mb": await settled_rss(server),
            }
            runs.append(row)
            lat = row["latency_s"]
            print(
                f"punct N={n:3d}: {row['words']:6d} words, lost {row['lost']}, p50 {lat['p50']} p95 "
                f"{lat['p95']} p99 {lat['p99']} max {lat['max']} s, RSS {row['server_rss_mb']} MB, "
                f"client loop lag {row['client_loop_lag_max_ms']} ms: {'pass' if row['passed'] else 'FAIL'}",
                flush=True,
            )
            if server.proc.poll() is not None:
                raise RuntimeError(f"the server exited with status {server.proc.returncode}")
            return row["passed"]

        if explicit:
            for n in explicit:
                await run(n)
        else:
            lo, hi = 0, LADDER_START
            while hi <= args.max_streams and await run(hi):
                lo, hi = hi, hi * 2
            if hi <= args.max_streams:
                while hi - lo > max(1, lo // 10):
                    mid = (lo + hi) // 2
                    lo, hi = (mid, hi) if await run(mid) else (lo, mid)
    finally:
        status = server.stop()
    best = max((r["streams"] for r in runs if r["passed"]), default=0)
    return {
        "config": {**PUNCT_CONFIG, "words_per_s": RATE, "seconds": args.seconds, "bound_s": args.bound_s},
        "server_rss_after_warm_up_mb": rss_start,
        "runs": runs,
        "largest_passing_streams": best,
        "sound": all(r["sound"] for r in runs),
        "server_failures_logged": len(server.failures_logged()),
        "server_exit_status": status,
    }


# --- /v1/asr live streams ------------------------------------------------------------------------


def speech(words: list[str], labels: list[str], seconds: float) -> Any:
    """espeak-ng reading the text for about ``seconds``, as float32 16 kHz; None without espeak-ng."""
    from streampunct.clients.file import load_audio

    minutes = seconds / 60
    piece = max(10, min(100, int(seconds * 2.5)))  # words an espeak-ng call: not much more than asked
    wav, _ = make_speech(words, labels, minutes, CACHE, piece_words=piece)
    return load_audio(str(wav))


async def asr_session(url: str, audio: Any, delay: float) -> dict[str, Any]:
    from streampunct.clients.file import stream_file

    await asyncio.sleep(delay)
    out: dict[str, Any] = {"failure": None, "lags": 0, "skipped_s": 0.0, "errors": []}
    try:
        result = await stream_file(url, audio, 1.0, P.Config(**ASR_CONFIG))
    except Exception as e:  # SessionLost and the like
        out["failure"] = f"{type(e).__name__}: {e}"
        out.update(committed=0, one_final=0, latencies=[])
        return out
    ends: dict[int, float | None] = {}
    finals: dict[int, list[float]] = {}
    for clock, msg in result.timeline:
        kind = msg["type"]
        if kind == "words":
            for w in msg["committed"]:
                ends[w["index"]] = w["end"]
        elif kind == "events":
            for e in msg["events"]:
                if e["final"]:
                    finals.setdefault(e["index"], []).append(clock)
        elif kind == "lag":
            out["lags"] += 1
            out["skipped_s"] += msg["skipped_s"]
        elif kind == "error":
            out["errors"].append(f"{msg['code']}: {msg['message']}")
    out["committed"] = len(ends)
    out["one_final"] = sum(len(finals.get(i, [])) == 1 for i in ends)
    out["finals_for_uncommitted_words"] = sum(1 for i in finals if i not in ends)
    out["latencies"] = [finals[i][0] - e for i, e in ends.items() if finals.get(i) and e is not None]
    out["server_words"] = result.end.words if result.end else None
    out["audio_s"] = result.end.audio_seconds if result.end else None
    if out["server_words"] != out["committed"]:
        out["errors"].append(f"the server counted {out['server_words']} words, {out['committed']} committed")
    return out


async def section_asr(
    args: argparse.Namespace, servers: Servers, words: list[str], labels: list[str]
) -> dict[str, Any]:
    if not args.asr_ok:
        return {"skipped": args.asr_note}
    audio = speech(words, labels, args.asr_seconds)
    audio_s = round(len(audio) / 16000, 2)
    print(f"asr: {audio_s} s of speech", flush=True)
    server = await servers.get("asr")
    runs: list[dict[str, Any]] = []
    try:
        warm = await asr_session(server.url, audio[: 16000 * 5], 0.0)  # the first passes are slow
        if warm["failure"]:
            raise RuntimeError(f"the warm-up stream failed: {warm['failure']}")
        for n in range(1, args.asr_max_streams + 1):
            sessions = await asyncio.gather(
                *(asr_session(server.url, audio, ASR_STAGGER_S * i / n) for i in range(n))
            )
            latencies = [x for s in sessions for x in s["latencies"]]
            committed = sum(s["committed"] for s in sessions)
            one_final = sum(s["one_final"] for s in sessions)
            failures = [s["failure"] for s in sessions if s["failure"]]
            errors = [e for s in sessions for e in s["errors"]]
            sound_run = (
                not failures and not errors and committed == one_final and committed > 0
                and not any(s["finals_for_uncommitted_words"] for s in sessions if not s["failure"])
            )  # fmt: skip
            lags = sum(s["lags"] for s in sessions)
            run = {
                "streams": n,
                "audio_s_each": audio_s,
                "lag_messages": lags,
                "skipped_s": round(sum(s["skipped_s"] for s in sessions), 2),
                "words_committed": committed,
                "words_one_final": one_final,
                "latency_s": {k: v for k, v in stats(latencies).items() if k in ("p50", "p95", "max")},
                "failures": failures[:10],
                "errors": errors[:10],
                "sound": sound_run,
                "passed": sound_run and lags == 0,
                "streams_open_after": (await wait_streams_zero(server.url))[0],
                "server_rss_mb": await settled_rss(server),
            }
            runs.append(run)
            lat = run["latency_s"]
            print(
                f"asr N={n}: {lags} lag messages ({run['skipped_s']} s skipped), {committed} words "
                f"committed, {one_final} with one final, audio end -> final p50 {lat['p50']} p95 "
                f"{lat['p95']} s: {'pass' if run['passed'] else 'FAIL'}",
                flush=True,
            )
            if not run["passed"] or server.proc.poll() is not None:
                break
    finally:
        status = server.stop()
    return {
        "config": {**ASR_CONFIG, "chunk_s": CHUNK_S, "speed": 1.0, "asr_model": args.asr_model or "tiny.en"},
        "runs": runs,
        "largest_streams_without_lag": max((r["streams"] for r in runs if r["passed"]), default=0),
        # the last run may fail by lagging; a failed session or a word without one final, at any N
        "sound": all(
            not r["failures"] and not r["errors"] and r["words_committed"] == r["words_one_final"]
            for r in runs
        ),
        "server_failures_logged": len(server.failures_logged()),
        "server_exit_status": status,
    }


# --- faults --------------------------------------------------------------------------------------


async def kill_punct(url: str, words: list[str], first: int) -> bool:
    """50 words, then the connection cut without a close frame; whether events came first."""
    ws = await open_punct(url)
    for j in range(KILL_WORDS):
        await ws.send(word_message(words[(first + j) % len(words)], j))
    try:
        await asyncio.wait_for(ws.recv(), 5)
        answered = True
    except (asyncio.TimeoutError, ConnectionClosed):
        answered = False
    ws.transport.abort()
    return answered


async def kill_asr(url: str, audio: Any) -> dict[str, Any]:
    """Audio at real time until the first words come (at most 10 s), then the connection cut."""
    ws = await connect(url + "/v1/asr", max_size=2**22, open_timeout=60)
    await ws.send(json.dumps({"type": "config", "version": 1, **ASR_CONFIG}))
    ready = json.loads(await ws.recv())
    if ready.get("type") != "ready":
        raise RuntimeError(f"refused: {ready}")
    pcm = (audio.clip(-1, 1) * 32767).astype("<i2").tobytes()
    step = int(CHUNK_S * 16000) * 2
    got_words = asyncio.Event()

    async def receive() -> None:
        with_words = False
        try:
            async for raw in ws:
                if json.loads(raw)["type"] == "words":
                    with_words = True
                    got_words.set()
        except ConnectionClosed:
            pass
        if not with_words:
            got_words.set()

    receiving = asyncio.create_task(receive())
    t0 = time.perf_counter()
    sent = 0.0
    for i in range(0, min(len(pcm), 10 * 16000 * 2), step):
        await asyncio.sleep(max(0.0, t0 + i / 2 / 16000 - time.perf_counter()))
        if got_words.is_set():
            break
        await ws.send(pcm[i : i + step])
        sent = (i + step) / 2 / 16000
    ws.transport.abort()
    receiving.cancel()
    return {"audio_sent_s": round(sent, 2), "words_came": got_words.is_set()}


async def check_stream(url: str, words: list[str]) -> bool:
    """A short stream works: nine words at once, every one a single final event, then ``end``."""
    res = PunctResult()
    ws = await open_punct(url)
    receiving = asyncio.create_task(punct_receive(ws, res))
    for j in range(9):
        res.sent.append(time.perf_counter())
        await ws.send(word_message(words[j], j))
    await ws.send(json.dumps({"type": "end"}))
    try:
        await asyncio.wait_for(receiving, 30)
    except asyncio.TimeoutError:
        res.failure = "no end within 30 s"
    await ws.close()
    return sound(tally([res]))


async def fault_kills(
    server: Server, args: argparse.Namespace, words: list[str], audio: Any
) -> dict[str, Any]:
    kills = []
    for k in range(args.kills):
        answered = await kill_punct(server.url, words, k * 131)
        left, waited = await wait_streams_zero(server.url)
        kills.append(
            {
                "answered_before_kill": answered,
                "streams_after": left,
                "seconds_to_zero": waited,
                "rss_mb": await settled_rss(server, 0.2),
            }  # fmt: skip
        )
    ref = min(4, len(kills) - 1)  # the 5th kill's RSS (the first's in a short run)
    growth = round(kills[-1]["rss_mb"] - kills[ref]["rss_mb"], 1) if kills else None
    out: dict[str, Any] = {
        "punct_kills": len(kills),
        "streams_after_each": [k["streams_after"] for k in kills],
        "max_seconds_to_zero": max((k["seconds_to_zero"] for k in kills), default=None),
        "rss_mb": [k["rss_mb"] for k in kills],
        "rss_from_kill": ref + 1,
        "rss_growth_mb": growth,
        "kills_answered_before_cut": sum(k["answered_before_kill"] for k in kills),
    }
    ok = all(k["streams_after"] == 0 for k in kills) and growth is not None and growth <= RSS_SLACK_MB
    if audio is not None:
        a = await kill_asr(server.url, audio)
        left, waited = await wait_streams_zero(server.url)
        a.update(streams_after=left, seconds_to_zero=waited, rss_mb=await settled_rss(server, 0.2))
        out["asr_kill"] = a
        ok = ok and left == 0
    else:
        out["asr_kill"] = {"skipped": args.asr_note or "not in --quick"}
    out["stream_after_kills_ok"] = await check_stream(server.url, words)
    out["passed"] = ok and out["stream_after_kills_ok"]
    return out


async def fault_sigterm(
    server: Server, args: argparse.Namespace, words: list[str], keep_talking: bool = False
) -> dict[str, Any]:
    """Streams at 3 words a second, then SIGTERM to ``server`` (a fresh one). The clients stop
    sending at the signal, or, with ``keep_talking``, go on as a live recogniser does until the
    server ends their stream (or, at the latest, ``--keep-talking-cap-s`` after the signal, when
    they end it themselves)."""
    await asyncio.sleep(0.5)  # (the server installs its signal handlers after it says it serves)
    n = args.sigterm_streams
    await warm_up(server.url, words)
    opened = [await open_punct(server.url) for _ in range(n)]
    results = [PunctResult() for _ in range(n)]
    stop = None if keep_talking else asyncio.Event()
    t0 = time.perf_counter() + 0.3
    cap = args.keep_talking_cap_s if keep_talking else 10.0  # without it: more than the signal allows
    n_words = int((args.sigterm_seconds + cap) * RATE)
    tasks = [
        asyncio.create_task(
            punct_live(ws, results[i], words, i * 997, t0, i / (RATE * n), n_words, stop=stop, end_wait=600)
        )
        for i, ws in enumerate(opened)
    ]
    await asyncio.sleep(max(0.0, t0 + args.sigterm_seconds - time.perf_counter()))
    if stop is not None:
        stop.set()
    signalled = time.perf_counter()
    server.proc.send_signal(signal.SIGTERM)
    try:
        status: int | None = await asyncio.to_thread(server.proc.wait, 600)
    except Exception:
        server.proc.kill()
        status = None
    exit_s = round(time.perf_counter() - signalled, 3)
    await asyncio.gather(*tasks)
    t = tally(results)
    before = after = lost = after_final = 0
    for r in results:
        for j, sent_at in enumerate(r.sent):
            one = len(r.finals.get(j, [])) == 1
            if sent_at <= signalled:
                before += 1
                lost += not one
            else:
                after += 1
                after_final += one
    reasons = [r.end.get("reason") if r.end else None for r in results]
    codes = [r.close_code for r in results]
    good_end = sum(x == "server shutting down" for x in reasons)
    out = {
        "streams": n,
        "clients_keep_talking": keep_talking,
        "seconds_before_signal": args.sigterm_seconds,
        "words_sent": before,
        "words_final": before - lost,
        "words_lost": lost,
        "streams_ended_shutting_down": good_end,
        "close_codes": sorted(set(c for c in codes if c is not None)) + [None] * codes.count(None),
        "signal_to_exit_s": exit_s,
        "exit_status": status,
        "server_failures_logged": len(server.failures_logged()),
        "errors": t["errors"],
        "failures": t["failures"],
    }
    good = lost == 0 and good_end == n and all(c == 1001 for c in codes) and status == 0 and not t["errors"]
    if keep_talking:
        grace = 2 * Limits().shutdown_grace_s  # taking what clients send, then finishing: docs/protocol.md
        out.update(
            words_sent_after_signal=after,
            of_those_final=after_final,
            cap_s=cap,
            exit_within_s=grace,
        )
        # the server must end the streams itself, soon: not wait for its clients to fall silent
        out["passed"] = good and exit_s <= grace
    else:
        out["passed"] = good and not t["failures"] and t["finals_for_unsent_words"] == 0
    return out


def tcp_queues(port_a: int, port_b: int) -> dict[str, int] | None:
    """Bytes queued in the kernel on the loopback connection between two ports (Linux
    /proc/net/tcp): each side's send queue (not yet taken by the other side's kernel) and
    receive queue (not yet read by its program)."""
    found: dict[str, int] = {}
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        f = line.split()
        local, remote = int(f[1].split(":")[1], 16), int(f[2].split(":")[1], 16)
        tx, rx = (int(x, 16) for x in f[4].split(":"))
        for name, port in (("server", port_a), ("client", port_b)):
            other = port_b if port == port_a else port_a
            if local == port and remote == other:
                found[f"{name}_send_queue"], found[f"{name}_recv_queue"] = tx, rx
    return found or None


def replies_queued(sample: dict[str, Any]) -> int | None:
    if "server_send_queue" not in sample:
        return None
    return sample["server_send_queue"] + sample["client_recv_queue"]


def logged_words(server: Server, session: str) -> int | None:
    """The words the server took from a session, by its ``disconnect`` log line."""
    for line in server.log.read_text(errors="replace").splitlines():
        if '"disconnect"' in line:
            entry = json.loads(line)
            if entry.get("session") == session:
                return entry.get("words")
    return None


class StalledReader:
    """Config, ``ready``, then words at 90 % of the server's rate limit (20 a message), never reading
    again: its socket's receive buffer is small, and the client stops reading once one frame waits."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.session = ""
        self.port = 0
        self.words_sent = 0
        self.blocked = 0.0  # seconds the client's sends waited: the server stopped taking its words
        self.closed_by_server: str | None = None

    async def run(self, words: list[str], seconds: float) -> None:
        u = urlparse(self.url)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, STALL_RCVBUF)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (u.hostname, u.port))
        self.port = sock.getsockname()[1]
        ws = await connect(
            self.url + "/v1/punct",
            sock=sock,
            max_queue=1,
            compression=None,  # the server's replies as they are: the most bytes to hold
            ping_interval=None,
            open_timeout=60,
        )
        await ws.send(json.dumps({"type": "config", "version": 1, **PUNCT_CONFIG}))
        self.session = json.loads(await ws.recv()).get("session", "")
        per_message = 20
        rate = 0.9 * (Limits().words_per_s or 200.0)
        t0 = time.perf_counter()
        deadline = t0 + seconds
        k = 0
        while time.perf_counter() < deadline:
            await asyncio.sleep(max(0.0, t0 + k * per_message / rate - time.perf_counter()))
            batch = [words[(k * per_message + j) % len(words)] for j in range(per_message)]
            t = time.perf_counter()
            try:
                await asyncio.wait_for(
                    ws.send(json.dumps({"type": "words", "words": batch})), max(0.01, deadline - t)
                )
            except asyncio.TimeoutError:
                self.blocked += time.perf_counter() - t
                break
            except ConnectionClosed as e:
                self.closed_by_server = str(e)
                break
            self.blocked += max(0.0, time.perf_counter() - t - 0.01)
            self.words_sent += per_message
            k += 1
        self.ws = ws

    def cut(self) -> None:
        self.ws.transport.abort()


async def fault_stall(server: Server, args: argparse.Namespace, words: list[str]) -> dict[str, Any]:
    seconds = args.stall_seconds
    if not args.quick:
        await warm_up(server.url, words, messages=10, per_message=20)  # the stalled reader's shapes
    alone = await punct_trial(server.url, words, 1, args.stall_alone_seconds, tag=101)
    samples: list[dict[str, Any]] = []
    stalled = StalledReader(server.url)
    server_port = urlparse(server.url).port or 0
    t0 = time.perf_counter()

    def sample() -> None:
        mb = rss_mb(server.pid)
        samples.append(
            {"t": round(time.perf_counter() - t0, 1), "rss_mb": None if mb is None else round(mb, 1)}
            | ((stalled.port and tcp_queues(server_port, stalled.port)) or {})
        )

    async def watch() -> None:
        while True:
            sample()
            await asyncio.sleep(args.rss_every_s)

    watching = asyncio.create_task(watch())
    _, beside = await asyncio.gather(
        stalled.run(words, seconds), punct_trial(server.url, words, 1, seconds, tag=202)
    )
    watching.cancel()
    sample()
    stalled.cut()
    left, waited = await wait_streams_zero(server.url)
    mbs = [x["rss_mb"] for x in samples if x["rss_mb"] is not None]
    growth_2nd_half = round(mbs[-1] - mbs[len(mbs) // 2], 1) if mbs else None
    out = {
        "seconds": seconds,
        "stalled_client": {
            "words_sent": stalled.words_sent,
            "words_taken_by_server": logged_words(server, stalled.session),
            "send_blocked_s": round(stalled.blocked, 2),
            "closed_by_server": stalled.closed_by_server,
            # the server's replies it never read, held by the kernel (the server's socket send buffer
            # and the client's receive buffer) at the end: not in the server's RSS
            "replies_queued_bytes": replies_queued(samples[-1]),
        },
        "samples": samples,
        "rss_growth_second_half_mb": growth_2nd_half,
        "neighbour_alone": {"words": alone["words"], "lost": alone["lost"], "latency_s": alone["latency_s"]},
        "neighbour_beside_stall": {
            "words": beside["words"],
            "lost": beside["lost"],
            "latency_s": beside["latency_s"],
        },
        "streams_after_cut": left,
        "seconds_to_zero": waited,
    }
    # a few seconds are too few to tell a level from a slope: the RSS is judged from 20 s on
    out["rss_judged"] = seconds >= 20
    levelled = growth_2nd_half is not None and growth_2nd_half <= RSS_SLACK_MB
    out["passed"] = (levelled or not out["rss_judged"]) and sound(alone) and sound(beside) and left == 0
    return out


async def section_faults(
    args: argparse.Namespace, servers: Servers, words: list[str], labels: list[str]
) -> dict[str, Any]:
    audio = None
    if args.asr_ok and not args.quick:
        audio = speech(words, labels, 15)
    # the servers for SIGTERM (a fresh one each) start meanwhile
    variants = [("sigterm", False)] + ([] if args.quick else [("sigterm_keep_talking", True)])
    servers.start("faults", *(name for name, _ in variants))
    server = await servers.get("faults")
    try:
        await warm_up(server.url, words)
        kills = await fault_kills(server, args, words, audio)
        print(
            f"faults a: {kills['punct_kills']} kills, streams after each {set(kills['streams_after_each'])}, "
            f"RSS {kills['rss_mb'][0]} -> {kills['rss_mb'][-1]} MB (growth from kill {kills['rss_from_kill']}: "
            f"{kills['rss_growth_mb']} MB), asr kill {kills['asr_kill']}: {'pass' if kills['passed'] else 'FAIL'}",
            flush=True,
        )
        for name, _ in variants:  # started before the stall, which measures latency
            await servers.starting[name]
        stall = await fault_stall(server, args, words)
        a, b = stall["neighbour_alone"]["latency_s"], stall["neighbour_beside_stall"]["latency_s"]
        sc = stall["stalled_client"]
        print(
            f"faults c: stalled reader sent {sc['words_sent']} words, the server took {sc['words_taken_by_server']} "
            f"(sends blocked {sc['send_blocked_s']} s); RSS {[x['rss_mb'] for x in stall['samples']]} MB; "
            f"neighbour p99 alone {a['p99']} s, beside it {b['p99']} s: {'pass' if stall['passed'] else 'FAIL'}",
            flush=True,
        )
    finally:
        status = server.stop()
    failures_logged = len(server.failures_logged())
    out: dict[str, Any] = {"killed_clients": kills, "stalled_reader": stall}
    out["sigterm_keep_talking"] = {"skipped": "not in --quick"}
    for name, keep_talking in variants:
        st = out[name] = await fault_sigterm(await servers.get(name), args, words, keep_talking)
        after = (
            f"; {st['words_sent_after_signal']} words sent after it, {st['of_those_final']} final"
            if keep_talking
            else ""
        )
        print(
            f"faults b{'2' if keep_talking else ''}: SIGTERM after {st['words_sent']} words from {st['streams']} "
            f"streams{' that keep talking' if keep_talking else ''}: {st['words_final']} final, {st['words_lost']} "
            f"lost{after}; {st['streams_ended_shutting_down']} ends 'server shutting down', exit "
            f"{st['exit_status']} after {st['signal_to_exit_s']} s: {'pass' if st['passed'] else 'FAIL'}",
            flush=True,
        )
    checks = (kills, stall, out["sigterm"], out["sigterm_keep_talking"])
    out.update(
        server_exit_status=status,
        server_failures_logged=failures_logged,
        passed=all(c.get("passed", True) for c in checks) and status == 0,
    )
    return out


# --- report --------------------------------------------------------------------------------------


def _s(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


# --- overload (issue 48) -------------------------------------------------------------------------

OVERLOAD_SIZES = (1, 5, 20, 100)  # words a message, one size a sender, in turn
OVERLOAD_LONG = "internationalisation counterrevolutionaries incomprehensibility uncharacteristically".split()
RESEND_QUIET_S = 1.0  # after `busy`: resend once no busy came for this long


@dataclass
class Sender:
    """One /v1/punct client of the overload profile: words in messages of ``size``, resent from the
    index a ``busy`` gives, as a revise (docs/protocol.md, Falling behind)."""

    size: int
    cfg: dict[str, Any]
    words: list[str] = field(default_factory=list)  # every word meant for the stream, in order
    sent_at: dict[int, float] = field(default_factory=dict)  # the last send of word i
    finals: dict[int, int] = field(default_factory=dict)  # final events of word i
    final_at: dict[int, float] = field(default_factory=dict)
    busy_at: float | None = None
    refused: int | None = None
    busy: int = 0
    resends: int = 0
    end: dict[str, Any] | None = None
    close_code: int | None = None
    errors: list[str] = field(default_factory=list)

    async def receive(self, ws: ClientConnection) -> None:
        with contextlib.suppress(ConnectionClosed):
            async for raw in ws:
                msg = json.loads(raw)
                if msg["type"] == "events":
                    for e in msg["events"]:
                        if e["final"]:
                            self.finals[e["index"]] = self.finals.get(e["index"], 0) + 1
                            self.final_at[e["index"]] = time.perf_counter()
                elif msg["type"] == "error" and msg["code"] == "busy":
                    self.busy += 1
                    self.busy_at, self.refused = time.perf_counter(), msg["word"]
                elif msg["type"] == "error":
                    self.errors.append(f"{msg['code']}: {msg['message']}")
                elif msg["type"] == "end":
                    self.end = msg
        self.close_code = ws.close_code

    async def send(self, ws: ClientConnection, start: int, kind: str = "words") -> None:
        chunk = self.words[start : start + 1000]
        msg: dict[str, Any] = {"type": kind, "words": chunk}
        if kind == "revise":
            msg["index"] = start
            self.resends += 1
        t = time.perf_counter()
        for i in range(start, start + len(chunk)):
            self.sent_at[i] = t
        await ws.send(json.dumps(msg))

    async def run(self, url: str, source: list[str], rate: float, seconds: float, end_wait: float) -> None:
        ws = await open_punct(url, self.cfg, ping_interval=20, ping_timeout=20)
        receiving = asyncio.create_task(self.receive(ws))
        t0, i, j = time.perf_counter(), 0, 0  # i: words sent (and taken, as far as known)
        try:
            while time.perf_counter() - t0 < seconds and not receiving.done():
                if self.refused is not None:  # told busy: wait for quiet, then resend from there
                    if time.perf_counter() - (self.busy_at or 0) < RESEND_QUIET_S:
                        await asyncio.sleep(0.1)
                        continue
                    start, self.refused = self.refused, None
                    await self.send(ws, start, "revise")
                    i = start + min(1000, len(self.words) - start)
                    continue
                self.words += [source[(j + k) % len(source)] for k in range(self.size)]
                j += self.size
                await self.send(ws, i)
                i += self.size
                await asyncio.sleep(max(0.0, t0 + j / rate - time.perf_counter()))
            while self.refused is not None and not receiving.done():  # what is left, then end
                await asyncio.sleep(max(0.0, RESEND_QUIET_S - (time.perf_counter() - (self.busy_at or 0))))
                start, self.refused = self.refused, None
                await self.send(ws, start, "revise")
                await asyncio.sleep(RESEND_QUIET_S)
            await ws.send(json.dumps({"type": "end"}))
            await asyncio.wait_for(asyncio.shield(receiving), end_wait)
        except (ConnectionClosed, asyncio.TimeoutError) as e:
            self.errors.append(f"{type(e).__name__}: {e}")
        finally:
            receiving.cancel()
            await ws.close()

    def tally(self) -> dict[str, Any]:
        n = self.end["words"] if self.end else None
        once = n is not None and all(self.finals.get(i) == 1 for i in range(n)) and len(self.finals) == n
        return {
            "size": self.size,
            "lookahead": self.cfg["lookahead"],
            "words_taken": n,
            "one_final_each": once,
            "end": self.end is not None,
            "close_code": self.close_code,
            "busy": self.busy,
            "resends": self.resends,
            "errors": self.errors[:5],
            "latency_s": [self.final_at[i] - self.sent_at[i] for i in self.final_at if i in self.sent_at],
        }


async def overload_capacity(url: str, words: list[str], n: int = 600) -> float:
    """Words a second the server finalises for one stream at the default config, pushed as fast as
    it takes them (messages of 50)."""
    sender = Sender(50, PUNCT_CONFIG)
    t0 = time.perf_counter()
    ws = await open_punct(url, PUNCT_CONFIG)
    receiving = asyncio.create_task(sender.receive(ws))
    for i in range(0, n, 50):
        await ws.send(json.dumps({"type": "words", "words": words[i : i + 50]}))
    await ws.send(json.dumps({"type": "end"}))
    await asyncio.wait_for(receiving, 600)
    return n / (time.perf_counter() - t0)


async def section_overload(args: argparse.Namespace, words: list[str]) -> dict[str, Any]:
    server = await asyncio.to_thread(start_server, "--device", args.device, *args.model_args)
    try:
        await overload_capacity(server.url, words, 100)  # warm-up
        capacity = await overload_capacity(server.url, words)
        await asyncio.sleep(LOAD_WINDOW_S + 1)  # its load leaves the window: the profile's streams get in
        offered = args.overload_factor * capacity
        rate = min(offered / args.overload_senders, Limits().words_per_s or math.inf)
        senders = [
            Sender(OVERLOAD_SIZES[i % len(OVERLOAD_SIZES)], PUNCT_CONFIG)
            for i in range(args.overload_senders)
        ]
        hog = Sender(1000, {"lookahead": 64, "max_delay_ms": None})
        hog_done: dict[str, float] = {}
        seconds = args.overload_seconds
        end_wait = args.overload_end_wait_s

        async def one_hog() -> None:
            t0 = time.perf_counter()
            await hog.run(server.url, OVERLOAD_LONG, rate=1e9, seconds=0.001, end_wait=end_wait)
            hog_done["s"] = time.perf_counter() - t0

        refusals: list[dict[str, Any]] = []

        async def knock() -> None:  # a new stream every 5 s: refused (503) or let in
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                await asyncio.sleep(5.0)
                try:
                    ws = await connect(server.url + "/v1/punct")
                    await ws.close()
                    refusals.append({"t": round(time.perf_counter() - t0, 1), "status": 101})
                except InvalidStatus as e:
                    refusals.append(
                        {
                            "t": round(time.perf_counter() - t0, 1),
                            "status": e.response.status_code,
                            "retry_after": e.response.headers.get("Retry-After"),
                            "code": json.loads(e.response.body or b"{}").get("code"),
                        }
                    )

        t0 = time.perf_counter()
        await asyncio.gather(
            one_hog(),
            knock(),
            *(
                s.run(server.url, words[i * 97 :] + words, rate, seconds, end_wait)
                for i, s in enumerate(senders)
            ),
        )
        wall = time.perf_counter() - t0
        streams = [s.tally() for s in [*senders, hog]]
        latencies = [x for s in streams[:-1] for x in s.pop("latency_s")]
        hog_tally = streams[-1]
        hog_tally.pop("latency_s")
        sound = all(s["one_final_each"] and s["end"] and s["close_code"] == 1000 for s in streams)
        return {
            "config": {
                "seconds": seconds,
                "factor": args.overload_factor,
                "senders": args.overload_senders,
                "sizes": list(OVERLOAD_SIZES),
                "words_per_s_each": round(rate, 1),
                "sender_config": PUNCT_CONFIG,
                "hog": "one 1000-word message of long words at lookahead 64, then end",
            },
            "capacity_words_per_s": round(capacity, 1),
            "offered_words_per_s": round(rate * len(senders), 1),
            "wall_s": round(wall, 1),
            "streams": streams,
            "words_taken": sum(s["words_taken"] or 0 for s in streams),
            "busy": sum(s["busy"] for s in streams),
            "close_codes": sorted({str(s["close_code"]) for s in streams}),
            "latency_s": stats(latencies),
            "hog_s": round(hog_done.get("s", math.nan), 1),
            "new_streams": refusals,
            "sound": sound,
        }
    finally:
        await asyncio.to_thread(server.stop)


def overload_table(o: dict[str, Any]) -> list[str]:
    c = o["config"]
    lat = o["latency_s"]
    refused = [r for r in o["new_streams"] if r["status"] == 503]
    ok = sum(s["one_final_each"] and s["end"] for s in o["streams"])
    return [
        f"**Overload** (issue 48): capacity measured first (one stream at lookahead 2 pushed as fast as "
        f"taken): **{o['capacity_words_per_s']:g} words/s**. Then {c['senders']} senders at "
        f"{c['words_per_s_each']:g} words/s each ({o['offered_words_per_s']:g} words/s, {c['factor']:g} x capacity) in "
        f"messages of {', '.join(map(str, c['sizes']))} words, for {c['seconds']:g} s, beside {c['hog']}; "
        "a `busy` is resent as a revise after 1 s of quiet; a new stream tried every 5 s.",
        "",
        "| streams with every taken word final once and `end` | close codes | words taken | `busy` | "
        "p50 s | p99 s | max s | 1000-word k=64 message s | new streams refused (503, Retry-After) |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {ok} of {len(o['streams'])} | {', '.join(o['close_codes'])} | {o['words_taken']:,} | {o['busy']} "
        f"| {_s(lat['p50'])} | {_s(lat['p99'])} | {_s(lat['max'])} | {o['hog_s']:g} "
        f"| {len(refused)} of {len(o['new_streams'])} |",
        "",
        _machine_line(o),
        "",
    ]


def markdown(payload: dict[str, Any]) -> str:
    """The figures as markdown tables (for docs/protocol.md)."""
    sections = payload.get("sections", {})
    out: list[str] = []
    p = sections.get("punct")
    if p:
        c = p["config"]
        out += [
            f"**/v1/punct**: N live streams of {c['words_per_s']:g} words a second (lookahead "
            f"{c['lookahead']}, time limit {c['max_delay_ms']} ms) for {c['seconds']:g} s each; latency from "
            f"a word sent to its final event; a run passes at p99 <= {c['bound_s']:g} s with no word lost. "
            f"Largest passing N: **{p['largest_passing_streams']}**.",
            "",
            "| streams | words | lost | p50 s | p95 s | p99 s | max s | server RSS MB | pass |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in sorted(p["runs"], key=lambda r: r["streams"]):
            lat = r["latency_s"]
            out.append(
                f"| {r['streams']} | {r['words']:,} | {r['lost']} | {_s(lat['p50'])} | {_s(lat['p95'])} "
                f"| {_s(lat['p99'])} | {_s(lat['max'])} | {_s(r['server_rss_mb'], 0)} | {'yes' if r['passed'] else 'no'} |"
            )
        out += ["", _machine_line(p), ""]
    r = sections.get("punct_ray")
    if r:
        runs = ", ".join(
            f"{x['streams']}: {_s(x['latency_s']['p99'])} s{'' if x['passed'] else ' (no)'}"
            for x in sorted(r["runs"], key=lambda x: x["streams"])
        )
        out += [
            f"On `streampunct serve-ray` (`--ray`: session replicas and one encoder), p99 by streams: {runs}. "
            f"Largest passing N: **{r['largest_passing_streams']}**. {_machine_line(r)}",
            "",
        ]
    a = sections.get("asr")
    if a and "skipped" in a:
        out += [f"**/v1/asr**: skipped ({a['skipped']}).", ""]
    elif a:
        c = a["config"]
        audio = a["runs"][0]["audio_s_each"] if a["runs"] else 0
        out += [
            f"**/v1/asr**: N streams of {audio:.0f} s of espeak-ng speech at real time in {c['chunk_s']:g} s "
            f"chunks ({c['asr_model']}); latency from a word's end in the audio to its final event. Largest N "
            f"without lag: **{a['largest_streams_without_lag']}**.",
            "",
            "| streams | lag messages | skipped s | words committed | one final | p50 s | p95 s | pass |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in a["runs"]:
            lat = r["latency_s"]
            out.append(
                f"| {r['streams']} | {r['lag_messages']} | {r['skipped_s']:.1f} | {r['words_committed']} "
                f"| {r['words_one_final']} | {_s(lat['p50'])} | {_s(lat['p95'])} | {'yes' if r['passed'] else 'no'} |"
            )
        out += ["", _machine_line(a), ""]
    f = sections.get("faults")
    if f:
        out += faults_table(f)
    o = sections.get("overload")
    if o:
        out += overload_table(o)
    return "\n".join(out).rstrip() + "\n"


def faults_table(f: dict[str, Any]) -> list[str]:
    k, st = f["killed_clients"], f["stalled_reader"]
    ak = k["asr_kill"]
    asr = (
        f"; a /v1/asr stream cut after {ak['audio_sent_s']:g} s of audio: {ak['streams_after']} streams after"
        if "skipped" not in ak
        else ""
    )
    yes = lambda x: "yes" if x["passed"] else "no"
    rows = [
        "| fault | result | pass |",
        "|---|---|---|",
        f"| {k['punct_kills']} /v1/punct connections cut (no close frame) after {KILL_WORDS} words "
        f"| /health: {max(k['streams_after_each'], key=lambda x: x or 0)} streams after each (at most "
        f"{_s(k['max_seconds_to_zero'])} s); RSS {k['rss_growth_mb']:+.1f} MB from kill {k['rss_from_kill']} "
        f"to the last{asr} | {yes(k)} |",
    ]
    for name in ("sigterm", "sigterm_keep_talking"):
        s = f.get(name, {})
        if not s or "skipped" in s:
            continue
        talking = s["clients_keep_talking"]
        after = (
            f", {s['words_sent_after_signal']} sent after it ({s['of_those_final']} final)" if talking else ""
        )
        rows.append(
            f"| SIGTERM with {s['streams']} streams at 3 words/s"
            f"{', the clients keep talking' if talking else ', the clients stop'} "
            f"| {s['words_sent']} words sent before it, {s['words_final']} final, {s['words_lost']} lost{after}; "
            f'{s["streams_ended_shutting_down"]} ends "server shutting down"; exit {s["exit_status"]} after '
            f"{s['signal_to_exit_s']:.2f} s | {yes(s)} |"
        )
    rss = [x["rss_mb"] for x in st["samples"] if x["rss_mb"] is not None]
    sc = st["stalled_client"]
    q = sc.get("replies_queued_bytes")
    queued = "" if q is None else f", {q / 1000:.0f} kB of its replies wait in the kernel"
    rows += [
        f"| a reader that stalls for {st['seconds']:g} s, sending at 90 % of the rate limit "
        f"| it sent {sc['words_sent']:,} words, the server took {sc['words_taken_by_server']}"
        f"{queued}; RSS "
        f"{_s(min(rss, default=None), 0)} to {_s(max(rss, default=None), 0)} MB "
        f"({_s(st['rss_growth_second_half_mb'], 1)} MB over the second half); neighbour p99 "
        f"{_s(st['neighbour_alone']['latency_s']['p99'])} s alone, "
        f"{_s(st['neighbour_beside_stall']['latency_s']['p99'])} s beside it | {yes(st)} |",
        "",
        _machine_line(f),
    ]
    return rows


def _machine_line(section: dict[str, Any]) -> str:
    m = section.get("machine", {})
    return (
        f"{m.get('cpu')} ({m.get('cores')} cores), {m.get('gpu') or 'no GPU'}, {m.get('date')}: "
        f"`{section.get('command', 'python benchmarks/server_load.py')}`."
    )


def write_docs(payload: dict[str, Any], page: Path = DOCS) -> bool:
    """The tables between the markers of ``page``; False if it has none."""
    text = page.read_text()
    start, end = (re.escape(m) for m in MARKERS)
    pattern = re.compile(rf"({start}\n?).*?({end})", re.S)
    if not pattern.search(text):
        return False
    page.write_text(
        pattern.sub(lambda m: m.group(1).rstrip("\n") + "\n" + markdown(payload) + m.group(2), text)
    )
    return True


# --- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_data = os.environ.get("STREAMPUNCT_DATA", str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--sections", default="punct,asr,faults", help="any of punct, asr, faults (default: all)")
    ap.add_argument("--quick", action="store_true", help="a tiny version of everything, under 30 s")
    ap.add_argument("--data", type=Path, default=Path(default_data), help="a folder laid out as shared/data")
    ap.add_argument("--device", default="cpu", help="the server's device (cpu, cuda)")
    ap.add_argument("--model", default=None, help="punctuation model: default, base or a checkpoint folder")
    ap.add_argument("--asr-model", default=None, help="tiny.en (the server's default), base or a folder")
    g = ap.add_argument_group("punct")
    g.add_argument(
        "--streams", default=None, help="the Ns to run, e.g. 10,20 (default: 5, 10, 20, ... then bisect)"
    )
    g.add_argument(
        "--max-streams", type=int, default=320, help="where the doubling stops (default %(default)s)"
    )
    g.add_argument("--seconds", type=float, default=30.0, help="per run (default %(default)s)")
    g.add_argument("--bound-s", type=float, default=1.5, help="p99 latency bound (default %(default)s)")
    g = ap.add_argument_group("asr")
    g.add_argument("--asr-seconds", type=float, default=60.0, help="speech per stream (default %(default)s)")
    g.add_argument("--asr-max-streams", type=int, default=12, help="the most N tried (default %(default)s)")
    g = ap.add_argument_group("overload (issue 48; not in the default sections)")
    g.add_argument("--overload-seconds", type=float, default=60.0, help="(default %(default)s)")
    g.add_argument(
        "--overload-factor", type=float, default=3.0, help="x the measured capacity (default %(default)s)"
    )
    g.add_argument("--overload-senders", type=int, default=8, help="(default %(default)s)")
    g.add_argument(
        "--overload-end-wait-s", type=float, default=900.0, help="for each end (default %(default)s)"
    )
    g = ap.add_argument_group("faults")
    g.add_argument("--kills", type=int, default=20, help="connections cut (default %(default)s)")
    g.add_argument("--sigterm-streams", type=int, default=10, help="(default %(default)s)")
    g.add_argument(
        "--sigterm-seconds", type=float, default=10.0, help="before the signal (default %(default)s)"
    )
    g.add_argument(
        "--keep-talking-cap-s",
        type=float,
        default=45.0,
        help="SIGTERM with clients that keep talking: when they stop (default %(default)s)",
    )
    g.add_argument("--stall-seconds", type=float, default=30.0, help="(default %(default)s)")
    g.add_argument(
        "--rss-every-s", type=float, default=5.0, help="RSS samples in the stall (default %(default)s)"
    )
    ap.add_argument(
        "--ray", type=int, default=None, metavar="N",
        help="punct section on `streampunct serve-ray`: N session replicas, one encoder (settings.ray)",
    )  # fmt: skip
    ap.add_argument("--out", type=Path, default=None, help="default: benchmarks/results/server_load.json")
    ap.add_argument("--docs", action="store_true", help="write the tables into docs/protocol.md's markers")
    ap.add_argument("--docs-only", action="store_true", help="only that, from the results file; run nothing")
    args = ap.parse_args(argv)
    if args.quick:
        args.sections = "punct,faults"
        args.streams = args.streams or "2"
        args.seconds, args.kills = 3.0, 3
        args.sigterm_streams, args.sigterm_seconds = 2, 2.0
        args.stall_seconds, args.rss_every_s = 3.0, 1.0
    args.stall_alone_seconds = 2.0 if args.quick else args.stall_seconds
    args.out = args.out or RESULTS / ("server_load_quick.json" if args.quick else "server_load.json")
    args.punct_model_args = ["--model", args.model] if args.model else []
    args.model_args = args.punct_model_args + (["--asr-model", args.asr_model] if args.asr_model else [])
    unknown = set(args.sections.split(",")) - {"punct", "asr", "faults", "overload", ""}
    if unknown:
        ap.error(f"unknown sections {', '.join(sorted(unknown))} (punct, asr, faults, overload)")
    return args


def asr_available(args: argparse.Namespace) -> None:
    """Whether /v1/asr can be measured here; the note if not."""
    import shutil

    args.asr_ok, args.asr_note = True, None
    if shutil.which("espeak-ng") is None:
        args.asr_ok, args.asr_note = False, "espeak-ng is not installed"
        return
    try:
        from streampunct.speech import resolve_asr_model

        resolve_asr_model(args.asr_model)
        import faster_whisper  # noqa: F401
    except (ImportError, StreamPunctError) as e:
        args.asr_ok, args.asr_note = False, f"no speech recogniser: {e}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    previous: dict[str, Any] = {}
    if args.out.is_file():
        previous = json.loads(args.out.read_text())
    if args.docs_only:
        if not previous:
            raise SystemExit(f"no results in {args.out}")
        print(markdown(previous))
        if not write_docs(previous):
            print(f"no {' ... '.join(MARKERS)} markers in {DOCS}: nothing written")
        return 0
    asr_available(args)
    words, labels, source = load_text(args.data)
    command = " ".join(["python", "benchmarks/server_load.py", *(sys.argv[1:] if argv is None else argv)])
    info = machine()
    run_at = {"command": command, "machine": info, "device": args.device, "text": source}
    wanted = [s for s in ("punct", "asr", "faults", "overload") if s in args.sections.split(",")]
    t0 = time.perf_counter()

    async def run_all() -> dict[str, Any]:
        done: dict[str, Any] = {}
        servers = Servers(args)
        if args.quick:  # every server at once: they load while the others work
            servers.start(*wanted, *(["sigterm"] if "faults" in wanted else []))
        try:
            for name in wanted:
                t = time.perf_counter()
                if name == "punct":
                    figures = await section_punct(args, servers, words)
                elif name == "asr":
                    figures = await section_asr(args, servers, words, labels)
                elif name == "overload":
                    figures = await section_overload(args, words)
                else:
                    figures = await section_faults(args, servers, words, labels)
                key = "punct_ray" if name == "punct" and args.ray else name  # beside the plain server's
                done[key] = {**run_at, "wall_s": round(time.perf_counter() - t, 1), **figures}
        finally:
            await servers.close()
        return done

    sections = asyncio.run(run_all())
    ok = all(
        s.get("sound", True) and s.get("passed", True) if name == "faults" else s.get("sound", True)
        for name, s in sections.items()
    )
    payload = {
        "command": command,
        "machine": info,
        "quick": args.quick,
        "passed": ok,
        "wall_s": round(time.perf_counter() - t0, 1),
        "sections": {**previous.get("sections", {}), **sections},
    }
    if args.out.parent.resolve() == RESULTS.resolve():
        path = write_json(args.out.name, payload)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(payload, indent=2) + "\n")
        path = args.out
    print()
    print(markdown({"sections": sections}))
    if args.docs and not write_docs(payload):
        print(f"no {' ... '.join(MARKERS)} markers in {DOCS}: nothing written")
    print(f"{'passed' if ok else 'FAILED'} in {payload['wall_s']:.0f} s; wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
