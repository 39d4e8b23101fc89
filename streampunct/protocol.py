"""The streampunct websocket protocol, version 1: every message as a frozen dataclass, no I/O, no torch.

docs/protocol.md describes it and docs/schema/ holds a JSON Schema for every message, with examples.
The server and every client read and write messages only through this module: ``to_json()`` writes
one, :func:`read_client` and :func:`read_server` read one. A client message that breaks the protocol
raises :class:`ProtocolError` (a code and a human sentence), which the server answers with an
:class:`Error`; the stream it was meant for is left as it was.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import Any, ClassVar, TypeAlias

from .captions import Caption
from .errors import InputError, StreamPunctError
from .options import StreamOptions
from .types import ENGINES, SAMPLE_RATE, PunctEvent, Sentence, Word, check_lookahead

__all__ = [
    "VERSION",
    "MAX_WORDS_PER_MESSAGE",
    "CLOSING_ERRORS",
    "ProtocolError",
    "Message",
    "Config",
    "Words",
    "Revise",
    "Tick",
    "Sync",
    "End",
    "Ready",
    "Events",
    "Recognised",
    "Captioned",
    "SentenceClosed",
    "Finished",
    "Error",
    "Lag",
    "Synced",
    "ClientMessage",
    "ServerMessage",
    "parse",
    "read_client",
    "read_server",
    "quote",
]

VERSION = 1
MAX_WORDS_PER_MESSAGE = 1000
CLOSING_ERRORS = frozenset({"internal"})  # error codes after which the server closes without an end


class ProtocolError(StreamPunctError):
    """A message that breaks the protocol; ``code`` names the kind, the message says why."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def quote(value: Any, limit: int = 40) -> str:
    """A client's value as an error message quotes it: as JSON, cut short (an error stays small)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."


def parse(text: str | bytes) -> dict[str, Any]:
    """A message's JSON object, with a string ``type``; anything else raises ProtocolError."""
    if isinstance(text, bytes):
        raise ProtocolError("bad_message", "this endpoint takes JSON text messages, not binary ones")
    try:
        msg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProtocolError("bad_json", f"the message is not JSON: {e.msg} at character {e.pos}") from e
    except (ValueError, RecursionError) as e:  # e.g. an integer of thousands of digits
        raise ProtocolError("bad_json", f"the message cannot be read: {e}") from e
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise ProtocolError("bad_message", 'a message is a JSON object with a string "type"')
    try:  # JSON may escape a lone surrogate (\ud800): text that cannot be sent back, nor logged
        json.dumps(msg, ensure_ascii=False).encode()
    except UnicodeEncodeError:
        raise ProtocolError(
            "bad_message", "the message holds a lone surrogate (such as \\ud800): not Unicode text"
        ) from None
    return msg


# --- values -------------------------------------------------------------------------------------


def _number(value: Any, name: str) -> float:
    """A finite number >= 0 (seconds, milliseconds)."""
    try:
        number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or number < 0:
        raise ProtocolError("bad_message", f'"{name}" must be a finite number >= 0, got {quote(value)}')
    return number


def _optional_number(msg: dict[str, Any], name: str) -> float | None:
    return None if msg.get(name) is None else _number(msg[name], name)


