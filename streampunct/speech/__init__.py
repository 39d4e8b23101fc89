"""Speech in, words out: the streaming recogniser on faster-whisper (:mod:`.recognizer`), its commit
policy (:mod:`.agreement`) and loading Whisper (:mod:`.whisper`)."""

from ..types import SAMPLE_RATE
from .agreement import LocalAgreement
from .recognizer import Hypothesis, Pass, Skip, StreamingRecognizer
from .whisper import encoder_window, is_silence, load_whisper, resolve_asr_model

__all__ = [
    "LocalAgreement",
    "StreamingRecognizer",
    "Hypothesis",
    "Pass",
    "Skip",
    "encoder_window",
    "is_silence",
    "load_whisper",
    "resolve_asr_model",
    "SAMPLE_RATE",
]
