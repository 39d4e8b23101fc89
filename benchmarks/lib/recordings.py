"""Audio clips and recorded streams, shared by the speech benchmarks: not a benchmark itself.

- audio: clips and their texts, WAVs, faster-whisper's word times on the clips;
- the recordings cache of ``python -m benchmarks.e2e record``;
- a run's calls as the benchmarks' JSON keeps them: ``streampunct.pipeline``'s recording.
"""

from __future__ import annotations

import json
import wave
from pathlib import Path
from typing import Any

import numpy as np

from streampunct.options import StreamOptions
from streampunct.pipeline import RECORDING_VERSION
from streampunct.types import SAMPLE_RATE, Word

# --- audio -------------------------------------------------------------------------------------

CLIP_GAP_S = 1.0  # silence between joined clips


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(round(seconds * SAMPLE_RATE)), dtype=np.float32)


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as w:
        assert w.getframerate() == SAMPLE_RATE and w.getnchannels() == 1
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0


AUDIO_SUFFIXES = (".wav", ".mp3", ".flac")


def clip_pairs(folder: Path) -> list[tuple[Path, Path]]:
    """NAME.wav (or .mp3, .flac) with NAME.txt, by name."""
    return [
        (a, a.with_suffix(".txt"))
        for a in sorted(folder.iterdir())
        if a.suffix in AUDIO_SUFFIXES and a.with_suffix(".txt").is_file()
    ]


def transcribe(audio_dir: Path, model_dir: str) -> list[Word]:
    """faster-whisper's words (``model_dir``, int8, greedy) with their times on jfk_16k.wav and the
    LJSpeech clips of ``audio_dir``, the clips one stream, CLIP_GAP_S apart."""
    from faster_whisper import WhisperModel

    asr = WhisperModel(model_dir, device="cpu", compute_type="int8")
    clips = [audio_dir / "jfk_16k.wav", *sorted((audio_dir / "ljspeech").glob("*.wav"))]
    words: list[Word] = []
    offset = 0.0
    for clip in clips:
        segments, info = asr.transcribe(str(clip), language="en", word_timestamps=True, beam_size=1)
        for seg in segments:
            for w in seg.words or []:
                words.append(Word(w.word.strip(), offset + w.start, offset + w.end))
        offset += info.duration + CLIP_GAP_S
    return words


# --- the recordings of python -m benchmarks.e2e record -------------------------------------------

STREAM_ASR = "tiny.en"
SETS = {
    "synthetic_conversation": "synthetic conversation",
    "synthetic_monologue": "synthetic monologue",
    "synthetic_talk_dev": "synthetic talk dev",
    "human": "human",
    "human_extra": "human (extra)",
    "speech_dev": "speech dev",
    "speech_test": "speech test",
}


def streamed_words(asr: dict) -> list[dict]:
    return [w for c in asr["calls"] if "push" in c for w in c["push"]]


def load_recordings(cache: Path) -> list[dict]:
    recs = [json.loads(p.read_text()) for p in sorted(cache.glob("*.json"))]
    recs = [r for r in recs if STREAM_ASR in r.get("streaming", {})]
    for r in recs:  # streamed before its settings were kept: the same calls, the same settings
        r["streaming"][STREAM_ASR].setdefault("settings", as_recording([])["settings"])
    if not recs:
        raise SystemExit(f"{cache}: no recorded recordings; run `record` first")
    order = list(SETS)
    return sorted(recs, key=lambda r: (order.index(r["set"]), r["name"]))


# --- a run's calls, recorded ---------------------------------------------------------------------
# One format for the live runs and the simulated ones: streampunct.pipeline's recording (Recorder:
# the server's --record DIR), kept in the benchmarks' JSON as {"settings": its first line, "calls":
# its call_to_json lines}; streampunct.pipeline.replay() (or calls_from_json) runs it again.


def as_recording(
    calls: list[dict[str, Any]],
    lookahead: int = StreamOptions.lookahead,
    max_delay_ms: float | None = StreamOptions.max_delay_ms,
    engine: str = "auto",
) -> dict[str, Any]:
    """Recorded calls with the stream's settings (by default a default client's: a simulated run
    has no stream of its own)."""
    settings = {"recording": RECORDING_VERSION, "lookahead": lookahead, "max_delay_ms": max_delay_ms}
    return {"settings": {**settings, "engine": engine}, "calls": calls}


def recording_of(kept: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A kept recording as ``streampunct.pipeline.replay`` takes it: (settings, calls)."""
    return kept["settings"], kept["calls"]
