"""The streampunct websocket protocol, version 1: parsing and building messages, no I/O.

docs/protocol.md describes it and docs/schema/ holds a JSON Schema for every message. A message
that breaks the protocol is answered by an ``error`` message (a code and a human sentence); the
stream it was meant for is left as it was, and the connection stays open.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streampunct import StreamPunctError
from streampunct.asr import SAMPLE_RATE, Skip
from streampunct.types import ENGINES, MAX_LOOKAHEAD, PunctEvent, Word

VERSION = 1
MAX_WORDS_PER_MESSAGE = 1000


class ProtocolError(StreamPunctError):
    """A message the server cannot take; ``code`` names the kind, the message says why."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class StreamConfig:
    lookahead: int = 2
    max_delay_ms: float | None = 1500.0
    sample_rate: int = SAMPLE_RATE  # /v1/asr only
    engine: str = "auto"  # how the lookahead is bounded (streampunct.punctuator.ENGINES)


def parse(text: str | bytes) -> dict[str, Any]:
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


def quote(value: Any, limit: int = 40) -> str:
    """A client's value as an error message quotes it: as JSON, cut short (an error stays small)."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."


def _number(value: Any, name: str, minimum: float = 0.0) -> float:
    try:
        number = float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or number < minimum:
        raise ProtocolError(
            "bad_message", f'"{name}" must be a finite number >= {minimum:g}, got {quote(value)}'
        )
    return number


def parse_config(msg: dict[str, Any], audio: bool = False) -> StreamConfig:
    if msg["type"] != "config":
        raise ProtocolError("bad_state", f'the first message must be "config", got {quote(msg["type"])}')
    version = msg.get("version", VERSION)
    if isinstance(version, bool) or version != VERSION:
        raise ProtocolError(
            "unsupported_version", f"this server speaks protocol version {VERSION}, not {quote(version)}"
        )
    defaults = StreamConfig()
    k = msg.get("lookahead", defaults.lookahead)
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= MAX_LOOKAHEAD:
        raise ProtocolError(
            "bad_message", f'"lookahead" must be an integer from 0 to {MAX_LOOKAHEAD}, got {quote(k)}'
        )
    delay = msg.get("max_delay_ms", defaults.max_delay_ms)
    if delay is not None:
        delay = _number(delay, "max_delay_ms")
    rate = msg.get("sample_rate", SAMPLE_RATE)
    if audio and rate != SAMPLE_RATE:
        raise ProtocolError(
            "bad_message", f'"sample_rate" must be {SAMPLE_RATE} (16-bit mono PCM), got {quote(rate)}'
        )
    engine = msg.get("engine", defaults.engine)
    if engine not in ENGINES:
        raise ProtocolError(
            "bad_message", f'"engine" must be one of {", ".join(ENGINES)}, got {quote(engine)}'
        )
    return StreamConfig(k, delay, SAMPLE_RATE, engine)


def parse_words(value: Any) -> list[Word]:
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
        start = None if w.get("start") is None else _number(w["start"], f"words[{i}].start")
        end = None if w.get("end") is None else _number(w["end"], f"words[{i}].end")
        if start is not None and end is not None and end < start:
            raise ProtocolError("bad_message", f"word {i} ({quote(w['text'])}) ends before it starts")
        words.append(Word(w["text"], start, end))
    return words


def parse_now(msg: dict[str, Any]) -> float | None:
    return None if msg.get("now") is None else _number(msg["now"], "now")


def parse_index(msg: dict[str, Any]) -> int:
    index = msg.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ProtocolError("bad_message", f'"index" must be a word index >= 0, got {quote(index)}')
    return index


# --- messages out ------------------------------------------------------------------------------


def ready(session: str, cfg: StreamConfig, endpoint: str, engine: str) -> dict[str, Any]:
    """The answer to a config: the stream's settings, with the engine it runs (``auto`` resolved)."""
    out: dict[str, Any] = {
        "type": "ready",
        "version": VERSION,
        "session": session,
        "lookahead": cfg.lookahead,
        "max_delay_ms": cfg.max_delay_ms,
        "engine": engine,
    }
    if endpoint == "asr":
        out["sample_rate"] = cfg.sample_rate
    return out


def events(evs: Sequence[PunctEvent]) -> dict[str, Any]:
    return {
        "type": "events",
        "events": [
            {"index": e.index, "word": e.word, "label": e.label, "mark": e.mark, "final": e.final}
            for e in evs
        ],
    }


def word_dict(w: Word, index: int | None = None) -> dict[str, Any]:
    d: dict[str, Any] = {"text": w.text, "start": w.start, "end": w.end}
    if index is not None:
        d["index"] = index
    return d


def error(code: str, message: str, word: int | None = None) -> dict[str, Any]:
    """An error; ``word``: where a failed stream stopped (its first word not final)."""
    msg: dict[str, Any] = {"type": "error", "code": code, "message": message}
    if word is not None:
        msg["word"] = word
    return msg


def lag(skip: Skip) -> dict[str, Any]:
    """Recognition fell behind real time and skipped the audio from ``start`` to ``end`` (stream
    seconds): the words spoken there are lost; recognition goes on from ``end``."""
    start, end = round(skip.start, 3), round(skip.end, 3)
    return {"type": "lag", "skipped_s": round(end - start, 3), "start": start, "end": end}


def dumps(msg: dict[str, Any]) -> str:
    return json.dumps(msg, ensure_ascii=False, separators=(",", ":"))
