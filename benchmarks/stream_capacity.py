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
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, update_readme, write_json  # noqa: E402

from streampunct import Punctuator, read_iwslt  # noqa: E402
from streampunct.scheduler import Batcher  # noqa: E402

RATE = 3.0  # words a second per stream


async def trial(p: Punctuator, words: list[str], n: int, seconds: float) -> dict:
    batcher = Batcher(max_batch=256)
    lags: list[float] = []
    t0 = time.perf_counter() + 0.2

    async def speaker(i: int) -> None:
        stream = p.stream(lookahead=2, max_delay_ms=1000)
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
    ap.add_argument("--readme", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(1)
    p = Punctuator.load(args.model, device="cpu")
    words, _ = read_iwslt(args.data)
    runs = []

    def passes(n: int) -> bool:
        r = asyncio.run(trial(p, words, n, args.seconds))
        r["pass"] = r["p99_ms"] < args.max_lag_ms and r["max_ms"] < 2 * args.max_lag_ms
        runs.append(r)
        print({k: round(v, 1) if isinstance(v, float) else v for k, v in r.items()}, flush=True)
        return r["pass"]

    lo, hi = 0, 4
    while passes(hi):
        lo, hi = hi, hi * 2
    while hi - lo > max(1, lo // 8):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if passes(mid) else (lo, mid)
    payload = {
        "machine": machine(),
        "torch_threads": 1,
        "words_per_second": RATE,
        "max_lag_ms": args.max_lag_ms,
        "streams_sustained": lo,
        "runs": runs,
    }
    print(f"one core sustains {lo} streams; wrote {write_json('stream_capacity.json', payload)}")
    if args.readme:
        best = max((r for r in runs if r["pass"]), key=lambda r: r["streams"], default=None)
        detail = (
            f" (p99 lag {best['p99_ms']:.0f} ms, mean batch {best['mean_batch']:.1f} streams)" if best else ""
        )
        update_readme(
            "capacity",
            f"One CPU core (1 torch thread) sustains **{lo} live streams** of {RATE:g} words a second at k=2 through the "
            f"batching scheduler with p99 lag under {args.max_lag_ms:.0f} ms{detail}; {payload['machine']['cpu']}, "
            f"{payload['machine']['date']}. `python benchmarks/stream_capacity.py --data ../shared/data/iwslt/test2011`.",
        )


if __name__ == "__main__":
    main()
