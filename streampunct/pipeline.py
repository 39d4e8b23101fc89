"""The caption pipeline: audio in; words, punctuation and caption lines out. Sans-I/O.

One :class:`CaptionPipeline` per audio stream holds the streaming recogniser, the pause clock, the
sentence-end feedback and the captioner, and says which calls to run on the stream's
:class:`~streampunct.stream.PunctStream`: it reads no socket and runs no punctuation itself, as
whisper_streaming's ``OnlineASRProcessor`` is one object driven offline, on a simulated clock and
live, and as websockets' protocol core is pumped by its I/O layers. Its drivers:

- the server's ``/v1/asr`` session (``streampunct serve``, and the clients' embedded server): the
  real clock, recognition passes in a worker thread, the calls through the batcher;
- :func:`simulate`: a simulated clock (the audio fed so far; instant compute), the calls run at
  once or recorded, for the speech benchmarks (``benchmarks/e2e.py``).

A run's calls, recorded (:class:`Recorder`: the server's ``--record DIR``, or a simulated run),
are one JSON-lines file: its stream's settings, then each call with the audio clock it was made at
(:func:`call_to_json`). :func:`replay` runs them again through a fresh stream, ticks and all: the
words and marks the run's stream gave, for any model.

A driver's loop::

    for call in pipeline.feed(chunk, now):  # queue audio; in a pause, move the clock
        captions += pipeline.punctuated(stream.run(call), call)
    while pipeline.ready():  # between passes only
        heard = pipeline.heard(pipeline.recognise(now))  # recognise() blocks: a worker thread
        for call in heard.calls: ...  # as above
    heard = pipeline.finish()  # blocks; its calls end with Finish: every word final

The pause clock (``FrontEndOptions.pause_clock``): once a pass has committed every word it heard
(no provisional word) and no speech was heard since, the stream is *quiet*; while quiet, each
silent chunk moves the punctuation stream's clock on to its end (a ``Tick``), so time limits fire
in a pause, and a chunk with speech ends the quiet. The sentence-end feedback (recogniser option
``sentence_ends="punctuator"``): a final PERIOD or QUESTION tells the recogniser where a sentence
ended, which trims its buffer there.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .captions import Caption, Captioner
from .errors import DataFormatError
from .options import FrontEndOptions
from .speech import Hypothesis, Skip, StreamingRecognizer, is_silence
from .stream import Call, Finish, Push, Tick
from .text import without_mark
from .types import SAMPLE_RATE, Cues, PunctEvent, Word

if TYPE_CHECKING:
    from .decision import OnDecision
    from .punctuator import Punctuator

__all__ = [
    "CaptionPipeline",
    "Heard",
    "Simulated",
    "simulate",
    "Recorder",
    "read_recording",
    "replay",
    "call_to_json",
    "calls_from_json",
    "recorded_words",
]


@dataclass(frozen=True)
class Heard:
    """What a recognition pass (or a catch-up, or the end of the audio) gives the driver: its
    hypothesis (the words to show, the audio skipped to catch up), ``first``, the index of its
    first committed word in the stream, and the calls to run on the punctuation stream, in order."""

    hypothesis: Hypothesis
    first: int
    calls: tuple[Call, ...]

    @property
    def committed(self) -> tuple[Word, ...]:
        return tuple(self.hypothesis.committed)

    @property
    def provisional(self) -> tuple[Word, ...]:
        return tuple(self.hypothesis.provisional)

    @property
    def skipped(self) -> Skip | None:
        return self.hypothesis.skipped


class CaptionPipeline:
    """One audio stream's caption pipeline (module docstring). ``feed()`` may run while a pass
    does; every other method runs between passes."""

    def __init__(
        self,
        recognizer: StreamingRecognizer,
        options: FrontEndOptions | None = None,
        captioner: Captioner | None = None,
    ):
        self.recognizer = recognizer
        self.options = options or FrontEndOptions()
        self.captioner = captioner or Captioner()
        self.inbox: list[tuple[np.ndarray, float | None]] = []  # audio not handed over yet, with its arrival
        self.inbox_samples = 0
        self.received = 0  # samples received: the stream time of the audio's end
        self.quiet = False  # no word waits uncommitted, and no speech came since: see the pause clock
        self.words = 0  # committed words so far
        self.ends: dict[int, float] = {}  # end times of words not final yet (sentence-end feedback)

    @property
    def waiting(self) -> int:
        """Samples received and not recognised yet."""
        return self.inbox_samples + self.recognizer.unprocessed

    def feed(self, audio: np.ndarray, now: float | None = None) -> list[Call]:
        """Take a chunk (16 kHz mono float32) that arrived at ``now`` (the driver's clock); the
        calls it makes: while quiet, a silent chunk moves the clock (a ``Tick``)."""
        self.inbox.append((audio, now))
        self.inbox_samples += len(audio)
        self.received += len(audio)
        if not self.quiet:
            return []
        if len(audio) and is_silence(audio):
            return [self._quiet()]
        self.quiet = False
        return []

    def ready(self) -> bool:
        """Hand the audio received to the recogniser; whether enough waits for a pass."""
        for audio, arrived in self.inbox:
            self.recognizer.feed(audio, now=arrived)
        self.inbox.clear()
        self.inbox_samples = 0
        return self.recognizer.ready()

    def catch_up(self, now: float | None = None) -> Heard | None:
        """Behind real time: the words committed and the skip, at once (no model; see
        :meth:`StreamingRecognizer.catch_up`); None when not behind."""
        hyp = self.recognizer.catch_up(now)
        return None if hyp is None else self.heard(hyp)

    def recognise(self, now: float | None = None) -> Hypothesis:
        """One recognition pass (blocks: a server runs it in a worker thread)."""
        return self.recognizer.process(now=now)

    def heard(self, hyp: Hypothesis) -> Heard:
        """What a pass found: its committed words pushed (its provisional words as lookahead, the
        clock at the first of them); quiet if it left no word provisional and none was said since."""
        first = self.words
        calls: list[Call] = [self._push(hyp.committed, hyp.provisional, hyp.complete_until)]
        self.quiet = False
        if hyp.pass_ is not None and not hyp.provisional and self.options.pause_clock:
            since = self.recognizer.waiting + [a for a, _ in self.inbox]
            heard = np.concatenate(since) if since else np.zeros(0, dtype=np.float32)
            if not len(heard) or is_silence(heard):
                calls.append(self._quiet())
        return Heard(hyp, first, tuple(calls))

    def finish(self) -> Heard:
        """The end of the audio (blocks): the rest recognised and committed, every word final."""
        self.ready()
        first, rest = self.words, self.recognizer.finish()
        return Heard(Hypothesis(rest, []), first, (self._push(rest, [], None), Finish()))

    def punctuated(self, events: Sequence[PunctEvent], call: Call) -> list[Caption]:
        """The stream's events for ``call``: the caption lines they close (all the rest after
        ``Finish``), and the sentence ends for the recogniser."""
        for e in events:
            end = self.ends.pop(e.index, None) if e.final else None
            if end is not None and e.label in ("PERIOD", "QUESTION"):
                self.recognizer.sentence_end(end)
        return self.captioner.add(events) + (self.captioner.flush() if isinstance(call, Finish) else [])

    def _push(self, committed: Sequence[Word], provisional: Sequence[Word], now: float | None) -> Push:
        self.captioner.add_words(self.words, committed)
        if self.recognizer.options.sentence_ends == "punctuator":
            for i, w in enumerate(committed):
                self.ends[self.words + i] = w.end or 0.0
        self.words += len(committed)
        guess = tuple(provisional) if self.options.provisional_lookahead else ()
        clock = self.recognizer.processed_until if now is None else now
        return Push(tuple(committed), clock, guess)

    def _quiet(self) -> Tick:
        """No word waits uncommitted up to the audio received: the clock moves there."""
        self.quiet = True
        return Tick(self.received / SAMPLE_RATE)


@dataclass
class Simulated:
    """A run of :func:`simulate`: every call with the simulated clock it was made at, the words
    and the skips, and the caption lines."""

    calls: list[tuple[float, Call]]
    heard: list[Heard]
    captions: list[Caption]

    @property
    def words(self) -> list[Word]:
        return [w for h in self.heard for w in h.committed]


def simulate(
    pipeline: CaptionPipeline,
    audio: np.ndarray,
    chunk_s: float,
    run: Callable[[Call], Sequence[PunctEvent]] = lambda call: (),
) -> Simulated:
    """``audio`` through ``pipeline`` in ``chunk_s`` chunks on a simulated clock (the audio fed
    so far: real-time speed with instant compute; deterministic, nothing sleeps): a pass whenever
    the recogniser is ready, as the server's session runs one. ``run`` runs each call on a
    punctuation stream (``stream.run``) and gives its events; by default the calls are only kept."""
    out = Simulated([], [], [])

    def do(calls: Sequence[Call], clock: float) -> None:
        for call in calls:
            out.calls.append((clock, call))
            out.captions += pipeline.punctuated(run(call), call)

    step = max(1, int(chunk_s * SAMPLE_RATE))
    for start in range(0, len(audio), step):
        chunk = audio[start : start + step]
        clock = (start + len(chunk)) / SAMPLE_RATE
        do(pipeline.feed(chunk, clock), clock)
        for heard in _passes(pipeline, clock):
            out.heard.append(heard)
            do(heard.calls, clock)
    heard = pipeline.finish()
    out.heard.append(heard)
    do(heard.calls, len(audio) / SAMPLE_RATE)
    return out


def _passes(pipeline: CaptionPipeline, now: float) -> Iterator[Heard]:
    while pipeline.ready():
        yield pipeline.heard(pipeline.recognise(now))


# --- a run, recorded ---------------------------------------------------------------------------
# The speech benchmarks record a simulated run's calls once (the recogniser is what costs) and run
# them through the stream of each model they score (benchmarks/e2e.py; streampunct calibrate --speech).


def _words_json(words: Sequence[str | Word]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for w in words:
        if isinstance(w, Word):
            out.append(
                {"text": w.text, "start": w.start and round(w.start, 3), "end": w.end and round(w.end, 3)}
            )
            if w.cues is not None and w.cues.marks is not None:
                out[-1]["cues"] = {"marks": [round(x, 4) for x in w.cues.marks]}
    return out


def call_to_json(call: Call, clock: float | None = None) -> dict[str, Any]:
    """One call of the pipeline as JSON (push: its words, clock and provisional words; tick;
    finish), with the driver's clock when it was made."""
    out: dict[str, Any] = {} if clock is None else {"clock": round(clock, 3)}
    if isinstance(call, Push):
        now = None if call.now is None else round(call.now, 3)
        return {**out, "push": _words_json(call.words), "now": now, "tentative": _words_json(call.tentative)}
    if isinstance(call, Tick):
        return {**out, "tick": round(call.now, 3)}
    return {**out, "finish": True}


