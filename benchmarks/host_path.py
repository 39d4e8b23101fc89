"""Host time a word with thousands of streams in one process, the model's forward timed apart.

    python -m benchmarks.host_path [--streams 1000 5000] [--steps 10] [--engine auto]

N streams each get one word a step (3 words a second of simulated speech, k=2, the 1.5 s time
limit), and every step runs the streams' jobs through the scheduler's ``run_batch`` in batches of
``--max-batch``, as the server's batcher does. The model has the default checkpoint's windows,
vocabulary and word pieces but small random layers (2 layers, 64 wide), so that its forward is
short beside the host's work, which is the same at any model size: collation, tensor builds,
windows, decisions, events. Timed: each step's wall, the model work (``compute_many``) and,
inside it, the model's forward. Host time a word = (wall - forward) / words. Memory a stream:
the process's resident memory after opening the N streams and giving each ``--warm`` words, less
before, over N. Writes ``results/host_path.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks.common import machine, rss_mb, write_json
from streampunct import Punctuator
from streampunct import scheduler as sched
from streampunct.model import ModelConfig, PunctModel
from streampunct.pieces import WordPieces
from streampunct.punctuator import DEFAULT_CHECKPOINT
from streampunct.stream import Push

RATE = 3.0  # words a second a stream
WORDS = (
    "so we went down to the river and then it started to rain but nobody wanted to go home because "
    "the music was still playing do you remember what she said about the new school next year"
).split()


def own_mb() -> float:
    mb = rss_mb(os.getpid())
    assert mb is not None  # this process is alive
    return mb


def small_model() -> Punctuator:
    """Random small layers on the default checkpoint's windows and word pieces."""
    torch.manual_seed(0)
    cfg = json.loads((DEFAULT_CHECKPOINT / "config.json").read_text())
    keep = (
        "vocab_size",
        "max_positions",
        "block",
        "context",
        "max_pieces",
        "cls_id",
        "pad_id",
        "window_bias",
        "window_from",
    )
    small = ModelConfig(
        **{k: cfg[k] for k in keep if k in cfg}, n_layer=2, n_head=4, n_embd=64, n_inner=128, dropout=0.0
    )
    return Punctuator(
        PunctModel(small).eval(), WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", small.max_pieces)
    )


class Timer:
    """Seconds spent in a function, summed, while installed."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t

        return timed


def trial(p: Punctuator, n: int, steps: int, warm: int, engine: str, max_batch: int) -> dict:
    rng = random.Random(0)
    before = own_mb()
    streams = [p.stream(lookahead=2, max_delay_ms=1500, engine=engine) for _ in range(n)]
    forward, work = Timer(), Timer()
    real_forward, real_work = PunctModel.forward, sched.compute_many
    PunctModel.forward = forward.wrap(real_forward)  # type: ignore[method-assign]
    sched.compute_many = work.wrap(real_work)
    try:
        clock, timed, words = 0.0, [], 0
        for step in range(warm + steps):
            clock += 1 / RATE
            forward.seconds = work.seconds = 0.0
            t = time.perf_counter()
            for i in range(0, n, max_batch):
                jobs = [sched.Job(s, Push((rng.choice(WORDS),), clock)) for s in streams[i : i + max_batch]]
                for r in sched.run_batch(jobs):
                    if isinstance(r, Exception):
                        raise r
            wall = time.perf_counter() - t
            if step == warm - 1:
                held = own_mb()
            if step >= warm:
                timed.append((wall, work.seconds, forward.seconds))
                words += n
    finally:
        PunctModel.forward, sched.compute_many = real_forward, real_work  # type: ignore[method-assign]
    wall, work_s, forward_s = (sum(x) for x in zip(*timed))
    us = 1e6 / words
    return {
        "streams": n,
        "words": words,
        "host_us_per_word": round((wall - forward_s) * us, 1),
        "forward_us_per_word": round(forward_s * us, 1),
        "model_work_us_per_word": round(work_s * us, 1),
        "outside_model_work_us_per_word": round((wall - work_s) * us, 1),
        "kb_per_stream": round((held - before) * 1024 / n, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--steps", type=int, default=10, help="steps timed (one word a stream each)")
    ap.add_argument("--warm", type=int, default=40, help="words a stream gets before the timed steps")
    ap.add_argument("--engine", default="auto")
    ap.add_argument("--max-batch", type=int, default=64, help="jobs a batch (the server's batcher: 64)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    p = small_model()
    runs = []
    for n in args.streams:
        runs.append(trial(p, n, args.steps, args.warm, args.engine, args.max_batch))
        print(json.dumps(runs[-1]), flush=True)
    out = write_json(
        "host_path.json",
        {
            "machine": machine(),
            "engine": args.engine,
            "max_batch": args.max_batch,
            "model": "the default's windows and word pieces, 2 random layers 64 wide",
            "runs": runs,
        },
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
