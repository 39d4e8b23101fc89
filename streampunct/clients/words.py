"""The integration example: word hypotheses as JSON lines in, punctuated sentences out.

    python -m streampunct.clients.words [--url ws://127.0.0.1:8765] [--lookahead 2] [FILE]   (stdin by default)

Each input line is one JSON object, as any recogniser can write it:

    {"text": "hello", "start": 0.42, "end": 0.71}         one word (times optional, in seconds)
    {"words": ["so", {"text": "what", "end": 1.2}]}        several words
    {"revise": 12, "words": [...]}                         replace the words from index 12 on
    {"tick": 3.5}                                          the recogniser's clock, in silence

Punctuated sentences are printed as soon as their last word is final (``--sentences``: the
server's ``sentence`` messages, one a line, the last with no period added). Once half the words
the server lets a stream have waiting (its ``ready`` says how many) are sent ahead of the last
final one (and the lookahead), the client waits for the server to compute them, so a file goes as
fast as the server computes it; words the server still refuses (``busy``: a long line, say) are
sent again from the word it names (:class:`Resend`), so that every word is final once, in order.
A line that breaks the protocol (a lone surrogate such as "\\ud800" included) is reported on
stderr and skipped; input that is not UTF-8 ends the stream there: one line, exit status 2. A
session lost on the way (the server failed or the connection dropped) still prints the final
words received (with ``--sentences``, the sentences), says what happened in one line and exits
with status 1. This file is the reference for integrators: it is the whole protocol of /v1/punct
(docs/protocol.md) in about 180 lines, 75 of them the resend of what the server refuses (:class:`Resend`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncGenerator, AsyncIterator
from typing import IO, Any

from streampunct import protocol as P
from streampunct.captions import Captioner
from streampunct.clients.common import (
    ClientError,
    add_stream_args,
    messages,
    open_stream,
    run_client,
    send_then_finish,
    server_says,
    stream_config,
)
from streampunct.flags import Parser
from streampunct.types import PunctEvent, Word


def to_message(line: str, n: int) -> P.ClientMessage:
    """The message of one input line, read as the server reads it (the same refusals)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ClientError(f"input line {n} is not JSON: {e.msg}") from e
    if not isinstance(obj, dict):
        raise ClientError(f"input line {n} is not a JSON object")
    if "revise" in obj:
        msg = {"type": "revise", "index": obj["revise"], "words": obj.get("words", [])}
    elif "tick" in obj:
        msg = {"type": "tick", "now": obj["tick"]}
    elif "words" in obj or "text" in obj:
        msg = {"type": "words", "words": obj["words"] if "words" in obj else [obj]}
    else:
        raise ClientError(f'input line {n} has none of "text", "words", "revise", "tick"')
    try:
        return P.read_client(json.dumps(msg))
    except P.ProtocolError as e:
        raise ClientError(f"input line {n}: {e}") from e


# Words sent and not final yet beyond the lookahead, at most, where the server does not say its
# max_waiting_words (half of it where it does): a file sent as fast as the server computes is
# rarely refused `busy`.
IN_FLIGHT = 1000


