"""The fuzz: hostile scripts against one real server, a neighbour beside; its generator and oracle.

    python benchmarks/fuzz.py --messages 10000 --asr-messages 2000

The fuzz harness lives here, once: the generator (hypothesis strategies for hostile /v1/punct and
/v1/asr scripts: ``punct_scripts``, ``asr_scripts``), the oracle of what the protocol says each
message must get (``expected``, docs/protocol.md), the client that plays a script and checks every
reply (``run_script``, its ``Report``), the neighbour's fixed script, the check of the server's log
(``log_problems``) and the server the fuzz runs against (``FuzzServer``, ``SERVER_ARGS``,
``warm_up``). tests/test_fuzz.py imports them, runs a few dozen small scripts and says what each
checks. Talking to a server as the protocol says (``talk``, ``finals``, the schemas,
``spawn_server``) is benchmarks/common.py's.

Run as a script, this is the fuzz's long profile. One ``streampunct serve`` process (rate limits off)
takes the generator's scripts, bigger than the suite's (words of up to 600 kB, messages of up to 1000
words, audio chunks of up to 2 s and stretches of speech of up to 4 s), on up to ``--concurrency``
connections at once, until ``--messages`` hostile messages have gone to /v1/punct and
``--asr-messages`` to /v1/asr (probes not counted). Each message is checked against the protocol as
in the suite (its reply fits the schema, its outcome is the documented one, words are final once
each, in order, the connection closes only with the documented code). Throughout, a neighbour stream
on its own connection runs a fixed script again and again: its final labels must be those it gets
alone. At the end the server gets SIGTERM and must exit 0; its log must hold no traceback.

Writes benchmarks/results/fuzz.json (see ``summary`` below); exits with status 1 when a property broke.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import signal
import subprocess
import sys
import tempfile
import threading
import time
import wave
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.protocol import State

sys.path.insert(0, str(Path(__file__).parent))
from common import SCHEMAS, WORDS, finals, machine, spawn_server, talk, write_json  # noqa: E402

from streampunct.types import SAMPLE_RATE  # noqa: E402

# --- the fuzz (what it checks: tests/test_fuzz.py) -------------------------------------------------

MAX_FRAME = 2**20  # the server's max_size: a bigger frame closes the connection (1009)
MAX_WORDS = 1000  # words a message (too_large beyond)
PROBE_TYPE = "fuzz-probe"
PROBE = json.dumps({"type": PROBE_TYPE})
ANY = "any"  # the strategy does not know: whatever the protocol allows for the message's type
REVISE = "revise"  # a well-formed revision: ok or bad_input, by the words final when it arrives
ANSWER_TIMEOUT_S = 120.0
END = {"type": "end"}
SERVER_ARGS = (
    "--words-per-s",
    "off",
    "--audio-speed",
    "off",
    "--max-load",
    "off",
)  # at full speed; capacity: test_server

# --- the fuzz: what it sends -------------------------------------------------------------------


@dataclass(frozen=True)
class Hostile:
    """One message. ``frame``: text, binary, or raw (bytes in a text frame: not UTF-8).
    ``expect``: the outcomes the strategy intends (an error code, ok, ready, end, close:N), or ANY,
    or REVISE; :func:`expected` applies the protocol's layers above it (parse, config, type).
    ``tail``: a revision of the last ``tail`` words not final, its index filled in when it is sent."""

    kind: str
    payload: str | bytes
    frame: str = "text"
    expect: tuple[str, ...] = (ANY,)
    tail: int | None = None

    @property
    def size(self) -> int:
        return len(self.payload) if isinstance(self.payload, bytes) else len(self.payload.encode())

    def __repr__(self) -> str:
        shown = self.payload if self.size <= 160 else self.payload[:120]
        more = "" if self.size <= 160 else f"...({self.size} bytes)"
        tail = "" if self.tail is None else f", tail={self.tail}"
        return f"Hostile({self.kind!r}, {shown!r}{more}, {self.frame!r}, {self.expect!r}{tail})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # hypothesis prints falsifying examples so
        p.text(repr(self))


@dataclass(frozen=True)
class Script:
    """A connection: the messages in order. Once one is bound to end the stream, it and all after
    it go at once, unanswered (messages after ``end``). ``hang_up``: the client drops the TCP
    connection right after sending the last message, without reading its answer or closing."""

    endpoint: str  # punct or asr
    messages: tuple[Hostile, ...]
    hang_up: bool = False

    def __repr__(self) -> str:
        messages = ",\n    ".join(map(repr, self.messages))
        return f"Script({self.endpoint!r}, [\n    {messages}], hang_up={self.hang_up})"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(repr(self))


class Raw:
    """JSON text that json.dumps cannot write, put into a message as it is: a lone surrogate's
    escape, 1e400, a number of 5000 digits."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return f"Raw({self.text[:40]!r})"


def to_json(obj: Any) -> str:
    raws: list[str] = []

    def walk(o: Any) -> Any:
        if isinstance(o, Raw):
            raws.append(o.text)
            return f"\x00\x01raw{len(raws) - 1}\x01\x00"
        if isinstance(o, dict):
            return {k: walk(v) for k, v in o.items()}
        if isinstance(o, list):
            return [walk(v) for v in o]
        return o

    text = json.dumps(walk(obj), ensure_ascii=False)
    for i, raw in enumerate(raws):
        text = text.replace(json.dumps(f"\x00\x01raw{i}\x01\x00"), raw)
    return text


def message(kind: str, obj: Any, *expect: str) -> Hostile:
    return Hostile(kind, to_json(obj), "text", expect or (ANY,))


def weighted(*pairs: tuple[int, st.SearchStrategy]) -> st.SearchStrategy:
    """One of the strategies, each drawn about in proportion to its weight."""
    return st.sampled_from([s for w, s in pairs for _ in range(w)]).flatmap(lambda s: s)


