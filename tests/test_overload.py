"""Issue 63: no way around a limit, on a real `streampunct serve`. A client that floods ticks is
slowed and then refused like one that floods words, and the load it makes never refuses anyone
else; a client that sends ``end`` and hangs up with 600 words of long compute queued frees the
server at once; ``/v1/asr`` past what the cores can recognise, while a ``/v1/punct`` stream loads
the batcher, refuses the streams it cannot serve and gives every admitted one every word final and
its ``end``, its socket read (its pings answered) throughout. Issue 76: empty ``words`` messages
are slowed like any other; an audio client that bursts and leaves takes its session with it, and
a SIGTERM after it stops within its grace."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import subprocess
import time
import urllib.request

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from benchmarks.common import WORDS, finals, validate
from streampunct.clients.file import load_audio
from tests.test_server import LONG, start_server, stop_server

KEEP = {"ping_interval": 1, "ping_timeout": 5}  # a client that gives up on a server 5 s deaf


def health(url: str) -> dict:
    with urllib.request.urlopen(url.replace("ws://", "http://") + "/health", timeout=10) as r:
        return json.loads(r.read())


async def configured(url: str, lookahead: int = 2, path: str = "/v1/punct"):
    ws = await connect(url + path, **KEEP)
    await ws.send(json.dumps({"type": "config", "lookahead": lookahead, "max_delay_ms": None}))
    ready = json.loads(await ws.recv())
    assert ready["type"] == "ready", ready
    return ws


async def replies_of(ws) -> list[dict]:
    out = []
    with contextlib.suppress(ConnectionClosed):
        async for raw in ws:
            out.append(json.loads(raw))
    return out


async def finished_within(url: str, words: list[str], seconds: float) -> list[dict]:
    """A new stream's words, every one final and its end, within ``seconds``."""
    ws = await configured(url)
    await ws.send(json.dumps({"type": "words", "words": words}))
    await ws.send(json.dumps({"type": "end"}))
    replies = await asyncio.wait_for(replies_of(ws), seconds)
    assert replies[-1] == {"type": "end", "words": len(words)}, replies[-3:]
    assert len(finals(replies)) == len(words)
    return replies


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    config = tmp_path_factory.mktemp("limited") / "c.toml"
    config.write_text("[limits]\nwords_per_s = 50\nwords_burst = 100\nmax_wait_s = 1\n")
    proc, url = start_server("--config", str(config))
    yield url
    stop_server(proc)


def test_a_tick_flood_is_slowed_like_words_and_refuses_no_one_else(limited):
    """Today 300,000 ticks in 9 s were all taken (no limit, an unbounded queue) and their load
    refused every new stream for a minute. A tick now counts as a word against the stream's rate
    (here 50 a second, bursts of 100), and ticks waiting one after another keep only the latest:
    300 ticks and an ``end`` take the flooder at least 4 s, while a neighbour's words are all
    final and new streams open."""
    n = 300

    async def go():
        flood = await connect(limited + "/v1/punct", ping_interval=None)  # slowed on purpose
        await flood.send(json.dumps({"type": "config", "lookahead": 2, "max_delay_ms": None}))
        await flood.recv()
        t0 = time.monotonic()
        for i in range(n):
            await flood.send(json.dumps({"type": "tick", "now": i / 100}))
        await flood.send(json.dumps({"type": "end"}))
        reading = asyncio.create_task(replies_of(flood))
        await asyncio.sleep(2)
        during = health(limited)
        await finished_within(limited, WORDS[:20], 10)  # a neighbour, served meanwhile
        replies = await asyncio.wait_for(reading, 60)
        return replies, time.monotonic() - t0, during

    replies, seconds, during = asyncio.run(go())
    assert replies[-1] == {"type": "end", "words": 0} and not [r for r in replies if r["type"] == "error"]
    assert seconds >= 0.8 * (n - 100) / 50, seconds
    assert during["punctuation"]["load"] < 0.5, during


@pytest.mark.parametrize("words", [["word"], []], ids=["one word", "empty"])
def test_words_messages_are_slowed_empty_or_not(limited, words):
    """Issue 76: four connections sent 1.07 million empty ``words`` messages in 25 s, never slowed
    (an empty message cost nothing against the rate), and a neighbour's p99 went from 0.77 s to
    9 s. A words message costs one word at least, as a tick does: 300 of them and an ``end`` take
    the client at least 4 s, empty or not."""
    n = 300

    async def go():
        ws = await connect(limited + "/v1/punct", ping_interval=None)  # slowed on purpose
        await ws.send(json.dumps({"type": "config", "lookahead": 2, "max_delay_ms": None}))
        await ws.recv()
        t0 = time.monotonic()
        for _ in range(n):
            await ws.send(json.dumps({"type": "words", "words": words}))
        await ws.send(json.dumps({"type": "end"}))
        replies = await asyncio.wait_for(replies_of(ws), 60)
        return replies, time.monotonic() - t0

    replies, seconds = asyncio.run(go())
    assert replies[-1] == {"type": "end", "words": n * len(words)}
    assert not [r for r in replies if r["type"] == "error"]
    assert seconds >= 0.8 * (n - 100) / 50, seconds


