"""The pause and mark statistics that train the pause fusion, measured on the speech dev set.

    python -m benchmarks.speech_stats --cache ../e2e_cache [--sets speech_dev]

The pause fusion learns from text with generated word times and recogniser marks
(:mod:`streampunct.prosody`: ``PAUSES``, ``OWN_MARK_RATES``, ``PAUSE_MARK_RATES``,
``CAPITAL_AFTER``). Those constants are measured here, on Whisper tiny.en's words as the live path
streams them (``e2e.py record --speech``: the server's front end on the simulated clock) for the
human conversational speech dev recordings, and on no recording that a benchmark reports: each
streamed word gets the reference mark aligned to it (``streampunct.scoring.compare``), then

- pauses: the time from a word's end to the next word's start, by the word's reference mark: the
  share over 50 ms, the median of those, and the spread (standard deviation) of their log;
- the recogniser's own marks by the reference mark, at full recall: ``synthetic_marks`` scales each
  rate by a recall factor drawn from ``MARK_RECALL``, so the measured rate is divided by that
  range's mean (a plain word before a pause of over 0.3 s counted apart, ``PAUSE_MARK_RATES``);
- the share of words after a streamed sentence-end mark written with a capital, by the reference
  mark of the word before (``I`` not counted).

Writes ``benchmarks/results/speech_stats.json``; the constants in ``prosody.py`` are copied from it.
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from benchmarks.common import machine, write_json
from benchmarks.lib.recordings import load_recordings, streamed_words
from streampunct.prosody import MARK_RECALL
from streampunct.scoring import compare, reference, whisper_tokens
from streampunct.text import LABELS, mark_of

PAUSE_S = 0.05  # a pause: more than this between two words
LONG_PAUSE_S = 0.3  # a plain word before a longer pause: PAUSE_MARK_RATES
OWN = ("PERIOD", "COMMA", "QUESTION")


def labelled_words(rec: dict) -> list[tuple[dict, str]]:
    """The streamed words of a recording, each with the reference mark aligned to its last token."""
    words = [w for w in streamed_words(rec["streaming"]["tiny.en"]) if whisper_tokens([w])[0]]
    last_token = np.cumsum([len(whisper_tokens([w])[0]) for w in words]) - 1
    hyp_tokens, hyp_labels = whisper_tokens(words)
    assert len(hyp_tokens) == last_token[-1] + 1, "a word's tokens depend on its neighbours"
    moved = compare(*reference(rec["text"]), hyp_tokens, hyp_labels)["ref"]
    return [(w, moved[t]) for w, t in zip(words, last_token)]


def measure(recordings: list[dict]) -> dict:
    pauses: dict[str, list[float]] = defaultdict(list)
    own: dict[str, Counter] = defaultdict(Counter)
    capital: dict[str, list[bool]] = defaultdict(list)
    for rec in recordings:
        pairs = labelled_words(rec)
        for (w, label), (nxt, _) in zip(pairs, pairs[1:]):
            gap = nxt["start"] - w["end"]
            pauses[label].append(gap)
            key = "O, long pause" if label == "O" and gap > LONG_PAUSE_S else label
            own[key][mark_of(w["text"])] += 1
            if (
                mark_of(w["text"]) in ("PERIOD", "QUESTION")
                and nxt["text"][:1].isalpha()
                and nxt["text"].split("'")[0] != "I"
            ):
                capital[label].append(nxt["text"][:1].isupper())
    recall = float(np.mean(MARK_RECALL))
    out: dict[str, dict] = {"pauses": {}, "own_marks": {}, "capital_after": {}, "words": {}}
    for label in LABELS:
        gaps = np.array(pauses[label])
        long = gaps[gaps > PAUSE_S]
        out["words"][label] = len(gaps)
        if len(long):
            out["pauses"][label] = [
                round(float(len(long) / len(gaps)), 2),
                round(float(np.median(long)), 2),
                round(float(np.std(np.log(long))), 2),
            ]
        if capital[label]:
            out["capital_after"][label] = round(float(np.mean(capital[label])), 2)
    for key, counts in own.items():
        total = sum(counts.values())
        out["own_marks"][key] = {m: round(min(1.0, counts[m] / total / recall), 3) for m in OWN if counts[m]}
        out["words"][key] = total
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", required=True, help="e2e.py's cache, with the speech recordings")
    ap.add_argument("--sets", nargs="+", default=["speech_dev"])
    args = ap.parse_args()
    recordings = [r for r in load_recordings(Path(args.cache)) if r["set"] in args.sets]
    if not recordings:
        raise SystemExit(f"no recording of {args.sets} in {args.cache}: run e2e.py record --speech first")
    stats = measure(recordings)
    payload = {
        "machine": machine(),
        "recordings": [r["name"] for r in recordings],
        "seconds": round(sum(r["seconds"] for r in recordings), 1),
        "mark_recall": list(MARK_RECALL),
        **stats,
    }
    print(write_json("speech_stats.json", payload))
    for key in ("pauses", "own_marks", "capital_after", "words"):
        print(key, stats[key])


if __name__ == "__main__":
    main()
