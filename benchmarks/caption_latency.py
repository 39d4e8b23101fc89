"""Caption latency, live, with its breakdown: audio streamed at real-time speed through a real server.

    python benchmarks/caption_latency.py --audio ../shared/data/audio --e2e-cache ../e2e_cache \\
        [--frontends today,fast] [--model default] [--asr-model tiny.en] [--lookahead 2] [--runs 3]

For each front-end setting (the server's ``--asr-*`` flags, FRONTENDS) a ``streampunct serve``
process is started with debug logs, and each input is streamed to ``/v1/asr`` at real-time speed
in 0.25 s chunks, as the ``mic`` client sends them:

- ``clips``: jfk_16k.wav and the LJSpeech clips of ``--audio``, one stream each;
- ``long``: with ``--e2e-cache``, the espeak-ng recordings of ``benchmarks/e2e.py record``
  (two conversations and a TED monologue, 14.6 min) joined into one continuous stream;
- ``human``: with ``--human DIR``, each NAME.wav there with its punctuated NAME.txt, one stream
  each (recordings of human speech, e.g. the earnings calls of ``benchmarks/earnings_calls.py``).

**Latency** of a word: from its end in the audio (the recogniser's word timestamp) to the arrival,
at the client, of that word's *final* punctuation: the moment a client can show the word with
the mark it will keep (docs/protocol.md). Its parts, per word, in order: the audio end, the first
hypothesis that shows the word (provisional or committed), its commit by the recogniser's policy,
its final punctuation sent by the server (debug log) and received. The caption line that contains
it is reported too (``caption_s``: a finished line waits for the words after it). Per
recognition pass: its time and real-time factor (debug log).

Live runs of the same audio differ, as the passes fall at other moments: ``--runs N`` measures
each front end N times, interleaved, and reports the words of all runs pooled, each run beside.

Accuracy on the same run: WER (jiwer, on normalised tokens) and punctuation micro-F1, with the
reference marks aligned onto the recognised words by edit distance (streampunct.scoring).
Writes ``benchmarks/results/caption_latency.json``; the timelines go to ``--timelines`` (for
``benchmarks/latency_f1.py``, which replays them for other lookaheads).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from common import CLIP_GAP_S, clip_pairs, machine, percentile, read_wav, silence, update_readme, write_json  # noqa: E402

from streampunct import protocol as P  # noqa: E402
from streampunct.clients.file import load_audio, stream_file  # noqa: E402
from streampunct.flags import flags_of  # noqa: E402
from streampunct.options import FrontEndOptions, RecognizerOptions  # noqa: E402
from streampunct.scoring import accuracy, metrics, pool  # noqa: E402
from streampunct.text import normalize  # noqa: E402

# The front end before each setting came (``today`` and the first ones were measured so): a named
# front end gives every setting, so that it stays what it was measured as when the server's
# defaults change. ``encoder_pad_s`` and ``settle_after_s`` came on 2026-11-25 (None: a 30 s encoder
# window and no settling), ``settle_unsure_after_s`` the same evening, ``context_s`` and
# ``beam_size`` on 2026-11-26, ``agree_after_s`` that night, ``sentence_ends="whisper"`` and the
# pause clock's independence of the end-of-speech commit on 2026-11-27.
BEFORE: dict[str, Any] = dict(
    min_chunk_s=0.5, max_buffer_s=25.0, end_of_speech_s=0.5, prompt=True, encoder_pad_s=None,
    settle_after_s=None, settle_unsure_after_s=None, agree_after_s=None, sentence_ends="punctuator",
)  # fmt: skip


def front_end(**changes: Any) -> tuple[RecognizerOptions, FrontEndOptions]:
    """A front end: BEFORE with ``changes`` (recogniser and pipeline fields alike)."""
    given = {**BEFORE, **changes}
    split = {
        cls: {k: v for k, v in given.items() if k in {f.name for f in dataclasses.fields(cls)}}
        for cls in (RecognizerOptions, FrontEndOptions)
    }
    return RecognizerOptions(**split[RecognizerOptions]), FrontEndOptions(**split[FrontEndOptions])


def _flags(**changes: Any) -> str:
    """A front end's ``serve`` flags, every setting given (see BEFORE)."""
    recognizer, pipeline = front_end(**changes)
    return " ".join(flags_of(pipeline, switches=True) + flags_of(recognizer, prefix="asr-", switches=True))


