"""The websocket server, run for real (a `streampunct serve` process with the shipped model)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from benchmarks.common import WORDS, finals, talk, validate
from benchmarks.common import spawn_server as start_server
from streampunct.text import caption_text


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


def test_serve_says_where_its_caption_page_is():
    """A newcomer's `streampunct serve` prints the page's address, and the page says what Start does."""
    proc, url = start_server()
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line == f"live captions in a browser: {url.replace('ws://', 'http://')}/"
        with urllib.request.urlopen(line.split()[-1]) as r:
            page = r.read().decode()
        assert "Press <b>Start</b>" in page and "microphone" in page
    finally:
        stop_server(proc)


def test_health_and_not_found(server):
    http = server.replace("ws://", "http://")
    with urllib.request.urlopen(http + "/health") as r:
        health = json.loads(r.read())
    idle = {"load": 0.0, "capacity": None}
    recognition = {**idle, "compute_ratio": None, "guarded": {}}
    assert health.pop("lanes") >= 1  # punctuation workers: one a core
    assert health == {
        "status": "ok", "streams": 0, "protocol": 1, "punctuation": idle, "recognition": recognition
    }  # fmt: skip
    # the census answers only on a soak's server (STREAMPUNCT_CENSUS=1)
    for nothing in ("/v2/nothing", "/debug/census"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(http + nothing)
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


def test_unknown_keys_are_ignored_on_every_message(server, shipped):
    """An ``end`` with a key the server does not know ends the stream as any end does (it ended
    both endpoints with a TypeError)."""
    config = {"type": "config", "lookahead": 2, "max_delay_ms": None, "client": "x"}

    async def go():
        async with connect(server + "/v1/punct") as ws:
            await ws.send(json.dumps(config))
            await ws.send(json.dumps({"type": "words", "words": WORDS, "id": 7}))
            await ws.send(json.dumps({"type": "tick", "now": 1.0, "id": 8}))
            await ws.send(json.dumps({"type": "end", "reason": "bye"}))
            return [json.loads(raw) async for raw in ws], ws.close_code

    replies, code = asyncio.run(go())
    for r in replies:
        validate(r)
    assert [r["type"] for r in replies if r["type"] == "error"] == [] and code == 1000
    assert replies[-1] == {"type": "end", "words": len(WORDS)}
    assert finals(replies) == shipped.predict(WORDS, lookahead=2)


def test_a_tick_may_not_go_back(server):
    """The recogniser's clock runs forward: a tick behind the stream's clock (the latest ``now`` or
    word time taken) is ``bad_input`` and changes nothing; a tick at the clock is taken."""
    timed = [{"text": w, "start": i * 0.3, "end": i * 0.3 + 0.2} for i, w in enumerate(WORDS[:4])]
    messages = [
        {"type": "words", "words": timed, "now": 1.5},
        {"type": "tick", "now": 1.0},  # behind now
        {"type": "tick", "now": 1.5},
        {"type": "tick", "now": 3.0},
        {"type": "words", "words": [{"text": "so", "start": 3.0, "end": 3.4}]},
        {"type": "tick", "now": 3.2},  # behind the word's end
        {"type": "revise", "index": 4, "words": ["so"], "now": 1.0},  # an old now: the clock stays
        {"type": "tick", "now": 3.4},
    ]
    replies = asyncio.run(talk(server, messages))
    errors = [r for r in replies if r["type"] == "error"]
    assert [e["code"] for e in errors] == ["bad_input", "bad_input"]
    assert "1.5" in errors[0]["message"] and "3.4" in errors[1]["message"]
    assert replies[-1] == {"type": "end", "words": 5}


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


def test_sentences_come_once_each_in_order_after_their_finals(server):
    """A stream that asks for them (``"sentences": true``) gets each sentence once, in order, after
    the final events of its words (a revision and ticks between), with their times; joined, they
    are the finals' text as captions write it. A stream that does not ask gets none."""
    text = WORDS * 3
    timed = [{"text": w, "start": 0.4 * i, "end": 0.4 * i + 0.3} for i, w in enumerate(text)]
    revised = [{**w, "text": w["text"].upper()} for w in timed[30:33]]  # the words from 30, again
    messages = [
        {"type": "words", "words": timed[:31]},
        {"type": "revise", "index": 30, "words": revised},
        {"type": "tick", "now": 20.0},  # past every word's time limit
        {"type": "words", "words": timed[33:]},
    ]
    replies = asyncio.run(talk(server, messages, max_delay_ms=1000, sentences=True))
    assert replies[0]["sentences"] is True and not [r for r in replies if r["type"] == "error"]
    finals: dict[int, dict] = {}
    sentences = []
    for r in replies:
        finals.update({e["index"]: e for e in r.get("events", []) if e["final"]})
        if r["type"] == "sentence":
            assert r["first"] == (sentences[-1]["last"] + 1 if sentences else 0), r
            assert all(i in finals for i in range(r["first"], r["last"] + 1)), f"{r} before its finals"
            ends = finals[r["last"]]["label"] in ("PERIOD", "QUESTION")
            assert r["closed"] == ("mark" if ends else "end"), r
            assert (r["start"], r["end"]) == (0.4 * r["first"], 0.4 * r["last"] + 0.3), r
            sentences.append(r)
    assert sentences[-1]["last"] == len(text) - 1 and sum(s["closed"] == "mark" for s in sentences) >= 2
    said = [finals[i] for i in range(len(text))]
    whole = caption_text([e["word"] for e in said], [e["label"] for e in said])
    assert " ".join(s["text"] for s in sentences) == whole and "COAST" in whole
    assert "sentence" not in {r["type"] for r in asyncio.run(talk(server, messages, max_delay_ms=1000))}


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
    runs = shipped.engine_name(engine, lookahead)  # auto: the checkpoint's window_from
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


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """The server's /metrics, parsed as Prometheus parses it: {(sample, labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url.replace("ws://", "http://") + "/metrics") as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=")
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_metrics_count_what_the_server_did(server):
    """/metrics (Prometheus text, no token on loopback as /health): sessions by endpoint, final
    words, batch sizes and the decision lag, the workers' load; counters from the start."""
    before = scrape(server)
    replies = [asyncio.run(talk(server, [{"type": "words", "words": WORDS}])) for _ in range(2)]
    after = scrape(server)

    def grew(name, labels=()):
        return after[(name, labels)] - before.get((name, labels), 0.0)

    assert grew("streampunct_sessions_total", (("endpoint", "punct"),)) == 2
    assert grew("streampunct_sessions_total", (("endpoint", "asr"),)) == 0
    assert after[("streampunct_failed_sessions_total", (("endpoint", "punct"),))] == 0
    assert grew("streampunct_final_words_total") == 2 * len(WORDS) == sum(len(finals(r)) for r in replies)
    batches = grew("streampunct_batch_size_count")
    assert batches >= 2 and grew("streampunct_batch_size_sum") >= batches
    assert grew("streampunct_decision_lag_seconds_count") == grew("streampunct_batch_size_sum")  # one a job
    assert 0 < grew("streampunct_decision_lag_seconds_sum") < 60
    assert after[("streampunct_open_streams", ())] == 0
    assert after[("streampunct_punctuation_capacity", ())] > 0
    assert 0 <= after[("streampunct_punctuation_load", ())] <= 1
    assert after[("streampunct_recognition_guarded_passes_total", (("guard", "loop"),))] == 0


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
    "runpy.run_module('streampunct.clients.words', run_name='__main__')"
)


