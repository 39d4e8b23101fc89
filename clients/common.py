"""What the clients share: connecting with clear errors, protocol messages, subtitle files."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus, InvalidURI

from streampunct.captions import Caption, to_srt, to_vtt

DEFAULT_URL = "ws://127.0.0.1:8765"


class ClientError(Exception):
    """Printed as one line, exit status 2."""


def add_stream_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--url", default=DEFAULT_URL, help=f"server address (default {DEFAULT_URL})")
    ap.add_argument("--lookahead", "-k", type=int, default=2, help="words of lookahead (default 2)")
    ap.add_argument(
        "--max-delay-ms", type=float, default=1500, help="time limit for a decision (default 1500)"
    )
    ap.add_argument(
        "--engine",
        choices=("auto", "masked", "window"),
        default="auto",
        help="masked (cheapest per word) or window (more accurate); auto: the model's choice per k (default)",
    )


def stream_config(args: argparse.Namespace) -> dict[str, Any]:
    """The config message's settings from the command line (add_stream_args)."""
    return {"lookahead": args.lookahead, "max_delay_ms": args.max_delay_ms, "engine": args.engine}


async def open_stream(
    url: str, endpoint: str, config: dict[str, Any]
) -> tuple[ClientConnection, dict[str, Any]]:
    """Connect to ``url`` + endpoint, send the config, return the connection and the ready message."""
    target = url.rstrip("/") + endpoint
    try:
        ws = await connect(target, max_size=2**22, open_timeout=10)
    except InvalidURI as e:
        raise ClientError(f"{url} is not a websocket URL (ws://host:port)") from e
    except InvalidStatus as e:
        body = e.response.body.decode(errors="replace") if e.response.body else ""
        try:
            reason = json.loads(body).get("message", body)
        except json.JSONDecodeError:
            reason = body or e.response.reason_phrase
        raise ClientError(f"the server at {url} refused the stream: {reason}") from e
    except (OSError, TimeoutError) as e:
        raise ClientError(
            f"cannot reach a streampunct server at {url}: {e}. Is `streampunct serve` running?"
        ) from e
    await ws.send(json.dumps({"type": "config", "version": 1, **config}))
    ready = json.loads(await ws.recv())
    if ready.get("type") == "error":
        await ws.close()
        raise ClientError(f"the server refused the configuration: {ready['message']}")
    return ws, ready


def caption_of(msg: dict[str, Any]) -> Caption:
    return Caption(msg["text"], msg["start"], msg["end"], msg["first"], msg["last"])


def write_subtitles(prefix: str, captions: list[Caption]) -> list[Path]:
    paths = [Path(prefix + ".srt"), Path(prefix + ".vtt")]
    paths[0].write_text(to_srt(captions))
    paths[1].write_text(to_vtt(captions))
    return paths


def run_client(
    main: Callable[[argparse.Namespace], Any], ap: argparse.ArgumentParser, argv: list[str] | None
) -> int:
    """Parse arguments, run the client's coroutine, turn failures into one clear line."""
    import asyncio

    args = ap.parse_args(argv)
    try:
        return int(asyncio.run(main(args)) or 0)
    except ClientError as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
