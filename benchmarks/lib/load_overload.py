"""The overload section of ``python -m benchmarks.server_load`` (issue 48): senders at a multiple of the
measured capacity, each ``busy`` resent as a revise, a hog beside them, new streams knocking."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from benchmarks.common import start_server
from benchmarks.lib.load_streams import PUNCT_CONFIG, open_punct, stats
from streampunct.options import Limits
from streampunct.scheduler import LOAD_WINDOW_S

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