VOCAB = tuple(dict.fromkeys(WORDS + "i think so yes well okay the end and but then".split()))
SPECIAL_TEXTS = (
    "", " ", "\t\n", "\u0000", "a\u0000b", "\u0007", "\x7f", "\r\n", "\u2028", "\u2029",
    "😀", "👩‍👩‍👧‍👦", "🇬🇧", "🏳️‍🌈", "\U0010ffff", "\ufffd", "\ufffe", "\ufeff", "\u200b", "\u00ad",
    "مرحبا", "שָׁלוֹם", "\u202eevil\u202c", "\u200f", "e" + "\u0301\u0302\u0303\u0304" * 40, "\u0301",
    "ǅ", "ß", "İ", "ﬃ", "Ⅻ", "１２３", "中文", "日本語", "ｶﾀｶﾅ", "한국어", "Ελληνικά", "кириллица",
    "n't", "'", "'s", ",", "...", "?!", " Don't,", "U.S.A.", "e-mail", "http://x.y/z?q=1&r=2", "\\", '"',
    "</script>", "%s%n", "{}", "null", "NaN", "123", "3.14", "-", "—", "’",
)  # fmt: skip
HUGE_UNITS = ("a", "ab ", "é", "😀", "\u0301", "x,", "\u200b", "\u0000", "مر", "don't ", "?", "中")
BAD_NUMBERS = (
    True, False, "1", "", [], {}, [1.0], {"s": 1}, -1, -0.5, -1e-300, -(10**20),
    math.nan, math.inf, -math.inf, Raw("1e400"), Raw("-1e400"), Raw("1" + "0" * 400),
)  # fmt: skip
BAD_INDICES = (
    True, False, -1, -(10**30), 1.0, 0.5, "0", None, [], {}, [0], math.nan, Raw("1e400"), Raw("-0.0"),
)  # fmt: skip
BAD_ITEMS = (1, 2.5, None, True, [], ["a"], {}, {"start": 1}, {"text": 5}, {"text": None}, {"text": ["a"]})
NOT_LISTS = (None, True, 0, 1.5, "so what", {"0": "so"}, {"text": "so"})
SURROGATES = ('"\\ud800"', '"a\\udfffb"', '"\\ude00\\ud83d"', '"\\ud83d"', '"x\\udbff"')
INVALID_UTF8 = (
    b'{"type":"words","words":["\xff"]}', b"\xc3\x28", b'{"type":"tick","now":1}\xed\xa0\x80',
    b"\xf4\x90\x80\x80", b"\xc0\xaf", b'{"type":"end"\x80}',
)  # fmt: skip
JSON_BOMBS = (
    "[" * 100_000,
    '{"type":"words","words":' + "[" * 50_000 + "]" * 50_000 + "}",
    '{"type":"tick","now":' + "9" * 5000 + "}",
    '{"type":"words","words":["a"],"words":5}',
    '{"type":"words","words":["a"]} trailing',
    '\ufeff{"type":"tick","now":1}',
    '{"type":"tick","now":1,}',
    "{'type':'tick'}",
    '{"type":"words","words":["a\x01"]}',
    "",
    " ",
    "null",
    "[]",
    '"type"',
)
KNOWN_TYPES = ("config", "words", "revise", "tick", "sync", "end", PROBE_TYPE)

no_surrogates = st.characters(exclude_categories=("Cs",))
json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(no_surrogates, max_size=12)
json_values = st.recursive(
    json_scalars,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(no_surrogates, max_size=5), c, max_size=3),
    max_leaves=8,
)
# keys no message has: every message ignores them (docs/protocol.md), "reason" on an end too
unknown_keys = st.just("reason") | st.text(no_surrogates, max_size=6).map(lambda k: "x-" + k)
extras = st.dictionaries(unknown_keys, json_values, max_size=2)
times = st.integers(0, 10**6) | st.floats(0, 1e4) | st.floats(0, 1e300) | st.just(0.0)


def huge_texts(max_bytes: int) -> st.SearchStrategy[str]:
    def build(unit: str, size: int) -> str:
        return unit * max(1, size // max(1, len(json.dumps(unit, ensure_ascii=False).encode()) - 2))

    return st.builds(build, st.sampled_from(HUGE_UNITS), st.integers(1000, max(1000, max_bytes)))


def word_texts(huge: int) -> st.SearchStrategy[str]:
    return weighted(
        (5, st.sampled_from(VOCAB)),
        (3, st.sampled_from(SPECIAL_TEXTS)),
        (2, st.text(no_surrogates, max_size=24)),
        (1 if huge else 0, huge_texts(huge)),
    )


@st.composite
def word_items(draw: Any, texts: st.SearchStrategy[str]) -> Any:
    """A good word: a string, or an object with times (any of them left out or null)."""
    text = draw(texts)
    shape = draw(st.sampled_from(["str", "str", "times", "start", "end", "text", "nulls"]))
    if shape == "str":
        return text
    item: dict[str, Any] = {"text": text}
    if shape == "times":
        start = draw(times)
        item.update(start=start, end=start + draw(st.floats(0, 5) | st.integers(0, 3)))
    elif shape in ("start", "end"):
        item[shape] = draw(times)
    elif shape == "nulls":
        item.update(start=None, end=None)
    return item


@st.composite
def good_words(draw: Any, huge: int = 0, most: int = 8) -> Hostile:
    texts = st.sampled_from(VOCAB) if not draw(st.integers(0, 3)) else word_texts(huge)
    msg: dict[str, Any] = {"type": "words", "words": draw(st.lists(word_items(texts), max_size=most))}
    if draw(st.booleans()):
        msg["now"] = draw(st.none() | times)
    msg.update(draw(extras))
    return message("words", msg, "ok")


@st.composite
def plain_words(draw: Any) -> Hostile:
    """Words as a recogniser sends them: the ones revisions and time limits then work on."""
    words = draw(st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6))
    return message("words", {"type": "words", "words": words, **draw(extras)}, "ok")


# a surrogate pair written as JSON escapes: a good emoji
ESCAPED_PAIR = message("escaped_pair", {"type": "words", "words": ["so", Raw('"\\ud83d\\ude00"')]}, "ok")