# Front-end settings: the server's flags. "today" is the front end before issue 19; "today", "fast",
# "next" and "live" were measured with the recogniser's prompt on (the server's default then), and
# keep it. "no-prompt" was the shipped default from 2026-11-24, "short-next" from 2026-11-25,
# "unsure2" from that evening, "agree03" from the night of 2026-11-26, and "whisper-ends" (the
# buffer trimmed at Whisper's sentence ends) since 2026-11-27; "held" and "beam5" (options, measured
# 2026-11-26), "no-eos" and "settle-pauses" (2026-11-27) are not (docs/latency.md).
SHORT = dict(prompt=False, encoder_pad_s=4.0, settle_after_s=1.0)
UNSURE2 = dict(prompt=False, encoder_pad_s=12.0, settle_after_s=1.0, settle_unsure_after_s=2.0)
WHISPER_ENDS = dict(**UNSURE2, agree_after_s=0.3, sentence_ends="whisper")
FRONTENDS: dict[str, str] = {
    "today": _flags(min_chunk_s=1.0, end_of_speech_s=None, provisional_lookahead=False, pause_clock=False),
    "default": "",  # the server's defaults (streampunct.options), whatever they are
    "fast": _flags(confident=0.7, provisional_lookahead=False),  # provisional lookahead came after it
    "next": _flags(),
    "no-prompt": _flags(provisional_lookahead=False, prompt=False),
    "short": _flags(**SHORT, provisional_lookahead=False),
    "short-next": _flags(**SHORT),
    "short-next-0.3": _flags(**SHORT, min_chunk_s=0.3),
    "pad12": _flags(prompt=False, encoder_pad_s=12.0, settle_after_s=1.0),
    "pad12-settle2": _flags(prompt=False, encoder_pad_s=12.0, settle_after_s=2.0),
    "pad12-no-settle": _flags(prompt=False, encoder_pad_s=12.0),
    "unsure2": _flags(**UNSURE2),
    "held": _flags(**UNSURE2, context_s=0.5),
    "beam5": _flags(**UNSURE2, beam_size=5),
    "agree03": _flags(**UNSURE2, agree_after_s=0.3),
    "whisper-ends": _flags(**WHISPER_ENDS),
    # options, 2026-11-27: without the commit at the end of speech; the pause clock off, then kept
    "no-eos": _flags(**WHISPER_ENDS, end_of_speech_s=None, pause_clock=False),
    "settle-pauses": _flags(**WHISPER_ENDS, end_of_speech_s=None),
    "live": _flags(max_buffer_s=6.0, confident=0.7),
    "live-agree": _flags(max_buffer_s=6.0),
    # issue 51, 2026-11-28: the single-pass commit policy beside the shipped front end
    "alignatt": _flags(**WHISPER_ENDS, commit="alignatt"),
}
LONG = ("conv1", "monologue", "conv2")  # e2e recordings joined into the long stream
STAGES = ("seen", "committed", "sent", "final")  # after the audio end, in order


# --- inputs ------------------------------------------------------------------------------------


def recording(audio: Path, text: Path, set_name: str) -> dict[str, Any]:
    """One stream: the audio file and its punctuated reference text."""
    return {"name": audio.name, "set": set_name, "audio": load_audio(str(audio)), "text": text.read_text()}


def clip_inputs(audio_dir: Path) -> list[dict[str, Any]]:
    clips = [(audio_dir / "jfk_16k.wav", audio_dir / "jfk_16k.txt"), *clip_pairs(audio_dir / "ljspeech")]
    return [recording(a, t, "clips") for a, t in clips]


def long_input(cache: Path, names: list[str]) -> dict[str, Any]:
    recs = [json.loads((cache / f"{name}.json").read_text()) for name in names]
    pieces: list[np.ndarray] = []
    for i, r in enumerate(recs):
        pieces += [silence(CLIP_GAP_S)] * bool(i) + [read_wav(Path(r["wav"]))]
    return {
        "name": "+".join(names),
        "set": "long",
        "audio": np.concatenate(pieces),
        "text": " ".join(r["text"] for r in recs),
    }


# --- one stream --------------------------------------------------------------------------------


def _key(text: str) -> str:
    return " ".join(normalize(text)) or text.lower()


