"""Is one front end worse than another on the same audio? A paired bootstrap of F1 and WER.

    python -m benchmarks.paired --timelines ../timelines [../timelines_human ...] \\
        --frontend whisper-ends --against today [--lookahead 2] [--out paired.json]

``python -m benchmarks.caption_latency --timelines DIR`` records each front end's live run; the same
recording replayed into a fresh stream (``streampunct.pipeline.replay``, as ``latency_f1.py``
replays it; time limit 1500 ms as live) gives back the marks it had. Each stream
is cut into units of ``--unit-s`` seconds of its audio (by each recognised word's end), and each
unit tallies the word errors, reference words and the punctuation's true positives, false
positives and misses of both front ends. Resampling the units (``streampunct.scoring.paired``:
with replacement, the same units for both) gives the spread of the differences in micro-F1 and WER
that other audio like this one would show: a 95% interval, and the share of resamples in which
``--frontend`` is worse. A set with few marks (the clips: 33) cannot tell a mark or two apart.
Runs of the same stream (``--runs N``, or folders of other runs) add up in each unit.

WER here counts the edits of the alignment that moves the reference marks
(``streampunct.scoring``), on the same tokens as jiwer's; it can differ from jiwer's by a few
hundredths.

Writes ``benchmarks/results/paired.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import machine, write_json
from benchmarks.lib.recordings import recording_of
from streampunct import Punctuator
from streampunct.metrics import count
from streampunct.pipeline import replay
from streampunct.scoring import TALLY, accuracy, paired
from streampunct.text import normalize


def tallies(words: list[dict[str, Any]], text: str, unit_s: float) -> dict[int, np.ndarray]:
    """A stream's recognised words (with their final ``label``) against its reference text, per
    ``unit_s`` seconds of audio: the :data:`TALLY` counts. A deleted reference word counts in the
    unit of the recognised word before it (the first unit if none)."""
    c = accuracy(words, text)
    units = [int((w["end"] or 0.0) // unit_s) for w in words for _ in normalize(w["text"])]
    out: dict[int, np.ndarray] = {}

    def row(unit: int) -> np.ndarray:
        return out.setdefault(unit, np.zeros(len(TALLY), dtype=np.int64))

    unit = units[0] if units else 0
    for op, i, j in c["path"]:
        if j is not None:
            unit = units[j]
        row(unit)[:2] += (op != "=", i is not None)
    labels: dict[int, tuple[list[str], list[str]]] = {}
    for ref, hyp, unit in zip(c["ref"], c["hyp"], units):
        refs, hyps = labels.setdefault(unit, ([], []))
        refs.append(ref)
        hyps.append(hyp)
    for unit, (refs, hyps) in labels.items():
        n = count(refs, hyps)
        marks = [sum(n.tp.values()), sum(n.fp.values()), sum(n.fn.values())]
        row(unit)[2:] += marks
    return out


def set_tallies(
    p: Punctuator, streams: list[dict], k: int, max_delay_ms: float, unit_s: float
) -> dict[str, dict[tuple[str, int], np.ndarray]]:
    """Per set, the tallies of every stream's units, keyed (stream, unit); runs of one stream add up."""
    by_set: dict[str, dict[tuple[str, int], np.ndarray]] = {}
    for stream in streams:
        words = replay(p, recording_of(stream["recording"]), k, max_delay_ms, "auto")
        units = by_set.setdefault(stream["set"], {})
        for unit, t in tallies(words, stream["text"], unit_s).items():
            key = (stream["name"], unit)
            units[key] = units.get(key, 0) + t
    return by_set


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--timelines", nargs="+", required=True, help="caption_latency.py's --timelines folders")
    ap.add_argument("--frontend", default="whisper-ends", help="the front end to judge")
    ap.add_argument("--against", default="today", help="the front end it must not be worse than")
    ap.add_argument("--lookahead", type=int, default=2, help="as the live run")
    ap.add_argument("--max-delay-ms", type=float, default=1500, help="as the live run")
    ap.add_argument("--unit-s", type=float, default=30.0, help="seconds of audio in a resampled unit")
    ap.add_argument("--draws", type=int, default=10000)
    ap.add_argument("--out", default="paired.json")
    args = ap.parse_args()

    p = Punctuator.load(None, device="cpu")
    found: dict[str, dict[str, dict]] = {args.frontend: {}, args.against: {}}
    for folder in args.timelines:
        for name, sets in found.items():
            streams = json.loads((Path(folder) / f"{name}.json").read_text())["streams"]
            for set_name, units in set_tallies(
                p, streams, args.lookahead, args.max_delay_ms, args.unit_s
            ).items():
                pooled = sets.setdefault(set_name, {})
                for key, t in units.items():  # a stream in several folders: its runs add up
                    pooled[key] = pooled.get(key, 0) + t
    a, b = found.values()
    payload: dict[str, Any] = {
        "machine": machine(),
        "frontend": args.frontend,
        "against": args.against,
        "lookahead": args.lookahead,
        "unit_s": args.unit_s,
        "draws": args.draws,
        "sets": {s: paired(a[s], b[s], args.draws) for s in a if s in b},
    }
    payload["sets"]["all"] = paired(
        {(s, *k): t for s, units in a.items() for k, t in units.items()},
        {(s, *k): t for s, units in b.items() for k, t in units.items()},
        args.draws,
    )
    for set_name, r in payload["sets"].items():
        f, w = r["micro_f1"], r["wer"]
        print(
            f"{set_name} ({r['units']} units, {r['marks']} marks): micro-F1 {f['a']:.1f} against {f['b']:.1f}, "
            f"{f['diff']:+.1f} [{f['ci95'][0]:+.1f}, {f['ci95'][1]:+.1f}], worse in {100 * f['p_worse']:.0f}%; "
            f"WER {w['a']:.1f} against {w['b']:.1f}, {w['diff']:+.1f} [{w['ci95'][0]:+.1f}, {w['ci95'][1]:+.1f}], "
            f"worse in {100 * w['p_worse']:.0f}%"
        )
    print(f"wrote {write_json(args.out, payload)}")


if __name__ == "__main__":
    main()