@st.composite
def bad_words(draw: Any, huge: int = 0) -> Hostile:
    """One fault in a words message: bad_message (or too_large). The faulty word's text may be
    ``huge`` bytes (the error message may quote it)."""
    good = draw(st.lists(st.sampled_from(VOCAB), max_size=3))
    text = draw(st.just("so") | word_texts(huge))
    fault = draw(
        st.sampled_from(["field", "missing", "item", "time", "backwards", "now", "surrogate", "too_large"])
    )
    msg: dict[str, Any] = {"type": "words"}
    if fault == "field":
        msg["words"] = draw(st.sampled_from(NOT_LISTS))
    elif fault == "missing":
        pass
    elif fault == "item":
        msg["words"] = good + [draw(st.sampled_from(BAD_ITEMS))] + good
    elif fault == "time":
        bad = {"text": text, draw(st.sampled_from(["start", "end"])): draw(st.sampled_from(BAD_NUMBERS))}
        msg["words"] = good + [bad]
    elif fault == "backwards":
        start = draw(st.floats(0, 1e4))
        msg["words"] = good + [{"text": text, "start": start + draw(st.floats(1e-3, 100)), "end": start}]
    elif fault == "now":
        msg.update(words=good, now=draw(st.sampled_from(BAD_NUMBERS)))
    elif fault == "surrogate":
        where = draw(st.sampled_from(["word", "text", "extra", "type"]))
        raw = Raw(draw(st.sampled_from(SURROGATES)))
        if where == "word":
            msg["words"] = good + [raw]
        elif where == "text":
            msg["words"] = [{"text": raw, "start": 0.0, "end": 0.1}]
        elif where == "extra":
            msg.update(words=good, note=raw)
        else:
            msg["type"] = raw
        return message("surrogate", msg, "bad_message")
    else:
        n = draw(st.integers(MAX_WORDS + 1, 3 * MAX_WORDS))
        return message("too_many_words", {"type": "words", "words": ["so"] * n}, "too_large")
    return message(f"bad_words_{fault}", msg, "bad_message")


@st.composite
def echoes(draw: Any, huge: int) -> Hostile:
    """A fault whose error message quotes the client's value with repr(), of characters repr()
    escapes (the reply outgrows the message): a word that ends before it starts, a text index."""
    unit = draw(st.sampled_from(["\u200b", "\u0301", "\u0000", "\x7f", "\u202e"]))
    text = unit * max(
        1, draw(st.integers(1000, max(1000, huge))) // len(json.dumps(unit, ensure_ascii=False).encode())
    )
    if draw(st.booleans()):
        return message(
            "echo_word", {"type": "words", "words": [{"text": text, "start": 2, "end": 1}]}, "bad_message"
        )
    return message("echo_index", {"type": "revise", "index": text, "words": []}, "bad_message")


@st.composite
def revisions(draw: Any) -> Hostile:
    """A good revision (REVISE: ok or bad_input by the stream's state), or one fault."""
    words = draw(st.lists(word_items(word_texts(0)), max_size=5))
    fault = draw(
        st.sampled_from(["tail", "tail", "none", "huge_index", "index", "missing", "words", "too_large"])
    )
    msg: dict[str, Any] = {
        "type": "revise",
        "index": draw(st.integers(0, 12) | st.integers(0, 40)),
        "words": words,
        **draw(extras),
    }
    if draw(st.booleans()):
        msg["now"] = draw(times)
    if fault == "tail":  # the last few words not final: mostly taken
        return dataclasses.replace(message("revise_tail", msg, REVISE), tail=draw(st.integers(0, 4)))
    if fault == "none":
        return message("revise", msg, REVISE)
    if fault == "huge_index":
        msg["index"] = draw(st.sampled_from([10**30, Raw("1" + "0" * 1000)]))
        return message("revise_huge_index", msg, REVISE)
    if fault == "index":
        msg["index"] = draw(st.sampled_from(BAD_INDICES))
    elif fault == "missing":
        del msg["index"]
    elif fault == "words":
        msg["words"] = draw(st.sampled_from(NOT_LISTS))
    else:
        msg["words"] = ["so"] * draw(st.integers(MAX_WORDS + 1, 2 * MAX_WORDS))
        return message("revise_too_large", msg, "too_large")
    return message(f"revise_bad_{fault}", msg, "bad_message")


@st.composite
def ticks(draw: Any) -> Hostile:
    """A tick at any time (one behind the stream's clock is bad_input: :func:`expected` knows the
    clock), or a tick without a clock."""
    kind = draw(st.sampled_from(["good", "good", "missing", "null", "bad"]))
    msg: dict[str, Any] = {"type": "tick", **draw(extras)}
    if kind == "good":
        return message("tick", {**msg, "now": draw(times)}, "ok")
    if kind == "null":
        msg["now"] = None
    elif kind == "bad":
        msg["now"] = draw(st.sampled_from(BAD_NUMBERS))
    return message(f"tick_{kind}", msg, "bad_message")


@st.composite
def configs(draw: Any, audio: bool = False) -> Hostile:
    """A config: good (ready) or with one fault (version: unsupported_version; others: bad_message)."""
    msg: dict[str, Any] = {"type": "config", **draw(extras)}
    for name, value in (
        ("version", st.sampled_from([1, 1.0])),
        ("lookahead", st.integers(0, 64)),
        ("max_delay_ms", st.none() | st.integers(0, 10_000) | st.floats(0, 1e6)),
        ("engine", st.sampled_from(["auto", "masked", "window"])),
        ("sample_rate", st.sampled_from([16000, 16000.0])),
    ):
        if draw(st.booleans()):
            msg[name] = draw(value)
    fault = draw(
        st.sampled_from(["none", "none", "version", "lookahead", "max_delay_ms", "engine", "sample_rate"])
    )
    if fault == "none":
        return message("config", msg, "ready")
    bad = {
        "version": [True, False, 2, 0, "1", None, [1], 1.5],
        "lookahead": [True, -1, 65, 1.0, "2", None, [], 10**30],
        "max_delay_ms": [True, -1, math.nan, math.inf, "1500", [], {}, Raw("1e400")],
        "engine": ["fast", "", 1, None, ["auto"], "AUTO"],
        "sample_rate": [8000, 44100, True, "16000", None, 0],
    }[fault]
    msg[fault] = draw(st.sampled_from(bad))
    if fault == "version":
        return message("config_bad_version", msg, "unsupported_version")
    if fault == "sample_rate" and not audio:
        return message("config_sample_rate_ignored", msg, "ready")
    return message(f"config_bad_{fault}", msg, "bad_message")