def test_a_client_that_sends_end_and_hangs_up_leaves_no_work_behind():
    """Today a client that ignored ``busy``, sent ``end`` and hung up left its 2,000 queued words
    computing for 133 s, and every new connection got 503 for minutes. A finishing session now
    notices that its client has gone: the rest of its work is dropped at once."""

    proc, url = start_server()

    async def go():
        hog = await configured(url, lookahead=64)
        # 600 long words at k=64: about a minute of compute on 2 cores, in slices of 0.25 s
        await hog.send(json.dumps({"type": "words", "words": [LONG[i % 4] for i in range(600)]}))
        await asyncio.sleep(2)  # it computes
        await hog.send(json.dumps({"type": "end"}))
        await asyncio.sleep(0.5)  # on its way
        hog.transport.abort()  # gone, without a closing handshake
        gone = time.monotonic()
        while health(url)["streams"]:
            assert time.monotonic() - gone < 5, "the session outlived its client"
            await asyncio.sleep(0.1)
        await finished_within(url, WORDS[:10], 5)  # the batcher is free again

    try:
        asyncio.run(go())
    finally:
        stop_server(proc)


# 160 s of silence, in messages of 32 s (a message is 1 MiB at most): all of it in the server's
# queue at once, and read at its --audio-speed, 10 x real time, for about 10 s
SILENCE = [bytes(2 * 16000 * 32)] * 5


async def burst_and_leave(url: str, leave: str) -> None:
    """A /v1/asr client that sends SILENCE in one burst and leaves: it closes, or drops (no close)."""
    ws = await configured(url, path="/v1/asr")
    for chunk in SILENCE:
        await ws.send(chunk)
    if leave == "close":
        await ws.close()
    else:
        ws.transport.abort()


@pytest.fixture(scope="module")
def audio_server():
    proc, url = start_server("--preload-asr")
    yield url
    stop_server(proc)


@pytest.mark.parametrize("leave", ["close", "drop"])
def test_an_audio_client_that_leaves_after_a_burst_leaves_no_session_behind(audio_server, leave):
    """Issue 76: a client that sent 600 s of silence in one burst and left kept its session open,
    reading and recognising what it had sent, with nobody to tell. The session now ends when its
    client goes, whatever it was doing: the audio waiting is dropped."""

    async def go():
        await burst_and_leave(audio_server, leave)
        gone = time.monotonic()
        while health(audio_server)["streams"]:
            assert time.monotonic() - gone < 3, "the session outlived its client"
            await asyncio.sleep(0.1)

    asyncio.run(go())


def test_sigterm_after_an_audio_client_left_stops_within_the_grace():
    """Issue 76: SIGTERM beside a session whose client had burst audio and left: the server hung
    past its grace (SIGKILL). It now exits within the grace, 0."""
    grace = 3
    proc, url = start_server("--preload-asr", "--shutdown-grace-s", str(grace))
    try:
        asyncio.run(burst_and_leave(url, "drop"))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=grace + 3) == 0  # the margin: the process's own exit
    finally:
        proc.kill()


needs_espeak = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
TALK = "Hello everyone and thank you for coming. What do you think about the weather? I think it will rain."


@needs_espeak
def test_audio_clients_past_capacity_are_refused_and_every_admitted_one_completes(tmp_path):
    """Five real-time audio clients, one every 2 s, on a server whose one recognition worker can
    keep up with fewer (tiny.en: about 0.55 s of compute an audio second on these cores), with a
    /v1/punct stream loading the batcher from the third on. Refused streams get 503 ``busy``
    with Retry-After; every admitted stream has every word final once and its ``end``, and its
    pings are answered throughout (a connection 5 s deaf would be closed by its client). The server
    refuses past half its worker's time (``--max-load 0.5``): at the default 0.9, an idle AMD EPYC
    kept all five (2026-12-02), and the test passed only on loaded cores."""
    wav = tmp_path / "talk.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(wav), TALK * 3], check=True)
    audio = (load_audio(str(wav)) * 32767).astype(np.int16)
    proc, url = start_server("--preload-asr", "--max-load", "0.5")

    async def speaker(delay: float) -> dict:
        await asyncio.sleep(delay)
        try:
            ws = await configured(url, path="/v1/asr")
        except InvalidStatus as e:
            return {
                "refused": (e.response.status_code, e.response.headers.get("Retry-After"), e.response.body)
            }
        reading = asyncio.create_task(replies_of(ws))
        chunk = 1600  # 0.1 s
        with contextlib.suppress(ConnectionClosed):
            for i in range(0, len(audio), chunk):
                await ws.send(audio[i : i + chunk].tobytes())
                await asyncio.sleep(0.1)
            await ws.send(json.dumps({"type": "end"}))
        replies = await asyncio.wait_for(reading, 180)
        return {"replies": replies, "code": ws.close_code}

    async def hog(delay: float) -> None:
        await asyncio.sleep(delay)
        ws = await configured(url, lookahead=64)
        for _ in range(4):
            await ws.send(json.dumps({"type": "words", "words": [LONG[i % 4] for i in range(100)]}))
        await asyncio.sleep(20)
        ws.transport.abort()

    async def go():
        return await asyncio.gather(*(speaker(2 * i) for i in range(5)), hog(4.5))

    try:
        *speakers, _ = asyncio.run(go())
    finally:
        stop_server(proc)
    admitted = [s for s in speakers if "replies" in s]
    refused = [s["refused"] for s in speakers if "refused" in s]
    assert len(admitted) >= 2 and refused, [s.get("refused") for s in speakers]
    for status, retry_after, body in refused:
        assert status == 503 and int(retry_after) >= 1 and json.loads(body)["code"] == "busy"
    for s in admitted:
        replies = s["replies"]
        for r in replies:
            validate(r)
        end = replies[-1]
        assert end["type"] == "end" and s["code"] == 1000, (replies[-3:], s["code"])
        committed = [w for r in replies if r["type"] == "words" for w in r["committed"]]
        assert end["words"] == len(committed) > 10
        assert len(finals(replies)) == end["words"]
