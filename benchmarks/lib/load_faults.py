"""The faults section of ``python -m benchmarks.server_load``: killed clients, SIGTERM mid-stream (the
clients stopping, or talking on), and the stalled reader beside them (benchmarks/lib/load_stall.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from benchmarks.common import Server
from benchmarks.lib.load_sections import Servers, speech
from benchmarks.lib.load_stall import fault_stall
from benchmarks.lib.load_streams import (
    ASR_CONFIG,
    CHUNK_S,
    KILL_WORDS,
    RATE,
    RSS_SLACK_MB,
    PunctResult,
    open_punct,
    punct_live,
    punct_receive,
    settled_rss,
    sound,
    tally,
    wait_streams_zero,
    warm_up,
    word_message,
)
from streampunct.options import Limits

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
