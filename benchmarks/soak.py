"""The soak: a real server under hours of recogniser traffic, every word checked, memory watched.

    python -m benchmarks.soak --data ../shared/data                       # 4 x 60 min words, 30 min audio
    python -m benchmarks.soak --data ../shared/data --punct-minutes 5 --asr-minutes 2   # a short run

A `streampunct serve` process is started on a free loopback port. At once, against it:

- /v1/punct: ``--streams`` concurrent streams (default 4), each speaking a different stretch of
  IWSLT dev2012 the way a recogniser does: words about 0.3 s apart on a simulated clock, messages of
  0 to 8 words with times and ``now``, pauses of 0.5 to 3 s now and then with ``tick`` messages in
  them, and every few messages a revision of the last 1 to 3 words that are not final yet (the events
  received and the documented commit rule say which; the client waits for the answer to each one).
  Now and then a revision comes too late, on a word already final: the server must refuse it
  (``bad_input``), and the refusals are counted, not failed. Messages go as fast as the server
  answers (at most 32 words due to be final by the lookahead before their final events came), not
  in real time, until each stream's simulated clock has covered ``--punct-minutes``.
  Stream 0 is one session throughout; the others start a new session every 1/12 to 1/3 of the run.
  The configurations differ per stream (lookahead 0, 2, 4; time limit 1500 ms or none; engine auto
  or masked).
- /v1/asr: ``--asr-minutes`` of continuous speech, espeak-ng reading dev2012 text (made in pieces,
  joined, cached under ~/.cache/streampunct/soak/), sent as fast as the server reads it
  (``--asr-speed 1``: in real time), beside the punct streams.

Checks, per session: it did not fail (an ``internal`` error, a close other than 1000, or no
``end``), and every word got exactly one final event, in order, carrying the text the server was
sent (after revisions). The server's resident memory (VmRSS) is sampled every ``--sample-s``:
after warm-up, its maximum, at the end, and the growth from 10 % of the run to its end. Writes
benchmarks/results/soak.json (a run with --asr-pauses or --asr-trap: under its settings.hours);
exits with status 1 when a session failed or a word lacked exactly one final decision.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import (
    ROOT,
    Server,
    command,
    machine,
    start_server,
    write_json,
    write_result,
)
from benchmarks.lib.soak_asr import asr_session, hours_audio
from benchmarks.lib.soak_checks import SessionReport
from benchmarks.lib.soak_punct import ASR_CONFIG, STREAM_CONFIGS, punct_session, punct_stream, stretch
from benchmarks.lib.soak_watch import BUFFER_LIMIT_S, MemoryWatch, MetricsWatch, plot_memory
from benchmarks.lib.speech import CACHE, make_speech
from streampunct.text import read_iwslt

# --- the run ---------------------------------------------------------------------------------------


async def soak(
    server: Server,
    words: Sequence[str],
    *,
    streams: int = 4,
    punct_minutes: float = 60,
    audio: Any = None,
    asr_speed: float = 0,
    punct_speed: float = 0,
    engine: str | None = None,
    seed: int = 0,
    sample_s: float = 5.0,
    progress_s: float = 60.0,
    warm_up: bool = True,
) -> dict[str, Any]:
    """Warm the server up, then run the punct streams and the audio session at once; returns the
    figures (``summary()``'s), sessions and memory samples included."""
    warm: list[SessionReport] = []
    engines = {engine} if engine else {c["engine"] for c in STREAM_CONFIGS[:streams]}
    for i, e in enumerate(sorted(engines) if warm_up else ()):
        cfg = {"lookahead": 2, "max_delay_ms": 1500, "engine": e}
        rep = SessionReport("punct", "warm-up", i, cfg)
        warm.append(await punct_session(server.url, cfg, stretch(words, 0), 30, random.Random(seed), rep))
    if audio is not None and warm_up:
        cfg = {**ASR_CONFIG, **({"engine": engine} if engine else {})}
        rep = SessionReport("asr", "warm-up", 0, cfg)
        warm.append(await asr_session(server.url, audio[: 16000 * 10], cfg, rep, asr_speed))

    watch = MemoryWatch(server.pid, sample_s)
    watching = asyncio.create_task(watch.run())
    metrics = MetricsWatch(server.url, sample_s)
    scraping = asyncio.create_task(metrics.run())
    t0 = time.perf_counter()
    starts = [(i + 1) * len(words) // (streams + 1) for i in range(streams)]
    jobs = [
        punct_stream(server.url, i, words, start, punct_minutes, seed, engine, punct_speed)
        for i, start in enumerate(starts)
    ]
    asr_reports: list[SessionReport] = []
    if audio is not None:
        cfg = {**ASR_CONFIG, **({"engine": engine} if engine else {})}
        asr_reports.append(SessionReport("asr", "asr", 0, cfg))
        jobs.append(asr_session(server.url, audio, cfg, asr_reports[0], asr_speed))

    async def progress() -> None:
        while True:
            await asyncio.sleep(progress_s)
            mb = watch.samples[-1][1] if watch.samples else float("nan")
            print(f"[{time.perf_counter() - t0:6.0f} s] server RSS {mb:.0f} MB", flush=True)

    reporting = asyncio.create_task(progress())
    results = await asyncio.gather(*jobs)
    wall = time.perf_counter() - t0
    reporting.cancel()
    watching.cancel()
    scraping.cancel()
    await asyncio.sleep(min(1.0, sample_s))  # the last replies sent, buffers freed
    watch.sample()
    await asyncio.to_thread(metrics.sample)
    sessions = warm + [r for rs in results if isinstance(rs, list) for r in rs] + asr_reports
    return {**summary(sessions, watch.samples, wall, server), "recognition": metrics.figures()}


def slope_mb_per_h(samples: list[tuple[float, float]]) -> float | None:
    """The least-squares slope of RSS against time, MB an hour (None: fewer than two samples)."""
    if len(samples) < 2:
        return None
    t, mb = np.array(samples).T
    return round(float(np.polyfit(t / 3600, mb, 1)[0]), 1)


def memory(samples: list[tuple[float, float]], wall: float) -> dict[str, Any]:
    """RSS after warm-up, at 10 % of the run, its maximum and at the end; growth from 10 % on."""
    if not samples:
        return {}
    tenth = next((mb for t, mb in samples if t >= 0.1 * wall), samples[-1][1])
    return {
        "start_mb": samples[0][1],
        "at_10pct_mb": tenth,
        "max_mb": max(mb for _, mb in samples),
        "end_mb": samples[-1][1],
        "growth_from_10pct_mb": round(samples[-1][1] - tenth, 1),
        "slope_second_half_mb_per_h": slope_mb_per_h([(t, mb) for t, mb in samples if t >= wall / 2]),
        "samples": samples,
    }


def summary(
    sessions: list[SessionReport], samples: list[tuple[float, float]], wall: float, server: Server
) -> dict:
    def totals(rs: list[SessionReport]) -> dict[str, Any]:
        return {
            "sessions": len(rs),
            "failed": sum(r.failure is not None for r in rs),
            "words": sum(r.words for r in rs),
            "words_one_final": sum(r.words_one_final for r in rs),
            "words_without_one_final": sum(r.words - r.words_one_final for r in rs),
            "words_sent": sum(r.words_sent for r in rs),
            "messages": sum(r.messages for r in rs),
            "ticks": sum(r.ticks for r in rs),
            "revisions": sum(r.revisions for r in rs),
            "revisions_refused": sum(r.revisions_refused for r in rs),
            "late_revisions_refused": sum(r.late_revisions for r in rs),
            "other_errors": sum(len(r.errors) for r in rs),
            "speech_minutes": round(sum(r.speech_s for r in rs) / 60, 2),
            "audio_minutes": round(sum(r.audio_s for r in rs) / 60, 2),
            "lags": sum(r.lags for r in rs),
            "captions": sum(r.captions for r in rs),
            "wall_s": round(max((r.wall_s for r in rs), default=0.0), 1),
        }

    names = sorted({r.stream for r in sessions}, key=lambda s: (not s.isdigit(), s.zfill(4)))
    per_stream = {}
    for name in names:
        rs = [r for r in sessions if r.stream == name]
        per_stream[name] = {"config": rs[0].config, "engine": rs[0].engine, **totals(rs)}
        if name != "warm-up":  # stream wall time: its sessions one after the other
            per_stream[name]["wall_s"] = round(sum(r.wall_s for r in rs), 1)
    total = totals(sessions)
    total["wall_s"] = round(wall, 1)
    failed = [r for r in sessions if not r.ok]
    return {
        "total": total,
        "streams": per_stream,
        "memory": memory(samples, wall),
        "server_failures_logged": len(server.failures_logged()),
        "failures": [
            {
                "stream": r.stream,
                "session": r.session,
                "failure": r.failure,
                "problems": r.problems[:10],
                "errors": r.errors[:10],
            }
            for r in failed
        ],
        "sessions": [asdict(r) | {"problems": r.problems[:10], "errors": r.errors[:10]} for r in sessions],
    }


def passed(figures: dict[str, Any]) -> bool:
    t, r = figures["total"], figures.get("recognition", {})
    buffer_ok = r.get("buffer_max_s", 0.0) <= BUFFER_LIMIT_S
    return t["failed"] == 0 and t["words_without_one_final"] == 0 and not figures["failures"] and buffer_ok


def table(figures: dict[str, Any]) -> str:
    rows = [
        "| stream | config | sessions | failed | words | one final | revisions (refused) | late refused "
        "| speech min | audio min | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in [*figures["streams"].items(), ("total", figures["total"])]:
        c = s.get("config")
        conf = f"k={c['lookahead']} {c['max_delay_ms'] or 'none'}/{s['engine'] or c['engine']}" if c else ""
        rows.append(
            f"| {name} | {conf} | {s['sessions']} | {s['failed']} | {s['words']:,} | {s['words_one_final']:,} "
            f"| {s['revisions']} ({s['revisions_refused']}) | {s['late_revisions_refused']} "
            f"| {s['speech_minutes']:.1f} | {s['audio_minutes']:.1f} | {s['wall_s']:.0f} |"
        )
    r = figures.get("recognition")
    if r:
        late = next((x.get("latency_s") for x in figures["sessions"] if x["stream"] == "asr"), None) or {}
        said = ", ".join(f"{q} {v:.1f} s" for q, v in late.items())
        rows += [
            "",
            f"Recognition: longest buffer {r['buffer_max_s']:.1f} s (limit {r['buffer_limit_s']:.0f} s); passes cut "
            f"by a guard: {r['guarded']}; audio skipped {r['skipped_s']:.1f} s"
            + (f"; caption lines after their speech: {said}" if said else "")
            + ".",
        ]
    m = figures["memory"]
    if m:
        rows += [
            "",
            f"Server resident memory: {m['start_mb']:.0f} MB after warm-up, {m['at_10pct_mb']:.0f} MB at 10 % "
            f"of the run, max {m['max_mb']:.0f} MB, {m['end_mb']:.0f} MB at the end "
            f"({m['growth_from_10pct_mb']:+.0f} MB from 10 %; over the second half "
            f"{m['slope_second_half_mb_per_h']} MB an hour).",
        ]
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_data = os.environ.get("STREAMPUNCT_DATA", str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--data", default=default_data, help="a folder laid out as shared/data (iwslt/dev2012)")
    ap.add_argument("--punct-minutes", type=float, default=60, help="simulated speech per punct stream")
    ap.add_argument("--streams", type=int, default=4, help="concurrent /v1/punct streams")
    ap.add_argument(
        "--punct-speed", type=float, default=0,
        help="0: punct words as fast as the server answers (default); 1: live, 3 words a second a stream",
    )  # fmt: skip
    ap.add_argument("--asr-minutes", type=float, default=30, help="speech through /v1/asr (0: none)")
    ap.add_argument(
        "--asr-speed",
        type=float,
        default=0,
        help="0: the audio as fast as the server reads it (default); 1: live",
    )
    ap.add_argument(
        "--asr-pauses", nargs=2, type=float, metavar=("MIN", "MAX"), default=None,
        help="a pause of MIN to MAX seconds (room noise) after every --asr-pause-every of speech",
    )  # fmt: skip
    ap.add_argument("--asr-pause-every", type=float, default=300.0, metavar="S", help="speech between pauses")
    ap.add_argument(
        "--asr-trap", type=int, default=0, metavar="N", help="one sentence N times in a row, mid-run"
    )
    ap.add_argument("--model", default=None, help="punctuation model: default, base or a checkpoint folder")
    ap.add_argument("--asr-model", default=None, help="tiny.en (the server's default), base or a folder")
    ap.add_argument("--device", default="cpu", help="the server's device (cpu, cuda)")
    ap.add_argument(
        "--engine", choices=("auto", "masked", "window"), help="one engine for every stream (default: varied)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample-s", type=float, default=5.0, help="seconds between memory samples")
    ap.add_argument("--cache", type=Path, default=CACHE, help="where the speech is made and kept")
    ap.add_argument(
        "--out", type=Path, default=None,
        help="write here instead of benchmarks/results/soak.json (a run with --asr-pauses or --asr-trap "
        "goes there under settings.hours)",
    )  # fmt: skip
    ap.add_argument("--setting", help="the run's name in soak.json's settings (default: hours with pauses)")
    args = ap.parse_args()

    words, labels = read_iwslt(Path(args.data) / "iwslt" / "dev2012")
    audio, layout = None, None
    if args.asr_minutes > 0:
        from streampunct.clients.file import load_audio

        t = time.perf_counter()
        wav, n_read = make_speech(words, labels, args.asr_minutes, args.cache)
        audio = load_audio(str(wav))
        print(f"speech: {wav} ({len(audio) / 16000 / 60:.1f} min, {n_read:,} words of text, "
              f"{time.perf_counter() - t:.0f} s)", flush=True)  # fmt: skip
        if args.asr_pauses or args.asr_trap:
            audio, layout = hours_audio(
                audio, args.asr_pause_every, args.asr_pauses, args.asr_trap, args.seed
            )
            print(f"with pauses and trap: {len(audio) / 16000 / 60:.1f} min, {layout}", flush=True)

    server_args = ["--device", args.device, "--max-streams", str(args.streams + 8)]
    server_args += ["--model", args.model] if args.model else []
    server_args += ["--asr-model", args.asr_model] if args.asr_model else []
    server_args += ["--preload-asr"] if audio is not None else []
    server = start_server(*server_args)
    print(f"server {server.url} (pid {server.pid}, log {server.log})", flush=True)
    try:
        figures = asyncio.run(
            soak(
                server,
                words,
                streams=args.streams,
                punct_minutes=args.punct_minutes,
                audio=audio,
                asr_speed=args.asr_speed,
                punct_speed=args.punct_speed,
                engine=args.engine,
                seed=args.seed,
                sample_s=args.sample_s,
            )
        )
    finally:
        status = server.stop()
    payload = {
        "machine": machine(),
        "device": args.device,
        "model": args.model or "default",
        "asr_model": args.asr_model or "tiny.en",
        "asr_speed": args.asr_speed,
        "punct_speed": args.punct_speed,
        "asr_layout": layout,
        "server_log": str(server.log),
        "server_exit_status": status,
        "passed": passed(figures),
        **figures,
    }
    setting = args.setting or ("hours" if args.asr_pauses or args.asr_trap else None)
    if args.out is None:
        out = write_json("soak.json", payload, setting)
    else:
        out = write_result(args.out, payload)
    picture = out.with_name(f"{out.stem}{'_' + setting if setting and args.out is None else ''}.png")
    if plot_memory(figures["memory"].get("samples", []), picture, command()[:110]):
        print(f"memory plot: {picture}")
    print(table(figures))
    for f in figures["failures"][:20]:
        why = f["failure"] or "; ".join((f["errors"] + f["problems"])[:3])
        print(f"FAILED stream {f['stream']} session {f['session']}: {why}")
    print(f"{'passed' if payload['passed'] else 'FAILED'}; wrote {out}")
    return 0 if payload["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
