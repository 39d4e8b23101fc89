"""Streaming cost: compute time per pushed word, incremental against naive, and memory over an hour.

    python -m benchmarks.stream_latency --data ../shared/data/iwslt/test2011 [--threads 2] [--readme]
    python -m benchmarks.stream_latency --data ... --model base --words 300 --hour 3600
    python -m benchmarks.stream_latency --docs-only [--device cuda]   # the section from the saved result

For each lookahead k, one stream is fed one word per push and every push is timed (p50, p99), under
the masked engine (incremental) and under the window engine (one window pass per word).
"Naive" recomputes the whole block window of the word that becomes final, as a batch model without
caches would (`window_logits`), timed on the same words in the same run. Memory (masked engine): the
process's resident set after 3,600 and after 36,000 pushed words (an hour of speech at 10 words a
second). Streams per core: one core's time budget divided by the work of a stream speaking 3 words
a second, for each engine at k=2. Another model than the default goes into the same file under
``settings.<name>`` (no docs section), with the default's one-core time timed beside it on the same
words (the window engine, k=2) and the ratio of the two.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path

import torch

from benchmarks.common import (
    RESULTS,
    device_suffix,
    machine,
    percentile,
    time_pushes,
    update_readme,
    write_json,
)
from benchmarks.lib import doc_text
from streampunct import Punctuator, read_iwslt
from streampunct.engines import window_logits
from streampunct.punctuator import DEFAULT_CHECKPOINT, checkpoint_dir

WORDS, HOUR = 2000, 36000  # timed pushes per lookahead, words pushed for the memory check


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * 4096 / 2**20


def time_naive(p: Punctuator, words: list[str], k: int) -> list[float]:
    ids = p.pieces.encode(words)
    times = []
    for t in range(len(words) - k):
        t0 = time.perf_counter()
        window_logits(p.model, ids, t, k)
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="a word<TAB>LABEL file to take words from")
    ap.add_argument("--model", default=None, help="default, base or a checkpoint folder")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--words", type=int, default=WORDS, help="timed pushes per lookahead")
    ap.add_argument("--hour", type=int, default=HOUR, help="words pushed for the memory check")
    ap.add_argument("--device", default="cpu", help="cpu or cuda; cuda writes stream_latency_cuda.json")
    ap.add_argument(
        "--int8", action="store_true", help="the encoder in int8: its run goes into the file's settings"
    )
    ap.add_argument("--readme", action="store_true")
    ap.add_argument(
        "--docs-only",
        action="store_true",
        help="rewrite the section from the saved result (--model, --device)",
    )
    args = ap.parse_args()
    model_dir = checkpoint_dir(args.model)
    if model_dir != DEFAULT_CHECKPOINT and (args.readme or args.docs_only):
        ap.error("--readme and --docs-only write the default model's section only")
    if args.docs_only:
        name, section = where(args.device)
        update_readme(section, table(json.loads((RESULTS / name).read_text()), name))
        return
    if not args.data:
        ap.error("--data is required (unless --docs-only)")

    torch.set_num_threads(args.threads)
    p = Punctuator.load(args.model, device=args.device, int8=args.int8)
    name, section = where(p.device)
    words, _ = read_iwslt(args.data)
    sample = words[: args.words]
    time_pushes(p, sample[:200], 2, "masked")  # warm-up
    time_pushes(p, sample[:200], 2, "window")

    rows = []
    for k in (0, 1, 2, 4):
        inc = time_pushes(p, sample, k, "masked")
        naive = time_naive(p, sample, k)
        row = {
            "lookahead": k,
            "pushes": len(inc),
            "p50_ms": 1000 * percentile(inc, 50),
            "p99_ms": 1000 * percentile(inc, 99),
            "mean_ms": 1000 * statistics.fmean(inc),
            "naive_p50_ms": 1000 * percentile(naive, 50),
            "naive_p99_ms": 1000 * percentile(naive, 99),
            "naive_mean_ms": 1000 * statistics.fmean(naive),
        }
        row["speedup_mean"] = row["naive_mean_ms"] / row["mean_ms"]
        window = time_pushes(p, sample, k, "window")
        row["window_p50_ms"] = 1000 * percentile(window, 50)
        row["window_p99_ms"] = 1000 * percentile(window, 99)
        row["window_mean_ms"] = 1000 * statistics.fmean(window)
        rows.append(row)
        print({key: round(v, 2) if isinstance(v, float) else v for key, v in row.items()}, flush=True)

    # Memory over an hour of speech, one core's capacity at 3 words a second.
    gc.collect()
    s = p.stream(lookahead=2, engine="masked")
    base = rss_mb()
    memory = {}
    t0 = time.perf_counter()
    for i in range(args.hour):
        s.push([words[i % len(words)]])
        if i + 1 in (args.hour // 10, args.hour):
            gc.collect()
            memory[i + 1] = rss_mb()
            print(f"{i + 1} words: RSS {memory[i + 1]:.1f} MB", flush=True)
    hour_seconds = time.perf_counter() - t0
    s.finish()
    small, large = memory[args.hour // 10], memory[args.hour]
    torch.set_num_threads(1)
    one_core = statistics.fmean(time_pushes(p, sample[:1000], 2, "masked"))
    one_core_window = statistics.fmean(time_pushes(p, sample[:1000], 2, "window"))
    payload = {
        "machine": machine(),
        "device": str(p.device),
        "engine": "masked",  # what p50_ms and mean_ms time (window_*: the window engine)
        "threads": args.threads,
        "per_push": rows,
        "memory_mb": {
            "before": base,
            str(args.hour // 10): small,
            str(args.hour): large,
            "growth_pct": 100 * (large - small) / small,
        },
        "hour_stream_seconds": hour_seconds,
        "one_core_mean_push_ms_k2": 1000 * one_core,
        "streams_per_core_at_3_words_per_s": int(1 / (3 * one_core)),
        "one_core_mean_push_ms_k2_window": 1000 * one_core_window,
        "streams_per_core_at_3_words_per_s_window": int(1 / (3 * one_core_window)),
    }
    if model_dir != DEFAULT_CHECKPOINT:  # the default beside it, in the same run: what it costs against it
        default = Punctuator.load(None, device=args.device)
        time_pushes(default, sample[:200], 2, "window")  # warm-up
        beside = statistics.fmean(time_pushes(default, sample[:1000], 2, "window"))
        payload["default_one_core_mean_push_ms_k2_window"] = 1000 * beside
        payload["compute_vs_default_k2_window"] = one_core_window / beside
    payload["model"], payload["int8"] = str(model_dir), args.int8
    other = None if model_dir == DEFAULT_CHECKPOINT else model_dir.name
    setting = " ".join(x for x in (other, "int8" if args.int8 else None) if x) or None
    print(f"wrote {write_json(name, payload, setting)}")
    if args.readme:
        update_readme(section, table(payload, name))


def where(device: object) -> tuple[str, str]:
    """The result file of a run on ``device`` and its section in docs/results.md."""
    suffix = device_suffix(device)
    return f"stream_latency{suffix}.json", "stream" + suffix.replace("_", "-")


def table(payload: dict, source: str = "stream_latency.json") -> str:
    """Per-push timings by k (the window engine's columns where it was timed), memory, one core's
    capacity, and where they come from (``source``: the results file)."""
    window = any("window_p50_ms" in r for r in payload["per_push"])
    head = ["k", "masked p50 ms", "masked p99 ms", "naive p50 ms", "naive p99 ms", "masked speed-up"]
    body = [
        [
            str(r["lookahead"]),
            *(f"{r[c]:.2f}" for c in ("p50_ms", "p99_ms", "naive_p50_ms", "naive_p99_ms")),
            f"{r['speedup_mean']:.1f}×",
            *(
                (f"{r['window_p50_ms']:.2f}", f"{r['window_p99_ms']:.2f}")
                if "window_p50_ms" in r
                else ("", "")
            ),
        ][: len(head) + 2 * window]
        for r in payload["per_push"]
    ]
    mem = payload["memory_mb"]
    keys = [k for k in mem if k.isdigit()]
    on_cpu = payload.get("device", "cpu") == "cpu"
    one = payload["one_core_mean_push_ms_k2"]
    m = payload["machine"]
    text = (
        f"Resident set: {mem[keys[0]]:.0f} MB after {int(keys[0]):,} words, {mem[keys[1]]:.0f} MB "
        f"after {int(keys[1]):,} ({mem['growth_pct']:+.1f} %). "
    )
    if on_cpu:
        text += (
            f"One core at k=2: {one:.2f} ms a word, about {payload['streams_per_core_at_3_words_per_s']} streams of "
            "3 words a second (compute only)"
        )
        if "one_core_mean_push_ms_k2_window" in payload:
            text += (
                f"; window engine {payload['one_core_mean_push_ms_k2_window']:.2f} ms, about "
                f"{payload['streams_per_core_at_3_words_per_s_window']}"
            )
        if "compute_vs_default_k2_window" in payload:
            text += (
                f"; {payload['compute_vs_default_k2_window']:.1f} times the default's "
                f"{payload['default_one_core_mean_push_ms_k2_window']:.2f} ms, timed beside it"
            )
        text += f". {doc_text.where(m, threads=payload['threads'])}."
    else:
        text += f"One stream, one torch thread driving the GPU, k=2: {one:.2f} ms a word. "
        text += f"{doc_text.where(m, payload['device'], payload['threads'])}."
    command = f"python -m benchmarks.stream_latency --data ../shared/data/iwslt/test2011{flags(payload)}"
    lines = doc_text.table([*head, *(["window p50 ms", "window p99 ms"] if window else [])], body)
    return "\n".join([*lines, "", *doc_text.wrap(text), doc_text.provenance(source, command)])


def flags(payload: dict) -> str:
    """The options that differ from the defaults, to rerun the measurement."""
    model = Path(payload.get("model", DEFAULT_CHECKPOINT))
    out = "" if model == DEFAULT_CHECKPOINT else f" --model {model.name}"
    pushes = payload["per_push"][0]["pushes"]
    hour = max(int(k) for k in payload["memory_mb"] if k.isdigit())
    out += "" if pushes == WORDS else f" --words {pushes}"
    out += "" if hour == HOUR else f" --hour {hour}"
    return out + ("" if payload.get("device", "cpu") == "cpu" else " --device cuda")


if __name__ == "__main__":
    main()
