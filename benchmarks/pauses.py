"""Do pauses help on human speech? Punctuation of recognised words with and without their times.

    python -m benchmarks.pauses --cache ../pause_cache --models default DIR \\
        --audio ../shared/data/audio/jfk_16k.wav CALL.wav ...   # each AUDIO.wav beside AUDIO.txt

faster-whisper (tiny.en, greedy, word timestamps) transcribes each recording once (cached as JSON
in --cache). Its words, with their times, are punctuated by each model at k = 0, 2 and offline,
with pause evidence on and off (``predict(words, k, pauses=...)``, which is what a stream decides
without time limits), and for a checkpoint whose fusion reads the recogniser's own marks, with
Whisper's marks left on the words ("+marks"; otherwise they are taken off first, as from a
recogniser that writes none); Whisper's own punctuation of the same words is the baseline. Each is scored
against the punctuated reference the same way as benchmarks/e2e.py (reference marks moved onto
the recognised tokens by edit-distance alignment). Writes benchmarks/results/pauses.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.common import machine, write_json
from streampunct import Punctuator
from streampunct.pipeline import recorded_words
from streampunct.scoring import compare, metrics, pool, reference, whisper_tokens, word_tokens
from streampunct.speech import load_whisper

MODES: list[tuple[str, int | None]] = [("k=0", 0), ("k=2", 2), ("offline", None)]


def transcribe(audio: Path, cache: Path, asr_name: str = "tiny.en") -> dict:
    path = cache / f"{audio.stem}.{asr_name}.json"
    if path.is_file():
        return json.loads(path.read_text())
    asr = load_whisper(asr_name, device="cpu")
    segments, info = asr.transcribe(str(audio), language="en", word_timestamps=True, beam_size=1)
    words = [{"text": w.word, "start": w.start, "end": w.end} for s in segments for w in (s.words or [])]
    rec = {"audio": audio.name, "seconds": info.duration, "reference": audio.with_suffix(".txt").read_text()}
    rec["words"] = words
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--audio", nargs="+", required=True, help="recordings, each beside its punctuated .txt")
    ap.add_argument("--cache", required=True, help="folder for the transcriptions")
    ap.add_argument("--models", nargs="+", default=["default"], help="shipped names or checkpoint folders")
    ap.add_argument("--name", default="pauses")
    args = ap.parse_args()
    recs = [transcribe(Path(a), Path(args.cache)) for a in args.audio]
    refs = [reference(r["reference"]) for r in recs]
    systems: dict[str, list[dict]] = {"whisper tiny.en own": []}
    for rec, (rt, rl) in zip(recs, refs):
        systems["whisper tiny.en own"].append(compare(rt, rl, *whisper_tokens(rec["words"])))
    for model in args.models:
        p = Punctuator.load(model, device="cpu")
        timed = p.decider.pause_fusion is not None
        runs = [(False, False)] + [(True, False)] * timed + [(True, True)] * p.model.cfg.pause_marks
        for mode, k in MODES:
            for pauses, marks in runs:
                name = f"{Path(model).name} {mode}{' +pauses' * pauses}{' +marks' * marks}"
                parts = systems.setdefault(name, [])
                for rec, (rt, rl) in zip(recs, refs):
                    words = recorded_words(rec["words"], marks)
                    labels = p.predict(words, k, pauses=pauses)
                    parts.append(compare(rt, rl, *word_tokens([w.text for w in words], labels)))
                print(name, metrics(pool(parts))["micro_f1"], flush=True)
    results = {name: {"pooled": metrics(pool(parts))} for name, parts in systems.items()}
    for name, parts in systems.items():
        results[name]["recordings"] = {r["audio"]: metrics(c) for r, c in zip(recs, parts)}
    minutes = sum(r["seconds"] for r in recs) / 60
    write_json(f"{args.name}.json", {"machine": machine(), "minutes": round(minutes, 1), "results": results})
    print(f"\n{minutes:.1f} min of speech, {len(recs)} recordings\n")
    print("| system | COMMA | PERIOD | QUESTION | micro-F1 | WER |\n|---|---|---|---|---|---|")
    for name, r in results.items():
        m = r["pooled"]
        cells = [f"{m[c]['f1']:.1f}" for c in ("COMMA", "PERIOD", "QUESTION")]
        print(f"| {name} | " + " | ".join(cells) + f" | {m['micro_f1']:.1f} | {m['wer']:.1f} |")


if __name__ == "__main__":
    main()
