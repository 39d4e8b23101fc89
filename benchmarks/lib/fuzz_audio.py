"""The fuzz's generator of hostile /v1/asr scripts (``asr_scripts``): audio chunks (silence, noise,
tones, clipping, random bytes, speech), the /v1/punct messages /v1/asr must refuse, and the scripts."""

from __future__ import annotations

import subprocess
import tempfile
import wave
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from benchmarks.lib.fuzz_messages import Hostile, Script, weighted
from benchmarks.lib.fuzz_punct import (
    configs,
    ends,
    garbage,
    invalid_utf8,
    mutated,
    oversize,
    plain_words,
    retyped,
    revisions,
    ticks,
    truncated,
)
from streampunct.types import SAMPLE_RATE

# --- the fuzz: audio ---------------------------------------------------------------------------


@cache
def speech_pcm() -> bytes:
    """A few seconds of speech (espeak-ng, PCM16 at 16 kHz), or a tone where espeak-ng is missing."""
    text = "so what did you do last summer. we went to the coast and it rained every day."
    try:
        with tempfile.TemporaryDirectory() as tmp:
            wav = Path(tmp) / "speech.wav"
            subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(wav), text], check=True)
            with wave.open(str(wav)) as w:
                rate, audio = w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    except (OSError, subprocess.CalledProcessError, wave.Error):
        t = np.arange(3 * SAMPLE_RATE) / SAMPLE_RATE
        return (np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2").tobytes()
    t = np.arange(round(len(audio) * SAMPLE_RATE / rate)) / SAMPLE_RATE
    return np.interp(t, np.arange(len(audio)) / rate, audio).astype("<i2").tobytes()


def _audio(kind: str, samples: int, seed: int, amplitude: int, offset: int) -> bytes:
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / SAMPLE_RATE
    if kind == "silence":
        pcm = np.zeros(samples)
    elif kind == "noise":
        pcm = rng.normal(0, amplitude / 3, samples)
    elif kind == "tone":
        pcm = amplitude * np.sin(2 * np.pi * rng.uniform(50, 7000) * t)
    elif kind == "clipped":
        pcm = np.where(np.sin(2 * np.pi * 300 * t) >= 0, 32767, -32768)
    elif kind == "speech":
        speech = speech_pcm()
        start = 2 * (offset % max(1, len(speech) // 2))
        return (speech[start:] + speech)[: 2 * samples]
    else:  # bytes
        return rng.bytes(2 * samples)
    return np.clip(pcm, -32768, 32767).astype("<i2").tobytes()


@st.composite
def audio_chunks(draw: Any, most_bytes: int = 16_000) -> Hostile:
    """Binary audio: silence, noise, tones, clipping, random bytes, speech, empty, odd-length."""
    kind = draw(
        st.sampled_from(["silence", "noise", "tone", "clipped", "bytes", "speech", "speech", "empty", "odd"])
    )
    if kind == "empty":
        return Hostile("audio_empty", b"", "binary")
    if kind == "odd":
        n = draw(st.integers(0, most_bytes // 2))
        return Hostile("audio_odd", draw(st.binary(min_size=1, max_size=1)) * (2 * n + 1), "binary")
    samples = draw(st.integers(1, most_bytes // 2))
    payload = _audio(
        kind,
        samples,
        draw(st.integers(0, 2**16)),
        draw(st.sampled_from([1, 300, 3000, 32767])),
        draw(st.integers(0, 10**6)),
    )
    return Hostile(f"audio_{kind}", payload, "binary")


def asr_messages(most_bytes: int = 16_000, limits: bool = True) -> st.SearchStrategy[Hostile]:
    return weighted(
        (10, audio_chunks(most_bytes)),
        (3, garbage()),
        (2, truncated(audio=True)),
        (3, st.one_of(plain_words(), revisions(), ticks())),  # /v1/punct's messages: unknown_type
        (2, configs(audio=True)),  # config twice: bad_state
        (2, mutated(audio=True)),
        (2, retyped(audio=True)),
        (1 if limits else 0, oversize(binary=True)),
        (1, invalid_utf8),
    )


@st.composite
def asr_scripts(
    draw: Any, most: int = 6, most_bytes: int = 16_000, most_speech_s: int = 1, limits: bool = True
) -> Script:
    before = draw(st.lists(st.one_of(configs(audio=True), garbage(), audio_chunks(64)), max_size=2))
    config = (
        [draw(configs(audio=True).filter(lambda h: h.expect == ("ready",)))]
        if draw(st.integers(0, 9)) != 7
        else []
    )
    after = [draw(asr_messages(most_bytes, limits)) for _ in range(draw(st.integers(1, most)))]
    if draw(st.booleans()):  # a stretch of speech in chunks, for the recogniser to hear
        speech, at = speech_pcm(), draw(st.integers(0, len(after)))
        start, size = 8000 * draw(st.integers(0, 15)), draw(st.sampled_from([3200, 8000, 16000, 32000]))
        run = (speech[start:] + speech)[: 32_000 * draw(st.integers(1, most_speech_s))]
        after[at:at] = [Hostile("speech_run", run[i : i + size], "binary") for i in range(0, len(run), size)]
    tail = draw(st.sampled_from(["end", "end", "end_twice", "end_then_audio", "none"]))
    end = draw(ends)
    ending = {"end": [end], "end_twice": [end, end], "none": []}.get(tail)
    if ending is None:
        ending = [end, draw(audio_chunks(most_bytes)), end]
    return Script("asr", tuple(before + config + after + ending), draw(st.integers(0, 6)) == 3)