def words_client(url: str, tmp_path, lines: list[str], *flags: str) -> subprocess.CompletedProcess:
    """``streampunct/clients/words.py`` without the models, on a file of these JSON lines."""
    f = tmp_path / "words.jsonl"
    f.write_text("\n".join(lines) + "\n")
    command = [sys.executable, "-c", WITHOUT_MODELS, "--url", url, *flags, str(f)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_words_client(server, tmp_path):
    bad = [json.dumps({"text": "late", "start": -1}), json.dumps({"revise": "x"})]
    lines = [json.dumps({"text": w}) for w in WORDS[:6]] + ["oops", *bad, json.dumps({"words": WORDS[6:]})]
    out = words_client(server, tmp_path, lines)
    assert out.returncode == 0, out.stderr
    assert "skipped: input line 7 is not JSON" in out.stderr
    assert 'skipped: input line 8: "start" must be a finite number >= 0, got -1' in out.stderr
    assert 'skipped: input line 9: "index" must be a word index >= 0, got "x"' in out.stderr
    text = " ".join(out.stdout.split())
    assert [w.strip(",.?").lower() for w in text.split()] == [
        w for w in " ".join(WORDS).replace(" n't", "n't").split()
    ]
    assert text[0].isupper()


def test_words_client_prints_the_servers_sentences_one_a_line(server, tmp_path):
    """``--sentences``: the server's sentence messages, one a line, as a stream asking for them
    gets them; the default output cuts the same sentences from the events, and gives the last,
    unmarked, its period."""
    words = WORDS * 2 + ["and", "then"]
    lines = [json.dumps({"words": words[i : i + 7]}) for i in range(0, len(words), 7)]
    out, default = words_client(server, tmp_path, lines, "--sentences"), words_client(server, tmp_path, lines)
    assert out.returncode == default.returncode == 0, out.stderr + default.stderr
    replies = asyncio.run(talk(server, [{"type": "words", "words": words}], sentences=True))
    sentences = [r for r in replies if r["type"] == "sentence"]
    assert out.stdout.splitlines() == [r["text"] for r in sentences] and len(sentences) >= 3
    assert sentences[-1]["closed"] == "end" and out.stdout.endswith("\nAnd then\n")
    assert default.stdout.splitlines() == [r["text"] for r in sentences[:-1]] + [sentences[-1]["text"] + "."]


def test_words_client_sends_no_faster_than_the_server_computes(tmp_path):
    """A file of many more words than a stream may have waiting (``max_waiting_words = 60``), sent as
    fast as the client can: without flow control its later messages were refused ``busy`` and
    their words lost; the client keeps half the bound in flight, so every word is printed."""
    (tmp_path / "c.toml").write_text('[limits]\nmax_waiting_words = 60\nwords_per_s = "off"\n')
    proc, url = start_server("--config", str(tmp_path / "c.toml"))
    try:
        words = (WORDS * 20)[:400]
        lines = [json.dumps({"words": words[i : i + 25]}) for i in range(0, len(words), 25)]
        out = words_client(url, tmp_path, lines)
    finally:
        stop_server(proc)
    assert out.returncode == 0 and "busy" not in out.stderr, out.stderr
    printed = " ".join(out.stdout.split()).replace("n't", " n't")
    assert [w.strip(",.?").lower() for w in printed.split()] == words


def test_words_client_refuses_text_that_is_not_unicode(server, tmp_path):
    """A lone surrogate crashed the client (a traceback, exit 1): escaped in JSON, the line is
    refused as the server refuses such a message, and the stream goes on; as bytes that are not
    UTF-8 (bash's printf '\\ud800'), the input ends there: the words before it are finished, then
    one line, exit 2."""
    f = tmp_path / "words.jsonl"
    f.write_bytes(b'{"words": ["so", "what"]}\n{"text": "\\ud800"}\n{"words": ["did", "you"]}\n')
    out = subprocess.run(
        [sys.executable, "-m", "streampunct", "words", "--url", server, str(f)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert "skipped: input line 2: the message holds a lone surrogate" in out.stderr
    assert [w.strip(",.?").lower() for w in out.stdout.split()] == ["so", "what", "did", "you"]
    out = subprocess.run(
        [sys.executable, "-m", "streampunct", "words", "--url", server],
        input=b'{"words": ["so", "what"]}\n{"text":"\xed\xa0\x80"}\n{"words": ["did"]}\n',
        capture_output=True,
        timeout=60,
    )
    err = out.stderr.decode()
    assert out.returncode == 2 and "Traceback" not in err, err
    assert err.strip().splitlines() == ["streampunct words: error: input line 2 is not UTF-8 text"]
    assert [w.strip(",.?").lower() for w in out.stdout.decode().split()] == ["so", "what"]


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
        [sys.executable, "-m", "streampunct.clients.words", "--url", server, "--lookahead", "99", str(f)],
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
    from streampunct.server.app import App
    from streampunct.server.host import LocalHost
    from tests.test_scheduler import broken_copy

    p = broken_copy(tiny)
    app = App(LocalHost(p))

    async def main():
        replies = [await app.health()]
        with pytest.raises(IndexError):
            await app.host.batcher.push(p.stream(lookahead=1), ["hello"])
        replies.append(await app.health())
        p.model.tok_emb = tiny.model.tok_emb  # the machine recovers
        replies.append(await app.health())
        await app.host.stop()
        return [(r.status_code, json.loads(r.body)) for r in replies]

    (ok, first), (failing, second), (again, third) = asyncio.run(main())
    assert (ok, first["status"]) == (200, "ok")
    assert (failing, second["status"]) == (503, "failing") and "IndexError" in second["error"]
    assert (again, third["status"]) == (200, "ok")


# Issue 48, overload: one client sends two 1000-word messages of long words at lookahead 64 (about
# 90 s of compute each on 2 cores), and a third message; a neighbour sends a word a message, ten a
# second, at lookahead 0. Both clients ping every second and give up after 3 s without a pong.
LONG = "internationalisation counterrevolutionaries incomprehensibility uncharacteristically".split()
NEIGHBOUR_WORDS = 50


@pytest.fixture(scope="module")
def overload():
    """The scenario, run once against a server with the default limits; what each client saw. A
    hog a batching lane (the server has one a core: /health says how many), so that every lane
    is busy and the neighbour shares its lane with a hog."""
    proc, url = start_server()
    seen: dict = {}
    health = url.replace("ws://", "http://") + "/health"

    async def go():
        keep = dict(ping_interval=1, ping_timeout=3)
        neighbour = await connect(url + "/v1/punct", **keep)
        await neighbour.send(json.dumps({"type": "config", "lookahead": 0, "max_delay_ms": None}))
        await neighbour.recv()
        lanes = json.loads(await asyncio.to_thread(lambda: urllib.request.urlopen(health).read()))["lanes"]
        hog, *others = [await connect(url + "/v1/punct", **keep) for _ in range(lanes)]
        for h in (hog, *others):
            await h.send(json.dumps({"type": "config", "lookahead": 64, "max_delay_ms": None}))
            await h.recv()
            for n in (1000, 1000, 20):
                await h.send(json.dumps({"type": "words", "words": [LONG[i % 4] for i in range(n)]}))
            await asyncio.sleep(0.5)  # it has its lane, busy, before the next comes
        hog_replies: list = []

        async def hog_reads():
            with contextlib.suppress(ConnectionClosed):
                async for raw in hog:
                    hog_replies.append(json.loads(raw))

        hog_reading = asyncio.create_task(hog_reads())
        sent: dict[int, float] = {}
        arrived: dict[int, float] = {}
        replies: list = []

        async def neighbour_reads():
            with contextlib.suppress(ConnectionClosed):  # its close code says how it ended
                async for raw in neighbour:
                    msg = json.loads(raw)
                    replies.append(msg)
                    for e in msg.get("events", []):
                        if e["final"]:
                            arrived[e["index"]] = time.monotonic()

        reading = asyncio.create_task(neighbour_reads())
        for i in range(NEIGHBOUR_WORDS):
            sent[i] = time.monotonic()
            with contextlib.suppress(ConnectionClosed):
                await neighbour.send(json.dumps({"type": "words", "words": [WORDS[i % len(WORDS)]]}))
            await asyncio.sleep(0.1)
        try:  # the server has computed for 5 s and more: a new stream is refused, not queued
            await connect(url + "/v1/punct")
        except InvalidStatus as e:
            seen["refused"] = (e.response.status_code, e.response.headers.get("Retry-After"), e.response.body)
        seen["health"] = json.loads(await asyncio.to_thread(lambda: urllib.request.urlopen(health).read()))
        with contextlib.suppress(ConnectionClosed):
            await neighbour.send(json.dumps({"type": "end"}))
        await asyncio.wait_for(reading, 30)
        seen["neighbour"] = (replies, neighbour.close_code, {i: arrived[i] - sent[i] for i in arrived})
        seen["hog_open"] = hog.close_code is None
        # a client arriving now, the server having computed all of the last 5 s: refused busy, it
        # tries again as Retry-After says, and gets its stream once the load is down (the hogs
        # leave once it has been refused: before, they could be gone and the load down first)
        late = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "streampunct", "words", "--url", url,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert late.stdin and late.stderr
        late.stdin.write(json.dumps({"words": WORDS[:6]}).encode())
        late.stdin.close()
        told = b""
        while b"trying again" not in told:
            line = await asyncio.wait_for(late.stderr.readline(), 30)
            if not line:
                break
            told += line
        for h in (hog, *others):
            await h.close()
        hog_reading.cancel()
        seen["hog"] = hog_replies
        out, err = await asyncio.wait_for(late.communicate(), 90)
        seen["late"] = (late.returncode, out.decode(), (told + err).decode())

    try:
        asyncio.run(go())
    finally:
        stop_server(proc)
    return seen


def test_a_neighbour_of_a_large_message_keeps_its_connection_and_every_final(overload):
    """Today the neighbour's messages waited one 3-second batch each; its 32 queued messages
    stopped the server reading it, its pings went unanswered, and it was dropped (1011)."""
    replies, close_code, waits = overload["neighbour"]
    assert close_code == 1000, close_code
    assert replies[-1] == {"type": "end", "words": NEIGHBOUR_WORDS}
    assert len(finals(replies)) == NEIGHBOUR_WORDS
    # each word final within its 0.25 s slices of the large message's compute, and its own
    assert max(waits.values()) < 3.0, sorted(waits.values())[-5:]


def test_a_stream_too_far_ahead_of_compute_is_told_busy_and_kept(overload):
    """The sender of the large messages has 2000 words waiting (words_burst): its third message
    is not taken (`busy`, where the stream stopped taking words), and it stays connected."""
    assert overload["hog_open"]
    busy = [r for r in overload["hog"] if r["type"] == "error"]
    assert busy and busy[0]["code"] == "busy" and busy[0]["word"] == 2000, busy
    for r in overload["hog"]:
        validate(r)


def test_past_its_capacity_the_server_refuses_new_streams_with_retry_after(overload):
    status, retry_after, body = overload.get("refused", (None, None, b"{}"))
    assert status == 503 and retry_after is not None and int(retry_after) >= 1
    assert json.loads(body)["code"] == "busy"


def test_health_says_how_busy_the_server_is_and_what_it_gets_done(overload):
    """What a load balancer weighs: the punctuation worker's load past --max-load (0.9) while it
    refuses new streams, and the words a second of computing it gets done."""
    punctuation = overload["health"]["punctuation"]
    assert punctuation["load"] >= 0.9 and punctuation["capacity"] > 0, overload["health"]


def test_a_client_refused_busy_tries_again_as_it_is_told(overload):
    """The clients took a 503 as final: one line, exit 2. They now wait as Retry-After says (for
    BUSY_RETRY_S in all) and get their stream once the server has room."""
    code, out, err = overload["late"]
    assert code == 0, err
    assert "trying again in 5 s" in err
    assert [w.strip(",.?").lower() for w in out.split()] == WORDS[:6]
