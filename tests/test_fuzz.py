"""Fuzzing a real running server: hostile messages on /v1/punct and /v1/asr, a neighbour stream beside.

One ``streampunct serve`` process (rate limits off, so that they do not interfere) takes hypothesis'
scripts: malformed and truncated JSON, wrong types in every field, huge, empty and non-ASCII words,
lone surrogates, bad times and indices, binary frames where text belongs, configs twice, messages
after ``end``, frames just over the 1 MiB limit, more than 1000 words, mutated valid messages; on
/v1/asr odd-length, empty, silent, noisy and spoken audio, text that is not JSON, JSON of the wrong
type, config twice, end twice; and clients that hang up without closing. After each message the client sends a probe (a message of an unknown
type, answered by one error that changes nothing), so every reply is attributed to the message that
caused it and checked against what the protocol says it must be (docs/protocol.md): a parse error
its code, a word's fault ``bad_message``, a revision of a final word ``bad_input``, and so on.

Checked per example: every reply fits its JSON Schema; the outcome of each message is the documented
one; the final events come once per word, in order, with the word's text, and ``end`` counts the
words; the connection is open, or closed with the documented code (1000 after ``end``, 1009 for a
frame over 1 MiB, 1007 for a text frame that is not UTF-8); the server process is alive; a neighbour
stream on another connection, running a fixed script at the same time, gets the final labels it gets
alone; the server's log holds no traceback. At the end the server exits 0 on SIGTERM, its log clean.

The generator, the oracle, the client that plays a script and the server it runs against live once,
in ``benchmarks/fuzz.py`` (run as a script, the long profile: 10,000+ messages, the neighbour
running throughout): this module imports them; talking to a server, from ``benchmarks/common.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys

import pytest
from hypothesis import example, given, settings
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from benchmarks.common import WORDS, finals, talk
from benchmarks.lib.fuzz_audio import asr_scripts, speech_pcm
from benchmarks.lib.fuzz_client import FuzzServer, Report, log_problems, neighbour, run_script, warm_up
from benchmarks.lib.fuzz_messages import (
    END,
    INVALID_UTF8,
    MAX_FRAME,
    MAX_WORDS,
    REVISE,
    SERVER_ARGS,
    SERVER_CONFIG,
    Hostile,
    Raw,
    Script,
    message,
)
from benchmarks.lib.fuzz_oracle import schema_fault
from benchmarks.lib.fuzz_punct import punct_scripts

# --- the tests -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fuzz():
    server = FuzzServer(*SERVER_ARGS, config=SERVER_CONFIG)
    try:
        server.alone = asyncio.run(warm_up(server.url))  # type: ignore[attr-defined]
        yield server
    finally:
        server.stop()


def check_example(server: FuzzServer, script: Script) -> None:
    async def both() -> tuple[Report, list[str]]:
        return await asyncio.gather(run_script(server.url, script), neighbour(server.url))

    report, labels = asyncio.run(both())
    assert server.alive(), "the server exited:\n" + "\n".join(server.log[-20:])
    assert not report.problems, "\n".join(report.problems)
    assert labels == server.alone, "the neighbour stream's labels changed"  # type: ignore[attr-defined]
    logged = log_problems(server.new_log())
    assert not logged, "the server logged an exception:\n" + "\n".join(logged)


def _punct(*messages: Hostile, hang_up: bool = False) -> Script:
    config = message("config", {"type": "config", "lookahead": 2, "max_delay_ms": None}, "ready")
    return Script("punct", (config, *messages), hang_up)


def _asr(*messages: Hostile) -> Script:
    return Script("asr", (message("config", {"type": "config", "lookahead": 1}, "ready"), *messages))


PLAIN = message("words", {"type": "words", "words": WORDS[:6]}, "ok")
END_MSG = message("end", END, "end")
OVER = '{"type":"words","words":["' + "a" * MAX_FRAME + '"]}'
WORD_TIMES = [
    {"text": "so", "start": 9.0, "end": 9.5},
    {"text": "a", "start": 1.0},
]  # backwards, across words
# The documented refusals, run every time.
REFUSALS = Script(
    "punct",
    (
        message("config_bad_version", {"type": "config", "version": True}, "unsupported_version"),
        message("config", {"type": "config", "version": 1.0, "lookahead": 0}, "ready"),
        message("surrogate", {"type": "words", "words": ["so", Raw('"\\ud800"')]}, "bad_message"),
        message("surrogate", {"type": "words", "words": [{"text": Raw('"a\\udfffb"')}]}, "bad_message"),
        message("escaped_pair", {"type": "words", "words": [Raw('"\\ud83d\\ude00"'), "so"]}, "ok"),
        message("too_many_words", {"type": "words", "words": ["so"] * (MAX_WORDS + 1)}, "too_large"),
        message("words", {"type": "words", "words": ["so"] * MAX_WORDS}, "ok"),
        message("revise_bad_index", {"type": "revise", "index": True, "words": []}, "bad_message"),
        message("revise_bad_index", {"type": "revise", "index": -1, "words": []}, "bad_message"),
        message("revise", {"type": "revise", "index": 0, "words": ["late"]}, REVISE),  # final: bad_input
        message("revise", {"type": "revise", "index": 5000, "words": []}, REVISE),  # beyond: bad_input
        message("tick_bad", {"type": "tick", "now": math.nan}, "bad_message"),
        message("tick", {"type": "tick", "now": 5.0}, "ok"),
        message("tick", {"type": "tick", "now": 1.0}, "bad_input"),  # backwards
        Hostile("binary", b"\x00\x01", "binary"),
        Hostile("oversize_text", OVER, "text", ("close:1009",)),
    ),
)
ODD_WORDS = ["", "\u0000", "😀", "مرحبا", "e\u0301\u0301", "x" * 50_000]
AFTER_END = _punct(
    message("words", {"type": "words", "words": ODD_WORDS}, "ok"),
    message("words_times", {"type": "words", "words": WORD_TIMES}, "ok"),
    message("config", {"type": "config"}, "ready"),  # config twice: bad_state
    END_MSG,
    PLAIN,  # after end: never answered
    message("config", {"type": "config"}, "ready"),
)
ASR_SCRIPT = _asr(
    Hostile("audio_odd", b"\x00" * 3, "binary"),
    Hostile("audio_empty", b"", "binary"),
    Hostile("text", "this is not json"),
    message("words", {"type": "words", "words": ["so"]}, "ok"),  # unknown_type here
    message("config", {"type": "config"}, "ready"),  # config twice: bad_state
    Hostile("audio_speech", speech_pcm()[:32_000], "binary"),
    Hostile("audio_silence", bytes(16_000), "binary"),
    END_MSG,
    END_MSG,  # end twice
)


@settings(max_examples=20, deadline=None)
@given(script=punct_scripts())
@example(script=REFUSALS)
@example(script=AFTER_END)
@example(script=_punct(PLAIN, Hostile("oversize_binary", bytes(MAX_FRAME + 1), "binary", ("close:1009",))))
@example(script=_punct(PLAIN, Hostile("invalid_utf8", INVALID_UTF8[0], "raw", ("close:1007",))))
@example(script=_punct(PLAIN, message("end", {"type": "end", "reason": "bye"}, "end")))
@example(script=_punct(PLAIN, message("words", {"type": "words", "words": WORDS * 5}, "ok"), hang_up=True))
@example(  # a revise of final words, refused, still moved the recogniser's clock: a later tick behind it is refused
    script=_punct(
        PLAIN,
        message("revise", {"type": "revise", "index": 0, "words": [], "now": 1}, REVISE),
        message("tick", {"type": "tick", "now": 0}, "ok"),
        END_MSG,
    )
)
def test_punct_endpoint_survives_hostile_messages(fuzz, script):
    check_example(fuzz, script)


@settings(max_examples=6, deadline=None)
@given(script=asr_scripts())
@example(script=ASR_SCRIPT)
@example(script=_asr(Hostile("oversize_binary", bytes(MAX_FRAME + 2), "binary", ("close:1009",))))
def test_asr_endpoint_survives_hostile_messages(fuzz, script):
    check_example(fuzz, script)


def test_rate_limits_finish_the_stream_not_the_server(tmp_path):
    """Over its rate a client is slowed, then refused: rate_limited, the stream finished (end, with
    the words taken), the connection closed 1008; the server goes on and its log stays clean."""
    (tmp_path / "c.toml").write_text("[limits]\nwords_per_s = 10\nwords_burst = 10\nmax_wait_s = 0.3\n")
    server = FuzzServer("--config", str(tmp_path / "c.toml"))
    try:

        async def go() -> tuple[list[dict], int | None]:
            async with connect(server.url + "/v1/punct") as ws:
                await ws.send(json.dumps({"type": "config", "lookahead": 2, "max_delay_ms": None}))
                await ws.send(json.dumps({"type": "words", "words": WORDS[:8]}))
                await ws.send(json.dumps({"type": "words", "words": WORDS[8:12]}))  # slowed 0.2 s: taken
                await ws.send(json.dumps({"type": "words", "words": WORDS}))  # 2 s ahead: refused
                replies = []
                with contextlib.suppress(ConnectionClosed):  # closed 1008: not a normal closure
                    while True:
                        replies.append(json.loads(await ws.recv()))
                return replies, ws.close_code

        replies, code = asyncio.run(go())
        for r in replies:
            assert schema_fault(r) is None, r
        errors = [r for r in replies if r["type"] == "error"]
        assert [(e["code"], e.get("word")) for e in errors] == [("rate_limited", 12)]
        assert replies[-1] == {"type": "end", "words": 12, "reason": "rate limit"} and code == 1008
        assert len(finals(replies)) == 12
        assert len(finals(asyncio.run(talk(server.url, [{"type": "words", "words": WORDS[:3]}])))) == 3
        assert server.alive()
    finally:
        assert server.stop() == 0
    assert not log_problems(server.log)


def test_server_exits_0_with_a_clean_log(fuzz):
    """After all the fuzzing (this module's last test): SIGTERM, exit 0, no traceback logged."""
    assert fuzz.alive()
    assert fuzz.stop() == 0
    assert not log_problems(fuzz.log)
    assert any('"stopped"' in line for line in fuzz.log)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