def recorded_words(words: Sequence[dict[str, Any]], marks: bool = True, cues: bool = True) -> list[Word]:
    """Recorded words; without ``marks``, their own marks taken off (as from a recogniser that
    writes none); without ``cues``, what the recogniser heard at their ends left out."""
    return [
        Word(
            w["text"] if marks else without_mark(w["text"]),
            w["start"],
            w["end"],
            Cues(tuple(w["cues"]["marks"])) if cues and "marks" in w.get("cues", {}) else None,
        )
        for w in words
    ]


def calls_from_json(
    records: Sequence[dict[str, Any]], marks: bool = True, tentative: bool = True, cues: bool = True
) -> list[Call]:
    """The calls :func:`call_to_json` recorded; without ``marks`` the recogniser's marks taken off
    the words, without ``tentative`` no provisional words, without ``cues`` no cues."""
    out: list[Call] = []
    for c in records:
        if "push" in c:
            guess = recorded_words(c["tentative"], marks, cues) if tentative else []
            out.append(Push(tuple(recorded_words(c["push"], marks, cues)), c["now"], tuple(guess)))
        elif "tick" in c:
            out.append(Tick(c["tick"]))
        else:
            out.append(Finish())
    return out


RECORDING_VERSION = 1


class Recorder:
    """A run's calls written as they are made, to a JSON-lines file: a first line of the stream's
    settings (``{"recording": 1, "lookahead": ..., "max_delay_ms": ..., "engine": ...}``), then
    one :func:`call_to_json` line a call, flushed (a recording survives its server)."""

    def __init__(self, path: str | Path, lookahead: int, max_delay_ms: float | None, engine: str):
        self.path = Path(path)
        self._file = self.path.open("w", encoding="utf-8")
        header = {"recording": RECORDING_VERSION, "lookahead": lookahead, "max_delay_ms": max_delay_ms}
        self._write({**header, "engine": engine})

    def add(self, call: Call, clock: float) -> None:
        self._write(call_to_json(call, clock))

    def _write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_recording(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A :class:`Recorder`'s file: its settings and its calls (as :func:`call_to_json` wrote them)."""
    lines = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]
    if not lines or lines[0].get("recording") != RECORDING_VERSION:
        raise DataFormatError(f"not a recording (version {RECORDING_VERSION})", str(path))
    return lines[0], lines[1:]


