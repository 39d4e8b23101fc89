"""How many live streams one CPU core sustains, through the batching scheduler.

    python benchmarks/stream_capacity.py --data ../shared/data/iwslt/test2011 [--seconds 20]

N streams each speak 3 words a second (staggered), on one torch thread, through one
`Batcher`, for --seconds. A word's lag is the time from the moment it was spoken (pushed) to the
moment its push returned, so every decision it allows is out. A run passes when the p99 lag is
under --max-lag-ms and the max under twice that: then every final decision lands within its
lookahead (or its time limit) plus that margin. The largest passing N is found by doubling, then
bisection.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import device_suffix, machine, update_readme, write_json  # noqa: E402

from streampunct import Punctuator, read_iwslt  # noqa: E402
from streampunct.engines import resolve_engine  # noqa: E402
from streampunct.punctuator import DEFAULT_CHECKPOINT, checkpoint_dir  # noqa: E402
from streampunct.scheduler import Batcher  # noqa: E402
from streampunct.types import ENGINES  # noqa: E402

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
    lags.sort()
    return {
        "streams": n,
        "p50_ms": 1000 * lags[len(lags) // 2],
        "p99_ms": 1000 * lags[int(0.99 * len(lags))],
        "max_ms": 1000 * lags[-1],
        "mean_batch": batcher.jobs / max(1, batcher.batches),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--model", default=None)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--max-lag-ms", type=float, default=200)
    ap.add_argument("--device", default="cpu", help="cpu or cuda; cuda writes stream_capacity_cuda.json")
    ap.add_argument(
        "--engine", default="auto", choices=ENGINES, help="default auto: the model's own (light: its one)"
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
    ap.add_argument("--readme", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(1)
    p = Punctuator.load(args.model, device=args.device, int8=args.int8)
    words, _ = read_iwslt(args.data)
    runs = []

    def passes(n: int) -> bool:
        r = asyncio.run(trial(p, words, n, args.seconds, args.engine, args.max_wait_ms))
        r["pass"] = r["p99_ms"] < args.max_lag_ms and r["max_ms"] < 2 * args.max_lag_ms
        runs.append(r)
        print({k: round(v, 1) if isinstance(v, float) else v for k, v in r.items()}, flush=True)
        return r["pass"]

    # Warm-up, not counted: the first batches of each shape are slow (allocator, kernel choice).
    asyncio.run(trial(p, words, 8, min(5.0, args.seconds), args.engine))
    lo, hi = 0, 4
    while passes(hi):
        lo, hi = hi, hi * 2
    while hi - lo > max(1, lo // 8):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    payload = {
        "machine": machine(),
        "device": str(p.device),
        "torch_threads": 1,
        "model": args.model or "default",
        "engine_used": resolve_engine(p.model, args.engine, 2),
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
    path = write_json(name, payload, setting or None)
    print(f"{p.device} sustains {lo} streams; wrote {path}")
    if args.readme:  # from the file: the default run, and every setting's
        update_readme(*readme_section(json.loads(path.read_text())))


def readme_section(payload: dict) -> tuple[str, str]:
    """The README section this result belongs to, and its text."""
    on_cpu = payload.get("device", "cpu") == "cpu"
    m = payload["machine"]
    best = max((r for r in payload["runs"] if r["pass"]), key=lambda r: r["streams"], default=None)
    detail = (
        f" (p99 lag {best['p99_ms']:.0f} ms, mean batch {best['mean_batch']:.1f} streams)" if best else ""
    )
    where = "One CPU core (1 torch thread)" if on_cpu else f"One {m['gpu']}"
    text = (
        f"{where} sustains **{payload['streams_sustained']} live streams** of {payload['words_per_second']:g} "
        f"words a second at k=2 ({payload.get('engine', 'masked')} engine) through the batching scheduler with p99 lag under {payload['max_lag_ms']:.0f} ms"
        f"{detail}; {m['cpu']}, {m['date']}. `python benchmarks/stream_capacity.py --data "
        f"../shared/data/iwslt/test2011 --seconds {payload['seconds']:g}{'' if on_cpu else ' --device cuda'}`."
    )
    return ("capacity" if on_cpu else "capacity-cuda"), text + others(payload.get("settings", {}))


def others(settings: dict[str, dict]) -> str:
    """The file's runs of other settings (another engine, int8), each in a few words."""
    runs = []
    for name, o in settings.items():
        best = max((r for r in o["runs"] if r["pass"]), key=lambda r: r["streams"], default=None)
        batch = f"mean batch {best['mean_batch']:.1f}; " if best else ""
        runs.append(f"{name}: {o['streams_sustained']} ({batch}{o['machine']['date']})")
    return f" Other settings, the same way (`--engine`, `--int8`): {'; '.join(runs)}." if runs else ""


if __name__ == "__main__":
    main()
