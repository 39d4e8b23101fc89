"""A streaming speech recogniser on faster-whisper: audio chunks in, committed words out.

Audio (16 kHz mono float32) waits until ``process()`` moves it into a rolling buffer that is
re-transcribed, with word timestamps and faster-whisper's VAD, each time ``min_chunk_s`` of new
audio has arrived. The settings are :class:`~streampunct.options.RecognizerOptions` (the shipped
front end's by default); what each costs and gains is measured in docs/latency.md, and what was
tried and not kept is in docs/decisions.md.

Committing. :class:`LocalAgreement` (whisper_streaming's LocalAgreement-2) commits a word once two
consecutive hypotheses agree on it, and only where the earlier of them had heard ``agree_after_s``
of audio after it (Whisper misreads a word cut at the end of what it heard, and the next pass often
misreads it alike). Sooner, as configured: on first sight for a word the recogniser is sure of
(``confident``) whose audio ended ``LocalAgreement.margin_s`` before the audio heard; once
``settle_after_s`` of audio has followed a word, as the latest pass heard it
(``settle_unsure_after_s`` for a word with probability under ``UNSURE_BELOW``); and the whole
hypothesis at the end of speech (the last word ended ``end_of_speech_s`` before the audio heard and
faster-whisper's VAD, Silero, hears no speech since). ``context_s`` holds an agreed word until a pass
has heard that much after it, and commits it as that pass wrote it (its mark included).

Cues. With ``cues`` (on), each decode of a pass also returns its decoder's distribution at every
step, and each word carries the probabilities of a mark after it that the pass gave
(:mod:`.marks`): the punctuator's evidence, at no second recognition.

Trimming. Past ``trim_after_s`` the buffer is trimmed at the end of the last committed sentence:
a committed word Whisper wrote with ``.``, ``?`` or ``!``, or with ``sentence_ends="punctuator"``
the ends the caller reports (:meth:`StreamingRecognizer.sentence_end`, streampunct's final periods);
past ``max_buffer_s``, at the last committed word. With ``cut_at_silence``, a pass that ends in
silence (the end of speech, above: every word heard committed) cuts the buffer where the silence
starts, so that the next passes transcribe only what follows. Whisper's casing and marks travel with the
words; streampunct's normalisation strips them before the text model, and a pause fusion that
reads marks takes them as evidence. ``prompt`` gives each pass the committed text before its
buffer as Whisper's prompt (off by default: Whisper copies its prompt's style, and once a stretch
is committed without marks the next passes write none).

Each pass decodes once, greedily with ``beam_size`` 1 and at temperature 0 (no fallback sampling at
higher temperatures): the same audio on the same clock gives the same words. With ``encoder_pad_s``
Whisper's encoder reads the buffer and that much of the padding's silence instead of 30 s
(:func:`encoder_window`), and a pass writes at most ``MAX_TOKENS_PER_S`` tokens a second of its audio,
so that a hypothesis that loops ends early. Each pass reports its time and real-time factor
(:class:`Pass`); :attr:`StreamingRecognizer.compute_ratio` is recognition seconds per second of
audio over the latest ``COMPUTE_WINDOW_S`` of it.

Guards (:mod:`.guards`). A pass whose words loop (one phrase said more than ``MAX_REPEATS`` times
in a row) or run away (more words than ``MAX_WORDS_PER_S`` a second of its audio) is cut there:
the words before the cut are committed and the buffer restarts past the audio heard, so the loop
is neither committed nor transcribed again. :attr:`StreamingRecognizer.guarded` counts the cuts.

Falling behind. Recognition is *behind* when audio that is due has waited more than ``max_lag_s``
without being recognised. Audio is due once real time has reached it: the caller passes its clock
as ``now`` to ``feed()`` and ``process()``, and audio at stream time ``t`` is due at ``anchor + t``,
where the anchor is the latest ``now - stream time`` of a fed chunk's end (a sender that pauses
moves the schedule on), a chunk's end taken at most ``LIVE_CHUNK_S`` after its start (audio beyond
that in one chunk was sent ahead of real time, and is not late while recognition keeps up). Without
a clock all fed audio is due. Then, at the start of ``process()`` (or alone, without the model:
``catch_up()``): the last hypothesis is committed as it stands; the waiting audio is skipped up to
``resume_s`` before the due end, the buffer restarting there with the true stream clock; the skip
is reported in :attr:`Hypothesis.skipped`. Without a skip, each pass takes all the due audio that
waits, so a recogniser a little slower than real time catches up by taking longer steps.

``process()`` runs the model and blocks: a server calls it from a worker thread. A recogniser is
not thread-safe: feed it only between passes (:class:`~streampunct.pipeline.CaptionPipeline` keeps
the audio that arrives during a pass).
"""

