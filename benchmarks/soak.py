"""The soak: a real server under hours of recogniser traffic, every word checked, memory watched.

    python benchmarks/soak.py --data ../shared/data                       # 4 x 60 min words, 30 min audio
    python benchmarks/soak.py --data ../shared/data --punct-minutes 5 --asr-minutes 2   # a short run

A `streampunct serve` process is started on a free loopback port. At once, against it:

- /v1/punct: ``--streams`` concurrent streams (default 4), each speaking a different stretch of
  IWSLT dev2012 the way a recogniser does: words about 0.3 s apart on a simulated clock, messages of
  0 to 8 words with times and ``now``, pauses of 0.5 to 3 s now and then with ``tick`` messages in
  them, and every few messages a revision of the last 1 to 3 words that are not final yet (the events
  received and the documented commit rule say which; the client waits for the answer to each one).
  Now and then a revision comes too late, on a word already final: the server must refuse it
  (``bad_input``), and the refusals are counted, not failed. Messages go as fast as the server
  answers (at most 32 words due to be final by the lookahead before their final events came), not
  in real time, until each stream's simulated clock has covered ``--punct-minutes``.
  Stream 0 is one session throughout; the others start a new session every 1/12 to 1/3 of the run.
  The configurations differ per stream (lookahead 0, 2, 4; time limit 1500 ms or none; engine auto
  or masked).
- /v1/asr: ``--asr-minutes`` of continuous speech, espeak-ng reading dev2012 text (made in pieces,
  joined, cached under ~/.cache/streampunct/soak/), sent as fast as the server reads it
  (``--asr-speed 1``: in real time), beside the punct streams.

Checks, per session: it did not fail (an ``internal`` error, a close other than 1000, or no
``end``), and every word got exactly one final event, in order, carrying the text the server was
sent (after revisions). The server's resident memory (VmRSS) is sampled every ``--sample-s``:
after warm-up, its maximum, at the end, and the growth from 10 % of the run to its end. Writes
benchmarks/results/soak.json (a run with --asr-pauses or --asr-trap: under its settings.hours);
exits with status 1 when a session failed or a word lacked exactly one final decision.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import numpy as np  # noqa: E402
from common import (  # noqa: E402
    CACHE,
    ESPEAK,
    ROOT,
    Server,
    machine,
    make_speech,
    rss_mb,
    start_server,
    write_json,
)  # fmt: skip
from websockets.asyncio.client import ClientConnection, connect  # noqa: E402
from websockets.exceptions import ConnectionClosed  # noqa: E402

from streampunct import protocol as P  # noqa: E402
from streampunct.options import RecognizerOptions  # noqa: E402
from streampunct.text import normalize, read_iwslt  # noqa: E402

# A recogniser's habits, on the simulated clock (seconds).
WORD_STEP = (0.22, 0.38)  # from one word's start to the next: about 0.3 s
WORD_LENGTH = (0.12, 0.30)
MAX_WORDS_A_MESSAGE = 8
PAUSE_CHANCE = 0.06  # per message
PAUSE = (0.5, 3.0)
TICK_EVERY = 0.5  # during a pause
REVISE_EVERY = (3, 6)  # messages between revision attempts
LATE_REVISION_CHANCE = 0.1  # a revision of a word already final: must be refused
MAX_AHEAD = 32  # words due to be final (by the lookahead) whose final events have not come yet
ANSWER_TIMEOUT_S = 300.0  # for the answer to a revision, for due final events, for the end

# Per-stream configurations, taken in turn.
STREAM_CONFIGS: tuple[dict[str, Any], ...] = (
    {"lookahead": 2, "max_delay_ms": 1500, "engine": "auto"},
    {"lookahead": 0, "max_delay_ms": None, "engine": "masked"},
    {"lookahead": 4, "max_delay_ms": 1500, "engine": "masked"},
    {"lookahead": 2, "max_delay_ms": None, "engine": "auto"},
    {"lookahead": 4, "max_delay_ms": None, "engine": "auto"},
    {"lookahead": 0, "max_delay_ms": 1500, "engine": "auto"},
    {"lookahead": 2, "max_delay_ms": 1500, "engine": "masked"},
    {"lookahead": 4, "max_delay_ms": 1500, "engine": "auto"},
)
ASR_CONFIG: dict[str, Any] = {"lookahead": 2, "max_delay_ms": 1500, "engine": "auto"}


# --- what each session reports --------------------------------------------------------------------


@dataclass
class SessionReport:
    endpoint: str  # "punct" or "asr"
    stream: str  # "0", "1", ... "asr", or "warm-up"
    session: int
    config: dict[str, Any]
    engine: str | None = None
    failure: str | None = None  # why the session failed; None: it did not
    problems: list[str] = field(default_factory=list)  # words without exactly one final decision
    words_sent: int = 0  # in words and revise messages (punct)
    words: int = 0  # the stream's words, by the client's count (punct) or the committed words (asr)
    words_one_final: int = 0  # of those, with exactly one final event, in order, of the right text
    server_words: int | None = None  # the ``end`` message's count
    messages: int = 0
    ticks: int = 0
    revisions: int = 0  # revisions of words not final, accepted or refused
    revisions_refused: int = 0
    late_revisions: int = 0  # of words already final: each must be refused
    errors: list[str] = field(default_factory=list)  # error messages other than expected refusals
    speech_s: float = 0.0  # simulated clock (punct)
    audio_s: float = 0.0  # audio sent (asr)
    lags: int = 0  # asr: lag messages (audio skipped)
    skipped_s: float = 0.0
    captions: int = 0
    wall_s: float = 0.0
    latency_s: dict[str, float] = field(default_factory=dict)  # asr, paced: caption lines after their speech

    @property
    def ok(self) -> bool:
        return (
            self.failure is None and not self.problems and not self.errors
            and self.words_one_final == self.words
        )  # fmt: skip


class FinalCheck:
    """Every word exactly one final event, in word order."""

    def __init__(self) -> None:
        self.count: Counter[int] = Counter()
        self.text: dict[int, str] = {}
        self.problems: list[str] = []

    @property
    def n_final(self) -> int:
        return len(self.text)

    def add(self, event: dict[str, Any]) -> None:
        i = event["index"]
        if self.count[i] == 0 and i != self.n_final:
            self.problems.append(f"final event for word {i} when {self.n_final} was due")
        elif self.count[i] > 0:
            self.problems.append(f"word {i} got a second final event")
        self.count[i] += 1
        self.text.setdefault(i, event["word"])

    def result(self, words: Sequence[str] | int) -> int:
        """How many of ``words`` (texts, or just their number) had exactly one final event (of that
        text); notes the others."""
        n = words if isinstance(words, int) else len(words)
        good = 0
        for i in range(n):
            if self.count[i] != 1:
                self.problems.append(f"word {i}: {self.count[i]} final events")
            elif not isinstance(words, int) and self.text[i] != words[i]:
                self.problems.append(f"word {i}: final event for {self.text[i]!r}, sent {words[i]!r}")
            else:
                good += 1
        extra = sorted(i for i in self.count if i >= n)
        if extra:
            self.problems.append(f"final events for {len(extra)} words never sent, from {extra[0]}")
        return good


# --- /v1/punct: a recogniser's words ---------------------------------------------------------------


def stretch(words: Sequence[str], start: int) -> Iterator[str]:
    """The words from ``start`` on, round and round."""
    i = start % len(words)
    while True:
        yield words[i]
        i = (i + 1) % len(words)


class _Receiver:
    """The punct session's incoming side: final events checked, the answer to a revision found."""

    def __init__(self, ws: ClientConnection, report: SessionReport) -> None:
        self.ws, self.report = ws, report
        self.finals = FinalCheck()
        self.end: dict[str, Any] | None = None
        self.closed = False
        self.pending: tuple[int, str, asyncio.Future[bool]] | None = None  # index, new text, accepted?
        self.progress = asyncio.Event()  # final events came, or the connection closed

    def expect_revision(self, index: int, text: str) -> asyncio.Future[bool]:
        future = asyncio.get_running_loop().create_future()
        self.pending = (index, text, future)
        return future

    def _answer(self, accepted: bool) -> None:
        if self.pending is not None and not self.pending[2].done():
            self.pending[2].set_result(accepted)
        self.pending = None

    async def run(self) -> None:
        rep = self.report
        try:
            async for raw in self.ws:
                msg = json.loads(raw)
                if msg["type"] == "events":
                    for e in msg["events"]:
                        if e["final"]:
                            self.finals.add(e)
                            self.progress.set()
                        if self.pending and e["index"] == self.pending[0] and e["word"] == self.pending[1]:
                            self._answer(True)  # an event for the new word: the revision was taken
                elif msg["type"] == "error":
                    if msg["code"] == "bad_input" and self.pending is not None:
                        self._answer(False)
                    elif msg["code"] == "internal":
                        rep.failure = f"internal: {msg['message']}" + (
                            f" (stopped at word {msg['word']})" if "word" in msg else ""
                        )
                    else:
                        rep.errors.append(f"{msg['code']}: {msg['message']}")
                elif msg["type"] == "end":
                    self.end = msg
        except ConnectionClosed:
            pass
        finally:
            self.closed = True
            self.progress.set()
            self._answer(False)
            code = self.ws.close_code
            if rep.failure is None and code != 1000:
                rep.failure = f"connection closed with code {code} {self.ws.close_reason or ''}".rstrip()
            if rep.failure is None and self.end is None:
                rep.failure = "no end message"


