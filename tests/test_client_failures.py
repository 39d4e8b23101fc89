"""No data lost when a session fails: the clients against a server that dies (a real `streampunct
serve`, killed with SIGKILL) and against a small real websocket server that fails each stream the
three ways a stream can end early (an `internal` error then close 1011, close 1011 alone, the TCP
connection cut). Each client keeps what it received, says what happened in one line, exits with 1,
and prints no traceback. Nor when the user stops it: Ctrl-C keeps what was shown, exit status 130."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import wave
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import jsonschema
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve

from streampunct.clients import file, words
from tests.test_e2e import SENTENCES, ctrl_c_reaches_it, needs_espeak, words_of
from tests.test_server import WORDS, start_server, validate

ROOT = Path(__file__).parent.parent

# What the failing server sends: protocol v1 messages, checked against docs/schema below.
READY = {
    "/v1/asr": {
        "type": "ready", "version": 1, "session": "000001", "lookahead": 2, "max_delay_ms": 1500,
        "engine": "window", "sample_rate": 16000,
    },
    "/v1/punct": {
        "type": "ready", "version": 1, "session": "000001", "lookahead": 2, "max_delay_ms": 1500,
        "engine": "window",
    },
}  # fmt: skip
BEFORE_FAILING = {
    "/v1/asr": [
        {"type": "caption", "text": "So what did you do?", "start": 0.1, "end": 1.2, "first": 0, "last": 4},
        {"type": "caption", "text": "We went", "start": 1.5, "end": 1.9, "first": 5, "last": 6},
    ],
    "/v1/punct": [
        {
            "type": "events",
            "events": [
                {"index": i, "word": w, "label": label, "mark": mark, "final": True}
                for i, (w, label, mark) in enumerate(
                    [("so", "O", ""), ("what", "O", ""), ("did", "O", ""), ("you", "O", ""),
                     ("do", "QUESTION", "?"), ("we", "O", ""), ("went", "O", "")]
                )
            ],
        }
    ],
}  # fmt: skip
INTERNAL = {
    "type": "error",
    "code": "internal",
    "message": "the server failed on this stream; it is closed",
    "word": 5,
}
REASONS = {
    "error": "the server closed the session: internal: the server failed on this stream; it is closed",
    "close": "the server closed the session with code 1011: internal error",
    "drop": "the connection to the server was lost",
}
STOPPED = {"error": "stopped at word 5; ", "close": "", "drop": ""}


def fail_after_first_data(ws: ServerConnection, ending: str) -> None:
    path = ws.request.path
    ws.recv()  # config
    ws.send(json.dumps(READY[path]))
    ws.recv()  # the first audio chunk or words
    for msg in BEFORE_FAILING[path]:
        ws.send(json.dumps(msg))
    if ending == "hang":  # nor the end of the stream answered: the client is left to give up
        with suppress(ConnectionClosed):
            for _ in ws:
                pass
        return
    if ending == "error":
        ws.send(json.dumps(INTERNAL))
    if ending in ("error", "close"):
        ws.close(1011, "internal error")
    else:  # as if the process died: no close frame
        ws.socket.shutdown(socket.SHUT_RDWR)


@contextmanager
def failing_server(ending: str) -> Iterator[str]:
    """A websocket server that fails every stream after its first data message, by ``ending``
    (``hang``: it then answers nothing, ``end`` included)."""
    with serve(lambda ws: fail_after_first_data(ws, ending), "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}"
        server.shutdown()
    thread.join(timeout=10)


def silence(path: Path, seconds: float) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(bytes(2 * int(16000 * seconds)))
    return path


def first_line(stream, timeout: float) -> str:
    """The next line of a child's output, or a failed test if none comes in ``timeout`` seconds.

    Read a byte at a time from the pipe itself: a buffered ``readline`` could take the next
    lines too, and ``communicate`` reads the pipe, not that buffer, so they would be lost."""
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        if not select.select([stream], [], [], max(0.0, deadline - time.monotonic()))[0]:
            pytest.fail(f"no output in {timeout} s")
        byte = os.read(stream.fileno(), 1)
        if not byte:
            break
        line += byte
    return line.decode()


def one_line(err: str, prog: str) -> str:
    """stderr holds no traceback and exactly one line from ``prog``: that line."""
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith(f"streampunct {prog}:")]
    assert len(lines) == 1, err
    return lines[0]


def cues(path: Path) -> list[str]:
    """The texts of an SRT or WebVTT file's cues (their lines joined)."""
    blocks = path.read_text().removeprefix("WEBVTT\n\n").strip().split("\n\n")
    return [" ".join(b.split(" --> ", 1)[1].split("\n")[1:]).strip() for b in blocks if " --> " in b]


def subtitled(prefix: Path) -> str:
    """The words of the subtitle files PREFIX.srt and PREFIX.vtt (the same in both)."""
    srt, vtt = cues(prefix.with_suffix(".srt")), cues(prefix.with_suffix(".vtt"))
    assert srt == vtt
    return " ".join(srt)


