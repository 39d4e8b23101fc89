"""Training text as a recogniser writes it: espeak-ng reads punctuated text, Whisper hears it, and
the text's marks are carried onto Whisper's words (MuSe's augmentation, Sunkara et al. 2020, §3.3:
training on the recogniser's own hypotheses instead of, or beside, random word noise).

    python -m streampunct.training.asr_corpus --text CONV/chat_train.tsv --out RUN --minutes 60 \
        [--turns] [--asr tiny.en] [--beam 1] [--threads 1] [--seed 0]

The text (IWSLT format) is cut into passages of about ``PASSAGE_WORDS`` words at sentence ends.
Each passage gets a voice (``VOICES``; with ``--turns`` its sentences become turns of one or two
sentences in two alternating voices, 0.2 to 0.8 s apart, as a conversation), a speed (130 to 200
words a minute) and a noise (none, or white noise at 10 to 30 dB SNR), drawn from the seed and the
passage's index, so the same passage always sounds the same. espeak-ng reads the passage with its
marks and casing (its prosody carries the marks, as a speaker's does); faster-whisper transcribes it
(``--asr``, greedy by default: the corpus is throughput-bound); the passage's marks move onto
Whisper's tokens by the scorer's alignment (``streampunct.scoring.compare``: a mark goes to the
token aligned to its word, a deleted word's to the token before it). Whisper's own marks are taken
off (``normalize``): the model reads words, not the recogniser's marks.

``--recordings CACHE --names ID ...`` makes the same from recordings already heard:
``python -m benchmarks.e2e record``'s cache (the speech sets), each named recording's reference
transcript and the words each recogniser heard in it (offline and streamed), the reference's marks
carried onto each, one after the other into ``RUN/asr_train.tsv`` (no budget, no state).

``RUN/asr_train.tsv`` grows a passage at a time (word, TAB, label); ``RUN/state.json`` says how far
it got, the words made, the audio heard and the seconds spent, so a run goes on where it stopped
(the same command). ``--minutes`` is this run's budget of work.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..scoring import compare, reference
from ..text import normalize, normalize_labeled, read_iwslt, render
from ..types import SAMPLE_RATE

__all__ = ["passages", "hear", "carry_marks"]

PASSAGE_WORDS = 150
VOICES = (
    "en-us+m1", "en-us+m3", "en-us+m7", "en-us+f2", "en-us+f3", "en-us+f4",
    "en-gb+m2", "en-gb+f1", "en-gb-x-rp+m4", "en-gb-scotland+f3", "en-029+m5", "en-us-nyc+f2",
)  # fmt: skip
WPM = (130, 200)
SNR_DB = (10.0, 30.0)
CLEAN_SHARE = 1 / 3
TURN_GAP_S = (0.2, 0.8)
ENDS = ("PERIOD", "QUESTION")


def passages(
    tokens: Sequence[str], labels: Sequence[str], words: int = PASSAGE_WORDS
) -> list[tuple[list[str], list[str]]]:
    """Consecutive passages of at least ``words`` tokens, each ending at a sentence end (the last
    one at the text's end)."""
    out, start = [], 0
    for i, lab in enumerate(labels):
        if lab in ENDS and i + 1 - start >= words:
            out.append((list(tokens[start : i + 1]), list(labels[start : i + 1])))
            start = i + 1
    if start < len(tokens):
        out.append((list(tokens[start:]), list(labels[start:])))
    return out


def turns(tokens: Sequence[str], labels: Sequence[str], rng: np.random.Generator) -> list[str]:
    """A passage's sentences as turns of one or two sentences each, rendered."""
    out, start, n, count = [], 0, int(rng.integers(1, 3)), 0
    for i, lab in enumerate(labels):
        if lab in ENDS:
            count += 1
            if count == n or i + 1 == len(labels):
                out.append(render(tokens[start : i + 1], labels[start : i + 1]))
                start, n, count = i + 1, int(rng.integers(1, 3)), 0
    if start < len(tokens):
        out.append(render(tokens[start:], labels[start:]))
    return out


def espeak(text: str, voice: str, wpm: int) -> np.ndarray:
    """espeak-ng reading ``text``: 16 kHz mono float32 (it speaks at 22,050 Hz; resampled)."""
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "say.wav"
        subprocess.run(
            ["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(wav), "--stdin"],
            input=text.encode(),
            check=True,
            capture_output=True,
        )
        from faster_whisper import decode_audio

        return decode_audio(str(wav), sampling_rate=SAMPLE_RATE)


def speak(
    tokens: Sequence[str], labels: Sequence[str], as_turns: bool, rng: np.random.Generator
) -> np.ndarray:
    """A passage as speech: its voice(s), speed and noise drawn from ``rng``."""
    wpm = int(rng.integers(*WPM))
    voices = [str(v) for v in rng.choice(VOICES, 2, replace=False)]
    texts = turns(tokens, labels, rng) if as_turns else [render(tokens, labels)]
    pieces = []
    for n, text in enumerate(texts):
        if n:
            pieces.append(np.zeros(int(rng.uniform(*TURN_GAP_S) * SAMPLE_RATE), np.float32))
        pieces.append(espeak(text, voices[n % 2 if as_turns else 0], wpm))
    audio = np.concatenate(pieces)
    snr = None if rng.random() < CLEAN_SHARE else float(rng.uniform(*SNR_DB))
    if snr is not None:
        power = float(np.mean(audio**2)) or 1e-8
        audio = audio + rng.normal(0, np.sqrt(power / 10 ** (snr / 10)), len(audio)).astype(np.float32)
    return audio


def hear(model, audio: np.ndarray, beam: int) -> list[str]:
    """faster-whisper's words for ``audio``, as it writes them."""
    segments, _ = model.transcribe(audio, language="en", beam_size=beam, condition_on_previous_text=False)
    return [w for s in segments for w in s.text.split()]


def carry_marks(
    tokens: Sequence[str], labels: Sequence[str], heard: Sequence[str]
) -> tuple[list[str], list[str]]:
    """The recogniser's words as tokens, with the text's marks moved onto them by the scorer's
    alignment; its own marks are taken off."""
    hyp = [t for w in heard for t in normalize(w)]
    return hyp, compare(tokens, labels, hyp, ["O"] * len(hyp))["ref"]


def heard_versions(recording: dict) -> list[list[str]]:
    """The words each recogniser heard in a recorded recording (its offline runs, then the live
    path's streamed words), as written."""
    streams = [recording["offline"][a]["words"] for a in sorted(recording["offline"])]
    calls = recording["streaming"].get("tiny.en", {}).get("calls", [])
    streams.append([w for c in calls if "push" in c for w in c["push"]])
    return [[w["text"] for w in words] for words in streams if words]


def from_recordings(cache: Path, names: Sequence[str], out: Path) -> int:
    """``--recordings``: the reference and each recogniser's words of the named recordings, the
    reference's marks carried onto them; the tokens written."""
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    with open(out / "asr_train.tsv", "w", encoding="utf-8") as tsv:
        for name in names:
            recording = json.loads((cache / f"{name}.json").read_text())
            tokens, labels = reference(recording["text"])
            versions = [(tokens, labels)] + [
                carry_marks(tokens, labels, h) for h in heard_versions(recording)
            ]
            for hyp, moved in versions:
                tsv.write("".join(f"{t}\t{lab}\n" for t, lab in zip(hyp, moved)))
                written += len(hyp)
    return written


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", help="punctuated text, IWSLT format (word TAB label)")
    ap.add_argument("--recordings", help="or benchmarks.e2e record's cache, with --names")
    ap.add_argument("--names", nargs="+", default=[], help="the recordings of --recordings to use")
    ap.add_argument("--out", required=True, help="run folder: asr_train.tsv and state.json")
    ap.add_argument("--minutes", type=float, default=60.0, help="this run's budget of work")
    ap.add_argument("--turns", action="store_true", help="read sentences as turns in two voices")
    ap.add_argument("--asr", default="tiny.en", help="the recogniser (streampunct.speech.load_whisper)")
    ap.add_argument("--beam", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.recordings:
        n = from_recordings(Path(args.recordings), args.names, Path(args.out))
        print(f"{n} tokens from {len(args.names)} recordings")
        return
    if not args.text:
        ap.error("--text or --recordings is required")
    from faster_whisper import WhisperModel

    from ..speech import resolve_asr_model

    model = WhisperModel(
        resolve_asr_model(args.asr), device="cpu", compute_type="int8", cpu_threads=args.threads
    )
    text = passages(*normalize_labeled(*read_iwslt(args.text)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / "state.json"
    state = json.loads(state_path.read_text()) if state_path.is_file() else {
        "text": args.text, "turns": args.turns, "asr": args.asr, "beam": args.beam, "seed": args.seed,
        "passages": 0, "of": len(text), "words_read": 0, "words_made": 0, "audio_s": 0.0, "work_s": 0.0, "bytes": 0,
    }  # fmt: skip
    for key in ("text", "turns", "asr", "beam", "seed"):
        if state[key] != getattr(args, key):
            raise SystemExit(f"{state_path}: made with {key}={state[key]!r}, not {getattr(args, key)!r}")
    state_path.write_text(json.dumps(state, indent=1) + "\n")
    t_end = time.perf_counter() + 60 * args.minutes
    corpus = out / "asr_train.tsv"
    corpus.touch()
    with open(corpus, "r+", encoding="utf-8") as tsv:
        tsv.truncate(state["bytes"])  # a passage written after the last state was saved goes
        tsv.seek(state["bytes"])
        while state["passages"] < len(text) and time.perf_counter() < t_end:
            t0 = time.perf_counter()
            tokens, labels = text[state["passages"]]
            rng = np.random.default_rng([args.seed, state["passages"]])
            audio = speak(tokens, labels, args.turns, rng)
            hyp, moved = carry_marks(tokens, labels, hear(model, audio, args.beam))
            tsv.write("".join(f"{t}\t{lab}\n" for t, lab in zip(hyp, moved)))
            tsv.flush()
            state["passages"] += 1
            state["words_read"] += len(tokens)
            state["words_made"] += len(hyp)
            state["audio_s"] = round(state["audio_s"] + len(audio) / SAMPLE_RATE, 1)
            state["work_s"] = round(state["work_s"] + time.perf_counter() - t0, 1)
            state["bytes"] = tsv.tell()
            state_path.write_text(json.dumps(state, indent=1) + "\n")
    rate = 3600 * state["words_made"] / max(state["work_s"], 1e-9)
    print(
        f"{state['passages']}/{state['of']} passages, {state['words_made']} words from "
        f"{state['audio_s'] / 3600:.2f} h of speech in {state['work_s'] / 3600:.2f} h of work "
        f"({rate:,.0f} words an hour)"
    )


if __name__ == "__main__":
    main()
