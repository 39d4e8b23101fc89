"""The fuzz's oracle: what docs/protocol.md says each message must get in the stream's state
(``expected``), and whether a server message fits its JSON Schema (``schema_fault``)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import jsonschema

from benchmarks.common import SCHEMAS
from benchmarks.lib.fuzz_messages import ANY, KNOWN_TYPES, MAX_FRAME, REVISE, Hostile

# --- the fuzz's oracle: what the protocol says each message must get --------------------------------


def server_parse(text: str) -> dict[str, Any] | str:
    """The message, or the error code a message that is not one must get."""
    try:
        msg = json.loads(text)
    except (ValueError, RecursionError):
        return "bad_json"
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        return "bad_message"
    try:
        json.dumps(msg, ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate
        return "bad_message"
    return msg


@dataclass
class Stream:
    """What the client knows of its stream."""

    configured: bool = False
    ended: bool = False
    texts: list[str] = field(default_factory=list)  # the words as the server holds them
    clock: float = -math.inf  # /v1/punct: the latest now or word time taken (a tick behind it is refused)
    n_final: int = 0
    samples: int = 0  # /v1/asr: audio taken


def frame_fault(h: Hostile) -> str | None:
    """The websocket closes on this frame: over the size limit (1009), text not UTF-8 (1007)."""
    return "close:1009" if h.size > MAX_FRAME else "close:1007" if h.frame == "raw" else None


def expected(endpoint: str, h: Hostile, s: Stream) -> frozenset[str]:
    """The outcomes docs/protocol.md allows for message ``h`` in state ``s``."""
    fault = frame_fault(h)
    if fault:
        return frozenset({fault})
    if h.frame == "binary":
        if endpoint == "punct" or not s.configured:
            return frozenset({"bad_message"})
        return frozenset({"bad_audio" if h.size % 2 else "ok"})
    msg = server_parse(str(h.payload))
    if isinstance(msg, str):
        return frozenset({msg})
    kind = msg["type"]
    if not s.configured:
        if kind != "config":
            return frozenset({"bad_state"})
        return frozenset({"ready", "bad_message", "unsupported_version"} if h.expect == (ANY,) else h.expect)
    if kind == "config":
        return frozenset({"bad_state"})
    if endpoint == "asr" or kind == "end":
        return frozenset({"end" if kind == "end" else "unknown_type"})
    if kind not in KNOWN_TYPES:
        return frozenset({"unknown_type"})
    if h.expect == (ANY,):
        return frozenset({"ok", "bad_message", "bad_input", "too_large"})
    if h.expect == (REVISE,):
        return frozenset({"ok" if s.n_final <= msg["index"] <= len(s.texts) else "bad_input"})
    if kind == "tick" and h.expect == ("ok",):
        return frozenset({"ok" if msg["now"] >= s.clock else "bad_input"})
    return frozenset(h.expect)


@cache
def _schema_validator(kind: str) -> Any:
    schema = json.loads((SCHEMAS / "server" / f"{kind}.json").read_text())
    return jsonschema.validators.validator_for(schema)(schema)


def schema_fault(msg: Any) -> str | None:
    """Why a server message does not fit its JSON Schema in docs/schema/server/ (None: it fits)."""
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        return "not an object with a string type"
    try:
        validator = _schema_validator(msg["type"])
    except FileNotFoundError:
        return f"no schema for type {msg['type']!r}"
    error = jsonschema.exceptions.best_match(validator.iter_errors(msg))
    return None if error is None else error.message[:300]