def _index(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProtocolError("bad_message", f'"{name}" must be a word index >= 0, got {quote(value)}')
    return value


def _words(value: Any) -> tuple[Word, ...]:
    """A client's words: strings, or objects with a string ``text`` and optional times."""
    if not isinstance(value, list):
        raise ProtocolError(
            "bad_message", '"words" must be a list of strings or {"text", "start", "end"} objects'
        )
    if len(value) > MAX_WORDS_PER_MESSAGE:
        raise ProtocolError("too_large", f"at most {MAX_WORDS_PER_MESSAGE} words a message, got {len(value)}")
    words = []
    for i, w in enumerate(value):
        if isinstance(w, str):
            words.append(Word(w))
            continue
        if not isinstance(w, dict) or not isinstance(w.get("text"), str):
            raise ProtocolError("bad_message", f'word {i} must be a string or an object with a string "text"')
        start, end = _optional_number(w, "start"), _optional_number(w, "end")
        if start is not None and end is not None and end < start:
            raise ProtocolError("bad_message", f"word {i} ({quote(w['text'])}) ends before it starts")
        words.append(Word(w["text"], start, end))
    return tuple(words)


def _word_json(w: Word) -> str | dict[str, Any]:
    """A client's word: its text alone when it has no times."""
    if w.start is None and w.end is None:
        return w.text
    return {"text": w.text, "start": w.start, "end": w.end}


def _timed(w: Word, index: int | None = None) -> dict[str, Any]:
    """A recognised word as the server sends it: text and times (null when unknown), and its index."""
    out: dict[str, Any] = {"text": w.text, "start": w.start, "end": w.end}
    if index is not None:
        out["index"] = index
    return out


# --- messages -----------------------------------------------------------------------------------


class Message:
    """A protocol message: a frozen dataclass whose fields are the JSON object's, with its ``type``.
    Fields in ``OPTIONAL`` that are None (or False: a switch off) are left out of the JSON. A key the message does not
    know is ignored when it is read, on every message (the readers of their own read their fields
    alone)."""

    type: ClassVar[str]
    OPTIONAL: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if not (value is None or value is False) or f.name not in self.OPTIONAL:
                out[f.name] = value
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, msg: dict[str, Any]) -> Any:
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in msg.items() if k in known})


# client to server


@dataclass(frozen=True)
class Config(Message):
    """The first message of a stream: its lookahead, time limit and engine. ``sample_rate`` is
    /v1/asr's PCM rate (16 kHz), None on /v1/punct. ``sentences``: the stream sends
    :class:`SentenceClosed` messages (off by default: a client that does not ask gets none)."""

    type: ClassVar[str] = "config"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("sample_rate", "sentences")
    lookahead: int = StreamOptions.lookahead
    max_delay_ms: float | None = StreamOptions.max_delay_ms
    engine: str = StreamOptions.engine
    sample_rate: int | None = None
    version: int = VERSION
    sentences: bool = StreamOptions.sentences

    @classmethod
    def from_dict(cls, msg: dict[str, Any], audio: bool = False) -> Config:
        if msg["type"] != "config":
            raise ProtocolError("bad_state", f'the first message must be "config", got {quote(msg["type"])}')
        version = msg.get("version", VERSION)
        if isinstance(version, bool) or version != VERSION:
            raise ProtocolError(
                "unsupported_version", f"this server speaks protocol version {VERSION}, not {quote(version)}"
            )
        k = msg.get("lookahead", cls.lookahead)
        try:
            check_lookahead(k, offline=False)
        except InputError as e:
            raise ProtocolError("bad_message", f'"lookahead": {e}') from None
        delay = msg.get("max_delay_ms", cls.max_delay_ms)
        delay = None if delay is None else _number(delay, "max_delay_ms")
        engine = msg.get("engine", cls.engine)
        if engine not in ENGINES:
            raise ProtocolError(
                "bad_message", f'"engine" must be one of {", ".join(ENGINES)}, got {quote(engine)}'
            )
        rate = msg.get("sample_rate", SAMPLE_RATE)
        if audio and rate != SAMPLE_RATE:
            raise ProtocolError(
                "bad_message", f'"sample_rate" must be {SAMPLE_RATE} (16-bit mono PCM), got {quote(rate)}'
            )
        sentences = msg.get("sentences", cls.sentences)
        if not isinstance(sentences, bool):
            raise ProtocolError("bad_message", f'"sentences" must be true or false, got {quote(sentences)}')
        return cls(k, delay, engine, SAMPLE_RATE if audio else None, sentences=sentences)


@dataclass(frozen=True)
class Words(Message):
    """/v1/punct: words appended to the stream; ``now``: the recogniser's clock (s)."""

    type: ClassVar[str] = "words"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("now",)
    words: tuple[Word, ...]
    now: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "words": [_word_json(w) for w in self.words]}

    @classmethod
    def from_dict(cls, msg: dict[str, Any]) -> Words:
        return cls(_words(msg.get("words")), _optional_number(msg, "now"))


@dataclass(frozen=True)
class Revise(Message):
    """/v1/punct: replace the words from ``index`` on (none of them final yet)."""

    type: ClassVar[str] = "revise"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("now",)
    index: int
    words: tuple[Word, ...]
    now: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "words": [_word_json(w) for w in self.words]}

    @classmethod
    def from_dict(cls, msg: dict[str, Any]) -> Revise:
        return cls(_index(msg.get("index"), "index"), _words(msg.get("words")), _optional_number(msg, "now"))