def replay(
    punctuator: Punctuator,
    recording: str | Path | tuple[dict[str, Any], list[dict[str, Any]]],
    lookahead: int | None = None,
    max_delay_ms: float | None = None,
    engine: str | None = None,
    pauses: bool = True,
    on_decision: OnDecision | None = None,
    **options: bool,
) -> list[dict[str, Any]]:
    """A recorded run's calls through a fresh stream of ``punctuator``, ticks included: each word
    committed, in order, with its final ``label`` and the recorded ``clock`` of the call that
    made it final. By default with the recording's own lookahead, time limit and engine (as the
    server ran it); ``pauses`` and ``on_decision``: the stream's (:meth:`Punctuator.stream`);
    ``options``: :func:`calls_from_json`'s (marks, tentative, cues). The one replay loop: the
    benchmarks, calibration and the hearing's fit read recordings through it."""
    settings, records = read_recording(recording) if isinstance(recording, str | Path) else recording
    stream = punctuator.stream(
        settings["lookahead"] if lookahead is None else lookahead,
        settings["max_delay_ms"] if max_delay_ms is None else max_delay_ms,
        engine or settings.get("engine", "auto"),
        pauses,
        on_decision,
    )
    out: list[dict[str, Any]] = []
    for record, call in zip(records, calls_from_json(records, **options)):
        if isinstance(call, Push):
            out += [
                {"text": w.text, "start": w.start, "end": w.end} for w in call.words if isinstance(w, Word)
            ]
        for e in stream.run(call):
            if e.final:
                out[e.index].update(label=e.label, clock=record.get("clock"))
    return out
