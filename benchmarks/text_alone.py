"""The text model alone on a recogniser's words, beside the recogniser's own marks on those words.

    python -m benchmarks.text_alone --cache CACHE [--set speech_dev|speech_test] [--models default base DIR]
                                    [--lookaheads 0 1 2 4] [--draws 10000] [--out text_alone]
                                    [--sources "tiny.en offline" ...] [--left-out DIR --setting NAME]

CACHE is ``python -m benchmarks.e2e record``'s (the speech sets: ``--speech
../shared/data/conversation_audio --only speech_dev``). For each recording of the set and each of
its word sources (Whisper tiny.en and base offline, beam 5; the live path's streamed tiny.en words,
as committed; the reference transcript's own words), each model punctuates the words with their
marks taken off, with no times (``Punctuator.predict(..., pauses=False)``: the text model and its
decision offsets, nothing fitted on speech), at each lookahead and offline. A streamed word's label
at k with no time limit is ``predict``'s (the stream equals ``predict()``). Beside it, the
recogniser's own marks on the very same words (what it writes when it hears the recording); the
reference's words have none.

Scored as ``benchmarks.e2e`` scores (``streampunct.scoring.compare``: the reference's marks moved
onto the aligned recognised tokens, micro-F1 over , . ? and per class), per recording and per set.
For each word source, the first model at k=2 against the recogniser's own marks: a two-level
paired bootstrap (recordings, then 60-token units inside each; ``streampunct.scoring.paired``).
Nothing is fitted here, so no figure needs leaving out; ``--left-out DIR`` adds a system ("left
out") that scores each recording with ``DIR/NAME``, a checkpoint trained without that recording
(the fine-tunes on speech dev's words: their left-out figures). ``benchmarks/results/text_alone.json``
(a set other than speech dev under ``settings.<set>``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks.common import machine, write_json
from benchmarks.lib.e2e_audio import SPEECH_SPLIT
from benchmarks.lib.e2e_recognise import OFFLINE_ASR
from benchmarks.lib.e2e_results import set_units
from benchmarks.lib.e2e_systems import model_labels
from benchmarks.lib.recordings import STREAM_ASR, load_recordings, streamed_words
from streampunct import Punctuator
from streampunct.scoring import (
    UNIT_TOKENS,
    compare,
    metrics,
    paired,
    pool,
    reference,
    whisper_tokens,
    word_tokens,
)

LOOKAHEADS = (0, 1, 2, 4)
PAIRED_K = 2


def word_sources(recording: dict) -> dict[str, list[dict] | None]:
    """The words each source recognised in a recording (dicts with ``text``), by source name;
    the reference's own words last, with None for a recogniser's own marks (it has none)."""
    out: dict[str, list[dict] | None] = {
        f"{a} offline": recording["offline"][a]["words"] for a in OFFLINE_ASR if a in recording["offline"]
    }
    out[f"{STREAM_ASR} streamed"] = streamed_words(recording["streaming"][STREAM_ASR])
    out["reference"] = None
    return out


def k_name(k: int | None) -> str:
    return "offline" if k is None else f"k={k}"


def score(args) -> dict:
    recordings = [r for r in load_recordings(Path(args.cache)) if r["set"] == args.set]
    if not recordings:
        raise SystemExit(f"{args.cache}: no {args.set} recordings; run `benchmarks.e2e record` first")
    labels = model_labels(args.models)
    punctuators = {labels[m]: Punctuator.load(m, device="cpu") for m in args.models}
    if args.left_out:  # one checkpoint a recording, trained without it: DIR/NAME
        folds = {
            r["name"]: Punctuator.load(Path(args.left_out) / r["name"], device="cpu") for r in recordings
        }
    lookaheads: list[int | None] = [*args.lookaheads, None]
    compared: dict[str, dict[str, dict[str, dict]]] = {}  # source -> system -> recording -> comparison
    for r in recordings:
        ref = reference(r["text"])
        for source, words in word_sources(r).items():
            if args.sources and source not in args.sources:
                continue
            systems = compared.setdefault(source, {})
            texts = ref[0] if words is None else [w["text"] for w in words]
            if words is not None:
                systems.setdefault("own marks", {})[r["name"]] = compare(*ref, *whisper_tokens(words))
            models = dict(punctuators)
            if args.left_out:
                models["left out"] = folds[r["name"]]
            for label, p in models.items():
                for k in lookaheads:
                    t0 = time.perf_counter()
                    hyp = word_tokens(texts, p.predict(texts, lookahead=k, pauses=False))
                    systems.setdefault(f"{label} {k_name(k)}", {})[r["name"]] = compare(*ref, *hyp)
                    print(
                        f"{r['name']} {source} {label} {k_name(k)}: {time.perf_counter() - t0:.1f} s",
                        flush=True,
                    )
    first = f"{labels[args.models[0]]} k={PAIRED_K}"
    results: dict[str, dict] = {}
    for source, systems in compared.items():
        entry: dict[str, dict] = {}
        for system, per_rec in systems.items():
            entry[system] = {
                "set": metrics(pool(list(per_rec.values()))),
                "recordings": {n: metrics(c) for n, c in per_rec.items()},
            }
        if "own marks" in systems and first in systems:
            a = set_units(recordings, systems[first], args.set, args.unit_tokens)
            b = set_units(recordings, systems["own marks"], args.set, args.unit_tokens)
            entry[f"{first} against own marks"] = paired(a, b, args.draws, 0, nested=True)
        results[source] = entry
    return {
        "machine": machine(),
        "set": args.set,
        "recordings": [r["name"] for r in recordings],
        "models": args.models,
        "left_out": args.left_out,
        "lookaheads": [k_name(k) for k in lookaheads],
        "unit_tokens": args.unit_tokens,
        "draws": args.draws,
        "results": results,
    }


def table(payload: dict) -> str:
    """micro-F1 of the set: a row a word source, a column a system; then each recording at k=2."""
    results = payload["results"]
    systems = [s for s in next(iter(results.values())) if "against" not in s]
    lines = ["| words | " + " | ".join(systems) + " |", "|" + "---|" * (len(systems) + 1)]
    for source, entry in results.items():
        cells = [f"{entry[s]['set']['micro_f1']:.1f}" if s in entry else "" for s in systems]
        lines.append(f"| {source} | " + " | ".join(cells) + " |")
    for source, entry in results.items():
        for name, r in entry.items():
            if "against" in name:
                f = r["micro_f1"]
                lines.append(
                    f"\n{source}: {name}: {f['a']:.1f} vs {f['b']:.1f}, {f['diff']:+.1f} "
                    f"[{f['ci95'][0]:+.1f}, {f['ci95'][1]:+.1f}]"
                )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", required=True, help="benchmarks.e2e record's cache")
    ap.add_argument("--set", choices=list(SPEECH_SPLIT), default="speech_dev")
    ap.add_argument("--models", nargs="+", default=["default"], help="shipped names or checkpoint folders")
    ap.add_argument(
        "--left-out",
        default=None,
        help="also a folder of checkpoints, one a recording (DIR/NAME), each trained without its recording",
    )
    ap.add_argument("--lookaheads", nargs="+", type=int, default=list(LOOKAHEADS), help="and offline")
    ap.add_argument(
        "--sources", nargs="+", default=None, help='only these word sources ("tiny.en offline" ...)'
    )
    ap.add_argument("--setting", default=None, help="write under settings.SETTING (default: the set's own)")
    ap.add_argument("--unit-tokens", type=int, default=UNIT_TOKENS)
    ap.add_argument("--draws", type=int, default=10000)
    ap.add_argument("--out", default="text_alone", help="benchmarks/results/OUT.json")
    args = ap.parse_args()
    payload = score(args)
    setting = args.setting or (None if args.set == "speech_dev" else args.set)
    print(f"wrote {write_json(f'{args.out}.json', payload, setting)}")
    print(table(payload))


if __name__ == "__main__":
    main()