@dataclass(frozen=True)
class Tick(Message):
    """/v1/punct: the recogniser's clock moved on with no new words (time limits may fire)."""

    type: ClassVar[str] = "tick"
    now: float

    @classmethod
    def from_dict(cls, msg: dict[str, Any]) -> Tick:
        if msg.get("now") is None:
            raise ProtocolError("bad_message", '"tick" needs "now", the recogniser\'s clock in seconds')
        return cls(_number(msg["now"], "now"))


@dataclass(frozen=True)
class Sync(Message):
    """/v1/punct: the server answers it (:class:`Synced`) once it has answered every message before
    it: a client refused ``busy`` then has every refusal due. ``id``: any integer, given back."""

    type: ClassVar[str] = "sync"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("id",)
    id: int | None = None

    @classmethod
    def from_dict(cls, msg: dict[str, Any]) -> Sync:
        ident = msg.get("id")
        if ident is not None and (isinstance(ident, bool) or not isinstance(ident, int)):
            raise ProtocolError("bad_message", f'"id" must be an integer, got {quote(ident)}')
        return cls(ident)


@dataclass(frozen=True)
class End(Message):
    """The client is done: every word becomes final, then the server sends :class:`Finished`."""

    type: ClassVar[str] = "end"


# server to client


@dataclass(frozen=True)
class Ready(Message):
    """The answer to a config: the stream's settings, with the engine it runs (``auto`` resolved);
    ``sentences`` (left out when off) says the stream sends them: a server older than them does not."""

    type: ClassVar[str] = "ready"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("sample_rate", "max_waiting_words", "sentences")
    session: str
    lookahead: int
    max_delay_ms: float | None
    engine: str
    sample_rate: int | None = None
    version: int = VERSION
    # /v1/punct: the words the stream may have waiting for compute (past it: busy)
    max_waiting_words: int | None = None
    sentences: bool = False

    @classmethod
    def of(cls, session: str, config: Config, engine: str, max_waiting_words: int | None = None) -> Ready:
        c = config
        return cls(
            session,
            c.lookahead,
            c.max_delay_ms,
            engine,
            c.sample_rate,
            max_waiting_words=max_waiting_words,
            sentences=c.sentences,
        )


@dataclass(frozen=True)
class Events(Message):
    """Marks after words: provisional (may change), or final (exactly one per word, in order)."""

    type: ClassVar[str] = "events"
    events: tuple[PunctEvent, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "events": [
                {"index": e.index, "word": e.word, "label": e.label, "mark": e.mark, "final": e.final}
                for e in self.events
            ],
        }

    @classmethod
    def from_dict(cls, msg: dict[str, Any]) -> Events:
        return cls(tuple(PunctEvent(e["index"], e["word"], e["label"], e["final"]) for e in msg["events"]))


@dataclass(frozen=True)
class Recognised(Message):
    """/v1/asr: words the recogniser committed (the stream's words ``first``, ``first + 1``, ...),
    and its current guess after them; ``compute_ratio``: the stream's recognition seconds per
    second of audio, lately (the recogniser's ``compute_ratio``; past 1 it falls behind)."""

    type: ClassVar[str] = "words"
    first: int
    committed: tuple[Word, ...]
    provisional: tuple[Word, ...]
    compute_ratio: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "type": self.type,
            "committed": [_timed(w, self.first + i) for i, w in enumerate(self.committed)],
            "provisional": [_timed(w) for w in self.provisional],
        }
        return out if self.compute_ratio is None else {**out, "compute_ratio": self.compute_ratio}

    @classmethod
    def from_dict(cls, msg: dict[str, Any]) -> Recognised:
        def words(key: str) -> tuple[Word, ...]:
            return tuple(Word(w["text"], w["start"], w["end"]) for w in msg[key])

        first = msg["committed"][0]["index"] if msg["committed"] else 0
        return cls(first, words("committed"), words("provisional"), msg.get("compute_ratio"))


@dataclass(frozen=True)
class Captioned(Message):
    """/v1/asr: a final caption line, punctuated and capitalised (words ``first`` to ``last``)."""

    type: ClassVar[str] = "caption"
    caption: Caption

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **dataclasses.asdict(self.caption)}

    @classmethod
    def from_dict(cls, msg: dict[str, Any]) -> Captioned:
        return cls(Caption(msg["text"], msg["start"], msg["end"], msg["first"], msg["last"]))