@dataclass
class _Word:
    text: str
    start: float
    end: float
    tokens: int

    def json(self) -> dict[str, Any]:
        return {"text": self.text, "start": self.start, "end": self.end}


class Speaker:
    """A recogniser's side of one /v1/punct session, on a simulated clock."""

    def __init__(self, cfg: dict[str, Any], source: Iterator[str], rng: random.Random) -> None:
        self.cfg, self.source, self.rng = cfg, source, rng
        self.words: list[_Word] = []
        self.clock = 0.0  # the latest time sent, as a word's end or ``now``

    def next_words(self, n: int, start: float, end: float) -> list[_Word]:
        """``n`` words of the text spread over start..end."""
        step = (end - start) / n
        out = []
        for j in range(n):
            text = next(self.source)
            s = round(start + j * step, 3)
            out.append(_Word(text, s, round(s + min(step, WORD_LENGTH[1]) * 0.8, 3), len(normalize(text))))
        return out

    def speak(self) -> list[_Word]:
        """0 to 8 words, about 0.3 s apart, from the clock on."""
        out = []
        t = self.clock
        for _ in range(self.rng.randint(0, MAX_WORDS_A_MESSAGE)):
            length = self.rng.uniform(*WORD_LENGTH)
            start = round(t + max(0.02, self.rng.uniform(*WORD_STEP) - length), 3)  # after the one before
            text = next(self.source)
            out.append(_Word(text, start, round(start + length, 3), len(normalize(text))))
            t = start + length
        return out

    def surely_final(self) -> int:
        """How many words are final by the lookahead alone: ``lookahead`` tokens follow them."""
        following = 0
        for i in range(len(self.words) - 1, -1, -1):
            if following >= self.cfg["lookahead"]:
                return i + 1
            following += self.words[i].tokens
        return 0

    def revisable_from(self, n_final: int) -> int | None:
        """The first of the last 1 to 3 words that can still be revised: not final by the events
        received (``n_final``) nor by the commit rule as the server applies it (a word is final once
        ``lookahead`` tokens follow its last token, or once the clock reaches its end plus the time
        limit). None if there is none."""
        k, delay = self.cfg["lookahead"], self.cfg["max_delay_ms"]
        following = 0  # tokens after word i
        best = None
        for i in range(len(self.words) - 1, max(n_final, len(self.words) - 3) - 1, -1):
            w = self.words[i]
            if following >= k or (delay is not None and w.end + delay / 1000 <= self.clock):
                break
            if w.tokens:  # a word without tokens is final as soon as the word before it is
                best = i
            following += w.tokens
        if best is None:
            return None
        return self.rng.randint(best, len(self.words) - 1) if self.rng.random() < 0.5 else best


