"""Every default of the live path, in one place: a dataclass per part, each field documented in its
``HELP`` (faster-whisper's ``VadOptions`` is the model). The server's flags are generated from them
(:func:`streampunct.flags.add_config_flags`), so a new option is one field and its help line (and
its line in docs/usage.md). No torch.

- :class:`StreamOptions`: a punctuation stream's lookahead, time limit and engine (the protocol's
  ``config`` message and the clients' flags);
- :class:`RecognizerOptions`: the streaming recogniser's (:class:`streampunct.speech.StreamingRecognizer`);
- :class:`FrontEndOptions`: what the caption pipeline does between the recogniser and the
  punctuation stream (:class:`streampunct.pipeline.CaptionPipeline`).

The values are the shipped front end's: docs/latency.md measures them.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import ClassVar, Literal

from .errors import StreamPunctError

__all__ = ["StreamOptions", "RecognizerOptions", "FrontEndOptions", "SentenceEnds", "Commit"]

SentenceEnds = Literal["whisper", "punctuator"]
Commit = Literal["agreement", "alignatt"]


@dataclass(frozen=True)
class StreamOptions:
    """A punctuation stream's settings, as a client asks for them."""

    lookahead: int = 2
    max_delay_ms: float | None = 1500.0
    engine: str = "auto"

    HELP: ClassVar[dict[str, str]] = {
        "lookahead": "words after a word that decide its mark",
        "max_delay_ms": "time limit (ms after the word ends) for a word's mark to become final, or off",
        "engine": "masked (cheapest per word) or window (more accurate); auto: the model's choice per lookahead",
    }


@dataclass(frozen=True)
class RecognizerOptions:
    """The streaming recogniser's settings (streampunct/speech/recognizer.py explains each policy)."""

    language: str | None = "en"
    min_chunk_s: float = 0.5
    max_buffer_s: float = 25.0
    trim_after_s: float | None = None
    max_lag_s: float | None = 8.0
    resume_s: float = 2.0
    beam_size: int = 1
    confident: float | None = None
    end_of_speech_s: float | None = 0.5
    cut_at_silence: bool = True
    prompt: bool = False
    settle_after_s: float | None = 1.0
    settle_unsure_after_s: float | None = 2.0
    encoder_pad_s: float | None = 12.0
    context_s: float | None = None
    agree_after_s: float | None = 0.3
    sentence_ends: SentenceEnds = "whisper"
    commit: Commit = "agreement"
    frame_threshold_s: float = 0.5
    cues: bool = True

    HELP: ClassVar[dict[str, str]] = {
        "language": "the language Whisper transcribes",
        "min_chunk_s": "new audio (s) that starts a recognition pass, once the last one has ended",
        "max_buffer_s": "most audio (s) the recogniser re-transcribes: past it, the buffer is trimmed at the "
        "last committed word",
        "trim_after_s": "past this much audio (s) in the buffer, it is trimmed at a committed sentence end "
        "(off: half of max-buffer-s)",
        "max_lag_s": "due audio (s) waiting unrecognised that makes the recogniser skip to recent audio, or off",
        "resume_s": "audio (s) before the due end that a skip resumes at",
        "beam_size": "beams each recognition pass decodes with (1: greedy)",
        "confident": "commit a word on first sight at this recogniser probability (0 to 1), or off: only when "
        "two passes agree",
        "end_of_speech_s": "silence (s) after the last word that commits the recogniser's whole guess, or off",
        "cut_at_silence": "at the end of speech (end-of-speech-s), the buffer is cut where the silence "
        "starts, so that the next passes transcribe only what follows",
        "prompt": "each recognition pass sees the committed text before its audio as Whisper's prompt",
        "settle_after_s": "audio (s) heard after a word that commits it even where two passes disagree on "
        "it, or off",
        "settle_unsure_after_s": "the same for a word the recogniser gives a probability under 0.5 (off: as "
        "settle-after-s)",
        "encoder_pad_s": "Whisper's encoder reads the buffer and this much silence (s) instead of 30 s "
        "(off: 30 s)",
        "context_s": "hold a word agreed on until a pass has heard this much audio (s) after it, and commit "
        "it as that pass wrote it, or off",
        "agree_after_s": "audio (s) the earlier of two agreeing passes must have heard after a word for "
        "their agreement to commit it, or off",
        "sentence_ends": "whose sentence ends trim the recogniser's buffer: Whisper's own marks, or "
        "streampunct's final periods",
        "commit": "how a pass commits words: two passes agreeing (LocalAgreement, with the settle rules) "
        "or AlignAtt (one pass, by where the decoder's attention reads)",
        "frame_threshold_s": "with commit alignatt: a token read within this much (s) of the end of the "
        "audio heard, and the words from it on, wait for the next pass",
        "cues": "give each word the probabilities Whisper's decoder gave to each mark after it, as "
        "evidence for the punctuator",
    }

    def __post_init__(self) -> None:
        ends = typing.get_args(SentenceEnds)
        if self.sentence_ends not in ends:
            raise StreamPunctError(f"sentence_ends must be one of {ends}, got {self.sentence_ends!r}")
        if self.max_lag_s is not None and not 0 <= self.resume_s < self.max_lag_s:
            raise StreamPunctError(
                f"resume_s must be from 0 to max_lag_s ({self.max_lag_s}), got {self.resume_s}"
            )
        commits = typing.get_args(Commit)
        if self.commit not in commits:
            raise StreamPunctError(f"commit must be one of {commits}, got {self.commit!r}")
        if self.commit == "alignatt" and self.language != "en":
            raise StreamPunctError(
                f"commit alignatt transcribes English (language en), not {self.language!r}"
            )
        if self.frame_threshold_s < 0:
            raise StreamPunctError(f"frame_threshold_s must be 0 or more, not {self.frame_threshold_s}")
        if self.beam_size < 1:
            raise StreamPunctError(f"beam_size must be 1 or more, not {self.beam_size}")
        for name in ("min_chunk_s", "max_buffer_s"):
            if getattr(self, name) <= 0:
                raise StreamPunctError(f"{name} must be over 0, not {getattr(self, name)}")

    @property
    def trim_s(self) -> float:
        """Buffer length (s) past which the buffer is trimmed at a committed sentence end."""
        return self.max_buffer_s / 2 if self.trim_after_s is None else self.trim_after_s


@dataclass(frozen=True)
class FrontEndOptions:
    """What the caption pipeline does between the recogniser and the punctuation stream."""

    provisional_lookahead: bool = True
    pause_clock: bool = True

    HELP: ClassVar[dict[str, str]] = {
        "provisional_lookahead": "the recogniser's provisional words serve as lookahead for the committed "
        "words before them (their marks become final sooner); never final themselves",
        "pause_clock": "in a pause where every word heard is committed, each silent chunk moves the "
        "punctuation clock on, so that time limits fire on time (off: only recognition passes move it)",
    }
