"""Eight hours of a server's traffic in three: the soak counted in events, with a leak that must fail.

    python -m benchmarks.soak_events --data ../shared/data                           # eight hours' events
    python -m benchmarks.soak_events --data ../shared/data --share 0.02 --cycles 4   # a short run
    python -m benchmarks.soak_events --data ../shared/data --arenas 2                # the allocator's arm

Eight hours of traffic as counts (``EIGHT_HOURS``): 10 /v1/punct streams of recogniser words for 8 h
each on a simulated clock (``benchmarks.lib.soak_punct``: about 3.3 words a second, pauses with
ticks, revisions, late revisions that must be refused), 2,000 connections opened and closed beside
them, and /v1/asr speech with a long pause in its own lane, at real speed. They run in ``--cycles``
identical cycles, each 1/cycles of every count (``--share`` scales them all, for a short run): words
as fast as the server answers, churn and faults at their full count. A cycle's churn takes, in turn:
clean closes, RST closes (``SO_LINGER`` 0), clients that send and stop reading (then reset), bad
frames (not JSON, a binary frame, an unknown type, a message over the size limit), and reconnect
storms (ten at once; one refused retries at once, as a client that ignores ``busy``).

At each cycle's end, with every client gone, the server's census (``/debug/census``, after
``gc.collect()``: :mod:`streampunct.server.census`): traced bytes (tracemalloc), live objects by type,
file descriptors, tasks, threads, resident memory before and after ``malloc_trim(0)``.

The rule (``verdict``), over the cycles after ``--warm-up``: traced bytes within ``TRACED_MB`` of the
first of them, every type's count within ``max(OBJECT_SLACK, 1 %)`` of it, file descriptors and tasks
no more than it (threads: the loop's executor's few more), resident memory after trim within
``RSS_BAND_MB`` of it; every word final once and no session failed. The control: cycles against a
server that keeps every closed session (``STREAMPUNCT_LEAK=connection``), a fifth of the counts each,
which the rule must catch within two cycles after warm-up, or a flat line proves nothing. Writes
benchmarks/results/soak.json under ``settings.events`` and its plot, soak_events.png (``--arenas N``:
``settings["events, MALLOC_ARENA_MAX=N"]``, no plot).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import struct
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from benchmarks.common import ROOT, Server, machine, start_server, write_json
from benchmarks.lib.soak_asr import asr_session, hours_audio
from benchmarks.lib.soak_checks import SessionReport
from benchmarks.lib.soak_punct import ASR_CONFIG, STREAM_CONFIGS, punct_session, stretch
from benchmarks.lib.speech import CACHE, make_speech
from streampunct.server.census import MIN_COUNT
from streampunct.text import read_iwslt

# 10 streams for 8 h each; 2,000 connections; an hour of audio at real speed, a long pause in each piece
EIGHT_HOURS = {"punct_streams": 10, "punct_seconds": 8 * 3600.0, "connections": 2000, "asr_seconds": 3600.0}
CONTROL_SHARE = 0.2  # of a cycle's counts, for the control's cycles (its leak grows with connections)
CHURN = ("clean", "rst", "deaf", "bad", "storm")  # a cycle's connections, in turn
STORM = 10  # connections at once
RETRIES = 3  # a storm's client refused tries again at once, this often
TRACED_MB = 1.0
OBJECT_SLACK = 30
RSS_BAND_MB = 64.0
EXECUTOR_THREADS = (
    6  # the event loop's default executor starts its threads as it needs them, at most this many
)
IDLE_WAIT_S = 120.0  # for the server to see every client gone
SETTLE_S = 11.0  # then for connections still closing (websockets' close_timeout, 10 s) and their timers


async def _open(url: str, cfg: dict[str, Any]) -> ClientConnection:
    ws = await connect(url + "/v1/punct", open_timeout=60, max_size=2**22)
    await ws.send(json.dumps({"type": "config", "version": 1, **cfg}))
    await ws.recv()  # ready
    return ws


def _words(rng: random.Random, words: Sequence[str], n: int) -> list[str]:
    at = rng.randrange(len(words) - n)
    return list(words[at : at + n])


def _reset(ws: ClientConnection) -> None:
    """Close with a TCP reset, as a load balancer or a crashed client does."""
    sock = ws.transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    ws.transport.abort()


async def churn_one(
    url: str, kind: str, rng: random.Random, words: Sequence[str], tally: dict[str, int]
) -> None:
    """One connection (a storm: ``STORM`` of them) of the churn ``kind``; ``tally`` counts them."""
    if kind == "storm":  # its connections count as clean ones, and it as one storm
        await asyncio.gather(*(_stormed(url, rng, words, tally) for _ in range(STORM)))
        tally["storm"] += 1
        return
    ws = await _open(url, {"lookahead": 2})
    tally["connections"] += 1
    if kind == "clean":
        await ws.send(json.dumps({"type": "words", "words": _words(rng, words, 20)}))
        await ws.send(json.dumps({"type": "end"}))
        async for _ in ws:
            pass
    elif kind == "rst":
        await ws.send(json.dumps({"type": "words", "words": _words(rng, words, 30)}))
        await asyncio.sleep(0.05)
        _reset(ws)
    elif kind == "deaf":  # sends and never reads: the server's replies pile up, then it goes
        for _ in range(40):
            await ws.send(json.dumps({"type": "words", "words": _words(rng, words, 8)}))
        await asyncio.sleep(0.5)
        _reset(ws)
    elif kind == "bad":  # each answered with an error; the last closes the connection (1009)
        frames = ("not json", b"\x00\x01\x02", json.dumps({"type": "nope"}), json.dumps({"words": 3}))
        try:
            for frame in (*frames, json.dumps({"type": "words", "words": ["x" * 1000] * 1100})):  # over 1 MiB
                await ws.send(frame)
            async for _ in ws:
                pass
        except ConnectionClosed:
            pass
    tally[kind] += 1


async def _stormed(url: str, rng: random.Random, words: Sequence[str], tally: dict[str, int]) -> None:
    for _ in range(RETRIES + 1):
        try:
            await churn_one(url, "clean", rng, words, tally)
            return
        except InvalidStatus:  # refused (503, 429): again at once
            tally["refused"] += 1


async def churn(url: str, n: int, rng: random.Random, words: Sequence[str]) -> dict[str, int]:
    """``n`` connections of every kind in turn, one after another (a storm counts ``STORM``)."""
    tally = dict.fromkeys(("connections", "refused", "client_errors", *CHURN), 0)
    i = 0
    while tally["connections"] < n:
        try:
            await churn_one(url, CHURN[i % len(CHURN)], rng, words, tally)
        except (ConnectionClosed, OSError) as e:  # a fault the client made: counted, not fatal
            tally["client_errors"] += 1
            print(f"churn {CHURN[i % len(CHURN)]}: {type(e).__name__}: {e}", flush=True)
        i += 1
    return tally


def _get(url: str) -> Any:
    with urllib.request.urlopen(url.replace("ws://", "http://"), timeout=120) as r:
        return json.loads(r.read())


async def census_when_idle(url: str, settle_s: float = SETTLE_S) -> dict[str, Any]:
    """The server's census once it has no open stream (every client gone) and ``settle_s`` more."""
    deadline = time.monotonic() + IDLE_WAIT_S
    while (await asyncio.to_thread(_get, url + "/health"))["streams"] and time.monotonic() < deadline:
        await asyncio.sleep(1)
    await asyncio.sleep(settle_s)
    return await asyncio.to_thread(_get, url + "/debug/census")