async def punct_session(
    url: str,
    cfg: dict[str, Any],
    source: Iterator[str],
    seconds: float,
    rng: random.Random,
    report: SessionReport,
    speed: float = 0,
) -> SessionReport:
    """One /v1/punct session: ``seconds`` of simulated speech from ``source``, then ``end``; as fast
    as the server answers (``speed`` 0) or ``speed`` times real time."""
    t0 = time.perf_counter()
    try:
        await _punct_session(url, cfg, source, seconds, rng, report, speed)
    except Exception as e:  # whatever happened, it is this session's failure, with its message
        report.failure = report.failure or f"{type(e).__name__}: {e}"
    report.wall_s = time.perf_counter() - t0
    return report


async def _punct_session(
    url: str,
    cfg: dict[str, Any],
    source: Iterator[str],
    seconds: float,
    rng: random.Random,
    rep: SessionReport,
    speed: float,
) -> None:
    async with connect(url + "/v1/punct", max_size=2**22, open_timeout=60) as ws:
        await ws.send(json.dumps({"type": "config", "version": 1, **cfg}))
        ready = json.loads(await ws.recv())
        if ready.get("type") != "ready":
            rep.failure = f"refused: {ready}"
            return
        rep.engine = ready["engine"]
        speaker = Speaker(cfg, source, rng)
        rx = _Receiver(ws, rep)
        receiving = asyncio.create_task(rx.run())

        start = time.perf_counter()

        async def send(msg: dict[str, Any]) -> None:
            if speed > 0:  # a live recogniser: nothing before its time on the simulated clock
                due = start + msg.get("now", speaker.clock) / speed
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
            await ws.send(json.dumps(msg))
            rep.messages += 1

        async def keep_pace() -> None:
            """As fast as the server answers: wait while too many final events are due."""
            while speaker.surely_final() - rx.finals.n_final > MAX_AHEAD and not rx.closed:
                rx.progress.clear()
                try:
                    await asyncio.wait_for(rx.progress.wait(), ANSWER_TIMEOUT_S)
                except asyncio.TimeoutError:
                    due = speaker.surely_final()
                    raise RuntimeError(
                        f"{due} words due to be final, {rx.finals.n_final} final events came"
                    ) from None

        until_revision = rng.randint(*REVISE_EVERY)
        while speaker.clock < seconds and not rx.closed:
            await keep_pace()
            if rng.random() < PAUSE_CHANCE:  # silence: the recogniser's clock goes on in ticks
                pause = rng.uniform(*PAUSE)
                t = speaker.clock
                while t + TICK_EVERY < speaker.clock + pause:
                    t = round(t + TICK_EVERY, 3)
                    await send({"type": "tick", "now": t})
                    rep.ticks += 1
                speaker.clock = round(speaker.clock + pause, 3)
                continue
            until_revision -= 1
            if until_revision <= 0:
                until_revision = rng.randint(*REVISE_EVERY)
                if not await revise(speaker, rx, rep, send, rng):
                    break
                continue
            batch = speaker.speak()
            now = round((batch[-1].end if batch else speaker.clock + rng.uniform(*WORD_STEP)) + 0.05, 3)
            await send({"type": "words", "words": [w.json() for w in batch], "now": now})
            speaker.words += batch
            speaker.clock = now
            rep.words_sent += len(batch)
        rep.speech_s = speaker.clock
        if not rx.closed:
            await send({"type": "end"})
        await asyncio.wait_for(receiving, ANSWER_TIMEOUT_S)
        rep.words = len(speaker.words)
        rep.server_words = rx.end["words"] if rx.end else None
        rep.words_one_final = rx.finals.result([w.text for w in speaker.words])
        if rep.failure is None:  # a failed session's missing finals are its failure, not problems
            if rep.server_words != rep.words:
                rep.problems.append(f"the server counted {rep.server_words} words, the client {rep.words}")
            rep.problems += rx.finals.problems