@st.composite
def garbage(draw: Any) -> Hostile:
    """Text that is not a message: any text, JSON that is not an object, a type that is no string
    or unknown, JSON bombs (the oracle, :func:`expected`, knows what each must get)."""
    kind = draw(st.sampled_from(["text", "not_object", "type_not_str", "unknown_type", "bomb"]))
    if kind == "text":
        return Hostile("text", draw(st.text(no_surrogates, max_size=80)))
    if kind == "not_object":
        return Hostile("not_object", to_json(draw(json_values.filter(lambda v: not isinstance(v, dict)))))
    if kind == "type_not_str":
        value = draw(json_values.filter(lambda v: not isinstance(v, str)))
        return Hostile("type_not_str", to_json({"type": value, "words": ["so"]}))
    if kind == "unknown_type":
        kind_ = draw(st.text(no_surrogates, max_size=20).filter(lambda t: t not in KNOWN_TYPES))
        return Hostile("unknown_type", to_json({"type": kind_, "words": ["so"]}))
    return Hostile("json_bomb", draw(st.sampled_from(JSON_BOMBS)))


ends = extras.map(lambda more: message("end", {**END, **more}, "end"))


def valid_messages(audio: bool = False) -> st.SearchStrategy[Hostile]:
    return st.one_of(plain_words(), good_words(), revisions(), ticks(), configs(audio), ends)


@st.composite
def truncated(draw: Any, audio: bool = False) -> Hostile:
    text = draw(valid_messages(audio)).payload
    assert isinstance(text, str)
    return Hostile("truncated", text[: draw(st.integers(0, len(text) - 1))])


@st.composite
def mutated(draw: Any, audio: bool = False) -> Hostile:
    """A valid message with bytes flipped, deleted, inserted or replaced."""
    data = bytearray(str(draw(valid_messages(audio)).payload).encode())
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["flip", "delete", "insert", "replace"]))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "insert" or not data:
            data.insert(pos, draw(st.integers(0, 255)))
        elif op == "delete":
            del data[pos]
        elif op == "flip":
            data[pos] ^= 1 << draw(st.integers(0, 7))
        else:
            data[pos] = draw(st.sampled_from(b'{}[]":,0123456789-.eE \\tnfu'))
    return Hostile("mutated", data.decode("utf-8", "replace"))


@st.composite
def retyped(draw: Any, audio: bool = False) -> Hostile:
    """A valid message with one value anywhere in it (a field, a word, a word's time) replaced by any
    JSON value, or a field left out: wrong types for every field."""
    msg = json.loads(str(draw(valid_messages(audio)).payload))
    places: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        for key in node if isinstance(node, dict) else range(len(node)):
            places.append((node, key))
            if isinstance(node[key], dict | list):
                walk(node[key])

    walk(msg)
    node, key = draw(st.sampled_from(places))
    if isinstance(node, dict) and draw(st.integers(0, 3)) == 2:
        del node[key]
    else:
        node[key] = draw(json_values | st.sampled_from(BAD_NUMBERS + BAD_ITEMS + NOT_LISTS))
    return Hostile("retyped", to_json(msg))


@st.composite
def oversize(draw: Any, binary: bool) -> Hostile:
    """A frame 1 to 64 bytes over the limit: the server closes the connection with 1009."""
    size = MAX_FRAME + draw(st.integers(1, 64))
    if binary:
        return Hostile(
            "oversize_binary", b"\x00\x01" * (size // 2) + b"\x00" * (size % 2), "binary", ("close:1009",)
        )
    head, tail = '{"type":"words","words":["', '"]}'
    return Hostile(
        "oversize_text", head + "a" * (size - len(head) - len(tail)) + tail, "text", ("close:1009",)
    )


@st.composite
def at_limit(draw: Any) -> Hostile:
    """A good message padded with spaces to exactly 1 MiB: taken."""
    text = draw(st.sampled_from(['{"type":"tick","now":1.5}', '{"type":"words","words":["so","what"]}']))
    return Hostile("at_limit", text[:-1] + " " * (MAX_FRAME - len(text)) + "}")


invalid_utf8 = st.sampled_from(INVALID_UTF8).map(lambda b: Hostile("invalid_utf8", b, "raw", ("close:1007",)))
binary_junk = st.binary(max_size=64).map(lambda b: Hostile("binary", b, "binary"))


def punct_messages(huge: int = 0, many: int = 0, limits: bool = True) -> st.SearchStrategy[Hostile]:
    """Any message for /v1/punct. ``huge``: bytes of the biggest word; ``many``: most words in a
    message that is taken; ``limits``: frames over and at the 1 MiB limit."""
    return weighted(
        (6, plain_words()),
        (4, good_words(huge)),
        (1 if many else 0, good_words(0, many)),
        (1, st.just(ESCAPED_PAIR)),
        (5, bad_words(huge)),
        (1, echoes(huge)),
        (5, revisions()),
        (3, ticks()),
        (2, configs()),
        (3, garbage()),
        (2, truncated()),
        (4, mutated()),
        (5, retyped()),
        (1, binary_junk),
        (1 if limits else 0, oversize(binary=False) | oversize(binary=True) | at_limit()),
        (1, invalid_utf8),
    )


@st.composite
def punct_scripts(
    draw: Any, most: int = 8, huge: int = 20_000, many: int = 60, limits: bool = True
) -> Script:
    """Messages before the config (most get bad_state), a good config (mostly), hostile messages,
    then an end (mostly) and messages after it."""
    before = draw(
        st.lists(st.one_of(configs(), garbage(), bad_words(), plain_words(), binary_junk), max_size=2)
    )
    config = (
        [draw(configs().filter(lambda h: h.expect == ("ready",)))] if draw(st.integers(0, 9)) != 7 else []
    )
    after = [draw(punct_messages(huge, many, limits)) for _ in range(draw(st.integers(1, most)))]
    tail = draw(st.sampled_from(["end", "end", "end_then_more", "none"]))
    ending = [draw(ends)] if tail != "none" else []
    if tail == "end_then_more":
        ending += draw(st.lists(punct_messages(0, 0, False), min_size=1, max_size=3))
    return Script("punct", tuple(before + config + after + ending), draw(st.integers(0, 6)) == 3)


# --- the fuzz: audio ---------------------------------------------------------------------------


@cache
def speech_pcm() -> bytes:
    """A few seconds of speech (espeak-ng, PCM16 at 16 kHz), or a tone where espeak-ng is missing."""
    text = "so what did you do last summer. we went to the coast and it rained every day."
    try:
        with tempfile.TemporaryDirectory() as tmp:
            wav = Path(tmp) / "speech.wav"
            subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(wav), text], check=True)
            with wave.open(str(wav)) as w:
                rate, audio = w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    except (OSError, subprocess.CalledProcessError, wave.Error):
        t = np.arange(3 * SAMPLE_RATE) / SAMPLE_RATE
        return (np.sin(2 * np.pi * 220 * t) * 8000).astype("<i2").tobytes()
    t = np.arange(round(len(audio) * SAMPLE_RATE / rate)) / SAMPLE_RATE
    return np.interp(t, np.arange(len(audio)) / rate, audio).astype("<i2").tobytes()


