"""The fuzz's generator of hostile /v1/punct scripts (``punct_scripts``): hypothesis strategies for
words, revisions, ticks, configs, garbage, mutated and oversized frames, and the scripts of them."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from hypothesis import strategies as st

from benchmarks.lib.fuzz_messages import (
    BAD_INDICES,
    BAD_ITEMS,
    BAD_NUMBERS,
    END,
    HUGE_UNITS,
    INVALID_UTF8,
    JSON_BOMBS,
    KNOWN_TYPES,
    MAX_FRAME,
    MAX_WORDS,
    NOT_LISTS,
    REVISE,
    SPECIAL_TEXTS,
    SURROGATES,
    VOCAB,
    Hostile,
    Raw,
    Script,
    extras,
    json_values,
    message,
    no_surrogates,
    times,
    to_json,
    weighted,
)


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