async def revise(speaker: Speaker, rx: _Receiver, rep: SessionReport, send: Any, rng: random.Random) -> bool:
    """Revise the tail (or, now and then, a word already final, which must be refused), and wait
    for the answer. False if the session is over."""
    n_final = rx.finals.n_final
    late = rng.random() < LATE_REVISION_CHANCE and n_final > 0
    index = n_final - 1 if late else speaker.revisable_from(n_final)
    if index is None:
        return True
    old = speaker.words[index:]
    n_new = max(1, len(old) + rng.choice((-1, 0, 0, 1)))
    start = old[0].start if old else speaker.clock
    new = speaker.next_words(n_new, start, max(speaker.clock, start + 0.3 * n_new))
    while not new[0].tokens or new[0].text == speaker.words[index].text:  # a word the answer can name
        new[0] = speaker.next_words(1, new[0].start, new[0].end)[0]
    answer = rx.expect_revision(index, new[0].text)
    await send({"type": "revise", "index": index, "words": [w.json() for w in new]})
    rep.words_sent += len(new)
    try:
        accepted = await asyncio.wait_for(answer, ANSWER_TIMEOUT_S)
    except asyncio.TimeoutError:
        rep.failure = f"no answer to a revision from word {index} in {ANSWER_TIMEOUT_S:.0f} s"
        return False
    if rx.closed:
        return False
    if late:
        rep.late_revisions += 1
        if accepted:
            rep.problems.append(f"a revision from word {index}, already final, was accepted")
    else:
        rep.revisions += 1
        rep.revisions_refused += not accepted
    if accepted:
        speaker.words[index:] = new
        speaker.clock = max(speaker.clock, new[-1].end)
    return True


async def punct_stream(
    url: str,
    i: int,
    words: Sequence[str],
    start: int,
    minutes: float,
    seed: int,
    engine: str | None,
    speed: float = 0,
) -> list[SessionReport]:
    """Stream ``i``: ``minutes`` of simulated speech from word ``start`` of the text, in one session
    (stream 0) or in sessions of 1/12 to 1/3 of it, one after the other."""
    rng = random.Random(seed * 1000 + i)
    cfg = dict(STREAM_CONFIGS[i % len(STREAM_CONFIGS)])
    if engine:
        cfg["engine"] = engine
    source = stretch(words, start)
    reports: list[SessionReport] = []
    left = minutes * 60
    while left > 0:
        seconds = left if i == 0 else min(left, minutes * 60 * rng.uniform(1 / 12, 1 / 3))
        rep = SessionReport("punct", str(i), len(reports), cfg)
        reports.append(rep)
        await punct_session(url, cfg, source, seconds, rng, rep, speed)
        left -= max(rep.speech_s, 1.0)
        if rep.failure:  # the stream goes on in a new session, as a client would reconnect
            print(f"stream {i} session {rep.session} failed: {rep.failure}", flush=True)
    return reports


# --- /v1/asr: continuous speech --------------------------------------------------------------------