from __future__ import annotations

import math
import time
from collections import Counter, deque
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..errors import StreamPunctError
from ..options import RecognizerOptions
from ..types import SAMPLE_RATE, Word
from .agreement import LocalAgreement
from .guards import loop_cut, runaway_cut
from .marks import heard_marks, listening
from .whisper import encoder_window, is_silence

__all__ = [
    "StreamingRecognizer",
    "Hypothesis",
    "Pass",
    "Skip",
    "LIVE_CHUNK_S",
    "SENTENCE_MARKS",
    "MIN_WINDOW_S",
    "MAX_TOKENS_PER_S",
    "COMPUTE_WINDOW_S",
]


# Of one chunk fed, the audio recorded by the time it arrived (the rest was sent ahead of real time).
LIVE_CHUNK_S = 1.0


@dataclass(frozen=True)
class Skip:
    """Audio never recognised: recognition fell behind and resumed at ``end`` (stream seconds)."""

    start: float
    end: float

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True)
class Hypothesis:
    committed: list[Word]  # newly committed, in order; never revised
    provisional: list[Word]  # the current guess after them, for display
    skipped: Skip | None = None  # audio skipped before this pass to catch up (module docstring)
    pass_: Pass | None = None  # the transcription that made it (None: a catch-up, or the end)

    @property
    def complete_until(self) -> float | None:
        """Stream time up to which every word is committed: the start of the first provisional
        word (None when there is none: then all the audio heard)."""
        return self.provisional[0].start if self.provisional else None


@dataclass(frozen=True)
class Pass:
    """One ``transcribe()`` call: how long it took and on how much audio."""

    seconds: float  # wall time of the call
    buffer_s: float  # audio transcribed (the rolling buffer)
    new_s: float  # audio new to this pass
    end_of_speech: bool  # the pass ended in silence and committed the whole hypothesis
    guard: str | None = None  # loop or runaway: the pass was cut there and the buffer restarted

    @property
    def real_time_factor(self) -> float:
        """Wall time per second of new audio: under 1 keeps up with real time."""
        return self.seconds / self.new_s if self.new_s else float("inf")