async def cycle(
    server: Server,
    n: int,
    per: dict[str, float],
    words: Sequence[str],
    audio: Any,
    seed: int,
    settle_s: float = SETTLE_S,
) -> dict[str, Any]:
    """Cycle ``n``: its punct streams, churn and audio at once, then the census."""
    rng = random.Random(seed * 7919 + n)
    t0 = time.perf_counter()
    reports = [
        SessionReport("punct", str(i), n, STREAM_CONFIGS[i % len(STREAM_CONFIGS)])
        for i in range(int(per["punct_streams"]))
    ]
    jobs: list[Any] = [
        punct_session(
            server.url,
            r.config,
            stretch(words, rng.randrange(len(words))),
            per["punct_seconds"],
            random.Random(rng.random()),
            r,
        )
        for r in reports
    ]
    jobs.append(churn(server.url, int(per["connections"]), random.Random(rng.random()), words))
    if audio is not None:
        reports.append(SessionReport("asr", "asr", n, ASR_CONFIG))
        jobs.append(asr_session(server.url, audio, ASR_CONFIG, reports[-1], 1.0))
    done = await asyncio.gather(*jobs)
    tally = next(x for x in done if isinstance(x, dict))
    census = await census_when_idle(server.url, settle_s)
    failed = [asdict(r) for r in reports if not r.ok]
    return {
        "cycle": n,
        "wall_s": round(time.perf_counter() - t0, 1),
        "words": sum(r.words for r in reports),  # the streams' words (asr: committed)
        "finals": sum(r.words_one_final for r in reports),  # of those, final once, in order
        "words_sent": sum(r.words_sent for r in reports),  # words and revise messages' words
        "revisions": sum(r.revisions + r.late_revisions for r in reports),
        "ticks": sum(r.ticks for r in reports),
        "asr_audio_s": sum(r.audio_s for r in reports if r.endpoint == "asr"),
        "connections": tally["connections"] + len(reports),
        "churn": tally,
        "sessions_failed": len(failed),
        "failures": failed[:5],
        **{
            k: census[k]
            for k in (
                "traced_mb",
                "rss_mb",
                "rss_after_trim_mb",
                "heap_mb",
                "arenas",
                "fds",
                "tasks",
                "threads",
                "kept",
            )
        },
        "objects": census["objects"],
        "traced_top": census["traced_top"],
    }


