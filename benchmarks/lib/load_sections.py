"""The punct and asr sections of ``python -m benchmarks.server_load``: their servers, N live /v1/punct
streams up a ladder (then bisected), and N /v1/asr streams of speech at real time until one lags."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from benchmarks.common import Server, start_server
from benchmarks.lib.load_streams import (
    ASR_CONFIG,
    ASR_STAGGER_S,
    CHUNK_S,
    LADDER_START,
    PUNCT_CONFIG,
    RATE,
    punct_trial,
    settled_rss,
    sound,
    stats,
    wait_streams_zero,
    warm_up,
)
from benchmarks.lib.speech import CACHE, make_speech
from streampunct import protocol as P


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