def test_the_failing_server_speaks_the_protocol():
    for msg in [*READY.values(), *(m for ms in BEFORE_FAILING.values() for m in ms), INTERNAL]:
        validate(msg)
    with pytest.raises(jsonschema.ValidationError):
        validate({**INTERNAL, "word": -1})


@pytest.mark.parametrize("ending", ["error", "close", "drop"])
def test_file_client_keeps_the_captions(ending, tmp_path, capsys):
    wav = silence(tmp_path / "talk.wav", 2)
    out = tmp_path / "talk"
    with failing_server(ending) as url:
        status = file.cli([str(wav), "--url", url, "--speed", "4", "--out", str(out)])
    stdout, err = capsys.readouterr()
    assert status == 1
    assert one_line(err, "file") == (
        f"streampunct file: error: {REASONS[ending]} ({STOPPED[ending]}after 2 captions; "
        f"wrote {out}.srt, {out}.vtt)"
    )
    texts = [m["text"] for m in BEFORE_FAILING["/v1/asr"]]
    assert [s.split("] ", 1)[1] for s in stdout.splitlines()] == texts
    assert subtitled(out) == " ".join(texts)


def test_file_client_without_subtitles_says_so(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    wav = silence(tmp_path / "talk.wav", 1)
    with failing_server("error") as url:
        status = file.cli([str(wav), "--url", url, "--speed", "0", "--no-subtitles"])
    assert status == 1
    assert one_line(capsys.readouterr().err, "file").endswith("(stopped at word 5; after 2 captions)")
    assert list(tmp_path.iterdir()) == [wav]


@pytest.mark.parametrize("ending", ["error", "close", "drop"])
def test_words_client_prints_what_it_received(ending, tmp_path, capsys):
    f = tmp_path / "words.jsonl"
    f.write_text("".join(json.dumps({"text": w}) + "\n" for w in WORDS))
    with failing_server(ending) as url:
        status = words.cli(["--url", url, str(f)])
    stdout, err = capsys.readouterr()
    assert status == 1
    stopped = " (stopped at word 5)" if ending == "error" else ""
    assert one_line(err, "words") == f"streampunct words: error: {REASONS[ending]}{stopped}"
    assert stdout.splitlines() == ["So what did you do?", "We went."]  # the last final words too


def fake_mic_env(tmp_path) -> dict[str, str]:
    """The environment of a mic client whose microphone (tests/fake_mic) plays a second of silence."""
    pcm = tmp_path / "silence.pcm"
    pcm.write_bytes(bytes(16000 * 2))
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "fake_mic"), str(ROOT)]),
        "FAKE_MIC_PCM": str(pcm),
    }


@pytest.mark.parametrize("ending", ["error", "drop"])
def test_mic_client_keeps_the_captions(ending, tmp_path):
    env = fake_mic_env(tmp_path)
    out = tmp_path / "live"
    with failing_server(ending) as url:
        mic = subprocess.run(
            [sys.executable, "-m", "streampunct.clients.mic", "--url", url, "--out", str(out)],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
        )
    assert mic.returncode == 1, mic.stderr
    assert one_line(mic.stderr, "mic") == (
        f"streampunct mic: error: {REASONS[ending]} ({STOPPED[ending]}after 2 captions; "
        f"wrote {out}.srt, {out}.vtt)"
    )
    texts = [m["text"] for m in BEFORE_FAILING["/v1/asr"]]
    assert subtitled(out) == " ".join(texts)


def test_a_second_ctrl_c_in_the_mic_client_keeps_the_captions_shown(tmp_path):
    """Issue 77: Ctrl-C ends the mic's stream and waits for the server's last words; a second one,
    before a server that does not answer, exited 130 with no subtitles and nothing said. It
    writes the captions shown, says so in one line, and exits with 130."""
    env = fake_mic_env(tmp_path)
    out = tmp_path / "live"
    with failing_server("hang") as url:
        mic = subprocess.Popen(
            [sys.executable, "-m", "streampunct.clients.mic", "--url", url, "--out", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
            preexec_fn=ctrl_c_reaches_it,
        )
        try:
            texts = [m["text"] for m in BEFORE_FAILING["/v1/asr"]]
            for text in texts:  # each caption shown: a line of its own
                assert text in first_line(mic.stdout, 30)
            mic.send_signal(signal.SIGINT)
            while not first_line(mic.stderr, 10).startswith("Stopping"):
                pass
            mic.send_signal(signal.SIGINT)
            _, err = mic.communicate(timeout=30)
        finally:
            mic.kill()
    assert mic.returncode == 130, err
    line = one_line(err, "mic")
    assert line == f"streampunct mic: interrupted (after 2 captions; wrote {out}.srt, {out}.vtt)"
    assert err.strip().count("\n") == 0, err
    assert subtitled(out) == " ".join(texts)


@pytest.fixture
def speech(tmp_path) -> Path:
    wav = tmp_path / "speech.wav"
    text = " ".join(SENTENCES * 2)  # longer than the test: the server dies after the first caption
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "140", "-g", "8", "-w", str(wav), text], check=True)
    return wav