def verdict(cycles: list[dict[str, Any]], warm_up: int) -> dict[str, Any]:
    """The rule over the cycles after ``warm_up``: what broke it (empty: it held)."""
    counted = cycles[warm_up:]
    broken: list[str] = []
    if len(counted) < 2:
        return {"passed": False, "broken": ["fewer than two cycles after warm-up"]}
    first = counted[0]
    for c in counted[1:]:
        at = f"cycle {c['cycle']}"
        if first["traced_mb"] is not None and c["traced_mb"] - first["traced_mb"] > TRACED_MB:
            broken.append(f"{at}: traced {c['traced_mb']:.2f} MB, {first['traced_mb']:.2f} at first")
        for name in sorted(set(first["objects"]) | set(c["objects"])):  # absent: under MIN_COUNT
            was, now = first["objects"].get(name, MIN_COUNT - 1), c["objects"].get(name, MIN_COUNT - 1)
            if now - was > max(OBJECT_SLACK, 0.01 * was):
                broken.append(f"{at}: {now} {name}, {was} at first")
        for key, slack in (("fds", 0), ("tasks", 0), ("threads", EXECUTOR_THREADS)):
            if c[key] > first[key] + slack:
                broken.append(f"{at}: {c[key]} {key}, {first[key]} at first")
        if c["rss_after_trim_mb"] - first["rss_after_trim_mb"] > RSS_BAND_MB:
            broken.append(
                f"{at}: {c['rss_after_trim_mb']:.0f} MB after trim, {first['rss_after_trim_mb']:.0f} at first"
            )
    for c in cycles:  # a session is ok when it did not fail and its every word had one final event
        if c["sessions_failed"]:
            broken.append(f"cycle {c['cycle']}: {c['sessions_failed']} sessions failed")
    return {"passed": not broken, "broken": broken[:40]}


async def run_cycles(
    server: Server,
    cycles: int,
    per: dict[str, float],
    words: Sequence[str],
    audio: Any,
    seed: int,
    settle_s: float = SETTLE_S,
) -> list[dict[str, Any]]:
    out = []
    for n in range(cycles):
        c = await cycle(server, n, per, words, audio, seed, settle_s)
        out.append(c)
        print(
            f"cycle {n}: {c['wall_s']:.0f} s, {c['words']:,} words, {c['connections']} connections, "
            f"traced {c['traced_mb']:.1f} MB, RSS {c['rss_mb']:.0f} -> {c['rss_after_trim_mb']:.0f} MB trim, "
            f"{c['fds']} fds, {c['tasks']} tasks, {c['threads']} threads, {c['sessions_failed']} failed",
            flush=True,
        )
    return out


