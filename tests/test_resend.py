"""Issue 63, item 3: `streampunct words` sends again what the server refuses (`busy`), so that every
word of its input is final exactly once, in order. A real server in this process (the shipped model,
the sessions of `streampunct serve`) with a tiny `max_waiting_words` limit; input lines of many words at
once, and ticks, drive the client into `busy`. What the server sent is read as the client reads it
(its receive, wrapped); the client runs as its command does (exit status, stdout, stderr)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import random
import re
import threading
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect

from streampunct import protocol as P
from streampunct.clients import words
from streampunct.options import Limits
from streampunct.server.app import App, run_server
from streampunct.server.host import LocalHost

VOCAB = "so what did you do we went to the market and bought some bread then came home".split()


@contextlib.contextmanager
def serving(punctuator: Any, max_waiting_words: int) -> Iterator[str]:
    """A server in a thread of this process (its own event loop), until the block ends; its URL."""
    started, box = threading.Event(), {}

    async def serve() -> None:
        # max_load off: streams one after another on one server are never refused for its load
        app = App(LocalHost(punctuator), limits=Limits(max_waiting_words=max_waiting_words, max_load=None))
        ready = asyncio.Event()
        server = asyncio.create_task(run_server(app, "127.0.0.1", 0, ready, standalone=False))
        await ready.wait()
        box.update(app=app, loop=asyncio.get_running_loop())
        started.set()
        await server

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    assert started.wait(60), "the server did not start"
    try:
        yield box["app"].url
    finally:
        box["loop"].call_soon_threadsafe(box["app"].stopping.set)
        thread.join(30)


@pytest.fixture(scope="module")
def server(shipped) -> Iterator[Any]:
    """The URL of a server with this `max_waiting_words` limit (each started once)."""
    urls: dict[int, str] = {}
    with contextlib.ExitStack() as stack:

        def url(max_waiting_words: int) -> str:
            if max_waiting_words not in urls:
                urls[max_waiting_words] = stack.enter_context(serving(shipped, max_waiting_words))
            return urls[max_waiting_words]

        yield url


def run(url: str, lines: list[dict], folder: Path, *flags: str) -> tuple[int, str, str, list, list[str]]:
    """`streampunct words --url URL FILE FLAGS` on these input lines: its exit status, stdout, stderr,
    the server's messages as the client read them, and the client's messages."""
    (folder / "in.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    received: list[P.ServerMessage] = []
    sent: list[str] = []
    messages, outgoing = words.messages, words.outgoing

    async def reading(ws: Any) -> Any:
        async for msg in messages(ws):
            received.append(msg)
            yield msg

    async def sending(*args: Any) -> Any:
        async for msg in outgoing(*args):
            sent.append(msg)
            yield msg

    out, err = io.StringIO(), io.StringIO()
    words.messages, words.outgoing = reading, sending
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = words.cli(["--url", url, str(folder / "in.jsonl"), *flags])
    finally:
        words.messages, words.outgoing = messages, outgoing
    return status, out.getvalue(), err.getvalue(), received, sent


def expected(lines: list[dict]) -> list[str]:
    """The stream's words once every line is taken: words appended, revisions applied."""
    stream: list[str] = []
    for line in lines:
        if "revise" in line:
            stream[line["revise"] :] = line["words"]
        elif "words" in line:
            stream += line["words"]
    return stream


def check(lines: list[dict], status: int, out: str, err: str, received: list) -> int:
    """Every word final exactly once, in order, as the input has it, and printed so; the busy
    replies the server sent."""
    assert status == 0 and err == "", err
    final = defaultdict(list)
    for msg in received:
        if isinstance(msg, P.Events):
            for e in msg.events:
                if e.final:
                    final[e.index].append(e.word)
    want = expected(lines)
    assert sorted(final) == list(range(len(want))), sorted(final)
    assert [w for i in range(len(want)) for w in final[i]] == want  # once each, in order
    assert [re.sub(r"[^\w']", "", w).lower() for w in out.split()] == want
    assert isinstance(received[-1], P.Finished) and received[-1].words == len(want)
    return sum(isinstance(m, P.Error) and m.code == "busy" for m in received)


def words_and_ticks(rng: random.Random, n: int) -> list[dict]:
    """Lines of one word and of many (more than `max_waiting_words`: a long line after a short
    one is refused while the short one waits), and ticks."""
    lines: list[dict] = []
    for i in range(n):
        if rng.random() < 0.15:
            lines.append({"tick": float(i)})
        else:
            lines.append({"words": [rng.choice(VOCAB) for _ in range(rng.choice([1, 1, 2, 9, 12]))]})
    return lines


def with_revisions(rng: random.Random, lines: list[dict], lookahead: int = 2) -> list[dict]:
    """Some of the words lines made the recogniser's revisions of its last words: only words not
    final yet (fewer than ``lookahead`` ever followed them; no time limit), the stream's end at most."""
    out, length, floor = [], 0, 0
    for line in lines:
        if "words" in line and length > floor and rng.random() < 0.3:
            index = rng.randint(max(floor, length - 2), length)
            line = {"revise": index, "words": line["words"][:3]}
            length = index + len(line["words"])
        elif "words" in line:
            length += len(line["words"])
        floor = max(floor, length - lookahead)
        out.append(line)
    return out


def resends(sent: list[str]) -> int:
    """The revise messages the client sent: here, with no revise line, each a resend."""
    return sum(json.loads(m)["type"] == "revise" for m in sent)


