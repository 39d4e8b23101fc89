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

With ``--talks``, the espeak-ng dev2012 talks (``e2e record --only synthetic_talk_dev``: a
synthetic set, reported apart and never pooled with human speech) are traced too, and each of
VARIANTS (which recordings a fit reads, whether it reads the marks gated by the text model's
confidence, the decision it is pulled towards) is scored left out per recording, beside the text
model alone on the same streamed words at k=2 with no time limit: the rule that every recording
holds is served >= text alone - 1 (``variants``).

Writes ``benchmarks/results/hearing.json``; ``--write-checkpoint DIR`` also writes the fusion
fitted on all of dev to ``DIR/hearing.json`` (with ``--talks``, ``--variant``'s, by default
SHIPPED_FORM: speech dev and the talks, the gated marks, pulled to the text model; without, the
speech dev fit above). The shipped one is written so, into ``streampunct/checkpoints/default``,
with ``--talks``. No test recording is read.
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
from benchmarks.lib.e2e_audio import TALK_DEV
from benchmarks.lib.recordings import recording_of
from streampunct import Punctuator, pipeline
from streampunct.hearing import SpeechFusion
from streampunct.options import StreamOptions
from streampunct.scoring import compare, paired, reference, unit_tallies, whisper_tokens, word_tokens
from streampunct.training.hearing import (
    Traced,
    decide,
    fit,
    fit_hearing,
    held_out,
    left_out,
    micro_f1_of,
    rows_in,
    rows_of,
    trace_all,
)

DEV = ("CAR0001", "CAR0002", "GAS0001", "GAS0002")
TALKS = tuple(name for name, *_ in TALK_DEV)
# name -> what a fit reads: "fit_on" (the sets whose recordings it is fitted on), "drop", "prior"
VARIANTS: dict[str, dict] = {
    "speech dev": {"fit_on": ("speech_dev",), "drop": ("gated",), "prior": "pause fusion"},  # until now
    "speech dev, gated": {"fit_on": ("speech_dev",), "prior": "pause fusion"},
    "speech dev + talks": {"drop": ("gated",), "prior": "pause fusion"},
    "speech dev + talks, gated": {"prior": "pause fusion"},
    "speech dev + talks, gated, text prior": {"prior": "text"},
}
SHIPPED_FORM = "speech dev + talks, gated, text prior"
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


def _fit_on(every: list[dict], how: dict) -> dict:
    """VARIANTS' ``how`` as :func:`held_out`'s keywords: the sets named, as recording indices."""
    sets = how.get("fit_on")
    fit_on = None if sets is None else [n for n, r in enumerate(every) if r["set"] in sets]
    return {"drop": how.get("drop", ()), "fit_on": fit_on, "prior": how["prior"]}


def fitted(every: list[dict], runs: dict[tuple[int, int], Traced], l2: float, how: dict) -> SpeechFusion:
    """A variant's fusion fitted on all of its recordings (every lookahead)."""
    kw = _fit_on(every, how)
    rows = rows_of([(n, t) for (n, _), t in runs.items()])
    return fit(rows, rows_in(rows, kw["fit_on"]), l2, kw["drop"], prior=kw["prior"])


def variants(
    p: Punctuator, every: list[dict], runs: dict[tuple[int, int], Traced], l2: float, draws: int
) -> dict:
    """Each of VARIANTS left out per recording at k=2 (the 1500 ms limit, as served), per recording
    and pooled per set (never across sets), beside the stream without the hearing (the pause fusion)
    and the text model alone on the same streamed words at k=2 with no time limit."""
    texts = [r["text"] for r in every]
    alone = {}
    for n, r in enumerate(every):  # the stream equals predict(): the text model alone at k=2
        settings, calls = recording_of(r["streaming"][STREAM_ASR])
        out = pipeline.replay(p, ({**settings, "max_delay_ms": None}, calls), 2, pauses=False)
        alone[n] = ([w["text"] for w in out], [w["label"] for w in out])

    def scores(labels_of: dict[int, tuple[list[str], list[str]]]) -> dict:
        out: dict = {"per_recording": {}, "pooled": {}}
        for n, r in enumerate(every):
            out["per_recording"][r["name"]] = micro_f1_of([(*labels_of[n], texts[n])])["micro_f1"]
        for kind in sorted({r["set"] for r in every}):
            ns = [n for n, r in enumerate(every) if r["set"] == kind]
            out["pooled"][kind] = micro_f1_of([(*labels_of[n], texts[n]) for n in ns])["micro_f1"]
        return out

    k2 = {n: t for (n, k), t in runs.items() if k == 2}
    report = {
        "text alone, no limit": scores(alone),
        "pause fusion (no hearing)": scores({n: (t.words, t.labels) for n, t in k2.items()}),
    }
    floor = report["text alone, no limit"]["per_recording"]
    decided = {"text alone, no limit": alone}
    for name, how in VARIANTS.items():
        labels = left_out(runs, texts, l2, **_fit_on(every, how))
        decided[name] = {n: (k2[n].words, labels[n][2]) for n in k2}
        v = scores(decided[name])
        v["holds"] = {rec: f >= floor[rec] - 1 for rec, f in v["per_recording"].items()}
        report[name] = v
        print(
            f"{name}: {v['pooled']} {v['per_recording']} holds {sum(v['holds'].values())}/{len(v['holds'])}"
        )
    report["paired"] = {}  # the shipped form minus the others, per set (recordings, then units)
    for kind in sorted({r["set"] for r in every}):
        ns = [n for n, r in enumerate(every) if r["set"] == kind]
        tallies = {
            name: {(n, u): t for n in ns for u, t in units(*d[n], texts[n]).items()}
            for name, d in decided.items()
        }
        report["paired"][kind] = {
            b: paired(tallies[SHIPPED_FORM], tallies[b], draws, nested=True)["micro_f1"]
            for b in ("speech dev", "text alone, no limit")
        }
        print(f"{SHIPPED_FORM} on {kind} minus: {report['paired'][kind]}", flush=True)
    return report


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
    ap.add_argument("--talks", action="store_true", help="trace the synthetic talks too; score VARIANTS")
    ap.add_argument("--variant", choices=VARIANTS, default=SHIPPED_FORM, help="what --write-checkpoint fits")
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    names = DEV + (TALKS if args.talks else ())
    every = [json.loads((Path(args.cache) / f"{name}.json").read_text()) for name in names]
    recordings = [(r["name"], r["text"], r["streaming"][STREAM_ASR]["calls"]) for r in every]
    p = Punctuator.load(args.model)
    delay = args.max_delay_ms
    every_run = trace_all(p, recordings, (0, 1, 2), delay)
    recs = every[: len(DEV)]  # speech dev: indices 0..3 in every_run too
    runs = {(n, k): t for (n, k), t in every_run.items() if n < len(DEV)}
    fusion, report = fit_hearing(runs, recordings[: len(DEV)], args.l2)
    if args.talks:
        report["variants"] = variants(p, every, every_run, args.l2, args.draws)
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
        if args.talks:  # a variant's fusion, on its sets (without the talks: the report's, on speech dev)
            fusion = fitted(every, every_run, args.l2, VARIANTS[args.variant])
            fusion.report = {**report, "variant": args.variant}
        fusion.save(Path(args.write_checkpoint) / "hearing.json")
        print(f"wrote {Path(args.write_checkpoint) / 'hearing.json'}")


if __name__ == "__main__":
    main()
