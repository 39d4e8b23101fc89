"""Words in, events out, and when a word becomes final: the stream's vocabulary, without torch.

:class:`Word` is what a recogniser gives (text, optional times on its clock), :class:`PunctEvent`
what a stream returns, and :class:`Lookahead` the commit policy: the one rule that says when a
word's mark is final and how many words after it decide it. The clients, the protocol and the
captioner import these without loading a model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .errors import InputError
from .text import MARKS

__all__ = [
    "Word",
    "Cues",
    "PunctEvent",
    "Sentence",
    "SENTENCE_ENDS",
    "Lookahead",
    "MAX_LOOKAHEAD",
    "ENGINES",
    "SAMPLE_RATE",
    "check_lookahead",
]

MAX_LOOKAHEAD = 64
SAMPLE_RATE = 16000  # Hz: the audio every front end takes (Whisper's rate, /v1/asr's PCM)
ENGINES = ("auto", "masked", "window", "cascade")  # how the lookahead is bounded (streampunct.engines)
SENTENCE_ENDS = ("PERIOD", "QUESTION")  # the labels whose mark ends a sentence


def check_lookahead(lookahead: object, offline: bool = True) -> None:
    """A lookahead is an int from 0 to MAX_LOOKAHEAD words, or None (offline) where ``offline``."""
    if lookahead is None and offline:
        return
    if isinstance(lookahead, bool) or not isinstance(lookahead, int) or not 0 <= lookahead <= MAX_LOOKAHEAD:
        shown = repr(lookahead) if len(repr(lookahead)) <= 40 else repr(lookahead)[:40] + "..."
        raise InputError(
            f"lookahead must be an integer from 0 to {MAX_LOOKAHEAD} words"
            + (" or None (offline)" if offline else "")
            + f", got {shown}"
        )


def _finite(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


@dataclass(frozen=True)
class Cues:
    """What a recogniser heard at a word's end besides the word: ``marks``, the probabilities its
    decoder gave to COMMA, PERIOD, QUESTION and a segment's end after the word
    (:mod:`streampunct.speech.marks`); None where it has none."""

    marks: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        m = self.marks
        if m is not None and (
            not isinstance(m, tuple)
            or len(m) != 4
            or not all(_finite(p) and 0.0 <= p <= 1.0 + 1e-6 for p in m)
            or sum(m) > 1.0 + 1e-3
        ):
            raise InputError(
                f"cues.marks must be 4 probabilities (COMMA, PERIOD, QUESTION, segment end) summing to at most 1, got {m!r}"[
                    :200
                ]
            )


@dataclass(frozen=True)
class Word:
    """A recogniser's word, with optional times in seconds on the recogniser's clock, and what the
    recogniser heard at its end (``cues``: streampunct's own front end gives them)."""

    text: str
    start: float | None = None
    end: float | None = None
    cues: Cues | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise InputError(f"word text must be a string, got {type(self.text).__name__}")
        for name in ("start", "end"):
            value = getattr(self, name)
            if value is not None and not _finite(value):
                raise InputError(
                    f"word {self.text!r}: {name} must be a finite number of seconds, got {value!r}"
                )
        if self.start is not None and self.end is not None and self.end < self.start:
            raise InputError(f"word {self.text!r} ends ({self.end}) before it starts ({self.start})")

    @property
    def time(self) -> float | None:
        """Where the word puts the recogniser's clock: its end, else its start."""
        return self.end if self.end is not None else self.start


@dataclass(frozen=True)
class PunctEvent:
    """The mark after word ``index`` of the stream: provisional, or final and never changed."""

    index: int
    word: str
    label: str
    final: bool

    @property
    def mark(self) -> str:
        return MARKS[self.label]


@dataclass(frozen=True)
class Sentence:
    """Words ``first`` to ``last`` of a stream, once all are final: ``text`` as the captions show
    them (the words' final marks, sentence case, the recogniser's names kept; no mark added), times
    from the first word's start to the last's end (None where a word has none). ``closed``: what
    closed it: ``"mark"`` (its last word's final PERIOD or QUESTION), ``"length"`` (that many words
    without one: see ``PunctStream.SENTENCE_WORDS``) or ``"end"`` (the end of the stream)."""

    text: str
    start: float | None
    end: float | None
    first: int
    last: int
    closed: str


@dataclass(frozen=True)
class Lookahead:
    """The commit policy: a token is final once ``words`` tokens follow it, or once the
    recogniser's clock is ``max_delay_ms`` past the end of its word (``None``: no time limit)."""

    words: int
    max_delay_ms: float | None = None

    def __post_init__(self) -> None:
        check_lookahead(self.words, offline=False)
        if self.max_delay_ms is not None and not (_finite(self.max_delay_ms) and self.max_delay_ms >= 0):
            raise InputError(f"max_delay_ms must be a finite number >= 0 or None, got {self.max_delay_ms!r}")

    def deadline(self, word: Word) -> float | None:
        """Clock time (s) by which the word must be final; None when there is no time limit."""
        if self.max_delay_ms is None or word.end is None:
            return None
        return word.end + self.max_delay_ms / 1000

    def ahead(self, word: Word, following: Sequence[Word], clock: float, flush: bool = False) -> int | None:
        """How many following tokens decide a token of ``word`` now, or None: not yet.

        ``following`` holds the word of each token after it. Past the word's deadline, those that
        had ended by then (at most ``words``) decide it, whatever arrived later, so the result does
        not depend on when the clock was told; else ``words`` of them once they are there, or at
        the end of the stream (``flush``) the ones there are.
        """
        deadline = self.deadline(word)
        if deadline is not None and clock >= deadline:
            n = 0
            for w in following[: self.words]:
                if w.end is None or w.end > deadline:
                    break
                n += 1
            return n
        if len(following) >= self.words:
            return self.words
        return len(following) if flush else None