def test_the_words_client_resends_what_the_server_refuses(server, tmp_path):
    lines = words_and_ticks(random.Random(63), 40)
    status, out, err, received, sent = run(server(8), lines, tmp_path)
    busy = check(lines, status, out, err, received)
    assert busy >= 1, "the server never refused a message: nothing was resent"
    # each refusal answered by one resend after a sync, each sync answered: nothing else refused
    syncs = sum(json.loads(m)["type"] == "sync" for m in sent)
    assert 1 <= resends(sent) <= min(busy, syncs), (busy, resends(sent))
    assert sum(isinstance(m, P.Synced) for m in received) == syncs
    assert {m.code for m in received if isinstance(m, P.Error)} == {"busy"}


def test_busy_replies_to_messages_sent_before_the_resend_resend_nothing(server, tmp_path):
    """Short lines sent faster than the server answers (lookahead 16: many words in flight): after
    the first message refused, the ones already sent are refused too, their busy replies come
    after; one resend answers them all. (Whether replies come late is a race: up to 3 runs.)"""
    late = []
    for seed in range(3):
        rng = random.Random(seed)
        lines = [
            {"words": [rng.choice(VOCAB) for _ in range(rng.choice([1, 1, 1, 2, 3]))]} for _ in range(60)
        ]
        status, out, err, received, sent = run(server(4), lines, tmp_path, "--lookahead", "16")
        busy = check(lines, status, out, err, received)
        assert 1 <= resends(sent) <= busy, (busy, resends(sent))
        late.append(busy - resends(sent))
        if late[-1]:
            break
    assert any(late), "no busy reply came after a resend was due: nothing stale to ignore"


def test_a_last_line_refused_is_resent_before_the_end(server, tmp_path):
    """The server's busy for the last words comes after the client has sent them: the client
    syncs before ``end``, so it is in (and the words resent) before the stream ends. (Whether the
    last line is refused is a race: up to 3 runs.)"""
    for seed in range(3):
        rng = random.Random(seed)
        lines = [{"words": ["so"]}, {"words": [rng.choice(VOCAB) for _ in range(12)]}]
        status, out, err, received, _ = run(server(8), lines, tmp_path)
        if check(lines, status, out, err, received):
            assert [m.word for m in received if isinstance(m, P.Error) and m.code == "busy"] == [1]
            return
    pytest.fail("the last line was never refused")


def test_revise_lines_keep_working_through_refusals(server, tmp_path):
    """The recogniser's own revisions are applied in order whatever the server refused around them."""
    rng = random.Random(3)
    lines = with_revisions(rng, words_and_ticks(rng, 50))
    assert sum("revise" in line for line in lines) >= 5
    status, out, err, received, _ = run(server(8), lines, tmp_path, "--max-delay-ms", "off")
    assert check(lines, status, out, err, received) >= 1


@settings(max_examples=10)
@given(
    seed=st.integers(0, 2**16),
    n=st.integers(1, 40),
    max_waiting_words=st.sampled_from([1, 3, 8]),
    lookahead=st.sampled_from([0, 2, 5]),
    revise=st.booleans(),
)
def test_every_word_final_once_in_order_whatever_is_refused(
    server, tmp_path, seed, n, max_waiting_words, lookahead, revise
):
    rng = random.Random(seed)
    lines = words_and_ticks(rng, n)
    flags = ["--lookahead", str(lookahead)]
    if revise:
        lines = with_revisions(rng, lines, lookahead)
        flags += ["--max-delay-ms", "off"]
    check(lines, *run(server(max_waiting_words), lines, tmp_path, *flags)[:4])


async def talk(url: str, *messages: dict) -> list[P.ServerMessage]:
    """Send these messages to /v1/punct at once, then ``end``; the server's messages up to its ``end``."""
    async with connect(url + "/v1/punct") as ws:
        for msg in [*messages, {"type": "end"}]:
            await ws.send(json.dumps(msg))
        received: list[P.ServerMessage] = []
        async for raw in ws:
            received.append(P.read_server(raw))
            if isinstance(received[-1], P.Finished):
                return received
    raise AssertionError(f"no end: {received}")


def test_a_sync_is_answered_after_every_message_before_it(server):
    """Words past `max_waiting_words`, sent at once: some are refused (busy), then a sync, taken
    during the refusal. Its answer comes after every busy, and says where the stream stands."""
    config = {"type": "config", "lookahead": 2, "max_delay_ms": None}
    sent = [{"type": "words", "words": ["so"]}] + [{"type": "words", "words": VOCAB[:12]}] * 20
    received = asyncio.run(talk(server(4), config, *sent, {"type": "sync", "id": 7}))
    at = next(i for i, m in enumerate(received) if isinstance(m, P.Synced))
    synced = received[at]
    busy = [m.word for m in received[:at] if isinstance(m, P.Error) and m.code == "busy"]
    assert busy, "nothing was refused"
    assert not any(isinstance(m, P.Error) for m in received[at:]), received[at:]  # every busy before it
    assert set(busy) == {synced.words}  # refused from the word the stream stands at
    final = [e.index for m in received[:at] if isinstance(m, P.Events) for e in m.events if e.final]
    assert synced == P.Synced(7, synced.words, len(final)) and final == list(range(len(final)))


def test_a_sync_before_the_config_is_bad_state(server):
    sync = {"type": "sync"}
    received = asyncio.run(talk(server(4), sync, {"type": "config"}, sync))
    assert isinstance(received[0], P.Error) and received[0].code == "bad_state"
    assert isinstance(received[1], P.Ready)
    assert received[2] == P.Synced(None, 0, 0)  # no id: null
