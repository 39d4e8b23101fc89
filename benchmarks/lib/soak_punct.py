"""The soak's /v1/punct traffic (``python -m benchmarks.soak``): a recogniser's words on a simulated
clock, with pauses, ticks and revisions, every word's final event checked; the streams' configurations."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from benchmarks.lib.soak_checks import FinalCheck, SessionReport
from streampunct.text import normalize

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