def word_times(timeline: list[tuple[float, dict[str, Any]]], sent: dict[int, float]) -> list[dict[str, Any]]:
    """Per committed word: its text, audio end and the clock of each stage (audio seconds)."""
    words: dict[int, dict[str, Any]] = {}
    shown: list[tuple[float, str, float]] = []  # (clock, key, midpoint) of every word shown so far
    for clock, msg in timeline:
        kind = msg["type"]
        if kind == "words":
            for w in msg["provisional"] + msg["committed"]:
                shown.append((clock, _key(w["text"]), (w["start"] + w["end"]) / 2))
            for w in msg["committed"]:
                mid, key = (w["start"] + w["end"]) / 2, _key(w["text"])
                seen = min((c for c, k, m in shown if k == key and abs(m - mid) < 0.5), default=clock)
                words[w["index"]] = {
                    "text": w["text"],
                    "start": w["start"],
                    "end": w["end"],
                    "seen": seen,
                    "committed": clock,
                }
        elif kind == "events":
            for e in msg["events"]:
                if e["final"] and e["index"] in words:
                    words[e["index"]].update(final=clock, label=e["label"])
                    if e["index"] in sent:
                        words[e["index"]]["sent"] = sent[e["index"]]
        elif kind == "caption":
            for i in range(msg["first"], msg["last"] + 1):
                if i in words:
                    words[i]["caption"] = clock
    return [words[i] for i in sorted(words)]


def server_log(
    path: Path, started: float, first_line: int
) -> tuple[list[dict], dict[int, float], list[dict]]:
    """The debug log lines of one stream: its recognition passes, when each word's final
    punctuation was sent (audio clock), and its pushes to the punctuation stream (audio clock,
    first word, number of words, the stream's clock ``now``)."""
    passes, sent, pushes = [], {}, []
    for line in path.read_text().splitlines()[first_line:]:
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("event") == "asr_pass":
            passes.append(entry)
        elif entry.get("event") == "final_sent":
            for i in range(entry["first"], entry["last"] + 1):
                sent.setdefault(i, entry["t"] - started)
        elif entry.get("event") == "asr_push":
            push = {"clock": entry["t"] - started, "first": entry["first"], "words": entry["words"]}
            pushes.append({**push, "now": entry["now"], "tentative": entry.get("tentative", [])})
    return passes, sent, pushes


def summarise(words: list[dict[str, Any]], passes: list[dict], parts: list[dict]) -> dict[str, Any]:
    import jiwer

    def stats(xs: list[float]) -> dict[str, float]:
        return {
            "median": round(statistics.median(xs), 3),
            "p95": round(percentile(xs, 95), 3),
            "max": round(max(xs), 3),
        }

    latency = [w["final"] - w["end"] for w in words if "final" in w]
    caption = [w["caption"] - w["end"] for w in words if "caption" in w]
    steps, before = {}, "end"
    for stage in STAGES:
        xs = [w[stage] - w[before] for w in words if stage in w and before in w]
        steps[f"{before}->{stage}"] = stats(xs) if xs else None
        before = stage
    pooled = pool(parts)
    acc = metrics(pooled)
    return {
        "words": len(words),
        "latency_s": stats(latency),
        "caption_s": stats(caption) if caption else None,
        "breakdown_s": steps,
        "passes": len(passes),
        "pass_s": stats([p["seconds"] for p in passes]) if passes else None,
        "real_time_factor": stats([p["rtf"] for p in passes if p["new_s"] > 0]) if passes else None,
        "end_of_speech_commits": sum(p.get("end_of_speech", False) for p in passes),
        "wer": round(100 * jiwer.wer([p["jiwer"][0] for p in parts], [p["jiwer"][1] for p in parts]), 2),
        "micro_f1": acc["micro_f1"],
        "per_class_f1": {c: acc[c]["f1"] for c in ("COMMA", "PERIOD", "QUESTION")},
    }


