"""A server safe to expose, tried as an attacker would on loopback (a real `streampunct serve`):
tokens, origins, TLS, the page's headers, the limits of a connection, unencodable text, and a
SIGTERM while every stream still has work queued."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from websockets.asyncio.client import connect
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from tests.browser import cdp_eval, chromium, needs_chromium
from tests.test_server import WORDS, finals, start_server, stop_server, validate

CONFIG = json.dumps({"type": "config", "version": 1, "lookahead": 2, "max_delay_ms": None})


async def replies_until_closed(ws) -> list[dict]:
    out = []
    try:
        async for raw in ws:
            out.append(json.loads(raw))
    except ConnectionClosed:
        pass
    for r in out:
        validate(r)
    return out


async def refused(url: str, **kwargs) -> tuple[int, dict, Headers]:
    """The HTTP status, JSON body and headers of a refused handshake."""
    with pytest.raises(InvalidStatus) as e:
        await connect(url, **kwargs)
    response = e.value.response
    return response.status_code, json.loads(response.body), response.headers


def handshake(url: str, *headers: tuple[str, str], path: str = "/v1/punct") -> tuple[int, dict | None]:
    """An opening handshake with exactly these headers, as a browser sends it after DNS rebinding
    (its Host is the attacker's name, which now resolves to this server): the HTTP status, and the
    JSON body of a refusal."""
    where = urlsplit(url)
    key = ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
    upgrade = [("Upgrade", "websocket"), ("Connection", "Upgrade"), key, ("Sec-WebSocket-Version", "13")]
    lines = [f"GET {path} HTTP/1.1", *(f"{k}: {v}" for k, v in (*headers, *upgrade)), "", ""]
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        sock.sendall("\r\n".join(lines).encode())
        data = b""
        while b"\r\n\r\n" not in data and (chunk := sock.recv(65536)):
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        if status == 101:
            return status, None
        while chunk := sock.recv(65536):  # a refusal: its body, up to the close
            body += chunk
    return status, json.loads(body)


async def opens(url: str, **kwargs) -> dict:
    """The ready message of a stream that opens."""
    async with connect(url, **kwargs) as ws:
        await ws.send(CONFIG)
        ready = json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "end"}))
        return ready


@pytest.fixture(scope="module")
def guarded():
    proc, url = start_server(
        "--token",
        "s3cret token",
        "--allow-origin",
        "https://captions.example",
        "--allow-host",
        "Captions.Example",
    )
    yield url
    stop_server(proc)


def test_a_token_is_checked_before_the_websocket_opens(guarded):
    punct = guarded + "/v1/punct"

    async def go():
        status, body, headers = await refused(punct)
        assert (status, body["code"]) == (401, "unauthorized")
        assert headers["WWW-Authenticate"].startswith("Bearer")
        status, body, _ = await refused(punct, additional_headers={"Authorization": "Bearer s3cret"})
        assert status == 401
        status, _, _ = await refused(punct + "?token=nope")
        assert status == 401
        bearer = {"Authorization": "Bearer s3cret token"}
        assert (await opens(punct, additional_headers=bearer))["type"] == "ready"
        assert (await opens(punct + "?token=s3cret%20token"))["type"] == "ready"  # the browser's way

    asyncio.run(go())
    http = guarded.replace("ws://", "http://")
    with urllib.request.urlopen(http + "/health") as r:  # a probe needs no token, and learns nothing
        assert json.loads(r.read())["status"] == "ok"
    with urllib.request.urlopen(http + "/metrics") as r:  # nor does a scrape: counts, no content
        assert b"streampunct_open_streams" in r.read()


def test_only_allowed_origins_may_open_streams(guarded):
    punct = guarded + "/v1/punct?token=s3cret%20token"
    own = guarded.replace("ws://", "http://")
    port = urlsplit(own).port
    elsewhere = own.replace(f":{port}", f":{port + 1}")  # another page on this machine

    async def go():
        for origin in ("http://evil.example", "null", elsewhere, own.replace("http:", "https:")):
            status, body, _ = await refused(punct, origin=origin)
            assert (status, body["code"]) == (403, "forbidden_origin"), origin
        # the server's own page by any name it answers to; an allowed origin; not a browser
        by_name = own.replace("127.0.0.1", "localhost")
        for origin in (own, by_name, f"http://captions.example:{port}", "https://captions.example", None):
            assert (await opens(punct, origin=origin))["type"] == "ready", origin

    asyncio.run(go())


def test_a_host_it_does_not_answer_to_is_refused_before_the_upgrade(limited, guarded):
    """DNS rebinding: a page on evil.example whose name now resolves to this server opens a socket
    to it with its own name as Host and Origin. With no token (the default) the Origin check alone
    stood in its way, and it compared the Origin with that Host."""
    port = urlsplit(limited).port
    evil = ("Host", f"evil.example:{port}")
    for path in ("/v1/punct", "/v1/asr", "/health", "/metrics", "/"):
        status, body = handshake(limited, evil, ("Origin", f"http://evil.example:{port}"), path=path)
        assert (status, body["code"]) == (403, "forbidden_host") and "evil.example" in body["message"], path
    assert handshake(limited, evil)[0] == 403  # not a browser: the same
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "LOCALHOST", f"[::1]:{port}"):
        assert handshake(limited, ("Host", host))[0] == 101, host
        assert handshake(limited, ("Host", host), ("Origin", f"http://localhost:{port}"))[0] == 101, host
    # --allow-host names one more (any case); the token is still checked
    named = ("Host", f"captions.example:{urlsplit(guarded).port}")
    assert handshake(guarded, named, ("Authorization", "Bearer s3cret token"))[0] == 101
    assert handshake(guarded, named)[0] == 401


def test_a_handshake_with_two_hosts_is_a_bad_request(limited):
    port = urlsplit(limited).port
    for name in ("Host", "Origin"):
        twice = [("Host", f"127.0.0.1:{port}")] * (name == "Host") + [(name, "http://localhost"), (name, "x")]
        status, body = handshake(limited, *twice)
        assert (status, body["code"]) == (400, "bad_request") and name in body["message"], name


def test_the_page_has_a_content_security_policy_and_names_no_versions(guarded):
    http = guarded.replace("ws://", "http://")
    with urllib.request.urlopen(http + "/") as r:
        page, headers = r.read().decode(), r.headers
    csp = headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "frame-ancestors 'none'" in csp and "'sha256-" in csp
    assert "unsafe-inline" not in csp
    assert headers["X-Frame-Options"] == "DENY" and headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Server"] == "streampunct"
    assert "autostart" not in page  # the microphone opens only when the user presses Start


@needs_chromium
def test_a_page_on_another_origin_cannot_open_a_stream(guarded):
    """Cross-site WebSocket hijacking: a page elsewhere, which knows even the token, is refused;
    the server's own page, on its own origin, is not."""
    target_url = guarded + "/v1/punct?token=s3cret%20token"
    probe = (
        "<!doctype html><title>probe</title><script>"
        f"const probe = new WebSocket({json.dumps(target_url)});"  # not `ws`: the page has its own
        "probe.onopen = () => { document.title = 'open'; };"
        "probe.onerror = () => { document.title = 'refused'; };"
        "</script>"
    ).encode()

    class Page(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(probe)

        def log_message(self, *args):
            pass

    foreign = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    try:

        def outcome(url: str, run_probe: bool = False) -> object:
            """The probe's verdict in the page at ``url`` (``run_probe``: run it there first)."""
            with chromium(url) as target:
                if run_probe:
                    asyncio.run(cdp_eval(target, probe.decode().split("<script>")[1].split("</script>")[0]))
                title = None
                for _ in range(100):
                    title = asyncio.run(cdp_eval(target, "document.title"))
                    if title in ("open", "refused"):
                        break
                    time.sleep(0.1)
                return title

        assert outcome(f"http://127.0.0.1:{foreign.server_address[1]}/") == "refused"
        own = guarded.replace("ws://", "http://")
        assert outcome(own + "/", run_probe=True) == "open"  # the same probe, in the server's own page
    finally:
        foreign.shutdown()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_tls(tmp_path, shipped):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost"]
        + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    proc, url = start_server("--certfile", str(cert), "--keyfile", str(key))
    try:
        assert url.startswith("wss://")
        trust = ssl.create_default_context(cafile=str(cert))

        async def go():
            async with connect(url + "/v1/punct", ssl=trust) as ws:
                await ws.send(CONFIG)
                await ws.send(json.dumps({"type": "words", "words": WORDS}))
                await ws.send(json.dumps({"type": "end"}))
                replies = await replies_until_closed(ws)
            with pytest.raises(ssl.SSLCertVerificationError):  # a client that does not trust it
                await connect(url + "/v1/punct")
            with pytest.raises((InvalidHandshake, OSError)):  # plain websockets to a TLS port
                await connect(url.replace("wss://", "ws://") + "/v1/punct", open_timeout=5)
            return replies

        replies = asyncio.run(go())
        assert finals(replies) == shipped.predict(WORDS, lookahead=2)
    finally:
        stop_server(proc)


def test_a_bad_certificate_is_one_line_at_start(tmp_path):
    bad = tmp_path / "cert.pem"
    bad.write_text("not a certificate")
    command = [sys.executable, "-m", "streampunct.server.app", "--port", "0", "--device", "cpu"]
    done = subprocess.run(
        [*command, "--certfile", str(bad), "--keyfile", str(bad)], capture_output=True, text=True
    )
    assert done.returncode == 2 and "error: cannot use" in done.stderr


def test_a_beam_under_one_is_refused_at_start(capsys, tmp_path):
    from streampunct.server.app import main

    (tmp_path / "beam.toml").write_text("[recognizer]\nbeam_size = 0\n")
    (tmp_path / "chunk.toml").write_text("[recognizer]\nmin_chunk_s = 0\n")
    with pytest.raises(SystemExit) as stopped:
        main(["--config", str(tmp_path / "beam.toml")])
    assert stopped.value.code == 2 and "beam_size must be 1 or more, not 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["--config", str(tmp_path / "chunk.toml")])
    assert stopped.value.code == 2 and "min_chunk_s must be over 0, not 0.0" in capsys.readouterr().err


# --- limits ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    config = tmp_path_factory.mktemp("limited") / "c.toml"
    config.write_text(
        "[limits]\nconfig_timeout_s = 0.5\nwords_timeout_s = 0.8\nidle_timeout_s = 1.5\nmax_session_s = 6\n"
        "words_per_s = 20\nwords_burst = 20\nmax_wait_s = 1\n"
    )
    proc, url = start_server("--config", str(config))
    yield url
    stop_server(proc)


def test_a_connection_that_never_configures_is_closed(limited):
    async def go():
        async with connect(limited + "/v1/punct") as ws:
            t0 = time.monotonic()
            replies = await replies_until_closed(ws)
            return replies, ws.close_code, time.monotonic() - t0

    replies, code, waited = asyncio.run(go())
    assert [r["code"] for r in replies] == ["config_timeout"] and code == 1008
    assert waited < 3


def test_an_idle_stream_is_finished_not_dropped(limited, shipped):
    async def go():
        async with connect(limited + "/v1/punct") as ws:
            await ws.send(CONFIG)
            await ws.send(json.dumps({"type": "words", "words": WORDS}))
            return await replies_until_closed(ws), ws.close_code

    replies, code = asyncio.run(go())
    assert [r.get("code") for r in replies if r["type"] == "error"] == ["idle_timeout"]
    assert replies[-1] == {"type": "end", "words": len(WORDS), "reason": "idle timeout"} and code == 1008
    assert finals(replies) == shipped.predict(WORDS, lookahead=2)


def test_a_stream_that_takes_no_words_is_finished_sooner(limited):
    """A config and then nothing held a slot for the whole idle timeout: the words timeout is shorter."""

    async def go():
        async with connect(limited + "/v1/punct") as ws:
            await ws.send(CONFIG)
            t0 = time.monotonic()
            await ws.send(json.dumps({"type": "tick", "now": 1.0}))  # a tick is no word
            return await replies_until_closed(ws), ws.close_code, time.monotonic() - t0

    replies, code, waited = asyncio.run(go())
    assert [r.get("code") for r in replies if r["type"] == "error"] == ["words_timeout"]
    assert replies[-1] == {"type": "end", "words": 0, "reason": "words timeout"} and code == 1008
    assert waited < 3


def test_ticks_and_bad_messages_do_not_keep_a_stream_alive(limited, shipped):
    """One tick (or any message the stream does not take) every 599 s kept a stream for 12 hours:
    only words reset the idle timeout."""

    async def go():
        async with connect(limited + "/v1/punct") as ws:
            await ws.send(CONFIG)
            await ws.send(json.dumps({"type": "words", "words": WORDS}))
            t0 = time.monotonic()
            with contextlib.suppress(ConnectionClosed):
                for i in range(40):
                    bad = i % 2 and "not json"
                    await ws.send(bad or json.dumps({"type": "tick", "now": 1.0 + i}))
                    await asyncio.sleep(0.2)
            return await replies_until_closed(ws), ws.close_code, time.monotonic() - t0

    replies, code, waited = asyncio.run(go())
    errors = [r["code"] for r in replies if r["type"] == "error"]
    assert "idle_timeout" in errors and "session_too_long" not in errors and code == 1008
    assert replies[-1] == {"type": "end", "words": len(WORDS), "reason": "idle timeout"}
    assert finals(replies) == shipped.predict(WORDS, lookahead=2)
    assert waited < 5


def test_one_client_cannot_hold_every_slot():
    """Bound beyond loopback, a client address may hold STREAMS_PER_CLIENT streams at once by
    default (HTTP 429 beyond); one that closes frees its slot."""
    from streampunct.options import STREAMS_PER_CLIENT

    proc, url = start_server("--host", "0.0.0.0")
    url = url.replace("0.0.0.0", "127.0.0.1")
    try:

        async def go():
            held = [await connect(url + "/v1/punct") for _ in range(STREAMS_PER_CLIENT)]
            for ws in held:
                await ws.send(CONFIG)
                assert json.loads(await ws.recv())["type"] == "ready"
            status, body, _ = await refused(url + "/v1/asr")
            assert (status, body["code"]) == (429, "too_many_client_streams")
            await held.pop().close()
            await asyncio.sleep(0.5)
            assert (await opens(url + "/v1/punct"))["type"] == "ready"
            for ws in held:
                await ws.close()

        asyncio.run(go())
    finally:
        stop_server(proc)


def test_a_stream_may_last_so_long(limited):
    async def go():
        async with connect(limited + "/v1/punct") as ws:
            await ws.send(CONFIG)
            sent = 0
            try:
                while True:  # a word a second, never idle
                    await ws.send(json.dumps({"type": "words", "words": ["word"]}))
                    sent += 1
                    await asyncio.sleep(1.0)
            except ConnectionClosed:
                pass
            return await replies_until_closed(ws), sent

    t0 = time.monotonic()
    replies, sent = asyncio.run(go())
    assert 5.5 < time.monotonic() - t0 < 9
    assert "session_too_long" in [r.get("code") for r in replies]
    # every word sent is final, but for one the client may have sent while the server finished
    assert replies[-1]["type"] == "end" and sent - 1 <= replies[-1]["words"] <= sent


def test_a_client_ahead_of_its_rate_is_slowed_then_refused(limited, shipped):
    """20 words a second with 20 in hand: the first 20 at once, the next 10 after about half a
    second; 60 more at once would take 3 s, more than the 1 s a message may wait: refused, and the
    stream is finished with every word taken final."""

    async def go():
        async with connect(limited + "/v1/punct") as ws:
            await ws.send(CONFIG)
            await ws.recv()
            t0 = time.monotonic()
            await ws.send(json.dumps({"type": "words", "words": WORDS}))
            await ws.send(json.dumps({"type": "words", "words": WORDS[:10]}))
            await ws.send(json.dumps({"type": "tick", "now": 1.0}))
            while "events" not in (reply := json.loads(await ws.recv())) or not any(
                e["index"] >= 20 for e in reply["events"]
            ):
                pass
            slowed = time.monotonic() - t0
            await ws.send(json.dumps({"type": "words", "words": WORDS * 3}))
            return slowed, await replies_until_closed(ws), ws.close_code

    slowed, replies, code = asyncio.run(go())
    assert slowed >= 0.35
    errors = [r for r in replies if r["type"] == "error"]
    assert [e["code"] for e in errors] == ["rate_limited"] and errors[0]["word"] == 30
    assert replies[-1] == {"type": "end", "words": 30, "reason": "rate limit"} and code == 1008


# --- text that cannot be sent back, and a SIGTERM under load ----------------------------------


def test_lone_surrogates_are_bad_messages(guarded, shipped):
    punct = guarded + "/v1/punct?token=s3cret%20token"

    async def go():
        async with connect(punct) as ws:
            await ws.send(CONFIG)
            await ws.send('{"type": "words", "words": ["a\\ud800b"]}')
            await ws.send('{"type": "wor\\udfffds", "words": ["x"]}')
            await ws.send('{"type": "words", "words": [{"text": "\\ud800"}]}')
            await ws.send('{"type": "words", "words": ["\\ud83d\\ude00"]}')  # a pair is a character
            await ws.send(json.dumps({"type": "words", "words": WORDS}))
            await ws.send(json.dumps({"type": "end"}))
            return await replies_until_closed(ws)

    replies = asyncio.run(go())
    assert [r["code"] for r in replies if r["type"] == "error"] == ["bad_message"] * 3
    assert replies[-1] == {"type": "end", "words": 1 + len(WORDS)}
    assert finals(replies) == shipped.predict(["\U0001f600", *WORDS], lookahead=2)


def test_version_true_is_not_version_1(guarded):
    async def go():
        async with connect(guarded + "/v1/punct?token=s3cret%20token") as ws:
            await ws.send(json.dumps({"type": "config", "version": True}))
            return json.loads(await ws.recv())

    assert asyncio.run(go())["code"] == "unsupported_version"


def test_sigterm_while_behind_finishes_every_stream(shipped, tmp_path):
    """Six streams send 40 words each in messages of 4, as fast as they can, then the server gets
    SIGTERM: it stops taking new streams, takes what each client had sent, and every word gets its
    final decision and every client its end."""
    (tmp_path / "c.toml").write_text('[limits]\nwords_per_s = "off"\n')
    proc, url = start_server("--config", str(tmp_path / "c.toml"))
    texts = [(WORDS * 3)[i : i + 40] for i in range(6)]
    try:

        async def one(words, sent):
            async with connect(url + "/v1/punct") as ws:
                await ws.send(CONFIG)
                for i in range(0, len(words), 4):
                    await ws.send(json.dumps({"type": "words", "words": words[i : i + 4]}))
                sent.set()
                return await replies_until_closed(ws)

        async def go():
            sent = [asyncio.Event() for _ in texts]
            streams = [asyncio.create_task(one(w, s)) for w, s in zip(texts, sent)]
            for s in sent:
                await s.wait()
            proc.send_signal(signal.SIGTERM)
            await asyncio.sleep(0.3)
            status, body, _ = await refused(url + "/v1/punct")  # no new streams while stopping
            assert (status, body["code"]) == (503, "shutting_down")
            return await asyncio.gather(*streams)

        for words, replies in zip(texts, asyncio.run(go())):
            assert replies[-1] == {"type": "end", "words": 40, "reason": "server shutting down"}
            assert finals(replies) == shipped.predict(words, lookahead=2)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
