"""The fusion with what the recogniser heard, fitted and measured on speech dev, left out per recording.

    python -m benchmarks.hearing --cache ../e2e_cache [--model default] [--write-checkpoint DIR]

The speech dev recordings of ``python -m benchmarks.e2e record`` (their calls carry each word's cues:
the decoder's mark probabilities) run through streams of ``--model`` at k = 0, 1
and 2 with the clients' time limit, as the server runs them, and
:func:`streampunct.training.hearing.fit_hearing` fits :class:`~streampunct.hearing.SpeechFusion`
on them: every figure is each recording decided by a fusion fitted on the other three. Then:

- the ablation at k=2: each evidence source (the text model, the pause fusion, the pause, the
  decoder's marks) left out of the fit in turn;
- turn ends: the fused decision forced to a sentence end (PERIOD, unless it is a QUESTION) where
  the pause after the word reaches 1, 2 or 3 s, or where the decoder's segment end passes 0.5;
- two-level bootstrap intervals (recordings, then 60-token units inside them) of the fused
  stream against the stream as it was and against Whisper tiny.en's and base's own offline
  punctuation on the same recordings.

Writes ``benchmarks/results/hearing.json``; ``--write-checkpoint DIR`` also writes the fusion
fitted on all four recordings to ``DIR/hearing.json`` (the shipped one is written so, into
``streampunct/checkpoints/default``). No test recording is read.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from benchmarks.common import machine, write_json
from streampunct import Punctuator
from streampunct.hearing import SpeechFusion
from streampunct.options import StreamOptions
from streampunct.scoring import compare, paired, reference, unit_tallies, whisper_tokens, word_tokens
from streampunct.training.hearing import (
    Traced,
    decide,
    fit_hearing,
    held_out,
    micro_f1_of,
    rows_of,
    trace_all,
)

DEV = ("CAR0001", "CAR0002", "GAS0001", "GAS0002")
STREAM_ASR = "tiny.en"
FORCE_PAUSES_S = (1.0, 2.0, 3.0)
FORCE_SEGMENT_END = 0.5


def forced(fusion: SpeechFusion, t: Traced, pause_s: float | None, segment: float | None) -> list[str]:
    """``t``'s labels with ``fusion`` deciding, then a sentence end forced at a turn's end: a pause
    after the word of at least ``pause_s`` (known to the decision), or the decoder's probability
    of a segment's end at least ``segment``."""
    labels = decide(fusion, t)
    for i, (x, _) in t.rows.items():
        gap = math.expm1(float(x[9])) * 0.1 if x[8] else 0.0  # prosody's log1p(gap / 0.1)
        turn = (pause_s is not None and gap >= pause_s) or (
            segment is not None and x[10] and math.exp(x[14]) >= segment
        )
        if turn and labels[i] in ("O", "COMMA"):
            labels[i] = "PERIOD"
    return labels


def units(words: list[str], labels: list[str], text: str) -> dict[int, np.ndarray]:
    return unit_tallies(compare(*reference(text), *word_tokens(words, labels)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", required=True, help="benchmarks/e2e.py record's folder")
    ap.add_argument("--model", default="default")
    ap.add_argument("--l2", type=float, default=10.0)
    ap.add_argument(
        "--max-delay-ms",
        type=float,
        default=StreamOptions.max_delay_ms,
        help="the streams' time limit (default: the clients', %(default)s); another is a setting of the result file",
    )
    ap.add_argument("--draws", type=int, default=10000)
    ap.add_argument(
        "--write-checkpoint", metavar="DIR", help="write the fusion fitted on all of dev to DIR/hearing.json"
    )
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    recs = [json.loads((Path(args.cache) / f"{name}.json").read_text()) for name in DEV]
    recordings = [(r["name"], r["text"], r["streaming"][STREAM_ASR]["calls"]) for r in recs]
    p = Punctuator.load(args.model)
    delay = args.max_delay_ms
    runs = trace_all(p, recordings, (0, 1, 2), delay)
    fusion, report = fit_hearing(runs, recordings, args.l2)
    traced = {n: t for (n, k), t in runs.items() if k == 2}
    held = held_out(rows_of([(n, t) for (n, _), t in runs.items()]), args.l2)  # as the fit's: every k
    texts = [text for _, text, _ in recordings]

    def pooled(labels: dict[int, list[str]]) -> float:
        return micro_f1_of([(traced[n].words, labels[n], texts[n]) for n in traced])["micro_f1"]

    turns = {}
    for pause_s in (None, *FORCE_PAUSES_S):
        labels = {n: forced(held[n], t, pause_s, None) for n, t in traced.items()}
        turns["none" if pause_s is None else f"pause >= {pause_s} s"] = pooled(labels)
    labels = {n: forced(held[n], t, None, FORCE_SEGMENT_END) for n, t in traced.items()}
    turns[f"segment end >= {FORCE_SEGMENT_END}"] = pooled(labels)
    report["turn_ends_k2_left_out"] = turns
    print("turn ends (k=2, left out):", turns, flush=True)

    fused = {n: forced(held[n], t, None, None) for n, t in traced.items()}
    systems = {
        "fused": {
            (n, u): v for n, t in traced.items() for u, v in units(t.words, fused[n], texts[n]).items()
        },
        "pause fusion": {
            (n, u): v for n, t in traced.items() for u, v in units(t.words, t.labels, texts[n]).items()
        },
    }
    for asr in ("tiny.en", "base"):
        systems[f"whisper {asr} offline"] = {
            (n, u): v
            for n, r in enumerate(recs)
            for u, v in unit_tallies(
                compare(*reference(r["text"]), *whisper_tokens(r["offline"][asr]["words"]))
            ).items()
        }
    report["paired_k2_left_out"] = {
        b: paired(systems["fused"], systems[b], args.draws, nested=True) for b in systems if b != "fused"
    }
    for b, r in report["paired_k2_left_out"].items():
        print(f"fused - {b}: {r['micro_f1']['diff']} {r['micro_f1']['ci95']}", flush=True)
    payload = {
        "machine": machine(),
        "model": args.model,
        "max_delay_ms": delay,
        "seconds": round(time.perf_counter() - t0),
        **report,
    }
    setting = (
        None
        if delay == StreamOptions.max_delay_ms and args.model == "default"
        else f"{args.model} {delay:g} ms"
    )
    print(f"wrote {write_json('hearing.json', payload, setting)}")
    if args.write_checkpoint:
        fusion.save(Path(args.write_checkpoint) / "hearing.json")
        print(f"wrote {Path(args.write_checkpoint) / 'hearing.json'}")


if __name__ == "__main__":
    main()
