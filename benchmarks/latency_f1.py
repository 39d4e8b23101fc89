"""Latency against punctuation F1: the punctuator alone, and the whole live pipeline.

    python -m benchmarks.latency_f1 --audio ../shared/data/audio --timelines ../timelines
    python -m benchmarks.latency_f1 --quick        # no data, no recogniser: what the test suite runs
    python -m benchmarks.latency_f1 --docs-only    # docs/latency.md's table from the saved result

(a) **The punctuator alone.** For each shipped model and engine: micro-F1 and per-class F1 on
IWSLT2011 test, Ref and ASR, for lookahead k = 0 to 4 and offline (``accuracy.json`` and
``accuracy_base.json``, written by ``benchmarks/accuracy.py`` on the shipped checkpoints), against
the emission delay of k: how long after a word ends its final mark is decided, median and p95, in
words and in milliseconds, on real word timings (Whisper tiny.en on the audio clips; ``--quick``:
synthetic timings) and no time limit. Offline waits for the end of the transcript.

(b) **The whole pipeline.** ``python -m benchmarks.caption_latency --timelines DIR`` keeps, for each
front end, each stream's recording (the server's ``--record``: every call on the punctuation
stream, its pushes of the recognised words and the pause clock's ticks, with the audio clock it was
made at). Replayed here (``streampunct.pipeline.replay``) into a fresh stream for each k (time limit
1500 ms, as live; the engine the model picks for k), they give each word's latency (its end in the
audio to the clock of the call that made it final) and the punctuation F1 against the reference
text, beside that front end's WER. The replay leaves out the few milliseconds a decision and its
message take (caption_latency.py measures them live, at k=2).

Writes ``latency_f1.json`` and ``latency_f1.png`` under ``benchmarks/results/`` (``--quick``: a
temporary folder, or ``--out DIR``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import RESULTS, machine, percentile, update_readme, write_result
from benchmarks.lib import doc_text
from benchmarks.lib.recordings import recording_of, transcribe
from streampunct import Punctuator
from streampunct.pipeline import replay
from streampunct.prosody import synthetic_times
from streampunct.scoring import accuracy, metrics, pool
from streampunct.speech import resolve_asr_model
from streampunct.training.conversation import labeled_words
from streampunct.types import Word

LOOKAHEADS = (0, 1, 2, 3, 4)
ACCURACY = {"default": "accuracy.json", "base": "accuracy_base.json"}
CLASSES = ("COMMA", "PERIOD", "QUESTION")
QUICK_TEXT = (
    "Hello everyone, and thank you for coming today. What do you think about the weather? "
    "I think it will rain tomorrow, so we should stay at home and read a book. Is that a plan? "
)


def stats(xs: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(xs), 3), "p95": round(percentile(xs, 95), 3)}


# --- (a) the punctuator alone --------------------------------------------------------------------


def emission_delays(p: Punctuator, words: list[Word]) -> dict[str, dict]:
    """Per k: the delay from each word's end to its final decision, in ms and in words. Without a
    time limit only pushes decide, so each word is pushed at its end and no clock ticks between."""
    out = {}
    for k in LOOKAHEADS:
        stream, decided = p.stream(lookahead=k), {}
        for i, w in enumerate(words):
            for e in stream.push([w]):
                if e.final:
                    decided[e.index] = (1000 * (w.end - words[e.index].end), i - e.index)
        for e in stream.finish():  # the end of the transcript
            decided[e.index] = (1000 * (words[-1].end - words[e.index].end), len(words) - 1 - e.index)
        ms, ahead = zip(*(decided[i] for i in range(len(words))))
        out[f"k={k}"] = {"ms": stats(list(ms)), "words": stats([float(a) for a in ahead])}
    return out


def punctuator_panel(results: Path, delays: dict[str, dict]) -> list[dict[str, Any]]:
    rows = []
    for model, name in ACCURACY.items():
        path = results / name
        if not path.is_file():
            continue
        for r in json.loads(path.read_text())["results"]:
            rows.append(
                {
                    "model": model,
                    "set": r["set"],
                    "mode": r["mode"],
                    "engine": r["engine"],
                    "micro_f1": round(r["micro_f1"], 2),
                    **{c: round(r[c]["f1"], 2) for c in CLASSES},
                    "delay": delays.get(r["mode"]),  # None offline: the end of the transcript
                }
            )
    return rows


# --- (b) the pipeline --------------------------------------------------------------------------


def pipeline_panel(p: Punctuator, timelines: Path, max_delay_ms: float) -> list[dict[str, Any]]:
    """Per front end (a timelines file), set and k: each stream's recording replayed with lookahead
    k and ``max_delay_ms``; each word's latency is its final clock less its end."""
    rows = []
    for path in sorted(timelines.glob("*.json")):
        rec = json.loads(path.read_text())
        by_set: dict[str, list[dict]] = {}
        for stream in rec["streams"]:
            by_set.setdefault(stream["set"], []).append(stream)
        for set_name, streams in by_set.items():
            for k in LOOKAHEADS:
                latency, parts = [], []
                for stream in streams:
                    words = replay(p, recording_of(stream["recording"]), k, max_delay_ms, "auto")
                    latency += [w["clock"] - w["end"] for w in words]
                    parts.append(accuracy(words, stream["text"]))
                acc = metrics(pool(parts))
                rows.append(
                    {
                        "frontend": rec["frontend"],
                        "set": set_name,
                        "lookahead": k,
                        "words": len(latency),
                        "latency_s": stats(latency),
                        "micro_f1": acc["micro_f1"],
                        **{c: acc[c]["f1"] for c in CLASSES},
                        "wer": acc["wer"],
                    }
                )
    return rows


