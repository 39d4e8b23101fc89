"""The fuzz's messages (``python -m benchmarks.fuzz``, tests/test_fuzz.py): the protocol's limits, the
fuzz server's flags and config, a hostile message and a script of them, JSON that json.dumps cannot
write, and the values and hypothesis strategies every generator draws from."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from benchmarks.common import WORDS

# --- the fuzz (what it checks: tests/test_fuzz.py) -------------------------------------------------

MAX_FRAME = 2**20  # the server's max_size: a bigger frame closes the connection (1009)
MAX_WORDS = 1000  # words a message (too_large beyond)
PROBE_TYPE = "fuzz-probe"
PROBE = json.dumps({"type": PROBE_TYPE})
ANY = "any"  # the strategy does not know: whatever the protocol allows for the message's type
REVISE = "revise"  # a well-formed revision: ok or bad_input, by the words final when it arrives
ANSWER_TIMEOUT_S = 120.0
END = {"type": "end"}
# the fuzz server at full speed (capacity: test_server): its flags, and its --config file's limits
SERVER_ARGS = ("--max-load", "off")
SERVER_CONFIG = """\
[limits]
words_per_s = "off"
audio_speed = "off"
"""

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