async def asr_session(
    url: str, audio: Any, cfg: dict[str, Any], report: SessionReport, speed: float = 0
) -> SessionReport:
    """One /v1/asr session: the audio as fast as the server reads it (``speed`` 0; 1: real time);
    committed words and their final events checked."""
    from streampunct.clients.file import stream_file

    t0 = time.perf_counter()
    report.audio_s = len(audio) / 16000
    try:
        result = await stream_file(url, audio, speed, P.Config(**cfg))
    except Exception as e:  # SessionLost and the like: the session failed, its message says how
        report.failure = f"{type(e).__name__}: {e}"
        report.wall_s = time.perf_counter() - t0
        return report
    report.wall_s = time.perf_counter() - t0
    late = sorted(x for x in result.latencies if x == x)  # NaN when not paced
    if late:
        report.latency_s = {
            q: round(late[min(len(late) - 1, int(f * len(late)))], 2) for q, f in LATENCY_QUANTILES
        }
    finals = FinalCheck()
    committed: list[int] = []
    for _, msg in result.timeline:
        kind = msg["type"]
        if kind == "words":
            committed += [w["index"] for w in msg["committed"]]
        elif kind == "events":
            for e in msg["events"]:
                if e["final"]:
                    finals.add(e)
        elif kind == "caption":
            report.captions += 1
        elif kind == "lag":
            report.lags += 1
            report.skipped_s += msg["skipped_s"]
        elif kind == "error":
            if msg["code"] == "internal":
                report.failure = f"internal: {msg['message']}"
            else:
                report.errors.append(f"{msg['code']}: {msg['message']}")
        elif kind == "ready":
            report.engine = msg.get("engine")
    if not result.end:
        report.failure = report.failure or "no end message"
        return report
    report.server_words = result.end.words
    report.words = len(committed)
    if committed != list(range(len(committed))):
        report.problems.append("committed word indices are not 0, 1, 2, ...")
    if report.server_words != report.words:
        report.problems.append(
            f"the server counted {report.server_words} words, {report.words} were committed"
        )
    report.words_one_final = finals.result(report.words)
    report.problems += finals.problems
    return report


LATENCY_QUANTILES = (("p50", 0.5), ("p95", 0.95), ("max", 1.0))
TRAP_SENTENCE = "I do not know what you mean."
ROOM_NOISE = 1e-3  # a pause is quiet, not digital silence: noise at about -60 dBFS


def hours_audio(
    audio: Any, pause_every_s: float, pause_s: tuple[float, float] | None, trap: int, seed: int
) -> tuple[Any, dict[str, Any]]:
    """The soak's speech with long pauses and a looped sentence: after every ``pause_every_s`` of
    speech (cut where espeak-ng's pieces meet, in their silence) a pause of ``pause_s`` seconds
    (uniform; room noise); in the middle pause, ``trap`` copies of one sentence back to back (a
    recogniser's loop trap). Returns the audio and where its parts are (seconds)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rate = 16000
    quiet = np.flatnonzero(
        np.convolve(audio == 0, np.ones(rate // 5), "valid") == rate // 5
    )  # 0.2 s of zeros
    cuts, target = [], pause_every_s * rate
    while pause_s is not None and len(quiet) and target < len(audio):
        at = quiet[np.searchsorted(quiet, target).clip(max=len(quiet) - 1)] + rate // 10
        if at <= (cuts[-1] if cuts else 0):
            break
        cuts.append(int(at))
        target = at + pause_every_s * rate
    parts, layout, start = [], {"pauses": [], "trap": None}, 0
    for i, cut in enumerate([*cuts, len(audio)]):
        parts.append(audio[start:cut])
        start = cut
        if cut == len(audio):
            break
        at = sum(map(len, parts)) / rate
        seconds = float(rng.uniform(*pause_s)) if pause_s else 0.0
        noise = (ROOM_NOISE * rng.standard_normal(int(seconds * rate))).astype(np.float32)
        if trap and i == len(cuts) // 2:
            loop = np.concatenate([trap_sentence(), np.zeros(rate // 4, np.float32)] * trap)
            half = len(noise) // 2
            parts += [noise[:half], loop, noise[half:]]
            layout["trap"] = {
                "start": round(at + half / rate, 2),
                "seconds": round(len(loop) / rate, 2),
                "copies": trap,
            }
        else:
            parts.append(noise)
        layout["pauses"].append({"start": round(at, 2), "seconds": round(seconds, 2)})
    return np.concatenate(parts), layout


def trap_sentence() -> Any:
    """TRAP_SENTENCE, read by espeak-ng, 16 kHz float32."""
    import subprocess
    import tempfile

    from streampunct.clients.file import load_audio

    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "trap.wav"
        subprocess.run(["espeak-ng", *ESPEAK, "-w", str(wav), TRAP_SENTENCE], check=True)
        return load_audio(str(wav))


class MetricsWatch:
    """The server's /metrics every ``every`` seconds: the recogniser's longest buffer, its compute
    ratio and the passes its guards cut."""

    def __init__(self, url: str, every: float) -> None:
        self.url, self.every = url.replace("ws://", "http://") + "/metrics", every
        self.buffer_max_s = 0.0
        self.last: dict[str, float] = {}

    def sample(self) -> None:
        import urllib.request

        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(self.url, timeout=10) as r:
            text = r.read().decode()
        for family in text_string_to_metric_families(text):
            for x in family.samples:
                key = x.name + "".join(f"_{v}" for v in x.labels.values())
                self.last[key] = x.value
        self.buffer_max_s = max(
            self.buffer_max_s, self.last.get("streampunct_recognition_buffer_seconds", 0.0)
        )

    async def run(self) -> None:
        while True:
            await asyncio.to_thread(self.sample)
            await asyncio.sleep(self.every)

    def figures(self) -> dict[str, Any]:
        return {
            "buffer_max_s": round(self.buffer_max_s, 2),
            "buffer_limit_s": BUFFER_LIMIT_S,
            "guarded": {
                g: int(self.last.get(f"streampunct_recognition_guarded_passes_total_{g}", 0))
                for g in ("loop", "runaway")
            },
            "skipped_s": round(self.last.get("streampunct_recognition_skipped_seconds_total", 0.0), 2),
        }


# A recogniser's buffer holds at most max_buffer_s after a pass, and the audio due to the next
# (under max_lag_s, or it skips).
BUFFER_LIMIT_S = RecognizerOptions().max_buffer_s + (RecognizerOptions().max_lag_s or 0.0) + 1.0


# --- the run ---------------------------------------------------------------------------------------


class MemoryWatch:
    """The server's VmRSS every ``every`` seconds, with the wall clock, in a task."""

    def __init__(self, pid: int, every: float) -> None:
        self.pid, self.every = pid, every
        self.samples: list[tuple[float, float]] = []  # (seconds since start, MB)
        self.t0 = time.perf_counter()

    def sample(self) -> float | None:
        mb = rss_mb(self.pid)
        if mb is not None:
            self.samples.append((round(time.perf_counter() - self.t0, 2), round(mb, 1)))
        return mb

    async def run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.every)