class StreamingRecognizer:
    """One audio stream. ``feed()`` audio, then ``process()`` whenever ``ready()``."""

    def __init__(self, model: Any, options: RecognizerOptions | None = None, **overrides: Any):
        """``options`` (default: the shipped front end's, :class:`~streampunct.options.RecognizerOptions`),
        with ``overrides`` of its fields."""
        self.options = replace(options or RecognizerOptions(), **overrides)  # checks them
        self.model = model
        self.audio = np.zeros(0, dtype=np.float32)  # the buffer that is transcribed
        self.offset = 0.0  # stream time of the buffer's first sample
        self.waiting: list[np.ndarray] = []  # audio fed after the buffer, not transcribed yet
        self.unprocessed = 0  # samples in ``waiting``
        self.policy = self._policy(0.0)
        self.history: list[str] = []  # committed text that left the buffer, for the prompt
        self.skipped: list[Skip] = []  # every skip, in order
        self._reported_end = 0.0  # the latest sentence end the caller reported (sentence_end)
        self._anchor: float | None = None  # real time minus stream time, at the latest chunk's end
        self._passes: deque[Pass] = deque()  # the compute ratio's window
        self.guarded: Counter[str] = Counter()  # passes cut by each guard (loop, runaway)

    @property
    def processed_until(self) -> float:
        """Stream time up to which audio has been transcribed: the recogniser's clock."""
        return self.offset + len(self.audio) / SAMPLE_RATE

    @property
    def duration(self) -> float:
        """Seconds of audio fed so far."""
        return self.processed_until + self.unprocessed / SAMPLE_RATE

    def feed(self, audio: np.ndarray, now: float | None = None) -> None:
        """Take audio; ``now``: the caller's clock (seconds) when it arrived, for :meth:`lag`."""
        if audio.ndim != 1:
            raise StreamPunctError("audio must be mono")
        start = self.duration
        self.waiting.append(audio.astype(np.float32, copy=False))
        self.unprocessed += len(audio)
        if now is not None:
            late = now - min(self.duration, start + LIVE_CHUNK_S)
            self._anchor = late if self._anchor is None else max(self._anchor, late)

    def ready(self) -> bool:
        return self.unprocessed >= self.options.min_chunk_s * SAMPLE_RATE

    def lag(self, now: float | None = None) -> float:
        """Seconds of due audio waiting to be transcribed (due: real time has reached it)."""
        return max(0.0, self._due_until(now) - self.processed_until)

    def sentence_end(self, time: float) -> None:
        """With ``sentence_ends="punctuator"``: a committed word ending at ``time`` closes a
        sentence (streampunct's final period); else nothing."""
        self._reported_end = max(self._reported_end, time)

    def process(self, now: float | None = None) -> Hypothesis:
        """Catch up if behind; transcribe the buffer with the due audio; cut a pass that loops or
        runs away (module docstring, "Guards"); commit what two hypotheses agree on (and, as
        configured, confident words on first sight and the whole hypothesis at the end of speech);
        trim the buffer (after a guard's cut: restart it past the audio heard)."""
        caught_up = self.catch_up(now)
        due = self.lag(now) * SAMPLE_RATE
        new = self._take(max(int(round(due)), int(self.options.min_chunk_s * SAMPLE_RATE)))
        t0 = time.perf_counter()
        words, probabilities = self._transcribe()
        seconds = time.perf_counter() - t0
        guard, cut = self._guard(words)
        words, probabilities = words[:cut], probabilities[:cut]
        committed = self.policy.update(words, probabilities, self.processed_until)
        pause = guard is None and self._ends_in_silence(words)
        if pause or guard is not None:
            committed += self.policy.settle()
        stats = Pass(seconds, len(self.audio) / SAMPLE_RATE, new / SAMPLE_RATE, pause, guard)
        self._count(stats)
        if guard is not None:
            self._restart(self.processed_until)
        else:
            self._trim(at_silence=pause and self.options.cut_at_silence)
        if caught_up is None:
            return Hypothesis(committed, self.policy.pending(), pass_=stats)
        return Hypothesis(caught_up.committed + committed, self.policy.pending(), caught_up.skipped, stats)

    @property
    def compute_ratio(self) -> float | None:
        """Seconds of recognition per second of new audio, over the latest passes that took
        ``COMPUTE_WINDOW_S`` of audio (None before the first pass): over 1, recognition falls
        behind real time."""
        audio = sum(p.new_s for p in self._passes)
        return sum(p.seconds for p in self._passes) / audio if audio else None

    def _count(self, stats: Pass) -> None:
        """A pass into the compute ratio's window, and its guard into ``guarded``."""
        self._passes.append(stats)
        while (
            len(self._passes) > 1
            and sum(p.new_s for p in self._passes) - self._passes[0].new_s >= COMPUTE_WINDOW_S
        ):
            self._passes.popleft()
        if stats.guard is not None:
            self.guarded[stats.guard] += 1

    def _guard(self, words: list[Word]) -> tuple[str | None, int | None]:
        """Which guard a pass's words trip (``loop`` or ``runaway``), and the index to cut them
        at; (None, None): none."""
        cut = loop_cut([w.text for w in words])
        if cut is not None:
            return "loop", cut
        cut = runaway_cut(len(words), len(self.audio) / SAMPLE_RATE)
        return ("runaway", cut) if cut is not None else (None, None)

    def _policy(self, last_end: float) -> LocalAgreement:
        return LocalAgreement(
            last_end=last_end,
            confident=self.options.confident,
            settle_after_s=self.options.settle_after_s,
            settle_unsure_after_s=self.options.settle_unsure_after_s,
            context_s=self.options.context_s,
            agree_after_s=self.options.agree_after_s,
        )

    def _ends_in_silence(self, words: list[Word]) -> bool:
        """Speech ended: the hypothesis has words after the commits, the last ended at least
        ``end_of_speech_s`` before the end of the audio heard, and faster-whisper's VAD (Silero)
        hears no speech in that last stretch (a word's end time can be early: the VAD has the
        last word on what is sound)."""
        if self.options.end_of_speech_s is None or not self.policy.previous:
            return False
        last = words[-1].end if words[-1].end is not None else self.processed_until
        if self.processed_until - last < self.options.end_of_speech_s:
            return False
        return is_silence(self.audio[-round(self.options.end_of_speech_s * SAMPLE_RATE) :])

    def catch_up(self, now: float | None = None) -> Hypothesis | None:
        """Behind by more than ``max_lag_s``: commit the last hypothesis and skip to recent audio
        (module docstring); return the words committed and the skip, or None when not behind.
        Cheap (no model): ``process()`` calls it first, and a caller may call it before a pass to
        report the skip at once."""
        if self.options.max_lag_s is None or self.lag(now) <= self.options.max_lag_s:
            return None
        committed = self.policy.settle()
        start = self.processed_until
        samples = round((self._due_until(now) - self.options.resume_s - start) * SAMPLE_RATE)  # < unprocessed
        waiting = np.concatenate(self.waiting)[samples:]
        self.waiting, self.unprocessed = [waiting], len(waiting)
        self._restart(start + samples / SAMPLE_RATE)  # exact: whole samples, no drift
        self.skipped.append(Skip(start, self.offset))
        return Hypothesis(committed, [], self.skipped[-1])

    def _restart(self, offset: float) -> None:
        """An empty buffer from stream time ``offset``, every word before it committed (a skip,
        or a guard's cut)."""
        self.history.extend(w.text for w in self.policy.committed)
        del self.history[:-60]
        self.audio = np.zeros(0, dtype=np.float32)
        self.offset = offset
        self.policy = self._policy(offset)

    def finish(self) -> list[Word]:
        """End of audio: transcribe what is left and commit all of it."""
        self._take(self.unprocessed)
        rest = self.policy.update(*self._transcribe()) if len(self.audio) else []
        return rest + self.policy.settle()

    def _due_until(self, now: float | None) -> float:
        if now is None or self._anchor is None:
            return self.duration
        return min(self.duration, now - self._anchor)

    def _take(self, samples: int) -> int:
        """Move up to ``samples`` of the waiting audio into the buffer; how many moved."""
        if not self.waiting or samples <= 0:
            return 0
        waiting = np.concatenate(self.waiting)
        self.audio = np.concatenate([self.audio, waiting[:samples]])
        rest = waiting[samples:]
        self.waiting = [rest] if len(rest) else []
        self.unprocessed = len(rest)
        return len(waiting) - len(rest)

    def _transcribe(self) -> tuple[list[Word], list[float]]:
        """The buffer's words (stream times) and the recogniser's probability for each."""
        if len(self.audio) < SAMPLE_RATE // 10:
            return [], []
        prompt = (" ".join(self.history)[-200:] or None) if self.options.prompt else None
        seconds = len(self.audio) / SAMPLE_RATE
        window = (
            None
            if self.options.encoder_pad_s is None
            else max(seconds + self.options.encoder_pad_s, MIN_WINDOW_S)
        )
        max_tokens = math.ceil(MAX_TOKENS_PER_S * seconds) + 10
        words, probabilities = [], []
        with encoder_window(self.model, window), listening(self.model, self.options.cues) as decodes:
            segments, _ = self.model.transcribe(
                self.audio,
                language=self.options.language,
                initial_prompt=prompt,
                word_timestamps=True,
                vad_filter=True,
                beam_size=self.options.beam_size,
                temperature=0.0,  # one decode a pass, the same words every run: no fallback
                condition_on_previous_text=False,
                max_new_tokens=max_tokens,
            )
            for seg in segments:  # a generator: the encoder runs while it is read
                for w in seg.words or []:
                    if w.word.strip():
                        words.append(Word(w.word.strip(), self.offset + w.start, self.offset + w.end))
                        probabilities.append(w.probability)
        if decodes:  # with cues, from a faster-whisper model
            words = heard_marks(self.model, words, decodes)
        return words, probabilities

    def _sentence_end(self) -> float:
        """The end of the last committed sentence (0 if none): Whisper's or the caller's."""
        if self.options.sentence_ends == "punctuator":
            return self._reported_end
        marked = (w.end for w in reversed(self.policy.committed) if w.end and w.text.endswith(SENTENCE_MARKS))
        return next(marked, 0.0)

    def _trim(self, at_silence: bool = False) -> None:
        """Trim the buffer (module docstring, "Trimming"); ``at_silence``: every word heard is
        committed and the last ``end_of_speech_s`` is silence, and the buffer is cut where it starts."""
        if at_silence and self.options.end_of_speech_s is not None:
            return self._cut(self.processed_until - self.options.end_of_speech_s)
        length = len(self.audio) / SAMPLE_RATE
        sentence_end = self._sentence_end() if length > self.options.trim_s else 0.0
        cut = None
        if sentence_end > self.offset:
            cut = sentence_end
        elif length > self.options.max_buffer_s:
            cut = self.policy.last_end if self.policy.last_end > self.offset else self.processed_until - 1.0
        if cut is None:
            return
        self._cut(min(cut, self.policy.last_end) if self.policy.last_end > self.offset else cut)

    def _cut(self, cut: float) -> None:
        """The buffer from stream time ``cut`` on; the committed words before it leave it."""
        samples = round((cut - self.offset) * SAMPLE_RATE)  # 24.999999 s is 400000 samples, not 399999
        if samples <= 0:
            return
        self.history.extend(w.text for w in self.policy.committed if (w.end or 0) <= cut)
        del self.history[:-60]  # the prompt uses the last 200 characters
        self.policy.forget_before(cut)
        self.audio = self.audio[samples:]
        self.offset += samples / SAMPLE_RATE  # exact: whole samples, no drift


# A committed word Whisper wrote with one of these closes a sentence: the buffer is trimmed there.
SENTENCE_MARKS = (".", "?", "!")
# The compute ratio is taken over the latest passes that took this much new audio (s).
COMPUTE_WINDOW_S = 30.0
# Whisper's encoder reads at least this much (s) with ``encoder_pad_s``: on a second of speech and a
# few of silence, tiny.en loops ("And so and so and so ..."), each loop a long pass.
MIN_WINDOW_S = 10.0
# Tokens a pass may write per second of buffer: fast speech needs about 5 with its marks and
# timestamps; a looping hypothesis stops there instead of at 224, and its pass stays short.
MAX_TOKENS_PER_S = 8.0