def _audio(kind: str, samples: int, seed: int, amplitude: int, offset: int) -> bytes:
    rng = np.random.default_rng(seed)
    t = np.arange(samples) / SAMPLE_RATE
    if kind == "silence":
        pcm = np.zeros(samples)
    elif kind == "noise":
        pcm = rng.normal(0, amplitude / 3, samples)
    elif kind == "tone":
        pcm = amplitude * np.sin(2 * np.pi * rng.uniform(50, 7000) * t)
    elif kind == "clipped":
        pcm = np.where(np.sin(2 * np.pi * 300 * t) >= 0, 32767, -32768)
    elif kind == "speech":
        speech = speech_pcm()
        start = 2 * (offset % max(1, len(speech) // 2))
        return (speech[start:] + speech)[: 2 * samples]
    else:  # bytes
        return rng.bytes(2 * samples)
    return np.clip(pcm, -32768, 32767).astype("<i2").tobytes()


@st.composite
def audio_chunks(draw: Any, most_bytes: int = 16_000) -> Hostile:
    """Binary audio: silence, noise, tones, clipping, random bytes, speech, empty, odd-length."""
    kind = draw(
        st.sampled_from(["silence", "noise", "tone", "clipped", "bytes", "speech", "speech", "empty", "odd"])
    )
    if kind == "empty":
        return Hostile("audio_empty", b"", "binary")
    if kind == "odd":
        n = draw(st.integers(0, most_bytes // 2))
        return Hostile("audio_odd", draw(st.binary(min_size=1, max_size=1)) * (2 * n + 1), "binary")
    samples = draw(st.integers(1, most_bytes // 2))
    payload = _audio(
        kind,
        samples,
        draw(st.integers(0, 2**16)),
        draw(st.sampled_from([1, 300, 3000, 32767])),
        draw(st.integers(0, 10**6)),
    )
    return Hostile(f"audio_{kind}", payload, "binary")


def asr_messages(most_bytes: int = 16_000, limits: bool = True) -> st.SearchStrategy[Hostile]:
    return weighted(
        (10, audio_chunks(most_bytes)),
        (3, garbage()),
        (2, truncated(audio=True)),
        (3, st.one_of(plain_words(), revisions(), ticks())),  # /v1/punct's messages: unknown_type
        (2, configs(audio=True)),  # config twice: bad_state
        (2, mutated(audio=True)),
        (2, retyped(audio=True)),
        (1 if limits else 0, oversize(binary=True)),
        (1, invalid_utf8),
    )


@st.composite
def asr_scripts(
    draw: Any, most: int = 6, most_bytes: int = 16_000, most_speech_s: int = 1, limits: bool = True
) -> Script:
    before = draw(st.lists(st.one_of(configs(audio=True), garbage(), audio_chunks(64)), max_size=2))
    config = (
        [draw(configs(audio=True).filter(lambda h: h.expect == ("ready",)))]
        if draw(st.integers(0, 9)) != 7
        else []
    )
    after = [draw(asr_messages(most_bytes, limits)) for _ in range(draw(st.integers(1, most)))]
    if draw(st.booleans()):  # a stretch of speech in chunks, for the recogniser to hear
        speech, at = speech_pcm(), draw(st.integers(0, len(after)))
        start, size = 8000 * draw(st.integers(0, 15)), draw(st.sampled_from([3200, 8000, 16000, 32000]))
        run = (speech[start:] + speech)[: 32_000 * draw(st.integers(1, most_speech_s))]
        after[at:at] = [Hostile("speech_run", run[i : i + size], "binary") for i in range(0, len(run), size)]
    tail = draw(st.sampled_from(["end", "end", "end_twice", "end_then_audio", "none"]))
    end = draw(ends)
    ending = {"end": [end], "end_twice": [end, end], "none": []}.get(tail)
    if ending is None:
        ending = [end, draw(audio_chunks(most_bytes)), end]
    return Script("asr", tuple(before + config + after + ending), draw(st.integers(0, 6)) == 3)


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


# --- the fuzz: running a script ----------------------------------------------------------------------


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


@dataclass
class Report:
    """What one connection (or many, added up) sent and got; ``problems``: each property broken."""

    messages: Counter[str] = field(default_factory=Counter)  # hostile messages sent, by kind
    replies: Counter[str] = field(default_factory=Counter)  # by type; errors by code (probes' apart)
    probe_replies: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    closes: Counter[str] = field(default_factory=Counter)
    big_replies: Counter[str] = field(default_factory=Counter)  # over 1 MiB (the server's own limit), by type
    largest_reply: int = 0  # bytes
    probes: int = 0
    connections: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, other: Report) -> None:
        for name in ("messages", "replies", "probe_replies", "outcomes", "closes", "big_replies"):
            getattr(self, name).update(getattr(other, name))
        self.largest_reply = max(self.largest_reply, other.largest_reply)
        self.probes += other.probes
        self.connections += other.connections
        self.problems += other.problems


async def _send(ws: ClientConnection, h: Hostile) -> None:
    if h.frame == "raw":
        await ws.send(h.payload, text=True)
    else:
        await ws.send(h.payload)


async def _answers(ws: ClientConnection, timeout: float) -> tuple[list[str | bytes], str | None]:
    """Replies up to the probe's answer; the close code when the connection closes first."""
    out: list[str | bytes] = []
    try:
        while True:
            raw = await asyncio.wait_for(ws.recv(), timeout)
            out.append(raw)
            if isinstance(raw, str) and f'"{PROBE_TYPE}' in raw and '"error"' in raw:
                return out, None
    except ConnectionClosed as e:
        return out, str(e.rcvd.code if e.rcvd else 1006)
    except TimeoutError:
        return out, "timeout"


def _check_reply(endpoint: str, msg: dict[str, Any], s: Stream, problems: list[str]) -> None:
    """Word order and counts: one final event per word, in order, with its text; end counts them."""
    kind = msg["type"]
    if kind in ("words", "caption", "lag") and endpoint != "asr":
        problems.append(f"order: {kind} message on /v1/{endpoint}")
    if kind == "words":
        for c in msg["committed"]:
            if c.get("index") != len(s.texts):
                problems.append(f"order: committed word index {c.get('index')}, expected {len(s.texts)}")
            s.texts.append(c["text"])
    elif kind == "events":
        for e in msg["events"]:
            if e["final"]:
                if e["index"] != s.n_final:
                    problems.append(f"order: final event for word {e['index']}, expected {s.n_final}")
                elif e["index"] >= len(s.texts) or e["word"] != s.texts[e["index"]]:
                    problems.append(f"order: final event {str(e)[:200]} for a word not sent")
                s.n_final = max(s.n_final, e["index"] + 1)
            elif not s.n_final <= e["index"] < len(s.texts):
                problems.append(f"order: provisional event for word {e['index']} ({s.n_final} final)")
    elif kind == "caption":
        if not 0 <= msg["first"] <= msg["last"] < len(s.texts):
            problems.append(f"order: caption of words {msg['first']}..{msg['last']}")
    elif kind == "end":
        if msg["words"] != len(s.texts) or s.n_final != len(s.texts):
            problems.append(f"order: end says {msg['words']} words; {len(s.texts)} sent, {s.n_final} final")
        if endpoint == "asr" and abs(msg.get("audio_seconds", -1) - s.samples / SAMPLE_RATE) > 2e-3:
            problems.append(
                f"order: end says {msg.get('audio_seconds')} s of audio, {s.samples / SAMPLE_RATE} sent"
            )
        s.ended = True


def _apply(endpoint: str, h: Hostile, s: Stream, refused: bool = False) -> None:
    """A message taken: the stream as the server now holds it. ``refused``: a revise the session
    took and the stream then refused (final words): the recogniser's clock it carries still counts."""
    if h.frame == "binary":
        s.samples += h.size // 2
        return
    msg = server_parse(str(h.payload))
    assert isinstance(msg, dict)
    words = msg.get("words") if msg["type"] in ("words", "revise") else []
    texts = [w if isinstance(w, str) else w["text"] for w in words]
    if msg["type"] in ("words", "revise", "tick"):  # a word's time: its end, else its start
        ends = [
            w.get("end") if w.get("end") is not None else w.get("start") for w in words if isinstance(w, dict)
        ]
        s.clock = max([s.clock, *(t for t in [msg.get("now"), *ends] if t is not None)])
    if refused:
        return
    if endpoint == "punct" and msg["type"] == "words":
        s.texts += texts
    elif endpoint == "punct" and msg["type"] == "revise":
        s.texts[msg["index"] :] = texts


async def run_script(url: str, script: Script, timeout: float = ANSWER_TIMEOUT_S) -> Report:
    """Play one script on one connection; every property broken is a line in ``report.problems``."""
    report, s, endpoint = Report(connections=1), Stream(), script.endpoint
    problems = report.problems
    try:
        async with connect(
            f"{url}/v1/{endpoint}", max_size=None, open_timeout=60, close_timeout=10, ping_interval=None
        ) as ws:
            messages = list(script.messages)
            while messages:
                h = messages.pop(0)
                if h.tail is not None:
                    revision = json.loads(str(h.payload))
                    revision["index"] = max(s.n_final, len(s.texts) - h.tail)
                    h = dataclasses.replace(h, payload=json.dumps(revision, ensure_ascii=False), tail=None)
                allowed = expected(endpoint, h, s)
                batch = [h]
                if allowed == {"end"}:  # the messages after it go at once, never answered; a frame
                    batch += messages  # the websocket refuses may close the connection before the end
                    allowed |= {frame_fault(m) for m in messages} - {None}
                    messages = []
                try:
                    for m in batch:
                        report.messages[m.kind] += 1
                        await _send(ws, m)
                    await ws.send(PROBE)
                    report.probes += 1
                except ConnectionClosed:
                    pass
                if script.hang_up and not messages:
                    ws.transport.abort()
                    report.closes["hang_up"] += 1
                    break
                raws, closed = await _answers(ws, timeout)
                replies = []
                for raw in raws:
                    size = len(raw.encode() if isinstance(raw, str) else raw)
                    report.largest_reply = max(report.largest_reply, size)
                    try:
                        reply = json.loads(raw)
                    except ValueError:
                        problems.append(f"schema: a reply that is not JSON: {raw[:200]!r}")
                        continue
                    fault = schema_fault(reply)
                    if fault:
                        problems.append(f"schema: {str(reply)[:300]}: {fault}")
                        continue
                    name = f"error:{reply['code']}" if reply["type"] == "error" else reply["type"]
                    if reply["type"] == "error" and f'"{PROBE_TYPE}"' in reply["message"]:
                        report.probe_replies[name] += 1
                        continue
                    report.replies[name] += 1
                    if size > MAX_FRAME:  # a client with websockets' default max_size would close (1009)
                        report.big_replies[name] += 1
                    replies.append(reply)
                errors = [r["code"] for r in replies if r["type"] == "error"]
                kinds = {r["type"] for r in replies}
                outcome = (
                    errors[0]
                    if errors
                    else "ready"
                    if "ready" in kinds
                    else "end"
                    if "end" in kinds
                    else f"close:{closed}"
                    if closed
                    else "ok"
                )
                report.outcomes[f"{h.kind}:{outcome}"] += 1
                if len(errors) > 1:
                    problems.append(f"expect: {h!r} got {len(errors)} errors {errors}")
                if "internal" in errors:
                    problems.append(f"internal: {h!r} got an internal error: {replies}")
                elif outcome not in allowed:
                    problems.append(f"expect: {h!r} got {outcome}, expected {sorted(allowed)}")
                if outcome == "ok" or (h.expect == (REVISE,) and outcome == "bad_input"):
                    _apply(endpoint, h, s, refused=outcome != "ok")
                for reply in replies:
                    if reply["type"] == "ready":
                        s.configured = True
                    else:
                        _check_reply(endpoint, reply, s, problems)
                if closed is not None:
                    report.closes[closed] += 1
                    if closed == "timeout":
                        problems.append(f"timeout: no answer to {h!r} within {timeout:g} s")
                    elif not (closed == "1000" and s.ended) and f"close:{closed}" not in allowed:
                        problems.append(f"close: {h!r} closed the connection with {closed}")
                    break
            else:
                if ws.state is not State.OPEN:
                    problems.append(f"close: the connection is {ws.state.name} after the script")
                report.closes["client"] += 1
    except (OSError, TimeoutError) as e:
        problems.append(f"connect: {type(e).__name__}: {e}")
    except Exception as e:  # the handshake refused, or the client failed: a problem, not a crash here
        problems.append(f"client: {type(e).__name__}: {e}")
    return report


# --- the fuzz: the neighbour and the server ------------------------------------------------------------

NEIGHBOUR = [{"type": "words", "words": WORDS[i : i + 3]} for i in range(0, len(WORDS), 3)]


async def neighbour(url: str) -> list[str]:
    """The neighbour's fixed script (lookahead 2, no time limit): its final labels."""
    return finals(await talk(url, NEIGHBOUR))


def log_problems(lines: list[str]) -> list[str]:
    """Log lines that tell of an unhandled exception (a traceback, a failed session or batch)."""
    bad = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            if line.strip():
                bad.append(line[:2000])
            continue
        failed = entry.get("event") in ("session_failed", "recognition_failed", "batch_job_failed")
        if "exc" in entry or failed or entry.get("level") in ("error", "critical"):
            bad.append(line[:4000])
    return bad


class FuzzServer:
    """A real ``streampunct serve`` process; its log (stderr) read by a thread as it comes."""

    def __init__(self, *args: str):
        self.proc, self.url = spawn_server(*args)
        self.log: list[str] = []
        self._seen = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line.rstrip("\n"))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def new_log(self) -> list[str]:
        lines = self.log[self._seen :]
        self._seen += len(lines)
        return lines

    def stop(self) -> int | None:
        """SIGTERM; the exit status (None: it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        self._reader.join(timeout=10)
        return self.proc.returncode


async def warm_up(url: str) -> list[str]:
    """Load the speech model (the first /v1/asr stream) and run the neighbour alone: its labels."""
    async with connect(url + "/v1/asr") as ws:
        await ws.send(json.dumps({"type": "config"}))
        await ws.send(json.dumps(END))
        async for _ in ws:
            pass
    return await neighbour(url)


# --- the long profile (this script) ------------------------------------------------------------

EXAMPLES_A_RUN = 100  # hypothesis examples per run of the generator (each run starts afresh)
KEEP = 40  # problems kept in the results, with their scripts


class Fuzz:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.server = FuzzServer(*SERVER_ARGS)
        self.alone = self.call(warm_up(self.server.url))
        self.rss: dict[str, float] = {}
        self.rss["after_warm_up"] = self.rss_mb()
        self.examples = 0
        self.totals = {"punct": Report(), "asr": Report()}
        self.problems: list[dict[str, Any]] = []
        self.categories: Counter[str] = Counter()
        self.crashes: list[dict[str, Any]] = []
        self.log_lines: list[str] = []
        self.neighbour = {"runs": 0, "mismatches": 0, "failed": 0, "first_mismatch": None}
        self.stopping = False
        self.neighbour_task = asyncio.run_coroutine_threadsafe(self.neighbour_forever(), self.loop)

    def rss_mb(self) -> float:
        """The server's resident memory (MB), and its highest so far."""
        try:
            status = Path(f"/proc/{self.server.proc.pid}/status").read_text()
            rss = (
                int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS"))) / 1024
            )
        except (OSError, StopIteration):
            return 0.0
        self.rss["max"] = max(self.rss.get("max", 0.0), rss)
        return rss

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    async def neighbour_forever(self) -> None:
        while not self.stopping:
            try:
                labels = await neighbour(self.server.url)
            except Exception as e:  # a crash shows here too; recorded, and the run goes on
                self.neighbour["failed"] += 1
                self.neighbour["first_failure"] = self.neighbour.get("first_failure") or repr(e)[:500]
                await asyncio.sleep(0.5)
                continue
            self.neighbour["runs"] += 1
            if labels != self.alone:
                self.neighbour["mismatches"] += 1
                self.neighbour["first_mismatch"] = self.neighbour["first_mismatch"] or labels

    def sent(self, endpoint: str) -> int:
        return sum(self.totals[endpoint].messages.values())

    def problem(self, category: str, text: str, scripts: list[Script]) -> None:
        self.categories[category] += 1
        if len(self.problems) < KEEP:
            self.problems.append(
                {"category": category, "problem": text[:2000], "scripts": repr(scripts)[:4000]}
            )

    def example(self, scripts: list[Script]) -> None:
        """Run the scripts at once, each on its own connection; record what broke."""

        async def all_of() -> list[Report]:
            return await asyncio.gather(*(run_script(self.server.url, s) for s in scripts))

        for script, report in zip(scripts, self.call(all_of())):
            self.totals[script.endpoint].add(report)
            for text in report.problems:
                self.problem(text.split(":", 1)[0], text, [script])
        self.examples += 1
        self.rss["end"] = self.rss_mb()
        lines = self.server.new_log()
        self.log_lines += log_problems(lines)
        for line in log_problems(lines):
            self.problem("log", line, scripts)
        if not self.server.alive():
            self.crashes.append({"exit": self.server.proc.returncode, "scripts": repr(scripts)[:4000]})
            self.problem("crash", f"the server exited {self.server.proc.returncode}", scripts)
            self.log_lines += log_problems(self.server.new_log())
            self.server = FuzzServer(*SERVER_ARGS)  # a fresh one, for the rest of the run
            self.call(warm_up(self.server.url))

    def run(self) -> None:
        args = self.args
        punct = punct_scripts(most=12, huge=600_000, many=1000)
        asr = asr_scripts(most=8, most_bytes=64_000, most_speech_s=4)
        while self.sent("punct") < args.messages or self.sent("asr") < args.asr_messages:
            wanted = [
                s
                for s, n, goal in (
                    (punct, self.sent("punct"), args.messages),
                    (asr, self.sent("asr"), args.asr_messages),
                )
                if n < goal
            ]

            @settings(
                max_examples=EXAMPLES_A_RUN,
                deadline=None,
                database=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(scripts=st.lists(st.one_of(wanted), min_size=1, max_size=args.concurrency))
            def batch(scripts: list[Script]) -> None:
                self.example(scripts)

            batch()
            print(
                f"{time.perf_counter() - self.t0:7.0f} s: punct {self.sent('punct')}, asr {self.sent('asr')} messages; "
                f"neighbour runs {self.neighbour['runs']}; problems {sum(self.categories.values())}",
                flush=True,
            )

    def finish(self) -> int | None:
        self.stopping = True
        self.neighbour_task.result(timeout=120)
        code = self.server.stop()
        lines = log_problems(self.server.new_log())
        self.log_lines += lines
        for line in lines:
            self.problem("log", line, [])
        return code

    def main(self) -> int:
        self.t0 = time.perf_counter()
        try:
            self.run()
        finally:
            exit_code = self.finish()
        wall = time.perf_counter() - self.t0
        endpoints = {}
        for name, r in self.totals.items():
            endpoints[name] = {
                "connections": r.connections,
                "messages": sum(r.messages.values()),
                "probes": r.probes,
                "messages_by_kind": dict(r.messages.most_common()),
                "replies": dict(r.replies.most_common()),
                "probe_replies": dict(r.probe_replies.most_common()),
                "outcomes": dict(sorted(r.outcomes.items())),
                "close_codes": dict(r.closes.most_common()),
                "replies_over_1_MiB": dict(r.big_replies.most_common()),
                "largest_reply_bytes": r.largest_reply,
            }
        unaffected = self.neighbour["mismatches"] == 0 and self.neighbour["failed"] == 0
        summary = {
            "benchmark": "fuzz",
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
            "server_args": list(SERVER_ARGS),
            "endpoints": endpoints,
            "messages": sum(e["messages"] for e in endpoints.values()),
            "crashes": len(self.crashes),
            "unhandled_exceptions": len(self.log_lines),
            "schema_violations": self.categories["schema"],
            "problems_by_category": dict(self.categories),
            "neighbour": {
                "unaffected": unaffected,
                "runs": self.neighbour["runs"],
                "mismatches": self.neighbour["mismatches"],
                "failed": self.neighbour["failed"],
                "first_failure": self.neighbour.get("first_failure"),
                "labels_alone": self.alone,
                "first_mismatch": self.neighbour["first_mismatch"],
            },
            "server_exit_code": exit_code,
            "server_rss_mb": {k: round(v, 1) for k, v in self.rss.items()},
            "examples": self.examples,
            "wall_s": round(wall, 1),
            "messages_per_s": round(sum(e["messages"] for e in endpoints.values()) / wall, 1),
            "problems": self.problems,
            "crash_scripts": self.crashes,
            "log_lines": self.log_lines[:KEEP],
            "machine": {
                **machine(),
                "server": "OMP_NUM_THREADS=1, --device cpu (benchmarks/common.spawn_server)",
            },
        }
        path = write_json(self.args.out, summary)
        for name, e in endpoints.items():
            print(
                f"/v1/{name}: {e['messages']} messages on {e['connections']} connections; replies "
                f"{json.dumps(e['replies'])}; closes {json.dumps(e['close_codes'])}"
            )
        print(
            f"crashes {summary['crashes']}, unhandled exceptions {summary['unhandled_exceptions']}, "
            f"schema violations {summary['schema_violations']}, problems {json.dumps(summary['problems_by_category'])}; "
            f"neighbour unaffected: {unaffected} ({self.neighbour['runs']} runs); server exit {exit_code}; "
            f"{summary['wall_s']} s"
        )
        print(f"wrote {path}")
        bad = sum(self.categories.values()) or self.crashes or not unaffected or exit_code != 0
        return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--messages", type=int, default=10_000, help="hostile messages to /v1/punct (default %(default)s)"
    )
    ap.add_argument(
        "--asr-messages", type=int, default=2_000, help="hostile messages to /v1/asr (default %(default)s)"
    )
    ap.add_argument(
        "--concurrency",
        type=int,
        default=4,
        help="hostile connections at once, at most (default %(default)s)",
    )
    ap.add_argument(
        "--out",
        default="fuzz.json",
        help="file name under benchmarks/results/, or a path (default %(default)s)",
    )
    return Fuzz(ap.parse_args()).main()


if __name__ == "__main__":
    sys.exit(main())