async def soak(
    server: Server,
    words: Sequence[str],
    *,
    streams: int = 4,
    punct_minutes: float = 60,
    audio: Any = None,
    asr_speed: float = 0,
    punct_speed: float = 0,
    engine: str | None = None,
    seed: int = 0,
    sample_s: float = 5.0,
    progress_s: float = 60.0,
    warm_up: bool = True,
) -> dict[str, Any]:
    """Warm the server up, then run the punct streams and the audio session at once; returns the
    figures (``summary()``'s), sessions and memory samples included."""
    warm: list[SessionReport] = []
    engines = {engine} if engine else {c["engine"] for c in STREAM_CONFIGS[:streams]}
    for i, e in enumerate(sorted(engines) if warm_up else ()):
        cfg = {"lookahead": 2, "max_delay_ms": 1500, "engine": e}
        rep = SessionReport("punct", "warm-up", i, cfg)
        warm.append(await punct_session(server.url, cfg, stretch(words, 0), 30, random.Random(seed), rep))
    if audio is not None and warm_up:
        cfg = {**ASR_CONFIG, **({"engine": engine} if engine else {})}
        rep = SessionReport("asr", "warm-up", 0, cfg)
        warm.append(await asr_session(server.url, audio[: 16000 * 10], cfg, rep, asr_speed))

    watch = MemoryWatch(server.pid, sample_s)
    watching = asyncio.create_task(watch.run())
    metrics = MetricsWatch(server.url, sample_s)
    scraping = asyncio.create_task(metrics.run())
    t0 = time.perf_counter()
    starts = [(i + 1) * len(words) // (streams + 1) for i in range(streams)]
    jobs = [
        punct_stream(server.url, i, words, start, punct_minutes, seed, engine, punct_speed)
        for i, start in enumerate(starts)
    ]
    asr_reports: list[SessionReport] = []
    if audio is not None:
        cfg = {**ASR_CONFIG, **({"engine": engine} if engine else {})}
        asr_reports.append(SessionReport("asr", "asr", 0, cfg))
        jobs.append(asr_session(server.url, audio, cfg, asr_reports[0], asr_speed))

    async def progress() -> None:
        while True:
            await asyncio.sleep(progress_s)
            mb = watch.samples[-1][1] if watch.samples else float("nan")
            print(f"[{time.perf_counter() - t0:6.0f} s] server RSS {mb:.0f} MB", flush=True)

    reporting = asyncio.create_task(progress())
    results = await asyncio.gather(*jobs)
    wall = time.perf_counter() - t0
    reporting.cancel()
    watching.cancel()
    scraping.cancel()
    await asyncio.sleep(min(1.0, sample_s))  # the last replies sent, buffers freed
    watch.sample()
    await asyncio.to_thread(metrics.sample)
    sessions = warm + [r for rs in results if isinstance(rs, list) for r in rs] + asr_reports
    return {**summary(sessions, watch.samples, wall, server), "recognition": metrics.figures()}


def slope_mb_per_h(samples: list[tuple[float, float]]) -> float | None:
    """The least-squares slope of RSS against time, MB an hour (None: fewer than two samples)."""
    if len(samples) < 2:
        return None
    t, mb = np.array(samples).T
    return round(float(np.polyfit(t / 3600, mb, 1)[0]), 1)


def memory(samples: list[tuple[float, float]], wall: float) -> dict[str, Any]:
    """RSS after warm-up, at 10 % of the run, its maximum and at the end; growth from 10 % on."""
    if not samples:
        return {}
    tenth = next((mb for t, mb in samples if t >= 0.1 * wall), samples[-1][1])
    return {
        "start_mb": samples[0][1],
        "at_10pct_mb": tenth,
        "max_mb": max(mb for _, mb in samples),
        "end_mb": samples[-1][1],
        "growth_from_10pct_mb": round(samples[-1][1] - tenth, 1),
        "slope_second_half_mb_per_h": slope_mb_per_h([(t, mb) for t, mb in samples if t >= wall / 2]),
        "samples": samples,
    }


def summary(
    sessions: list[SessionReport], samples: list[tuple[float, float]], wall: float, server: Server
) -> dict:
    def totals(rs: list[SessionReport]) -> dict[str, Any]:
        return {
            "sessions": len(rs),
            "failed": sum(r.failure is not None for r in rs),
            "words": sum(r.words for r in rs),
            "words_one_final": sum(r.words_one_final for r in rs),
            "words_without_one_final": sum(r.words - r.words_one_final for r in rs),
            "words_sent": sum(r.words_sent for r in rs),
            "messages": sum(r.messages for r in rs),
            "ticks": sum(r.ticks for r in rs),
            "revisions": sum(r.revisions for r in rs),
            "revisions_refused": sum(r.revisions_refused for r in rs),
            "late_revisions_refused": sum(r.late_revisions for r in rs),
            "other_errors": sum(len(r.errors) for r in rs),
            "speech_minutes": round(sum(r.speech_s for r in rs) / 60, 2),
            "audio_minutes": round(sum(r.audio_s for r in rs) / 60, 2),
            "lags": sum(r.lags for r in rs),
            "captions": sum(r.captions for r in rs),
            "wall_s": round(max((r.wall_s for r in rs), default=0.0), 1),
        }

    names = sorted({r.stream for r in sessions}, key=lambda s: (not s.isdigit(), s.zfill(4)))
    per_stream = {}
    for name in names:
        rs = [r for r in sessions if r.stream == name]
        per_stream[name] = {"config": rs[0].config, "engine": rs[0].engine, **totals(rs)}
        if name != "warm-up":  # stream wall time: its sessions one after the other
            per_stream[name]["wall_s"] = round(sum(r.wall_s for r in rs), 1)
    total = totals(sessions)
    total["wall_s"] = round(wall, 1)
    failed = [r for r in sessions if not r.ok]
    return {
        "total": total,
        "streams": per_stream,
        "memory": memory(samples, wall),
        "server_failures_logged": len(server.failures_logged()),
        "failures": [
            {
                "stream": r.stream,
                "session": r.session,
                "failure": r.failure,
                "problems": r.problems[:10],
                "errors": r.errors[:10],
            }
            for r in failed
        ],
        "sessions": [asdict(r) | {"problems": r.problems[:10], "errors": r.errors[:10]} for r in sessions],
    }


def passed(figures: dict[str, Any]) -> bool:
    t, r = figures["total"], figures.get("recognition", {})
    buffer_ok = r.get("buffer_max_s", 0.0) <= BUFFER_LIMIT_S
    return t["failed"] == 0 and t["words_without_one_final"] == 0 and not figures["failures"] and buffer_ok


def table(figures: dict[str, Any]) -> str:
    rows = [
        "| stream | config | sessions | failed | words | one final | revisions (refused) | late refused "
        "| speech min | audio min | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in [*figures["streams"].items(), ("total", figures["total"])]:
        c = s.get("config")
        conf = f"k={c['lookahead']} {c['max_delay_ms'] or 'none'}/{s['engine'] or c['engine']}" if c else ""
        rows.append(
            f"| {name} | {conf} | {s['sessions']} | {s['failed']} | {s['words']:,} | {s['words_one_final']:,} "
            f"| {s['revisions']} ({s['revisions_refused']}) | {s['late_revisions_refused']} "
            f"| {s['speech_minutes']:.1f} | {s['audio_minutes']:.1f} | {s['wall_s']:.0f} |"
        )
    r = figures.get("recognition")
    if r:
        late = next((x.get("latency_s") for x in figures["sessions"] if x["stream"] == "asr"), None) or {}
        said = ", ".join(f"{q} {v:.1f} s" for q, v in late.items())
        rows += [
            "",
            f"Recognition: longest buffer {r['buffer_max_s']:.1f} s (limit {r['buffer_limit_s']:.0f} s); passes cut "
            f"by a guard: {r['guarded']}; audio skipped {r['skipped_s']:.1f} s"
            + (f"; caption lines after their speech: {said}" if said else "")
            + ".",
        ]
    m = figures["memory"]
    if m:
        rows += [
            "",
            f"Server resident memory: {m['start_mb']:.0f} MB after warm-up, {m['at_10pct_mb']:.0f} MB at 10 % "
            f"of the run, max {m['max_mb']:.0f} MB, {m['end_mb']:.0f} MB at the end "
            f"({m['growth_from_10pct_mb']:+.0f} MB from 10 %; over the second half "
            f"{m['slope_second_half_mb_per_h']} MB an hour).",
        ]
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    default_data = os.environ.get("STREAMPUNCT_DATA", str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--data", default=default_data, help="a folder laid out as shared/data (iwslt/dev2012)")
    ap.add_argument("--punct-minutes", type=float, default=60, help="simulated speech per punct stream")
    ap.add_argument("--streams", type=int, default=4, help="concurrent /v1/punct streams")
    ap.add_argument(
        "--punct-speed", type=float, default=0,
        help="0: punct words as fast as the server answers (default); 1: live, 3 words a second a stream",
    )  # fmt: skip
    ap.add_argument("--asr-minutes", type=float, default=30, help="speech through /v1/asr (0: none)")
    ap.add_argument(
        "--asr-speed",
        type=float,
        default=0,
        help="0: the audio as fast as the server reads it (default); 1: live",
    )
    ap.add_argument(
        "--asr-pauses", nargs=2, type=float, metavar=("MIN", "MAX"), default=None,
        help="a pause of MIN to MAX seconds (room noise) after every --asr-pause-every of speech",
    )  # fmt: skip
    ap.add_argument("--asr-pause-every", type=float, default=300.0, metavar="S", help="speech between pauses")
    ap.add_argument(
        "--asr-trap", type=int, default=0, metavar="N", help="one sentence N times in a row, mid-run"
    )
    ap.add_argument("--model", default=None, help="punctuation model: default, base or a checkpoint folder")
    ap.add_argument("--asr-model", default=None, help="tiny.en (the server's default), base or a folder")
    ap.add_argument("--device", default="cpu", help="the server's device (cpu, cuda)")
    ap.add_argument(
        "--engine", choices=("auto", "masked", "window"), help="one engine for every stream (default: varied)"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample-s", type=float, default=5.0, help="seconds between memory samples")
    ap.add_argument("--cache", type=Path, default=CACHE, help="where the speech is made and kept")
    ap.add_argument(
        "--out", type=Path, default=None,
        help="write here instead of benchmarks/results/soak.json (a run with --asr-pauses or --asr-trap "
        "goes there under settings.hours)",
    )  # fmt: skip
    args = ap.parse_args()

    words, labels = read_iwslt(Path(args.data) / "iwslt" / "dev2012")
    audio, layout = None, None
    if args.asr_minutes > 0:
        from streampunct.clients.file import load_audio

        t = time.perf_counter()
        wav, n_read = make_speech(words, labels, args.asr_minutes, args.cache)
        audio = load_audio(str(wav))
        print(f"speech: {wav} ({len(audio) / 16000 / 60:.1f} min, {n_read:,} words of text, "
              f"{time.perf_counter() - t:.0f} s)", flush=True)  # fmt: skip
        if args.asr_pauses or args.asr_trap:
            audio, layout = hours_audio(
                audio, args.asr_pause_every, args.asr_pauses, args.asr_trap, args.seed
            )
            print(f"with pauses and trap: {len(audio) / 16000 / 60:.1f} min, {layout}", flush=True)

    server_args = ["--device", args.device, "--max-streams", str(args.streams + 8)]
    server_args += ["--model", args.model] if args.model else []
    server_args += ["--asr-model", args.asr_model] if args.asr_model else []
    server_args += ["--preload-asr"] if audio is not None else []
    server = start_server(*server_args)
    print(f"server {server.url} (pid {server.pid}, log {server.log})", flush=True)
    try:
        figures = asyncio.run(
            soak(
                server,
                words,
                streams=args.streams,
                punct_minutes=args.punct_minutes,
                audio=audio,
                asr_speed=args.asr_speed,
                punct_speed=args.punct_speed,
                engine=args.engine,
                seed=args.seed,
                sample_s=args.sample_s,
            )
        )
    finally:
        status = server.stop()
    payload = {
        "command": " ".join(["python", "benchmarks/soak.py", *sys.argv[1:]]),
        "machine": machine(),
        "device": args.device,
        "model": args.model or "default",
        "asr_model": args.asr_model or "tiny.en",
        "asr_speed": args.asr_speed,
        "punct_speed": args.punct_speed,
        "asr_layout": layout,
        "server_log": str(server.log),
        "server_exit_status": status,
        "passed": passed(figures),
        **figures,
    }
    if args.out is None:
        out = write_json("soak.json", payload, "hours" if args.asr_pauses or args.asr_trap else None)
    else:
        out = args.out
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(payload, indent=2) + "\n")
    print(table(figures))
    for f in figures["failures"][:20]:
        why = f["failure"] or "; ".join((f["errors"] + f["problems"])[:3])
        print(f"FAILED stream {f['stream']} session {f['session']}: {why}")
    print(f"{'passed' if payload['passed'] else 'FAILED'}; wrote {out}")
    return 0 if payload["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
