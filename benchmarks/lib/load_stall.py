"""The stalled reader of ``python -m benchmarks.server_load``'s faults: a client that sends at 90 % of the
rate limit and never reads, the server's memory and the kernel's queues on its connection watched,
a neighbour stream timed beside it."""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from benchmarks.common import Server, rss_mb
from benchmarks.lib.load_streams import (
    PUNCT_CONFIG,
    RSS_SLACK_MB,
    STALL_RCVBUF,
    punct_trial,
    sound,
    wait_streams_zero,
    warm_up,
)
from streampunct.options import Limits


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
