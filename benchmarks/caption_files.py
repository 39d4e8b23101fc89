"""Subtitle files by broadcast rules: the cues ``streampunct file`` and ``mic`` write, before and after.

    python -m benchmarks.caption_files [--cache ~/.cache/streampunct/e2e] [--sets speech_dev]
                                       [--model default]

For each recording of ``python -m benchmarks.e2e record`` in the sets asked for, the caption lines
as the server serves them are rebuilt: the recorded calls through a fresh stream of ``--model``
(``streampunct.pipeline.replay``, the recording's own lookahead and time limit), their final
labels through the server's :class:`~streampunct.captions.Captioner`. Their subtitle cues are
written two ways: *before*, one cue a caption line, from its first word's start to its last word's
end (the writer up to issue 77); *after*, :func:`~streampunct.captions.subtitle_cues` with the
clients' :class:`~streampunct.options.CueOptions`. Reported per recording and pooled (over the
cues of all of them): the share of cues that break each rule (RULES), as the files' times read
(to the millisecond). Writes ``benchmarks/results/caption_files.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.common import machine, write_json
from benchmarks.lib.recordings import STREAM_ASR, load_recordings, recording_of
from streampunct import Punctuator
from streampunct.captions import Caption, Captioner, Cue, subtitle_cues
from streampunct.options import CueOptions
from streampunct.pipeline import replay
from streampunct.types import PunctEvent, Word

DEFAULT_CACHE = Path.home() / ".cache" / "streampunct" / "e2e"


def served(punctuator: Punctuator, recording: dict) -> tuple[list[Caption], dict[int, Word]]:
    """The caption lines a server gives for a recording, and its words by stream index."""
    replayed = replay(punctuator, recording_of(recording["streaming"][STREAM_ASR]))
    words = {i: Word(w["text"], w["start"], w["end"]) for i, w in enumerate(replayed)}
    captioner = Captioner()
    captioner.add_words(0, list(words.values()))
    events = [PunctEvent(i, w["text"], w["label"], True) for i, w in enumerate(replayed)]
    return captioner.add(events) + captioner.flush(), words


def one_cue_a_line(captions: Sequence[Caption]) -> list[Cue]:
    """The writer before: each caption line a cue of one line, with its words' times."""
    return [Cue((c.text,), c.start or 0.0, c.end or 0.0) for c in captions]


def _ends_sentence(text: str) -> bool:
    return text.endswith((".", "?", "!"))


def _name_word(text: str) -> bool:
    return text[:1].isupper() and text != "I" and not text.startswith("I'")


def rules(o: CueOptions) -> dict[str, Callable[[Sequence[Cue], int], bool]]:
    """Each rule's test of cue ``k`` (its times to the millisecond, as the files write them): True
    where the cue breaks it."""

    def ms(x: float) -> float:
        return round(1000 * x) / 1000

    def seconds(c: Cue) -> float:
        return ms(c.end) - ms(c.start)

    def few_words(cues: Sequence[Cue], k: int) -> bool:
        words = cues[k].text.split()
        starts = k == 0 or _ends_sentence(cues[k - 1].text)
        return len(words) <= 2 and not (starts and _ends_sentence(words[-1]))

    def name_cut(cues: Sequence[Cue], k: int) -> bool:  # the cue ends inside a name
        if k + 1 == len(cues):
            return False
        last, first = cues[k].text.split()[-1], cues[k + 1].text.split()[0]
        return _name_word(last) and last[-1].isalnum() and _name_word(first)

    return {
        f"line_over_{o.max_line_chars}_chars": lambda cues, k: any(
            len(line) > o.max_line_chars for line in cues[k].lines
        ),
        f"over_{o.max_lines}_lines": lambda cues, k: len(cues[k].lines) > o.max_lines,
        f"under_{o.min_cue_s:g}_s": lambda cues, k: seconds(cues[k]) < o.min_cue_s,
        "one_or_two_words_not_a_sentence": few_words,
        "overlaps_the_next": lambda cues, k: k + 1 < len(cues) and ms(cues[k].end) > ms(cues[k + 1].start),
        "zero_length": lambda cues, k: seconds(cues[k]) <= 0,
        f"over_{o.max_chars_per_s:g}_chars_per_s": lambda cues, k: (
            len(cues[k].text) > o.max_chars_per_s * (seconds(cues[k]) + 0.001)
        ),  # to the millisecond the file rounds to
        "cut_inside_a_name": name_cut,
        "two_lines": lambda cues, k: len(cues[k].lines) == 2,  # not a fault: how many use the second line
    }


def counts(cues: Sequence[Cue], o: CueOptions) -> dict[str, int]:
    out = {"cues": len(cues), "words": sum(len(c.text.split()) for c in cues)}
    return out | {name: sum(broken(cues, k) for k in range(len(cues))) for name, broken in rules(o).items()}


def shares(n: dict[str, int]) -> dict[str, float]:
    """The counts as shares of the cues (and the words a cue)."""
    cues = max(1, n["cues"])
    out = {"cues": n["cues"], "words_per_cue": round(n["words"] / cues, 2)}
    return out | {k: round(v / cues, 4) for k, v in n.items() if k not in ("cues", "words")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default=str(DEFAULT_CACHE), help="e2e.py's cache of recordings")
    ap.add_argument("--sets", nargs="+", default=["speech_dev"], help="the recording sets")
    ap.add_argument("--model", default="default", help="the punctuation model")
    args = ap.parse_args()
    t0 = time.perf_counter()
    recordings = [r for r in load_recordings(Path(args.cache)) if r["set"] in args.sets]
    if not recordings:
        raise SystemExit(f"{args.cache}: no recordings of the sets {', '.join(args.sets)}")
    punctuator = Punctuator.load(args.model, device="cpu")
    o = CueOptions()
    per: dict[str, dict[str, dict[str, float]]] = {}
    pooled: dict[str, dict[str, int]] = {"before": {}, "after": {}}
    for r in recordings:
        captions, words = served(punctuator, r)
        per[r["name"]] = {}
        for writer, cues in (
            ("before", one_cue_a_line(captions)),
            ("after", subtitle_cues(captions, words, o)),
        ):
            n = counts(cues, o)
            per[r["name"]][writer] = shares(n)
            pooled[writer] = {k: pooled[writer].get(k, 0) + v for k, v in n.items()}
        print(r["name"], per[r["name"]], flush=True)
    payload = {
        "machine": machine(),
        "options": dataclasses.asdict(o),
        "model": args.model,
        "recordings": per,
        "pooled": {writer: shares(n) for writer, n in pooled.items()},
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(write_json("caption_files.json", payload))


if __name__ == "__main__":
    main()