@dataclass(frozen=True)
class SentenceClosed(Message):
    """A stream configured with ``sentences``: words ``first`` to ``last``, all final, as one
    sentence, sent once, after their final events (:class:`~streampunct.types.Sentence`)."""

    type: ClassVar[str] = "sentence"
    sentence: Sentence

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **dataclasses.asdict(self.sentence)}

    @classmethod
    def from_dict(cls, msg: dict[str, Any]) -> SentenceClosed:
        return cls(Sentence(msg["text"], msg["start"], msg["end"], msg["first"], msg["last"], msg["closed"]))


@dataclass(frozen=True)
class Finished(Message):
    """Every word is final (``words`` of them); the server closes the connection. ``reason``: why
    the server finished the stream itself (a limit, shutting down)."""

    type: ClassVar[str] = "end"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("audio_seconds", "reason")
    words: int
    audio_seconds: float | None = None
    reason: str | None = None


@dataclass(frozen=True)
class Error(Message):
    """A message the server could not take (nothing changed), or why it finished or closed a
    stream; ``word``: where such a stream stopped (its first word not taken or not final)."""

    type: ClassVar[str] = "error"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("word",)
    code: str
    message: str
    word: int | None = None


@dataclass(frozen=True)
class Lag(Message):
    """/v1/asr: recognition fell behind real time and skipped the audio from ``start`` to ``end``
    (stream seconds): the words spoken there are lost; recognition goes on from ``end``.
    ``compute_ratio``: as in :class:`Recognised`, when the skip was decided."""

    type: ClassVar[str] = "lag"
    OPTIONAL: ClassVar[tuple[str, ...]] = ("compute_ratio",)
    skipped_s: float
    start: float
    end: float
    compute_ratio: float | None = None

    @classmethod
    def over(cls, start: float, end: float, compute_ratio: float | None = None) -> Lag:
        start, end = round(start, 3), round(end, 3)
        return cls(round(end - start, 3), start, end, compute_ratio)


@dataclass(frozen=True)
class Synced(Message):
    """/v1/punct: the answer to a :class:`Sync` (its ``id``, or None), after the answers to every
    message before it: the stream then holds ``words`` words, ``final`` of them final."""

    type: ClassVar[str] = "synced"
    id: int | None
    words: int
    final: int


ClientMessage: TypeAlias = Config | Words | Revise | Tick | Sync | End
ServerMessage: TypeAlias = (
    Ready | Events | Recognised | Captioned | SentenceClosed | Finished | Error | Lag | Synced
)

_CLIENT: dict[str, Any] = {m.type: m for m in (Words, Revise, Tick, Sync, End)}
_SERVER: dict[str, Any] = {
    m.type: m for m in (Ready, Events, Recognised, Captioned, SentenceClosed, Finished, Error, Lag, Synced)
}


def read_client(text: str | bytes, audio: bool = False) -> ClientMessage:
    """A configured stream's client message: on /v1/punct (``words``, ``revise``, ``tick``, ``sync``,
    ``end``) or, with ``audio``, a text message on /v1/asr (``end``). A config raises ``bad_state``."""
    msg = parse(text)
    kind = msg["type"]
    if kind == "config":
        raise ProtocolError("bad_state", "this stream is already configured")
    if kind not in _CLIENT or (audio and kind != "end"):
        known = 'send binary audio, then "end"' if audio else "config, words, revise, tick, sync, end"
        raise ProtocolError("unknown_type", f"unknown message type {quote(kind)} ({known})")
    message: ClientMessage = _CLIENT[kind].from_dict(msg)
    return message


def read_server(text: str | bytes) -> ServerMessage:
    """A message from the server; one that does not fit the protocol raises ProtocolError."""
    msg = parse(text)
    cls = _SERVER.get(msg["type"])
    if cls is None:
        raise ProtocolError("unknown_type", f"unknown message type {quote(msg['type'])} from the server")
    try:
        message: ServerMessage = cls.from_dict(msg)
    except (KeyError, TypeError, IndexError, InputError) as e:
        raise ProtocolError("bad_message", f"a {msg['type']} message the client cannot read: {e!r}") from e
    return message
