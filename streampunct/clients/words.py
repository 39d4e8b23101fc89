"""The integration example: word hypotheses as JSON lines in, punctuated sentences out.

    python -m streampunct.clients.words [--url ws://127.0.0.1:8765] [--lookahead 2] [FILE]   (stdin by default)

Each input line is one JSON object, as any recogniser can write it:

    {"text": "hello", "start": 0.42, "end": 0.71}         one word (times optional, in seconds)
    {"words": ["so", {"text": "what", "end": 1.2}]}        several words
    {"revise": 12, "words": [...]}                         replace the words from index 12 on
    {"tick": 3.5}                                          the recogniser's clock, in silence

Punctuated sentences are printed as soon as their last word is final. At most half the words
the server lets a stream have waiting (its ``ready`` says how many) are sent ahead of the last
final one, so a file goes as fast as the server computes it and is never refused ``busy``. A line that breaks
the protocol (a lone surrogate such as "\\ud800" included) is reported on stderr and skipped; input that
is not UTF-8 ends the stream there: one line, exit status 2. A session lost on the way
(the server failed or the connection dropped) still prints the final words received, says what
happened in one line and exits with status 1. This file is the reference
for integrators: it is the whole protocol of /v1/punct (docs/protocol.md) in about 60 lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator
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
    stream_config,
)
from streampunct.types import PunctEvent


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


# Words sent and not final yet, at most, where the server does not say its --max-waiting-words
# (half of it where it does): a file sent as fast as the server computes is never refused `busy`.
IN_FLIGHT = 1000


class Flow:
    """The stream's words sent against its words final: the sender waits while ``in_flight``
    words are not final (the server computes them in the meantime)."""

    def __init__(self, max_waiting_words: int | None = None) -> None:
        self.in_flight = max(1, max_waiting_words // 2) if max_waiting_words else IN_FLIGHT
        self.sent = 0
        self.final = 0
        self.moved = asyncio.Event()

    def sending(self, msg: P.ClientMessage) -> None:
        if isinstance(msg, P.Words):
            self.sent += len(msg.words)
        elif isinstance(msg, P.Revise):
            self.sent = min(self.sent, msg.index) + len(msg.words)

    def finals(self, events: tuple[PunctEvent, ...]) -> None:
        self.final = max([self.final, *(e.index + 1 for e in events if e.final)])
        self.moved.set()

    async def room(self, receiver: asyncio.Task[None]) -> None:
        """Wait until the words in flight are fewer than ``in_flight`` (or the session is over)."""
        while self.sent - self.final >= self.in_flight and not receiver.done():
            self.moved.clear()
            waiting = asyncio.ensure_future(self.moved.wait())
            await asyncio.wait({waiting, receiver}, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()


async def receive(ws: Any, out: Any, flow: Flow | None = None) -> None:
    captioner = Captioner(line_chars=None)  # whole sentences: this is text, not live captions
    try:
        async for msg in messages(ws):
            if isinstance(msg, P.Events):
                if flow is not None:
                    flow.finals(msg.events)
                for c in captioner.add(msg.events):
                    print(c.text, file=out, flush=True)
            elif isinstance(msg, P.Error):
                print(f"server: {msg.code}: {msg.message}", file=sys.stderr, flush=True)
    finally:  # the end, or a lost session: the final words of the last sentence are printed too
        for c in captioner.flush():
            print(c.text, file=out, flush=True)


async def lines(source: IO[bytes], flow: Flow, receiver: asyncio.Task[None]) -> AsyncIterator[str]:
    """The protocol messages of the input lines, each once ``flow`` has room for it; a bad line is
    reported and skipped. Input that is not UTF-8 ends the input (a ClientError, once the stream
    is finished)."""
    loop = asyncio.get_running_loop()
    n = 0
    while True:
        await flow.room(receiver)
        raw = await loop.run_in_executor(None, source.readline)  # the loop stays free
        if not raw:
            return
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
        flow.sending(message)
        yield message.to_json()


async def main(args: argparse.Namespace) -> int:
    source = open(args.file, "rb") if args.file else sys.stdin.buffer  # noqa: SIM115
    ws, ready = await open_stream(args.url, "/v1/punct", stream_config(args), args.token)
    flow = Flow(ready.max_waiting_words)
    async with ws:
        receiver = asyncio.create_task(receive(ws, sys.stdout, flow))
        await send_then_finish(ws, lines(source, flow, receiver), receiver)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="streampunct words", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("file", nargs="?", help="JSON lines (default: stdin)")
    add_stream_args(ap)
    return ap


def cli(argv: list[str] | None = None) -> int:
    return run_client(main, build_parser(), argv)


if __name__ == "__main__":
    sys.exit(cli())
