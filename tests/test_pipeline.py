"""One caption pipeline: the server's /v1/asr session and the benchmarks' driver
(``streampunct.pipeline.simulate``) run the same object, so the same audio on the same clock gives
the same words and the same final marks through either. Real parts: espeak-ng speech, Whisper
tiny.en, the shipped punctuator, a real server on a loopback port."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from websockets.asyncio.client import connect

from streampunct import Punctuator
from streampunct import protocol as P
from streampunct.clients.file import load_audio
from streampunct.options import Limits, StreamOptions
from streampunct.pipeline import CaptionPipeline, read_recording, replay, simulate
from streampunct.server.app import App, run_server
from streampunct.server.host import LocalHost, Recognition
from streampunct.server.sessions import AsrSession
from streampunct.speech import SAMPLE_RATE, StreamingRecognizer, load_whisper

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed"),
]
CHUNK_S = 0.25  # as the file client and the e2e benchmark send it
TEXT = (
    "Good morning, and welcome back. Did you sleep well last night? "
    "I think the weather will change soon, so bring a coat."
)


@pytest.fixture(scope="module")
def speech(tmp_path_factory) -> np.ndarray:
    """Speech with a pause of two seconds in it (the pause clock's ticks) and silence after it."""
    wav = tmp_path_factory.mktemp("speech") / "speech.wav"
    parts = []
    for i, sentence in enumerate(TEXT.split("? ")):
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(wav), sentence], check=True)
        parts += [load_audio(str(wav)), np.zeros(int((2.0 if i == 0 else 1.0) * SAMPLE_RATE), np.float32)]
    return np.concatenate(parts)


@pytest.fixture(scope="module")
def parts() -> tuple[Punctuator, object]:
    """The shipped punctuator and Whisper tiny.en, loaded once for the module."""
    return Punctuator.load("default", device="cpu").prepare(), load_whisper("tiny.en", "cpu")


def through_the_driver(
    punctuator: Punctuator, whisper, audio: np.ndarray
) -> tuple[list[str], dict[int, str]]:
    cfg = StreamOptions()
    stream = punctuator.stream(cfg.lookahead, cfg.max_delay_ms, cfg.engine)
    final: dict[int, str] = {}

    def run(call):
        events = stream.run(call)
        final.update((e.index, e.label) for e in events if e.final)
        return events

    out = simulate(CaptionPipeline(StreamingRecognizer(whisper)), audio, CHUNK_S, run)
    return [w.text for w in out.words], final


async def through_the_server(
    punctuator: Punctuator, whisper, audio: np.ndarray, record: Path | None = None
) -> tuple[list[str], dict[int, str]]:
    """The server's session on a clock the test holds: each chunk arrives at its end's audio time,
    and the next is sent once the session has recognised all it was given, as simulate() does."""
    clock = [0.0]
    recognition = Recognition(clock=lambda: clock[0], record=record)
    recognition._model = whisper  # the same model object, loaded once
    app = App(LocalHost(punctuator), recognition=recognition, limits=Limits(audio_speed=None))
    ready = asyncio.Event()
    server = asyncio.create_task(run_server(app, "127.0.0.1", 0, ready, standalone=False))
    await ready.wait()
    words: list[str] = []
    final: dict[int, str] = {}
    try:
        async with connect(app.url + "/v1/asr") as ws:
            await ws.send(P.Config(sample_rate=SAMPLE_RATE).to_json())
            assert json.loads(await ws.recv())["type"] == "ready"
            (session,) = app.sessions.values()
            assert isinstance(session, AsrSession)
            step = int(CHUNK_S * SAMPLE_RATE)
            for start in range(0, len(audio), step):
                chunk = audio[start : start + step]
                clock[0] = (start + len(chunk)) / SAMPLE_RATE
                await ws.send((np.clip(chunk, -1, 1) * 32767).astype("<i2").tobytes())
                while not (session.pipeline.received == start + len(chunk) and session.listening):
                    await asyncio.sleep(0.005)
            await ws.send(P.End().to_json())
            async for raw in ws:
                msg = json.loads(raw)
                if msg["type"] == "words":
                    words += [w["text"] for w in msg["committed"]]
                elif msg["type"] == "events":
                    final.update((e["index"], e["label"]) for e in msg["events"] if e["final"])
                elif msg["type"] == "end":
                    break
    finally:
        app.stopping.set()
        await server
    return words, final


def test_the_server_and_the_benchmark_driver_give_the_same_words_and_marks(speech, parts):
    punctuator, whisper = parts
    words, final = through_the_driver(punctuator, whisper, speech)
    assert len(words) >= 20 and sorted(final) == list(range(len(words)))
    assert {"PERIOD", "COMMA"} <= set(final.values())
    served = asyncio.run(through_the_server(punctuator, whisper, speech))
    assert served == (words, final)


def test_a_pause_moves_the_punctuation_clock_in_the_pipelines_calls(speech, parts):
    """In the two seconds of silence after the question every word heard is committed: the
    pipeline's calls then tick the clock through the pause, chunk by chunk."""
    from streampunct.stream import Tick

    out = simulate(CaptionPipeline(StreamingRecognizer(parts[1])), speech, CHUNK_S)
    ticks = [call.now for _, call in out.calls if isinstance(call, Tick)]
    assert len(ticks) >= 4 and ticks == sorted(ticks)
    assert any(b - a == pytest.approx(CHUNK_S) for a, b in zip(ticks, ticks[1:]))


def test_the_servers_recording_replayed_gives_the_servers_own_words_and_marks(speech, parts, tmp_path):
    """Issue 66: the server records each /v1/asr stream's calls (``--record DIR``), and
    ``pipeline.replay()`` runs them through a fresh stream, the pause clock's ticks included: the
    words and final marks the server sent, exactly."""
    punctuator, whisper = parts
    words, final = asyncio.run(through_the_server(punctuator, whisper, speech, record=tmp_path))
    (path,) = tmp_path.glob("*.jsonl")
    settings, records = read_recording(path)
    assert settings["lookahead"] == StreamOptions().lookahead and any("tick" in r for r in records)
    replayed = replay(punctuator, path)
    assert [w["text"] for w in replayed] == words
    assert {i: w["label"] for i, w in enumerate(replayed)} == final