async def until(event: asyncio.Event, receiver: asyncio.Task[None]) -> None:
    """Wait for ``event``, or for the session to end (the receiver is done)."""
    waiting = asyncio.ensure_future(event.wait())
    await asyncio.wait({waiting, receiver}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()


class Flow:
    """The stream's words sent against its words final: once ``in_flight`` words are not final
    (the ``lookahead`` words a final needs after it, and half of the words the server lets wait),
    the sender syncs (:class:`Resend`): it waits until the server has computed all it took."""

    def __init__(self, max_waiting_words: int | None = None, lookahead: int = 0) -> None:
        half = max(1, max_waiting_words // 2) if max_waiting_words else IN_FLIGHT
        self.in_flight = half + lookahead
        self.sent = 0  # the stream's words once the server has taken all that was sent
        self.final = 0

    @property
    def full(self) -> bool:
        return self.sent - self.final >= self.in_flight

    def finals(self, events: tuple[PunctEvent, ...]) -> None:
        self.final = max([self.final, *(e.index + 1 for e in events if e.final)])


class Resend:
    """Words the server refused (``busy``), sent again from the word it names.

    The server answers a refused message at once, and refuses every later one (same word W) until
    a ``revise`` at W; which of the messages in flight were taken, it does not say. So on ``busy``
    the client sends nothing but a ``sync``, which the server answers (``synced``, same ``id``)
    after every message before it. Once that answer is in, every ``busy`` due has come (none can
    come later), the last names where the stream stands, the server has computed what it took and
    its events are in: the resend, ``revise`` at W of the words from W, is taken (pieces
    of at most ``in_flight`` words follow under the flow). A ``busy`` is thus answered once, never
    twice nor missed, and a refused resend is sent again after its own sync; the client syncs
    before ``end`` too (a ``busy`` for the last words comes before its answer). A revise line sent
    since the last sync that changed words before W is sent again too: ``revise`` at W with no words
    (words are taken again), a sync, then the words from the revised one. After a message the
    stream refused (``bad_input``: a revise of final words, say), the stream may not hold what was
    sent: the words from the first not final are sent again at the next sync (one comes when the
    flow is full). The client keeps the words from the oldest not final (a resend starts there at
    the earliest)."""

    def __init__(self, flow: Flow) -> None:
        self.flow = flow
        self.words: list[Word] = []  # the stream as sent, from word ``base`` (the words before are final)
        self.base = 0
        self.todo = 0  # the words from here are to be sent (again)
        self.revise = False  # the next of them go as a revise at ``todo``, at once
        self.busy: int | None = None  # where the server last refused words, since the last sync
        self.low: int | None = None  # the first word a revise changed since the last sync
        self.failed = False  # a message was refused (bad_input) since the last sync
        self.unsynced = False  # words or revisions sent since the last sync
        self.clearing = False  # the revise at W alone went: sync before the words
        self.syncs = 0  # the id of the last sync
        self.answered = asyncio.Event()

    @property
    def end(self) -> int:
        return self.base + len(self.words)

    @property
    def pending(self) -> bool:
        """Words to send again."""
        return self.revise or self.todo < self.end

    def refused(self, msg: P.Error) -> bool:
        """Take the server's ``busy`` (True); any other error is not ours (a ``bad_input`` is noted)."""
        self.failed |= msg.code == "bad_input"
        if msg.code != "busy" or msg.word is None:
            return False
        self.busy = self.flow.sent = msg.word  # what the stream has
        return True

    def synced(self, msg: P.Synced) -> None:
        """Take the server's answer to a sync: the last one's is awaited."""
        if msg.id == self.syncs:
            self.answered.set()

    def take(self, msg: P.ClientMessage) -> None:
        """A line's message is sent: its words are kept (a revision the server will refuse is not)."""
        if isinstance(msg, P.Words):
            self.words += msg.words
        elif isinstance(msg, P.Revise) and max(self.base, self.flow.final) <= msg.index <= self.end:
            self.changed(msg.index)
            self.words[msg.index - self.base :] = msg.words
        self.todo = self.flow.sent = self.end
        self.unsynced |= not isinstance(msg, P.Tick)

    def changed(self, index: int) -> None:
        """A revise at ``index`` is sent: one before the words sent changes them."""
        if index < self.flow.sent:
            self.low = index if self.low is None else min(self.low, index)

    def piece(self) -> P.ClientMessage | None:
        """The next message of a resend, None when there is none."""
        final = max(self.base, min(self.flow.final, self.todo))
        del self.words[: final - self.base]  # final: never sent again
        self.base = final
        if not self.pending:
            return None
        n = min(self.flow.in_flight, P.MAX_WORDS_PER_MESSAGE)
        words = tuple(self.words[self.todo - self.base : self.todo - self.base + n])
        msg = P.Revise(self.todo, words) if self.revise else P.Words(words)
        if self.revise:
            self.changed(self.todo)
        self.revise, self.todo, self.unsynced = False, self.todo + len(words), True
        self.flow.sent = self.todo
        return msg

    async def sync(self, receiver: asyncio.Task[None]) -> AsyncIterator[str]:
        """The sync, then its answer; where words were refused, the resend starts."""
        self.syncs += 1
        self.answered.clear()
        yield P.Sync(self.syncs).to_json()
        await until(self.answered, receiver)
        refused, final, failed, low = self.busy, self.flow.final, self.failed, self.low
        self.busy, self.low, self.failed, self.unsynced, self.clearing = None, None, False, False, False
        if failed:  # the stream may differ from what was sent: again from its first word not final
            start = final
            if final > self.end:
                self.words, self.base = [], final
        elif refused is None or refused < final:  # all taken (a revise line at W took words again,
            if not self.revise:  # and the stream went past W; after the revise at W alone, the
                self.flow.sent = self.todo  # stream still ends at W)
            return
        else:  # from W, or from a word before it that a revise line changed
            start = max(final, refused if low is None else min(low, refused))
        self.todo, self.revise = start, True
        if refused is not None and start != refused:  # first a revise at W alone: words are taken again
            self.low = start if start < refused else None  # (kept: a refusal of it sends those again)
            self.clearing = self.unsynced = True
            yield P.Revise(refused, ()).to_json()


async def receive(ws: Any, out: Any, resend: Resend | None = None, sentences: bool = False) -> None:
    """Print each sentence once its words are final: cut here from the events, or with
    ``sentences`` the server's (those it closed; one of words without text, "--", is not printed)."""
    captioner = Captioner(line_chars=None)  # whole sentences: this is text, not live captions
    try:
        async for msg in messages(ws):
            if isinstance(msg, P.Events):
                if resend is not None:
                    resend.flow.finals(msg.events)
                if not sentences:
                    for c in captioner.add(msg.events):
                        print(c.text, file=out, flush=True)
            elif isinstance(msg, P.SentenceClosed) and msg.sentence.text:
                print(msg.sentence.text, file=out, flush=True)
            elif isinstance(msg, P.Synced) and resend is not None:
                resend.synced(msg)
            elif isinstance(msg, P.Error) and not (resend is not None and resend.refused(msg)):
                server_says(f"{msg.code}: {msg.message}")
    finally:  # the end, or a lost session: the final words of the last sentence are printed too
        for c in captioner.flush():
            print(c.text, file=out, flush=True)


async def lines(source: IO[bytes]) -> AsyncGenerator[P.ClientMessage, None]:
    """The protocol messages of the input lines; a bad line is reported and skipped. Input that
    is not UTF-8 ends the input (a ClientError)."""
    loop = asyncio.get_running_loop()
    n = 0
    while raw := await loop.run_in_executor(None, source.readline):  # the loop stays free
        n += 1
        try:
            line = raw.decode()
        except UnicodeDecodeError:
            raise ClientError(f"input line {n} is not UTF-8 text") from None
        if not line.strip():
            continue
        try:
            message = to_message(line, n)
        except ClientError as e:  # the stream goes on
            print(f"streampunct words: skipped: {e}", file=sys.stderr, flush=True)
            continue
        yield message


async def outgoing(source: IO[bytes], resend: Resend, receiver: asyncio.Task[None]) -> AsyncIterator[str]:
    """What the client sends, in order: each input line (after a sync while the flow is full), the
    resends (after their syncs) before any line read since, and a last sync before ``end``. Input
    that is not UTF-8 is raised (a ClientError) once what was read is sent."""
    reader, flow = lines(source), resend.flow
    held: P.ClientMessage | None = None  # a line read, not sent yet
    more, error = True, None
    while not receiver.done():
        done = not (more or held is not None or resend.pending)
        if done and not resend.unsynced and resend.busy is None:
            break  # all sent, and all taken: the end
        if resend.busy is not None or resend.clearing or done or (resend.unsynced and flow.full):
            async for out in resend.sync(receiver):
                yield out
        elif (piece := resend.piece()) is not None:
            yield piece.to_json()
        elif held is None:
            try:
                held = await anext(reader, None)
            except ClientError as e:
                error = e
            more = held is not None
        else:
            resend.take(held)
            yield held.to_json()
            held = None
    await reader.aclose()
    if error is not None:
        raise error


async def main(args: argparse.Namespace) -> int:
    source = open(args.file, "rb") if args.file else sys.stdin.buffer  # noqa: SIM115
    ws, ready = await open_stream(args.url, "/v1/punct", stream_config(args), args.token)
    if args.sentences and not ready.sentences:
        await ws.close()
        raise ClientError("the server sends no sentences (it predates them): run without --sentences")
    resend = Resend(Flow(ready.max_waiting_words, ready.lookahead))
    async with ws:
        receiver = asyncio.create_task(receive(ws, sys.stdout, resend, args.sentences))
        await send_then_finish(ws, outgoing(source, resend, receiver), receiver)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="streampunct words", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("file", nargs="?", help="JSON lines (default: stdin)")
    add_stream_args(ap, sentences="print the server's sentences, one a line, as each one's words are final")
    return ap


def cli(argv: list[str] | None = None) -> int:
    return run_client(main, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(cli())