def run_frontend(
    name: str, flags: list[str], inputs: list[dict], args: argparse.Namespace, logdir: Path
) -> tuple[dict[str, dict[str, list]], list[dict]]:
    """One run of a front end: a server of its own, every input streamed through it. Per set, its
    words, passes and per-input accuracy (for :func:`summarise`); and each stream's timeline."""
    log = logdir / f"{name}.log"
    cmd = [sys.executable, "-m", "streampunct.server.app", "--port", "0", "--preload-asr", "--device", "cpu"]
    cmd += ["--model", args.model, "--asr-model", args.asr_model, "--log-level", "debug", *flags]
    with log.open("w") as err:
        server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        url = server.stdout.readline().split()[-1]  # type: ignore[union-attr]
        config = {"lookahead": args.lookahead, "max_delay_ms": args.max_delay_ms}
        by_set: dict[str, dict[str, list]] = {}
        timelines = []
        try:
            for item in inputs:
                first_line = len(log.read_text().splitlines())
                result = asyncio.run(stream_file(url, item["audio"], 1.0, P.Config(**config)))
                passes, sent, pushes = server_log(log, result.started, first_line)
                words = word_times(result.timeline, sent)
                acc = accuracy(words, item["text"])
                s = by_set.setdefault(item["set"], {"words": [], "passes": [], "parts": []})
                s["words"] += words
                s["passes"] += passes
                s["parts"].append(acc)
                lat = [w["final"] - w["end"] for w in words if "final" in w]
                print(
                    f"  {name} {item['name']}: {len(words)} words, latency median {statistics.median(lat):.2f} s "
                    f"p95 {percentile(lat, 95):.2f} s",
                    flush=True,
                )
                timelines.append(
                    {
                        "name": item["name"],
                        "set": item["set"],
                        "text": item["text"],
                        "words": [
                            {k: w[k] for k in ("text", "start", "end", "final")}
                            for w in words
                            if "final" in w
                        ],
                        "pushes": pushes,
                        "end_clock": result.timeline[-1][0],
                    }
                )
        finally:
            server.terminate()
            server.wait(timeout=60)
    return by_set, timelines


def pooled_summary(runs: list[dict[str, dict[str, list]]], set_name: str) -> dict[str, Any]:
    """:func:`summarise` over one set's words, passes and accuracy of these runs together."""
    return summarise(*([x for r in runs for x in r[set_name][k]] for k in ("words", "passes", "parts")))


def measure(names: list[str], inputs: list[dict], args: argparse.Namespace) -> dict[str, dict]:
    """Each front end ``args.runs`` times, the runs interleaved (every front end once, then again)
    so that a slow spell of the machine falls on all of them alike. A set's summary pools the words
    of every run; with several runs, each run's own WER, F1 and latency stand beside it (``runs``):
    live runs of the same audio differ, as passes fall at other moments."""
    raw: dict[str, list[dict[str, dict[str, list]]]] = {name: [] for name in names}
    timelines: dict[str, list[dict]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for name in names:
                print(f"front end {name}, run {run + 1} of {args.runs}: {FRONTENDS[name]}", flush=True)
                by_set, streams = run_frontend(name, FRONTENDS[name].split(), inputs, args, Path(tmp))
                raw[name].append(by_set)
                timelines[name] += [{**s, "run": run} for s in streams]
    out = {}
    for name, runs in raw.items():
        sets = {}
        for set_name in runs[0]:
            sets[set_name] = pooled_summary(runs, set_name)
            if len(runs) > 1:
                each = (pooled_summary([r], set_name) for r in runs)
                sets[set_name]["runs"] = [{k: e[k] for k in ("latency_s", "wer", "micro_f1")} for e in each]
        out[name] = {"flags": FRONTENDS[name].split(), "runs": len(runs), "sets": sets}
        if args.timelines:
            path = Path(args.timelines) / f"{name}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                json.dumps({"frontend": name, "flags": out[name]["flags"], "streams": timelines[name]})
            )
    return out


def flags_text(flags: list[str]) -> str:
    return f"`{' '.join(flags)}`" if flags else "the server's defaults"


