"""The websocket server, run for real (a `streampunct serve` process with the shipped model)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import jsonschema
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from streampunct.engines import resolve_engine

SCHEMAS = Path(__file__).parent.parent / "docs" / "schema"
WORDS = "so what did you do last summer we went to the coast and it rained every day did n't it".split()


def validate(msg: dict) -> None:
    """Every message the server sends fits its JSON Schema in docs/schema/server/."""
    schema = json.loads((SCHEMAS / "server" / f"{msg['type']}.json").read_text())
    jsonschema.validate(msg, schema)


def start_server(*args: str) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "server.app", "--port", "0", "--device", "cpu", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "serving on" not in line:
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
    return proc, line.split()[-1]


def stop_server(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def server():
    proc, url = start_server()
    yield url
    stop_server(proc)


async def talk(url: str, messages: list, lookahead: int = 2) -> list[dict]:
    """Send config then messages (dicts as JSON, bytes as binary); collect replies until end."""
    replies = []
    async with connect(url + "/v1/punct") as ws:
        await ws.send(
            json.dumps({"type": "config", "version": 1, "lookahead": lookahead, "max_delay_ms": None})
        )
        replies.append(json.loads(await ws.recv()))
        for m in messages:
            await ws.send(m if isinstance(m, bytes | str) else json.dumps(m))
        await ws.send(json.dumps({"type": "end"}))
        async for raw in ws:
            replies.append(json.loads(raw))
    for r in replies:
        validate(r)
    return replies


def finals(replies: list[dict]) -> list[str]:
    out = {}
    for r in replies:
        for e in r.get("events", []):
            if e["final"]:
                assert e["index"] not in out
                out[e["index"]] = e["label"]
    return [out[i] for i in range(len(out))]


def test_health_and_not_found(server):
    http = server.replace("ws://", "http://")
    with urllib.request.urlopen(http + "/health") as r:
        assert json.loads(r.read()) == {"status": "ok", "streams": 0, "protocol": 1}
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(http + "/v2/nothing")
    assert e.value.code == 404
    assert json.loads(e.value.read())["code"] == "not_found"
    with urllib.request.urlopen(http + "/") as r:
        assert b"streampunct" in r.read() and r.headers["Content-Type"].startswith("text/html")


def test_punct_stream_equals_predict(server, shipped):
    replies = asyncio.run(
        talk(server, [{"type": "words", "words": WORDS[:7]}, {"type": "words", "words": WORDS[7:]}])
    )
    assert replies[0]["type"] == "ready" and replies[0]["lookahead"] == 2
    assert replies[-1] == {"type": "end", "words": len(WORDS)}
    assert finals(replies) == shipped.predict(WORDS, lookahead=2)


def test_bad_messages_are_answered_and_lose_nothing(server, shipped):
    messages = [
        {"type": "words", "words": WORDS[:5]},
        "this is not json",
        {"type": "jump"},
        {"type": "words", "words": "not a list"},
        {"type": "words", "words": [{"text": "x", "start": 2.0, "end": 1.0}]},
        {"type": "revise", "index": 0, "words": ["too", "late"]},  # word 0 is final by now
        {"type": "tick"},
        {"type": "config", "lookahead": 1},
        b"\x00\x01",
        '{"type": "tick", "now": 1' + "0" * 400 + "}",
        '{"type": "words", "words": [{"text": "x", "end": ' + "9" * 5000 + "}]}",
        {"type": "words", "words": WORDS[5:]},
    ]
    replies = asyncio.run(talk(server, messages, lookahead=0))
    codes = [r["code"] for r in replies if r["type"] == "error"]
    assert codes == [
        "bad_json",
        "unknown_type",
        "bad_message",
        "bad_message",
        "bad_input",
        "bad_message",
        "bad_state",
        "bad_message",
        "bad_message",
        "bad_json",
    ]
    assert all(r["message"] for r in replies if r["type"] == "error")
    assert finals(replies) == shipped.predict(WORDS, lookahead=0)


def test_revision_through_the_server(server, shipped):
    revised = WORDS[:10] + ["and", "it", "was", "sunny"]
    messages = [
        {"type": "words", "words": WORDS[:12]},
        {"type": "revise", "index": 10, "words": revised[10:]},
    ]
    replies = asyncio.run(talk(server, messages, lookahead=4))
    # words 0..7 were final before the revision, decided with the words of the first message
    decided_first = shipped.predict(WORDS[:12], lookahead=4)[:8]
    assert finals(replies) == decided_first + shipped.predict(revised, lookahead=4)[8:]


def test_config_errors(server):
    async def go():
        async with connect(server + "/v1/punct") as ws:
            await ws.send(json.dumps({"type": "words", "words": ["hi"]}))
            first = json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "config", "version": 7}))
            second = json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "config", "lookahead": 99}))
            third = json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "config", "engine": "fast"}))
            engine = json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "config", "lookahead": 1}))
            fourth = json.loads(await ws.recv())
            return first, second, third, engine, fourth

    first, second, third, engine, fourth = asyncio.run(go())
    assert (first["code"], second["code"], third["code"], engine["code"]) == (
        "bad_state",
        "unsupported_version",
        "bad_message",
        "bad_message",
    )
    assert "engine" in engine["message"]
    assert fourth["type"] == "ready" and fourth["lookahead"] == 1 and fourth["engine"] == "window"


@pytest.mark.parametrize(("lookahead", "engine"), [(0, "auto"), (0, "masked"), (2, "masked")])
def test_config_chooses_the_engine(server, shipped, lookahead, engine):
    runs = resolve_engine(shipped.model, engine, lookahead)  # auto: the checkpoint's window_from
    words = "so what did you do today i went home and then well i slept a lot".split()

    async def go():
        async with connect(server + "/v1/punct") as ws:
            config = {"type": "config", "lookahead": lookahead, "engine": engine, "max_delay_ms": None}
            await ws.send(json.dumps(config))
            ready = json.loads(await ws.recv())
            await ws.send(json.dumps({"type": "words", "words": words}))
            await ws.send(json.dumps({"type": "end"}))
            return ready, [json.loads(raw) async for raw in ws]

    ready, replies = asyncio.run(go())
    validate(ready)
    assert ready["engine"] == runs
    assert finals(replies) == shipped.predict(words, lookahead=lookahead, engine=engine)


def test_many_clients_at_once(server, shipped):
    texts = [WORDS[i:] + WORDS[:i] for i in range(0, 20, 4)]

    async def go():
        async def one(words):
            return finals(
                await talk(
                    server, [{"type": "words", "words": words[j : j + 3]} for j in range(0, len(words), 3)]
                )
            )

        return await asyncio.gather(*(one(t) for t in texts))

    for words, labels in zip(texts, asyncio.run(go())):
        assert labels == shipped.predict(words, lookahead=2)


def test_stream_limit_and_graceful_shutdown(shipped):
    proc, url = start_server("--max-streams", "1")
    try:

        async def go():
            ws = await connect(url + "/v1/punct")
            await ws.send(json.dumps({"type": "config", "lookahead": 4, "max_delay_ms": None}))
            await ws.recv()
            await ws.send(json.dumps({"type": "words", "words": WORDS}))
            with pytest.raises(InvalidStatus) as refused:
                await connect(url + "/v1/punct")
            assert refused.value.response.status_code == 503
            assert json.loads(refused.value.response.body)["code"] == "too_many_streams"
            await asyncio.sleep(0.5)
            proc.send_signal(signal.SIGTERM)  # the open stream is finished, not dropped
            replies = [json.loads(m) async for m in ws]
            return replies

        replies = asyncio.run(go())
        assert replies[-1] == {"type": "end", "words": len(WORDS), "reason": "server shutting down"}
        assert finals(replies) == shipped.predict(WORDS, lookahead=4)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


# Runs the words client as `pip install streampunct` (no extras) has it: the model stack unimportable.
WITHOUT_MODELS = (
    "import runpy, sys; sys.modules.update(dict.fromkeys("
    "['torch', 'numpy', 'tokenizers', 'safetensors', 'faster_whisper', 'ctranslate2'])); "
    "runpy.run_module('clients.words', run_name='__main__')"
)


def test_words_client(server, tmp_path):
    bad = [json.dumps({"text": "late", "start": -1}), json.dumps({"revise": "x"})]
    lines = [json.dumps({"text": w}) for w in WORDS[:6]] + ["oops", *bad, json.dumps({"words": WORDS[6:]})]
    f = tmp_path / "words.jsonl"
    f.write_text("\n".join(lines) + "\n")
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_MODELS, "--url", server, str(f)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert "skipped: input line 7 is not JSON" in out.stderr
    assert 'skipped: input line 8: "start" must be a finite number >= 0, got -1' in out.stderr
    assert 'skipped: input line 9: "index" must be a word index >= 0, got "x"' in out.stderr
    text = " ".join(out.stdout.split())
    assert [w.strip(",.?").lower() for w in text.split()] == [
        w for w in " ".join(WORDS).replace(" n't", "n't").split()
    ]
    assert text[0].isupper()


@pytest.mark.parametrize(
    "client_args, message",
    [
        (["words", "--url", "ws://127.0.0.1:9"], "cannot reach a streampunct server at ws://127.0.0.1:9"),
        (["words", "--url", "http//nowhere"], "is not a websocket URL"),
    ],
)
def test_clients_explain_connection_failures(client_args, message, tmp_path):
    f = tmp_path / "w.jsonl"
    f.write_text('{"text": "hi"}\n')
    out = subprocess.run(
        [sys.executable, "-m", "streampunct", *client_args, str(f)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr


def test_client_told_when_server_refuses(server, tmp_path):
    f = tmp_path / "w.jsonl"
    f.write_text('{"text": "hi"}\n')
    out = subprocess.run(
        [sys.executable, "-m", "clients.words", "--url", server, "--lookahead", "99", str(f)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "refused the configuration" in out.stderr


def test_revisions_after_hundreds_of_words(server, shipped):
    """Issue 1 of 5: 291 words one per message, then a revision of word 289, killed the stream
    (the default engine read a window the stream had forgotten). Here every word is followed by a
    revision of the newest word, which reaches that state wherever it lies."""
    words = [w.lower().strip(",.?") for w in (WORDS * 20)[:300]]
    messages: list = []
    for i, w in enumerate(words):
        messages += [{"type": "words", "words": [w]}, {"type": "revise", "index": i, "words": [w]}]
    replies = asyncio.run(talk(server, messages))
    assert not [r for r in replies if r["type"] == "error"]
    assert replies[-1] == {"type": "end", "words": len(words)}
    assert finals(replies) == shipped.predict(words, lookahead=2)


def test_health_says_when_the_server_cannot_compute(tiny):
    """After a batch fails as a whole, /health probes the batcher: 503 "failing" while streams
    cannot be computed, "ok" again once they can."""
    from server.app import App
    from tests.test_scheduler import broken_copy

    p = broken_copy(tiny)
    app = App(p)

    async def main():
        replies = [await app.health()]
        with pytest.raises(IndexError):
            await app.batcher.push(p.stream(lookahead=1), ["hello"])
        replies.append(await app.health())
        p.model.tok_emb = tiny.model.tok_emb  # the machine recovers
        replies.append(await app.health())
        await app.batcher.close()
        return [(r.status_code, json.loads(r.body)) for r in replies]

    (ok, first), (failing, second), (again, third) = asyncio.run(main())
    assert (ok, first["status"]) == (200, "ok")
    assert (failing, second["status"]) == (503, "failing") and "IndexError" in second["error"]
    assert (again, third["status"]) == (200, "ok")
