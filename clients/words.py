"""The integration example: word hypotheses as JSON lines in, punctuated sentences out.

    python -m clients.words [--url ws://127.0.0.1:8765] [--lookahead 2] [FILE]   (stdin by default)

Each input line is one JSON object, as any recogniser can write it:

    {"text": "hello", "start": 0.42, "end": 0.71}         one word (times optional, in seconds)
    {"words": ["so", {"text": "what", "end": 1.2}]}        several words
    {"revise": 12, "words": [...]}                         replace the words from index 12 on
    {"tick": 3.5}                                          the recogniser's clock, in silence

Punctuated sentences are printed as soon as their last word is final. A session lost on the way
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

from clients.common import (
    ClientError,
    add_stream_args,
    messages,
    open_stream,
    run_client,
    send_then_finish,
    stream_config,
)
from streampunct import protocol as P
from streampunct.captions import Captioner


def to_message(line: str, n: int) -> P.Words | P.Revise | P.Tick:
    """The message of one input line, checked by the protocol's own rules."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise ClientError(f"input line {n} is not JSON: {e.msg}") from e
    if not isinstance(obj, dict):
        raise ClientError(f"input line {n} is not a JSON object")
    try:
        if "revise" in obj:
            return P.Revise.from_dict({"index": obj["revise"], "words": obj.get("words", [])})
        if "tick" in obj:
            return P.Tick.from_dict({"now": obj["tick"]})
        if "words" in obj or "text" in obj:
            return P.Words.from_dict({"words": obj["words"] if "words" in obj else [obj]})
    except P.ProtocolError as e:
        raise ClientError(f"input line {n}: {e}") from e
    raise ClientError(f'input line {n} has none of "text", "words", "revise", "tick"')


async def receive(ws: Any, out: Any) -> None:
    captioner = Captioner(line_chars=None)  # whole sentences: this is text, not live captions
    try:
        async for msg in messages(ws):
            if isinstance(msg, P.Events):
                for c in captioner.add(msg.events):
                    print(c.text, file=out, flush=True)
            elif isinstance(msg, P.Error):
                print(f"server: {msg.code}: {msg.message}", file=sys.stderr, flush=True)
    finally:  # the end, or a lost session: the final words of the last sentence are printed too
        for c in captioner.flush():
            print(c.text, file=out, flush=True)


async def lines(source: IO[str]) -> AsyncIterator[str]:
    """The protocol messages of the input lines; a bad line is reported and skipped."""
    loop = asyncio.get_running_loop()
    n = 0
    while line := await loop.run_in_executor(None, source.readline):  # the loop stays free
        n += 1
        if not line.strip():
            continue
        try:
            message = to_message(line, n).to_json()
        except ClientError as e:  # the stream goes on
            print(f"streampunct words: skipped: {e}", file=sys.stderr, flush=True)
            continue
        yield message


async def main(args: argparse.Namespace) -> int:
    source = open(args.file, encoding="utf-8") if args.file else sys.stdin  # noqa: SIM115
    ws, _ = await open_stream(args.url, "/v1/punct", stream_config(args), args.token)
    async with ws:
        await send_then_finish(ws, lines(source), asyncio.create_task(receive(ws, sys.stdout)))
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
