"""espeak-ng speech for /v1/asr: the soak's and server_load's WAVs, made in pieces and cached."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import wave
from collections.abc import Sequence
from pathlib import Path

from streampunct.text import normalize, render

CACHE = Path.home() / ".cache" / "streampunct" / "soak"  # make_speech's WAVs (the soak's, server_load's)
ESPEAK = ("-v", "en-us", "-s", "165", "-g", "4")  # voice, words a minute, gap between words (10 ms)
PIECE_WORDS = 100  # words of text per espeak-ng call: about 35 s of speech
PIECE_GAP_S = 0.4


def speakable(words: Sequence[str], labels: Sequence[str]) -> tuple[list[str], list[str]]:
    """The words espeak-ng can read: no "--", no mojibake."""
    keep = [(w, lab) for w, lab in zip(words, labels) if w.isascii() and normalize(w)]
    return [w for w, _ in keep], [lab for _, lab in keep]


def make_speech(
    words: Sequence[str],
    labels: Sequence[str],
    minutes: float,
    cache: Path = CACHE,
    piece_words: int = PIECE_WORDS,
) -> tuple[Path, int]:
    """A WAV of espeak-ng reading the text (rendered with its marks and casing) for at least
    ``minutes``, made in pieces and joined; cached. Returns the file and the number of words read."""
    if shutil.which("espeak-ng") is None:
        raise RuntimeError("the audio part needs espeak-ng (apt-get install espeak-ng), or --asr-minutes 0")
    words, labels = speakable(words, labels)
    budget = int(minutes * 60 * 4) + piece_words  # words: never more than 4 a second
    version = subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True).stdout.strip()
    key = hashlib.sha1(
        json.dumps([version, ESPEAK, piece_words, minutes, words[:budget], labels[:budget]]).encode()
    ).hexdigest()[:16]
    path = cache / f"speech-{minutes:g}min-{key}.wav"
    meta = path.with_suffix(".json")
    if path.is_file() and meta.is_file():
        return path, json.loads(meta.read_text())["words"]
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        piece = Path(tmp) / "piece.wav"
        partial = Path(tmp) / "speech.wav"
        out: wave.Wave_write | None = None
        seconds, used = 0.0, 0
        try:
            while seconds < minutes * 60:
                if used >= len(words):
                    raise RuntimeError(f"not enough text for {minutes} minutes of speech")
                chunk = slice(used, used + piece_words)
                text = render(
                    words[chunk], labels[chunk], sentence_start=used == 0 or labels[used - 1] != "O"
                )
                subprocess.run(["espeak-ng", *ESPEAK, "-w", str(piece), text], check=True)
                with wave.open(str(piece), "rb") as w:
                    if out is None:
                        out = wave.open(str(partial), "wb")
                        out.setparams(w.getparams())
                    frames = w.readframes(w.getnframes())
                    gap = b"\0" * (int(PIECE_GAP_S * w.getframerate()) * w.getsampwidth())
                    out.writeframes(frames + gap)
                    seconds += w.getnframes() / w.getframerate() + PIECE_GAP_S
                used += len(words[chunk])
        finally:
            if out is not None:
                out.close()
        shutil.move(partial, path)
    meta.write_text(json.dumps({"words": used, "seconds": seconds}) + "\n")
    return path, used
