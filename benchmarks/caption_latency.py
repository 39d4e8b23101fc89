"""Caption latency, live, with its breakdown: audio streamed at real-time speed through a real server.

    python -m benchmarks.caption_latency --audio ../shared/data/audio --e2e-cache ../e2e_cache \\
        [--frontends today,fast] [--model default] [--asr-model tiny.en] [--lookahead 2] [--runs 3]

For each front-end setting (FRONTENDS: the recogniser's and pipeline's settings, a ``--config`` file)
a ``streampunct serve`` process is started with debug logs and ``--record DIR``, and each input is
streamed to ``/v1/asr`` at real-time speed in 0.25 s chunks, as the ``mic`` client sends them:

- ``clips``: jfk_16k.wav and the LJSpeech clips of ``--audio``, one stream each;
- ``long``: with ``--e2e-cache``, the espeak-ng recordings of ``python -m benchmarks.e2e record``
  (two conversations and a TED monologue, 14.6 min) joined into one continuous stream;
- ``human``: with ``--human DIR``, each NAME.wav there with its punctuated NAME.txt, one stream
  each (recordings of human speech, e.g. the earnings calls of ``benchmarks/earnings_calls.py``).

**Latency** of a word: from its end in the audio (the recogniser's word timestamp) to the arrival,
at the client, of that word's *final* punctuation: the moment a client can show the word with
the mark it will keep (docs/protocol.md). Its parts, per word, in order: the audio end, the first
hypothesis that shows the word (provisional or committed), its commit by the recogniser's policy
and the arrival of its final punctuation, all by the client's clock (the messages it received).
The caption line that contains it is reported too (``caption_s``: a finished line waits for the
words after it). Per recognition pass: its time and real-time factor (the debug log's
``asr_pass`` lines, all that is read from it). The server's recording of each stream (``--record``:
every call on its punctuation stream, with the audio clock it was made at) goes into the timelines.

Live runs of the same audio differ, as the passes fall at other moments: ``--runs N`` measures
each front end N times, interleaved, and reports the words of all runs pooled, each run beside.

Accuracy on the same run: WER (jiwer, on normalised tokens) and punctuation micro-F1, with the
reference marks aligned onto the recognised words by edit distance (streampunct.scoring).
Writes ``benchmarks/results/caption_latency.json``; the timelines go to ``--timelines``: per
front end, each stream's words with their final's arrival and its recording (``{"settings",
"calls"}``, benchmarks/lib/recordings.py), which ``benchmarks/latency_f1.py`` replays for other
lookaheads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import RESULTS, machine, percentile, update_readme, write_json
from benchmarks.lib.caption_frontends import FRONTENDS, server_args, settings
from benchmarks.lib.caption_tables import STAGES, breakdown, table
from benchmarks.lib.doc_text import short_name
from benchmarks.lib.model_sources import resolve
from benchmarks.lib.recordings import CLIP_GAP_S, clip_pairs, read_wav, silence
from streampunct import protocol as P
from streampunct.clients.file import load_audio, stream_file
from streampunct.pipeline import read_recording
from streampunct.scoring import accuracy, metrics, pool
from streampunct.text import normalize

LONG = ("conv1", "monologue", "conv2")  # e2e recordings joined into the long stream


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


def word_times(timeline: list[tuple[float, dict[str, Any]]]) -> list[dict[str, Any]]:
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
        elif kind == "caption":
            for i in range(msg["first"], msg["last"] + 1):
                if i in words:
                    words[i]["caption"] = clock
    return [words[i] for i in sorted(words)]


def server_recording(folder: Path, seen: set[Path]) -> tuple[str, dict[str, Any]]:
    """The session id and recording of the stream just run (``serve --record folder``: the one
    SESSION.jsonl not in ``seen``; then seen), the recording as the timelines keep it:
    ``{"settings", "calls"}``."""
    (path,) = set(folder.glob("*.jsonl")) - seen
    seen.add(path)
    settings, calls = read_recording(path)
    return path.stem, {"settings": settings, "calls": calls}


def passes_of(path: Path, session: str) -> list[dict]:
    """The stream's recognition passes: the debug log's ``asr_pass`` lines."""
    passes = []
    for line in path.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("event") == "asr_pass" and entry.get("session") == session:
            passes.append(entry)
    return passes


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
    record = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=logdir))  # a server's session ids restart
    cmd = [sys.executable, "-m", "streampunct.server.app", "--port", "0", "--preload-asr", "--device", "cpu"]
    cmd += ["--model", args.model, "--asr-model", args.asr_model, "--log-level", "debug"]
    cmd += ["--record", str(record), *flags]
    with log.open("w") as err:
        server = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
        url = server.stdout.readline().split()[-1]  # type: ignore[union-attr]
        config = {"lookahead": args.lookahead, "max_delay_ms": args.max_delay_ms}
        by_set: dict[str, dict[str, list]] = {}
        timelines: list[dict] = []
        seen: set[Path] = set()  # the recordings of the streams before
        try:
            for item in inputs:
                result = asyncio.run(stream_file(url, item["audio"], 1.0, P.Config(**config)))
                session, recorded = server_recording(record, seen)
                words = word_times(result.timeline)
                passes = passes_of(log, session)
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
                        "recording": recorded,
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
                print(
                    f"front end {name}, run {run + 1} of {args.runs}: {' '.join(settings(name))}", flush=True
                )
                flags = server_args(name, Path(tmp))
                by_set, streams = run_frontend(name, flags, inputs, args, Path(tmp))
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
        out[name] = {"flags": settings(name), "runs": len(runs), "sets": sets}  # its --config's settings
        if args.timelines:
            path = Path(args.timelines) / f"{name}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                json.dumps({"frontend": name, "flags": out[name]["flags"], "streams": timelines[name]})
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--audio", help="the shared/data/audio folder")
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
    ap.add_argument(
        "--timelines",
        default=None,
        help="folder for the streams' timelines and recordings (for latency_f1.py)",
    )
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
        help="write docs/latency.md's tables from these results (in benchmarks/results, FILE@COMMIT: as "
        "git kept it), run nothing",
    )
    args = ap.parse_args()

    if args.docs_from:  # several runs side by side (FILE@COMMIT: as git kept it)
        runs = {}
        for source in args.docs_from:
            path = resolve(source, RESULTS)
            if path is None:
                raise SystemExit(f"--docs-from: {source}: no such result file here")
            runs[source] = (path.stem, json.loads(path.read_text()))
        frontends: dict[str, Any] = {}
        for stem, run in runs.values():  # a front end measured again: a row of its own, named by its file
            for name, fe in run["frontends"].items():
                frontends[name if name not in frontends else f"{name} ({stem})"] = fe
        merged = {**next(iter(runs.values()))[1], "frontends": frontends}
        when = {
            f: f"{run['machine']['date']} ({short_name(run['machine']['cpu'])})"
            for f, (_, run) in runs.items()
        }
        update_readme("latency", table(merged, when))
        update_readme("breakdown", breakdown(merged))
        return
    if not args.audio:
        ap.error("--audio is required (unless --docs-from)")
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
        update_readme("latency", table(payload, {args.out: payload["machine"]["date"]}))
        update_readme("breakdown", breakdown(payload))


if __name__ == "__main__":
    main()
