"""How many live streams one CPU core sustains, through the batching scheduler.

    python -m benchmarks.stream_capacity --data ../shared/data/iwslt/test2011 [--seconds 20]

N streams each speak 3 words a second (staggered), on one torch thread, through one
`Batcher`, for --seconds. A word's lag is the time from the moment it was spoken (pushed) to the
moment its push returned, so every decision it allows is out. A run passes when the p99 lag is
under --max-lag-ms and the max under twice that: then every final decision lands within its
lookahead (or its time limit) plus that margin. The largest passing N is found by doubling, then
bisection.

``--serve CPUS`` measures the same through a real ``streampunct serve`` on those cores (taskset's
list: ``0``, or ``0,1``), one websocket a stream from this process on the other cores: a word's lag
is from the moment the word that let it be decided (its lookahead's last) was spoken to the arrival
of its final event. The server computes in a batching lane a core (``scheduler.lanes_for``); its
figure a core is comparable to the in-process one (the file's ``settings.serve_CPUS``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import torch
from websockets.asyncio.client import connect

from benchmarks.common import RESULTS, device_suffix, machine, start_server, update_readme, write_json
from benchmarks.lib.doc_text import short_name, wrap
from streampunct import Punctuator, read_iwslt
from streampunct.punctuator import DEFAULT_CHECKPOINT, checkpoint_dir
from streampunct.scheduler import Batcher
from streampunct.text import normalize
from streampunct.types import ENGINES

RATE = 3.0  # words a second per stream


async def trial(
    p: Punctuator, words: list[str], n: int, seconds: float, engine: str, max_wait_ms: float = 0.0
) -> dict:
    batcher = Batcher(max_batch=256, max_wait_ms=max_wait_ms)
    lags: list[float] = []
    t0 = time.perf_counter() + 0.2

    async def speaker(i: int) -> None:
        stream = p.stream(lookahead=2, max_delay_ms=1000, engine=engine)
        offset = i / (RATE * n)
        for j in range(int(seconds * RATE)):
            due = t0 + offset + j / RATE
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            w = words[(i * 997 + j) % len(words)]
            await batcher.push(stream, [w], now=due - t0)
            lags.append(time.perf_counter() - due)
        await batcher.finish(stream)

    await asyncio.gather(*(speaker(i) for i in range(n)))
    await batcher.close()
    return {**lag_quantiles(n, lags), "mean_batch": batcher.jobs / max(1, batcher.batches)}


def lag_quantiles(n: int, lags: list[float]) -> dict:
    """A run of ``n`` streams: its lags' median, p99 and maximum, ms."""
    lags = sorted(lags)
    return {
        "streams": n,
        "p50_ms": 1000 * lags[len(lags) // 2],
        "p99_ms": 1000 * lags[int(0.99 * len(lags))],
        "max_ms": 1000 * lags[-1],
    }


def deciding_word(words: list[str], lookahead: int = 2) -> list[int | None]:
    """For each word, the word whose arrival gives it its lookahead (``lookahead`` tokens after its
    last one); None for the last words, decided by the end."""
    ends, n = [], 0
    for w in words:
        n += len(normalize(w))
        ends.append(n)  # tokens up to this word's last
    out: list[int | None] = []
    j = 0
    for end in ends:
        while j < len(ends) and ends[j] < end + lookahead:
            j += 1
        out.append(j if j < len(ends) else None)
    return out


async def trial_serve(url: str, words: list[str], n: int, seconds: float, engine: str) -> dict:
    """``trial`` through a server: n websockets, a word a message with the clock ``now``."""
    lags: list[float] = []
    t0 = time.perf_counter() + 1.0 + n / 100  # the connections open first

    async def speaker(i: int) -> None:
        mine = [words[(i * 997 + j) % len(words)] for j in range(int(seconds * RATE))]
        decided_by = deciding_word(mine)
        due = [t0 + i / (RATE * n) + j / RATE for j in range(len(mine))]
        async with connect(url + "/v1/punct", max_size=None, open_timeout=60) as ws:
            config = {"type": "config", "version": 1, "lookahead": 2, "max_delay_ms": 1000, "engine": engine}
            await ws.send(json.dumps(config))
            assert json.loads(await ws.recv())["type"] == "ready"

            async def receive() -> None:
                async for raw in ws:
                    msg = json.loads(raw)
                    if msg["type"] == "end":
                        return
                    for e in msg.get("events", ()) if msg["type"] == "events" else ():
                        j = decided_by[e["index"]] if e["final"] else None
                        if j is not None:
                            lags.append(time.perf_counter() - due[j])

            receiving = asyncio.create_task(receive())
            for j, w in enumerate(mine):
                await asyncio.sleep(max(0.0, due[j] - time.perf_counter()))
                await ws.send(json.dumps({"type": "words", "words": [w], "now": due[j] - t0}))
            await ws.send(json.dumps({"type": "end"}))
            await receiving

    await asyncio.gather(*(speaker(i) for i in range(n)))
    return lag_quantiles(n, lags)


def sustained(one: Callable[[int], Coroutine[Any, Any, dict]], max_lag_ms: float, runs: list[dict]) -> int:
    """The most streams whose run passes, by doubling from 4, then bisection; every run in ``runs``."""

    def passes(n: int) -> bool:
        r = asyncio.run(one(n))
        r["pass"] = r["p99_ms"] < max_lag_ms and r["max_ms"] < 2 * max_lag_ms
        runs.append(r)
        print({k: round(v, 1) if isinstance(v, float) else v for k, v in r.items()}, flush=True)
        return r["pass"]

    lo, hi = 0, 4
    while passes(hi):
        lo, hi = hi, hi * 2
    while hi - lo > max(1, lo // 8):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    return lo


def serve_run(args: argparse.Namespace, words: list[str]) -> None:
    """The capacity through ``streampunct serve`` on ``--serve`` cores, this process on the others;
    or through ``streampunct serve-ray`` with ``--ray-encoders`` encoder replicas (2 session
    replicas, every core shared)."""
    model = ["--model", args.model] if args.model else []
    if args.ray_encoders:
        cores = list(range(os.cpu_count() or 1))
        others: set[int] = set()
        flags = ("--max-load", "off", "--encoder-replicas", str(args.ray_encoders))
        server = start_server("--max-streams", "4000", *flags, *model, ray=2)
        setting = f"serve_ray_{args.ray_encoders}"
    else:
        cores = [int(c) for c in args.serve.split(",")]
        others = set(range(os.cpu_count() or 1)) - set(cores)
        if others:
            os.sched_setaffinity(0, others)
        server = start_server("--device", "cpu", "--max-streams", "4000", *model, cpus=args.serve)
        setting = f"serve_{args.serve.replace(',', '_')}"
    runs: list[dict] = []
    try:
        asyncio.run(trial_serve(server.url, words, 8, min(5.0, args.seconds), args.engine))  # warm-up
        lo = sustained(
            lambda n: trial_serve(server.url, words, n, args.seconds, args.engine), args.max_lag_ms, runs
        )
    finally:
        server.stop()
    payload = {
        "machine": machine(),
        "server_cores": len(cores),
        "client_cores": len(others),
        "encoder_replicas": args.ray_encoders,
        "model": args.model or "default",
        "engine": args.engine,
        "words_per_second": RATE,
        "max_lag_ms": args.max_lag_ms,
        "seconds": args.seconds,
        "streams_sustained": lo,
        "streams_a_core": round(lo / len(cores), 1),
        "runs": runs,
    }
    path = write_json("stream_capacity.json", payload, setting, folder=args.out)
    print(f"{setting}: {lo} streams; wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="IWSLT text (word<TAB>LABEL): the words the streams speak")
    ap.add_argument("--model", default=None)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--max-lag-ms", type=float, default=200)
    ap.add_argument("--device", default="cpu", help="cpu or cuda; cuda writes stream_capacity_cuda.json")
    ap.add_argument(
        "--engine", default="auto", choices=ENGINES, help="default auto: the one the checkpoint takes at k=2"
    )
    ap.add_argument(
        "--max-wait-ms",
        type=float,
        default=0.0,
        help="the batcher lingers this long for more work (default 0)",
    )
    ap.add_argument(
        "--int8", action="store_true", help="the encoder in int8: its run goes into the file's settings"
    )
    ap.add_argument("--readme", action="store_true", help="and rewrite the docs' region from the file")
    ap.add_argument("--docs-only", action="store_true", help="only rewrite the docs' regions from the files")
    ap.add_argument("--serve", metavar="CPUS", help="through `streampunct serve` on these cores (0, or 0,1)")
    ap.add_argument(
        "--ray-encoders", type=int, metavar="N", help="through `streampunct serve-ray`, N encoders"
    )
    ap.add_argument("--out", type=Path, default=None, help="the results folder (default benchmarks/results)")
    args = ap.parse_args()

    if args.docs_only:
        for suffix in ("", "_cuda"):
            update_readme(
                *readme_section(json.loads((RESULTS / f"stream_capacity{suffix}.json").read_text()))
            )
        return None
    if not args.data:
        ap.error("--data is needed (but with --docs-only)")
    words, _ = read_iwslt(args.data)
    if args.serve or args.ray_encoders:
        return serve_run(args, words)
    torch.set_num_threads(1)
    p = Punctuator.load(args.model, device=args.device, int8=args.int8)
    runs: list[dict] = []
    # Warm-up, not counted: the first batches of each shape are slow (allocator, kernel choice).
    asyncio.run(trial(p, words, 8, min(5.0, args.seconds), args.engine))
    lo = sustained(
        lambda n: trial(p, words, n, args.seconds, args.engine, args.max_wait_ms), args.max_lag_ms, runs
    )
    payload = {
        "machine": machine(),
        "device": str(p.device),
        "torch_threads": 1,
        "model": args.model or "default",
        "engine_used": p.engine_name(args.engine, 2),
        "engine": args.engine,
        "int8": args.int8,
        "max_wait_ms": args.max_wait_ms,
        "words_per_second": RATE,
        "max_lag_ms": args.max_lag_ms,
        "seconds": args.seconds,
        "streams_sustained": lo,
        "runs": runs,
    }
    model_dir = checkpoint_dir(args.model)  # another model than the default: a file of its own
    model = "" if model_dir == DEFAULT_CHECKPOINT else f"_{model_dir.name}"
    name = f"stream_capacity{model}{device_suffix(p.device)}.json"
    # another engine than the model's own, or int8: a setting in the same file
    setting = "_".join(([] if args.engine == "auto" else [args.engine]) + (["int8"] if args.int8 else []))
    path = write_json(name, payload, setting or None, folder=args.out)
    print(f"{p.device} sustains {lo} streams; wrote {path}")
    if args.readme:  # from the file: the default run, and every setting's
        update_readme(*readme_section(json.loads(path.read_text())))


def readme_section(payload: dict) -> tuple[str, str]:
    """The docs region this result belongs to, and its text (wrapped at the docs' width)."""
    on_cpu = payload.get("device", "cpu") == "cpu"
    m = payload["machine"]
    best = max((r for r in payload["runs"] if r["pass"]), key=lambda r: r["streams"], default=None)
    detail = f" (p99 {best['p99_ms']:.0f} ms, mean batch {best['mean_batch']:.1f})" if best else ""
    where = "One CPU core (1 torch thread)" if on_cpu else f"One {short_name(m['gpu'])}"
    text = (
        f"{where} sustains **{payload['streams_sustained']} live streams** of {payload['words_per_second']:g} "
        f"words a second at k=2 ({payload.get('engine', 'masked')} engine) through the batching scheduler, p99 "
        f"lag under {payload['max_lag_ms']:.0f} ms{detail}; {short_name(m['cpu'])}, {m['date'][:10]}. "
        f"`python -m benchmarks.stream_capacity --data ../shared/data/iwslt/test2011 --seconds "
        f"{payload['seconds']:g}{'' if on_cpu else ' --device cuda'}`."
    )
    settings = payload.get("settings", {})
    served = {k: v for k, v in settings.items() if k.startswith("serve_")}
    text += served_text(list(served.values()))
    text += others({k: v for k, v in settings.items() if k not in served})
    return ("capacity" if on_cpu else "capacity-cuda"), "\n".join(wrap(text))


def served_text(runs: list[dict]) -> str:
    """The runs through a server, in a sentence."""
    serve = [o for o in runs if not o.get("encoder_replicas")]
    ray = [o for o in runs if o.get("encoder_replicas")]

    def beside(o: dict) -> str:
        return "the clients on the other cores" if o["client_cores"] else "the clients beside it"

    parts = [
        f"on {o['server_cores']} core{'s' * (o['server_cores'] > 1)} ({beside(o)}) {o['streams_sustained']}"
        for o in serve
    ]
    parts += [
        f"`serve-ray` with {o['encoder_replicas']} encoder replica{'s' * (o['encoder_replicas'] > 1)} "
        f"({beside(o)}) {o['streams_sustained']}"
        for o in ray
    ]
    if not parts:
        return ""
    when = {f"{short_name(o['machine']['cpu'])}, {o['machine']['date'][:10]}" for o in runs}
    return (
        f" Through `streampunct serve` (`--serve CPUS`, `--ray-encoders N`): {'; '.join(parts)} "
        f"({'; '.join(sorted(when))})."
    )


def others(settings: dict[str, dict]) -> str:
    """The file's runs of other settings (another engine, int8), each in a few words."""
    runs = []
    for name, o in settings.items():
        best = max((r for r in o["runs"] if r["pass"]), key=lambda r: r["streams"], default=None)
        batch = f"mean batch {best['mean_batch']:.1f}; " if best else ""
        runs.append(f"{name}: {o['streams_sustained']} ({batch}{o['machine']['date'][:10]})")
    return f" Other settings, the same way (`--engine`, `--int8`): {'; '.join(runs)}." if runs else ""


if __name__ == "__main__":
    main()