@needs_espeak
def test_file_client_when_the_asr_server_is_killed(speech, tmp_path):
    server, url = start_server("--preload-asr")
    out = tmp_path / "talk"
    client = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streampunct.clients.file",
            str(speech),
            "--url",
            url,
            "--speed",
            "1",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        first = first_line(client.stdout, 60)
        assert "] " in first, first  # "[   0.00s, 1.2s late] Hello everyone,"
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
        rest, err = client.communicate(timeout=60)
    finally:
        server.kill()
        client.kill()
    assert client.returncode == 1, err
    line = one_line(err, "file")
    texts = [s.split("] ", 1)[1] for s in (first + rest).splitlines() if "] " in s]
    assert line.startswith("streampunct file: error: the connection to the server was lost ("), line
    captions = f"{len(texts)} caption" + ("" if len(texts) == 1 else "s")
    assert line.endswith(f"after {captions}; wrote {out}.srt, {out}.vtt)"), line
    assert subtitled(out) == " ".join(texts)
    # nothing else on stderr but what the server said of its recognition (on a busy machine, that
    # its compute ratio passed the bound)
    assert [x for x in err.strip().splitlines() if not x.startswith("server: recognition")] == [line]


@needs_espeak
def test_ctrl_c_in_the_file_client_keeps_the_captions_shown(speech, tmp_path):
    """Issue 77: Ctrl-C in `streampunct file` printed two tracebacks (a task's exception never
    retrieved, SessionLost 1011) and wrote no subtitles. It writes the SRT and VTT of the captions
    shown, says so in one line, and exits with 130 (the models in its own process, as a newcomer
    runs it)."""
    out = tmp_path / "talk"
    client = subprocess.Popen(
        [sys.executable, "-m", "streampunct", "file", str(speech), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        preexec_fn=ctrl_c_reaches_it,
    )
    try:
        first = first_line(client.stdout, 120)
        assert "] " in first, first
        client.send_signal(signal.SIGINT)
        rest, err = client.communicate(timeout=60)
    finally:
        client.kill()
    assert client.returncode == 130, err
    texts = [s.split("] ", 1)[1] for s in (first + rest).splitlines() if "] " in s]
    captions = f"{len(texts)} caption" + ("" if len(texts) == 1 else "s")
    line = one_line(err, "file")
    assert line == f"streampunct file: interrupted (after {captions}; wrote {out}.srt, {out}.vtt)"
    assert subtitled(out) == " ".join(texts)
    # nothing else on stderr but the client's start and what it said of recognition
    said = err.strip().splitlines()
    assert [x for x in said if not x.startswith(("streampunct: loading", "recognition takes"))] == [line], err


def test_words_client_when_the_punct_server_is_killed(tmp_path):
    server, url = start_server()
    client = subprocess.Popen(
        [sys.executable, "-m", "streampunct.clients.words", "--url", url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    said = [w for s in SENTENCES for w in words_of(s)]  # "hello everyone and thank you ..."
    try:
        client.stdin.write("".join(json.dumps({"text": w}) + "\n" for w in said[:12]))
        client.stdin.flush()
        first = first_line(client.stdout, 30)  # "Hello everyone."
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
        rest, err = client.communicate("".join(json.dumps({"text": w}) + "\n" for w in said[12:]), 30)
    finally:
        server.kill()
        client.kill()
    assert client.returncode == 1, err
    assert one_line(err, "words") == "streampunct words: error: the connection to the server was lost"
    assert err.strip().count("\n") == 0
    assert first[0].isupper() and first.rstrip()[-1] in ".?", first  # a sentence before the kill
    received = words_of(first + rest)
    assert received == said[: len(received)] and len(received) <= 12, first + rest


def test_a_client_with_its_server_in_process_says_what_was_refused_without_a_server_prefix(tmp_path, capsys):
    """Issue 66: with no --url the user started no server, so the server's refusals are not
    labelled "server:" (a newcomer met warnings so prefixed in an in-process run)."""
    f = tmp_path / "words.jsonl"
    lines = [
        {"words": ["hello", "there", "how", "are", "you"]},
        {"revise": 0, "words": ["x"]},
        {"text": "today"},
    ]
    f.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert words.cli(["--lookahead", "0", str(f)]) == 0
    stdout, err = capsys.readouterr()
    refused = [line for line in err.splitlines() if "can revise from word" in line]
    assert refused and refused[0].startswith("bad_input: "), err
    assert stdout.split()[-1].startswith("Today")  # the stream went on after the refusal