# --- output ------------------------------------------------------------------------------------


# The plot and the docs' table: the shipped front end and the one before issue 19, its baseline.
# The result file keeps every front end replayed.
SHOWN = ("whisper-ends", "today")


def shown(payload: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in payload["pipeline"] if r["frontend"] in SHOWN]


def chart(payload: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(13, 5))
    rows = payload["punctuator"]
    for (model, engine, set_name), style in zip(
        sorted({(r["model"], r["engine"], r["set"]) for r in rows if r["delay"]}),
        ["o-", "s-", "o--", "s--", "^-", "v-", "^--", "v--"],
    ):
        pts = sorted(
            (r["delay"]["ms"]["median"], r["micro_f1"])
            for r in rows
            if (r["model"], r["engine"], r["set"]) == (model, engine, set_name) and r["delay"]
        )
        a.plot(*zip(*pts), style, label=f"{model} {engine} {set_name}", markersize=4)
    for r in rows:
        if r["mode"] == "offline":
            a.axhline(r["micro_f1"], color="grey", lw=0.6, ls=":")
            a.annotate(f"{r['model']} offline {r['set']}", (0, r["micro_f1"]), fontsize=7, color="grey")
    a.set(
        xlabel="median emission delay (ms after the word's end), k = 0..4", ylabel="micro-F1 (IWSLT2011 test)"
    )
    a.set_title("(a) the punctuator alone")
    a.legend(fontsize=7)
    a.grid(alpha=0.3)
    pipeline = shown(payload)
    frontends = sorted({r["frontend"] for r in pipeline})
    for fe, set_name in sorted({(r["frontend"], r["set"]) for r in pipeline}):
        pts = [r for r in pipeline if (r["frontend"], r["set"]) == (fe, set_name)]
        wer = pts[0]["wer"]
        b.plot(
            [r["latency_s"]["median"] for r in pts],
            [r["micro_f1"] for r in pts],
            "o-" if set_name == "long" else "s--",  # one colour a front end, one style a set
            color=plt.get_cmap("tab10")(frontends.index(fe) % 10),
            label=f"{fe}, {set_name} (WER {wer:.1f})",
        )
        for r in pts:
            b.annotate(f"k={r['lookahead']}", (r["latency_s"]["median"], r["micro_f1"]), fontsize=7)
    b.axvline(1.5, color="grey", lw=0.6, ls=":")
    b.set(
        xlabel="median latency (s): word end in the audio to its final punctuation",
        ylabel="punctuation micro-F1",
    )
    b.set_title("(b) the live pipeline (tiny.en, 2 CPU cores)")
    if pipeline:
        b.legend(fontsize=7)
    b.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(payload: dict[str, Any]) -> str:
    head = [
        "front end",
        "input",
        "k",
        "latency median s",
        "p95 s",
        "micro-F1",
        "COMMA",
        "PERIOD",
        "QUESTION",
        "WER %",
    ]
    body = [
        [
            r["frontend"],
            r["set"],
            str(r["lookahead"]),
            f"{r['latency_s']['median']:.2f}",
            f"{r['latency_s']['p95']:.2f}",
            *(f"{r[c]:.1f}" for c in ("micro_f1", "COMMA", "PERIOD", "QUESTION", "wer")),
        ]
        for r in shown(payload)
    ]
    m = payload["machine"]
    others = sorted({r["frontend"] for r in payload["pipeline"]} - set(SHOWN))
    text = (
        "Live runs of `python -m benchmarks.caption_latency` replayed (tiny.en int8, time limit 1500 ms), "
        f"{doc_text.where(m)}."
    )
    by_date: dict[str, list[str]] = {}
    for name, date in payload.get("kept", {}).get("frontends", {}).items():
        if name in SHOWN:
            by_date.setdefault(date, []).append(f"`{name}`")
    for date, names in sorted(by_date.items()):
        text += f" {', '.join(names)}: replayed on {date} with the default model of that day (`--keep`)."
    text += f" Earlier front ends in the file: {', '.join(others)}." if others else ""
    command = str(payload.get("command", "python -m benchmarks.latency_f1 --audio ../shared/data/audio"))
    lines = [*doc_text.table(head, body), "", *doc_text.wrap(text)]
    return "\n".join([*lines, doc_text.provenance("latency_f1.json", command)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--audio", help="the shared/data/audio folder: real word timings for panel (a)")
    ap.add_argument("--timelines", help="caption_latency.py's --timelines folder: panel (b)")
    ap.add_argument(
        "--keep",
        default=None,
        metavar="JSON",
        help="an earlier latency_f1.json: its pipeline rows for front ends not in --timelines are kept",
    )
    ap.add_argument("--max-delay-ms", type=float, default=1500)
    ap.add_argument("--quick", action="store_true", help="synthetic timings, no recogniser; writes to --out")
    ap.add_argument("--out", default=None, help="folder for the JSON and PNG (default: benchmarks/results)")
    ap.add_argument("--docs", action="store_true", help="write the pipeline table into docs/latency.md")
    ap.add_argument(
        "--redraw", action="store_true", help="the plot and the table from the saved result; measure nothing"
    )
    ap.add_argument("--docs-only", action="store_true", help="the table alone from the saved result")
    args = ap.parse_args()
    if args.docs_only:
        update_readme("latency_f1", table(json.loads((RESULTS / "latency_f1.json").read_text())))
        return
    if args.redraw:
        saved = json.loads((RESULTS / "latency_f1.json").read_text())
        chart(saved, RESULTS / "latency_f1.png")
        update_readme("latency_f1", table(saved))
        return

    p = Punctuator.load(None, device="cpu")
    if args.quick or not args.audio:
        tokens, labels = labeled_words(QUICK_TEXT * 2, turn_end=False)
        words = synthetic_times(tokens, labels, np.random.default_rng(0))
        source = "synthetic timings"
    else:
        words = transcribe(Path(args.audio), resolve_asr_model("tiny.en"))
        source = "tiny.en word timestamps on jfk + the LJSpeech clips"
    payload: dict[str, Any] = {
        "machine": machine(),
        "timings": source,
        "words": len(words),
        "punctuator": punctuator_panel(RESULTS, emission_delays(p, words)),
        "pipeline": pipeline_panel(p, Path(args.timelines), args.max_delay_ms) if args.timelines else [],
    }
    if args.keep:  # front ends whose timelines are no longer at hand, as replayed then
        replayed = {r["frontend"] for r in payload["pipeline"]}
        earlier = json.loads(Path(args.keep).read_text())
        kept = [r for r in earlier["pipeline"] if r["frontend"] not in replayed]
        before = earlier.get("kept", {}).get("frontends", {})  # those that run kept in turn: their own date
        if isinstance(before, list):  # written before each kept front end had its own date
            before = dict.fromkeys(before, earlier["kept"]["date"])
        payload["pipeline"] = kept + payload["pipeline"]
        payload["kept"] = {
            "frontends": {r["frontend"]: before.get(r["frontend"], earlier["machine"]["date"]) for r in kept}
        }
    out = Path(args.out) if args.out else (Path(tempfile.mkdtemp()) if args.quick else RESULTS)
    write_result(out / "latency_f1.json", payload)
    try:
        chart(payload, out / "latency_f1.png")
    except ImportError:
        print("matplotlib is missing: no plot (pip install 'streampunct[bench]')", file=sys.stderr)
    for r in payload["pipeline"]:
        print(
            f"{r['frontend']} {r['set']} k={r['lookahead']}: latency median {r['latency_s']['median']:.2f} s "
            f"p95 {r['latency_s']['p95']:.2f} s, micro-F1 {r['micro_f1']:.1f}, WER {r['wer']:.1f}"
        )
    print(f"wrote {out / 'latency_f1.json'}")
    if args.docs:
        update_readme("latency_f1", table(payload))


if __name__ == "__main__":
    main()