def plot(payload: dict[str, Any], path: Path) -> bool:
    """Each cycle's census (the run's, the control's): memory and live objects; False without matplotlib."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (mem, objs) = plt.subplots(1, 2, figsize=(9, 3))
    runs = [("", payload["cycles"], "-")]
    if payload.get("control"):
        runs.append(("control ", payload["control"]["cycles"], ":"))
    for name, cycles, style in runs:
        x = [c["cycle"] for c in cycles]
        for key, label in (("rss_after_trim_mb", "RSS after trim"), ("traced_mb", "traced")):
            mem.plot(x, [c[key] for c in cycles], style, marker=".", label=name + label)
        objs.plot(x, [sum(c["objects"].values()) for c in cycles], style, marker=".", label=name + "objects")
    mem.set_xlabel("cycle")
    mem.set_ylabel("MB")
    mem.set_ylim(bottom=0)
    objs.set_xlabel("cycle")
    objs.set_ylabel("live objects (types of 50 or more)")
    for ax in (mem, objs):
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def serve(env: dict[str, str], audio: bool) -> Server:
    args = ["--device", "cpu", "--max-streams", "64"] + (["--preload-asr"] if audio else [])
    return start_server(*args, env={"STREAMPUNCT_CENSUS": "1", "PYTHONTRACEMALLOC": "1", **env})


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data"), help="a folder as shared/data")
    ap.add_argument("--cycles", type=int, default=10)
    ap.add_argument("--share", type=float, default=1.0, help="of the eight hours' counts (a short run: 0.02)")
    ap.add_argument("--warm-up", type=int, default=2, help="cycles the rule does not count")
    ap.add_argument("--control-cycles", type=int, default=3, help="cycles of the leaking server (0: none)")
    ap.add_argument("--asr-pause-s", type=float, default=20.0, help="the long pause in each cycle's audio")
    ap.add_argument("--no-audio", action="store_true", help="no /v1/asr lane (which lane holds memory)")
    ap.add_argument("--arenas", type=int, help="MALLOC_ARENA_MAX for the server (the allocator's arm)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", type=Path, default=CACHE, help="where the speech is made and kept")
    ap.add_argument("--out", type=Path, help="write here instead of benchmarks/results/soak.json")
    args = ap.parse_args(argv)
    words, labels = read_iwslt(Path(args.data) / "iwslt" / "dev2012")
    per = {k: v * args.share / args.cycles for k, v in EIGHT_HOURS.items()}
    per["punct_streams"] = EIGHT_HOURS["punct_streams"]  # concurrent streams: not a count to share
    audio = None
    if per["asr_seconds"] >= 10 and not args.no_audio:
        from streampunct.clients.file import load_audio

        wav, _ = make_speech(words, labels, per["asr_seconds"] / 60, args.cache)
        speech = load_audio(str(wav))[: int(16000 * max(5.0, per["asr_seconds"] - args.asr_pause_s))]
        half = len(speech) / 16000 / 2
        audio, _ = hours_audio(speech, half, (args.asr_pause_s, args.asr_pause_s), 0, args.seed)
    env = {"MALLOC_ARENA_MAX": str(args.arenas)} if args.arenas else {}
    t0 = time.perf_counter()
    server = serve(env, audio is not None)
    print(f"server {server.url} (pid {server.pid}, log {server.log}); a cycle: {per}", flush=True)
    try:
        cycles = asyncio.run(run_cycles(server, args.cycles, per, words, audio, args.seed))
    finally:
        status = server.stop()
    result = verdict(cycles, args.warm_up)
    control = None
    if args.control_cycles:
        leaking = serve({**env, "STREAMPUNCT_LEAK": "connection"}, False)
        small = {**per, "punct_seconds": per["punct_seconds"] * CONTROL_SHARE}
        small["connections"] = per["connections"] * CONTROL_SHARE
        try:
            leaked = asyncio.run(run_cycles(leaking, args.control_cycles, small, words, None, args.seed))
        finally:
            leaking.stop()
        caught = verdict(leaked, 1)
        control = {"detected": not caught["passed"], "broken": caught["broken"][:10], "cycles": leaked}
    counted = ("words", "finals", "words_sent", "revisions", "ticks", "connections", "asr_audio_s")
    totals = {k: sum(c[k] for c in cycles) for k in counted}
    payload = {
        "machine": machine(),
        "eight_hours": EIGHT_HOURS,
        "share": args.share,
        "per_cycle": per,
        "warm_up": args.warm_up,
        "rule": {"traced_mb": TRACED_MB, "object_slack": OBJECT_SLACK, "rss_band_mb": RSS_BAND_MB},
        "wall_s": round(time.perf_counter() - t0),
        "server_exit_status": status,
        "totals": totals,
        "passed": result["passed"],
        "broken": result["broken"],
        "cycles": cycles,
        "control": control,
    }
    setting = "events" if not args.arenas else f"events, MALLOC_ARENA_MAX={args.arenas}"
    out = write_json(args.out or "soak.json", payload, setting)
    picture = out.with_name(f"{out.stem}_{setting.split(',')[0]}.png")
    if not args.arenas and plot(payload, picture):
        print(f"plot: {picture}")
    print(f"totals {totals}")
    print(f"{'passed' if result['passed'] else 'FAILED: ' + '; '.join(result['broken'][:5])}")
    if control is not None:
        print(f"control: {'detected' if control['detected'] else 'NOT DETECTED'} {control['broken'][:3]}")
    print(f"wrote {out}")
    return 0 if result["passed"] and (control is None or control["detected"]) else 1


if __name__ == "__main__":
    sys.exit(main())