def table(payload: dict[str, Any]) -> str:
    lines = [
        "| front end | run | input | words | latency median s | p95 s | caption line median s | WER % | micro-F1 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    m = payload["machine"]
    for name, fe in payload["frontends"].items():
        for set_name, s in fe["sets"].items():
            cap = s["caption_s"]["median"] if s["caption_s"] else float("nan")
            lines.append(
                f"| {name} | {fe.get('date', m['date'])} | {set_name} | {s['words']} | {s['latency_s']['median']:.2f} | "
                f"{s['latency_s']['p95']:.2f} | {cap:.2f} | {s['wer']:.1f} | {s['micro_f1']:.1f} |"
            )
    lines += [
        "",
        f"Punctuation model {payload.get('model', 'default')}, {payload['asr_model']} int8, "
        f"lookahead {payload['lookahead']}, time limit {payload['max_delay_ms']:.0f} ms, "
        f"real-time input in 0.25 s chunks, on {m['cpu']} ({m['cores']} cores). Front ends: "
        + "; ".join(f"`{k}`: {flags_text(v['flags'])}" for k, v in payload["frontends"].items())
        + ". `python benchmarks/caption_latency.py --audio ../shared/data/audio --e2e-cache ../e2e_cache"
        + (f" --model {payload['model']}" if payload.get("model", "default") != "default" else "")
        + "`.",
    ]
    return "\n".join(lines)


def breakdown(payload: dict[str, Any]) -> str:
    """Median (p95) seconds of each stage, and the recogniser's passes."""
    lines = [
        "| front end | input | end → seen | seen → committed | committed → final sent | sent → received "
        "| pass s | real-time factor | passes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, fe in payload["frontends"].items():
        for set_name, s in fe["sets"].items():
            cells = [
                f"{round(st['median'], 2) + 0.0:.2f} ({st['p95']:.2f})" if st else "-"  # no "-0.00"
                for st in (s["breakdown_s"][f"{a}->{b}"] for a, b in zip(("end", *STAGES), STAGES))
            ]
            lines.append(
                f"| {name} | {set_name} | {' | '.join(cells)} | {s['pass_s']['median']:.2f} | "
                f"{s['real_time_factor']['median']:.2f} | {s['passes']} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--audio", required=True, help="the shared/data/audio folder")
    ap.add_argument("--e2e-cache", default=None, help="benchmarks/e2e.py's cache: adds the 14.6 min stream")
    ap.add_argument(
        "--frontends", default="today,default", help=f"comma-separated, of {', '.join(FRONTENDS)}"
    )
    ap.add_argument("--human", default=None, help="a folder of NAME.wav with NAME.txt: adds the human set")
    ap.add_argument("--sets", default="clips,long,human", help="clips; long and human, given their folders")
    ap.add_argument("--long", default=",".join(LONG), help="the e2e recordings joined into the long stream")
    ap.add_argument(
        "--model", default="default", help="punctuation model: default, base or a checkpoint folder"
    )
    ap.add_argument("--asr-model", default="tiny.en")
    ap.add_argument("--lookahead", type=int, default=2)
    ap.add_argument("--max-delay-ms", type=float, default=1500)
    ap.add_argument(
        "--runs", type=int, default=1, help="measure each front end this many times, interleaved (pooled)"
    )
    ap.add_argument("--timelines", default=None, help="folder for the streams' timelines (for latency_f1.py)")
    ap.add_argument("--out", default="caption_latency.json")
    ap.add_argument(
        "--setting",
        default=None,
        help="a run of other inputs (e.g. speech_dev): kept under the file's settings",
    )
    ap.add_argument("--docs", action="store_true", help="write the tables into docs/latency.md")
    ap.add_argument(
        "--docs-from",
        nargs="+",
        metavar="JSON",
        help="write docs/latency.md's tables from these results, run nothing",
    )
    args = ap.parse_args()

    if args.docs_from:  # several runs side by side, each front end with its run's date
        runs = {Path(p).stem: json.loads(Path(p).read_text()) for p in args.docs_from}
        frontends: dict[str, Any] = {}
        for stem, run in runs.items():  # a front end measured again: a row of its own, named by its file
            for name, fe in run["frontends"].items():
                frontends[name if name not in frontends else f"{name} ({stem})"] = {
                    **fe,
                    "date": run["machine"]["date"],
                }
        merged = {**next(iter(runs.values())), "frontends": frontends}
        update_readme("latency", table(merged))
        update_readme("breakdown", breakdown(merged))
        return
    sets = args.sets.split(",")
    inputs = clip_inputs(Path(args.audio)) if "clips" in sets else []
    if "long" in sets and args.e2e_cache:
        inputs.append(long_input(Path(args.e2e_cache), args.long.split(",")))
    if "human" in sets and args.human:
        inputs += [recording(a, t, "human") for a, t in clip_pairs(Path(args.human))]
    payload: dict[str, Any] = {
        "machine": machine(),
        "model": args.model,
        "asr_model": args.asr_model,
        "lookahead": args.lookahead,
        "max_delay_ms": args.max_delay_ms,
        "frontends": {},
    }
    payload["frontends"] = measure(args.frontends.split(","), inputs, args)
    for name, fe in payload["frontends"].items():
        for set_name, s in fe["sets"].items():
            spread = [(r["wer"], r["micro_f1"]) for r in s.get("runs", [])]
            print(
                f"{name} {set_name}: latency median {s['latency_s']['median']:.2f} s p95 {s['latency_s']['p95']:.2f} s; "
                f"WER {s['wer']:.1f}; micro-F1 {s['micro_f1']:.1f}"
                + (f" (runs: WER, F1 {spread})" if spread else "")
                + f"; {s['breakdown_s']}",
                flush=True,
            )
    print(f"wrote {write_json(args.out, payload, args.setting)}")
    if args.docs:
        update_readme("latency", table(payload))
        update_readme("breakdown", breakdown(payload))


if __name__ == "__main__":
    main()
