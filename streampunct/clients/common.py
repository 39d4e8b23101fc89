"""What the clients share: connecting with clear errors, protocol messages, subtitle files, and one
account of a session that ended before its ``end`` (the server failed or closed it, the connection
dropped, or Ctrl-C), so that every client keeps what it received and says what happened in one line."""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI
from websockets.frames import CloseCode

from streampunct import protocol as P
from streampunct.captions import Caption, subtitle_cues, to_srt, to_vtt
from streampunct.errors import StreamPunctError
from streampunct.flags import add_config_flags, add_int8_flag, config_from_flags
from streampunct.options import CueOptions, StreamOptions
from streampunct.types import ENGINES, Word

DEFAULT_URL = "ws://127.0.0.1:8765"
# A server at its capacity refuses new streams (HTTP 503 `busy`, Retry-After): a client tries again
# as it asks, for this long in all, before it gives up.
BUSY_RETRY_S = 30.0
# A stream's recognition seconds per audio second past this is reported (past 1, recognition falls
# behind real time and skips audio).
WARN_COMPUTE_RATIO = 0.8


class ClientError(Exception):
    """Printed as one line, exit status 2."""

    exit_status = 2


class SessionLost(ClientError):
    """The stream ended before the server's ``end``: the server failed on it or closed it, or the
    connection dropped. ``reason`` says which, ``word`` is where the server stopped (when it said),
    ``notes`` what the client kept. Printed as one line, exit status 1."""

    exit_status = 1

    def __init__(self, reason: str, word: int | None = None, notes: tuple[str, ...] = ()):
        self.reason, self.word, self.notes = reason, word, notes
        details = ((f"stopped at word {word}",) if word is not None else ()) + notes
        super().__init__(reason + (f" ({'; '.join(details)})" if details else ""))

    def noting(self, *notes: str) -> SessionLost:
        """The same loss, its line also saying what the client kept."""
        return type(self)(self.reason, self.word, self.notes + notes)


class Interrupted(SessionLost):
    """Ctrl-C stopped the stream where it was. Printed as one line (no "error:"), exit status 130."""

    exit_status = 130


def add_stream_args(ap: argparse.ArgumentParser, sentences: str | None = None) -> None:
    """The stream's flags; ``sentences``: the help of ``--sentences`` (None: no such flag)."""
    ap.add_argument(
        "--url",
        help=f"a server's address ({DEFAULT_URL} for `streampunct serve`); none: run the pipeline in "
        "this process (needs the models: pip install 'streampunct[model,asr]')",
    )
    ap.add_argument(
        "--token",
        default=os.environ.get("STREAMPUNCT_TOKEN"),
        help="the server's shared secret, if it has one (default: $STREAMPUNCT_TOKEN)",
    )
    add_config_flags(
        ap,
        StreamOptions,
        aliases={"lookahead": "-k"},
        engine={"choices": ENGINES},
        sentences=None if sentences is None else {"help": sentences},
    )
    here = ap.add_argument_group("without --url (the models run in this process)")
    here.add_argument("--model", help="punctuation model: default, base, or a checkpoint folder")
    here.add_argument("--asr-model", help="tiny.en (default), base, or a CTranslate2 Whisper folder")
    here.add_argument("--device", default="auto", help="cpu, cuda, ... (default: cuda if present)")
    add_int8_flag(here)


def stream_config(args: argparse.Namespace) -> P.Config:
    """The config message from the command line (add_stream_args)."""
    o = config_from_flags(args, StreamOptions)
    return P.Config(o.lookahead, o.max_delay_ms, o.engine, sentences=o.sentences)


async def open_stream(
    url: str, endpoint: str, config: P.Config, token: str | None = None
) -> tuple[ClientConnection, P.Ready]:
    """Connect to ``url`` + endpoint, send the config, return the connection and the ready message.
    ``token``: the server's shared secret, sent as ``Authorization: Bearer`` (None: none). A
    ``wss://`` server's certificate is checked against the system's CAs (or $SSL_CERT_FILE)."""
    target = url.rstrip("/") + endpoint
    headers = {"Authorization": f"Bearer {token}"} if token else None
    loop = asyncio.get_running_loop()
    give_up = loop.time() + BUSY_RETRY_S
    try:
        while True:
            try:
                ws = await connect(target, max_size=2**22, open_timeout=10, additional_headers=headers)
                break
            except InvalidStatus as e:
                code, reason = refusal(e)
                wait = _retry_after(e)
                if code != "busy" or wait is None or loop.time() + wait > give_up:
                    raise ClientError(f"the server at {url} refused the stream: {reason}") from e
                print(f"{reason}; trying again in {wait:g} s", file=sys.stderr, flush=True)
                await asyncio.sleep(wait)
    except InvalidURI as e:
        raise ClientError(f"{url} is not a websocket URL (ws://host:port)") from e
    except (OSError, TimeoutError) as e:
        raise ClientError(
            f"cannot reach a streampunct server at {url}: {e}. Is `streampunct serve` running?"
        ) from e
    try:
        await ws.send(config.to_json())
        ready = P.read_server(await ws.recv())
    except ConnectionClosed as e:
        raise ClientError(f"the server at {url} closed the connection before the stream began") from e
    except P.ProtocolError as e:
        await ws.close()
        raise ClientError(f"the server at {url} does not speak this protocol: {e}") from e
    if not isinstance(ready, P.Ready):
        await ws.close()
        reason = ready.message if isinstance(ready, P.Error) else f"a {ready.type} message"
        raise ClientError(f"the server refused the configuration: {reason}")
    return ws, ready


def refusal(e: InvalidStatus) -> tuple[str | None, str]:
    """The code and the message of a refused handshake (the server's JSON error, or the status)."""
    body = e.response.body.decode(errors="replace") if e.response.body else ""
    try:
        error = json.loads(body)
        return error.get("code"), error.get("message", body)
    except (json.JSONDecodeError, AttributeError):
        return None, body or e.response.reason_phrase


def _retry_after(e: InvalidStatus) -> float | None:
    """The seconds a 503's ``Retry-After`` asks for (None: no such header, or not seconds)."""
    try:
        return float(e.response.headers.get("Retry-After", ""))
    except ValueError:
        return None


def session_lost(ws: ClientConnection, error: P.Error | None) -> SessionLost:
    """How a session ended without its ``end``: the server's closing error if it sent one, else the
    close code (1006: no close frame, the connection dropped)."""
    if error is not None:
        return SessionLost(f"the server closed the session: {error.code}: {error.message}", error.word)
    code, reason = ws.close_code, ws.close_reason
    if code is None or code == 1006:
        return SessionLost("the connection to the server was lost")
    if code in (1000, 1001):
        return SessionLost("the server closed the session before its end")
    return SessionLost(f"the server closed the session with code {code}" + (f": {reason}" if reason else ""))


async def messages(ws: ClientConnection) -> AsyncIterator[P.ServerMessage]:
    """The server's messages, up to its ``end`` (included). A session that ends otherwise raises
    SessionLost; the error message that announces the close is its reason, not a message. A
    message this client cannot read is reported on stderr and skipped."""
    closing = None
    try:
        async for raw in ws:
            try:
                msg = P.read_server(raw)
            except P.ProtocolError as e:
                print(f"skipped a message from the server: {e}", file=sys.stderr, flush=True)
                continue
            if isinstance(msg, P.Error) and msg.code in P.CLOSING_ERRORS:
                closing = msg
                continue
            yield msg
            if isinstance(msg, P.Finished):
                return
    except ConnectionClosed as e:
        raise session_lost(ws, closing) from e
    raise session_lost(ws, closing)


# Who speaks in the client's warnings: "server: " when it is one at --url; nothing when the server
# is embedded in this process (the user started no server).
_SERVER: contextvars.ContextVar[str] = contextvars.ContextVar("server", default="server: ")


def server_says(text: str, out: Any = None, prefix: str = "") -> None:
    """A line on stderr (or ``out``) of what the server said: a warning, an error."""
    print(prefix + _SERVER.get() + text, file=out or sys.stderr, flush=True)


class Recognition:
    """What a client says on stderr about the server's recognition of its audio: each skip
    (``lag``), and a warning once the stream's compute ratio passes WARN_COMPUTE_RATIO (again only
    after it has fallen a tenth under it). Audio sent at ``speed`` times real time, over 1 (a
    file's): instead, once the ratio passes 1 / ``speed``, that recognition is slower than that (a
    pass takes at least ``min_chunk_s`` of the audio sent ahead of real time, so recognition goes
    at about 1 / ratio times real time)."""

    def __init__(self, out: Any = None, prefix: str = "", speed: float = 1.0):
        self.out, self.prefix = out, prefix  # prefix: "\n" past a line being redrawn
        self.speed = speed
        self.warned = False

    def say(self, text: str) -> None:
        server_says(text, self.out, self.prefix)

    def see(self, msg: P.ServerMessage) -> None:
        if isinstance(msg, P.Lag):
            self.say(
                f"recognition fell behind; skipped {msg.skipped_s:.1f} s of audio ({msg.start:.1f} to {msg.end:.1f} s)"
            )
        ratio = getattr(msg, "compute_ratio", None)
        if ratio is None:
            return
        bound = WARN_COMPUTE_RATIO if self.speed <= 1 else 1 / self.speed
        if ratio >= bound and not self.warned:
            self.warned = True
            said = f"recognition takes {ratio:.2f} s per second of this audio"
            if self.speed > 1:
                said += f", more than the {bound:.2f} that --speed {self.speed:g} needs: the captions come as it recognises"
            else:
                said += "; past 1.0 it falls behind and skips audio (a smaller --asr-model, or fewer streams on the server)"
            self.say(said)
        elif ratio < 0.9 * bound:
            self.warned = False


async def finish(ws: ClientConnection, receiver: asyncio.Task[None]) -> None:
    """Send ``end`` and wait for the receiver (a loop over ``messages``) to take the last messages.
    A connection already closed is left to the receiver to explain: it raises SessionLost."""
    with suppress(ConnectionClosed):
        await ws.send(P.End().to_json())
    await receiver


async def send_then_finish(
    ws: ClientConnection, outgoing: AsyncIterable[str | bytes], receiver: asyncio.Task[None]
) -> None:
    """Send every message of ``outgoing``, then finish; sending stops where the connection fails.
    Input the client cannot read (``outgoing`` raises ClientError) is finished too, then raised.
    Cancelled (Ctrl-C), it stops the receiver and leaves (close code 1001, going away)."""
    try:
        try:
            with suppress(ConnectionClosed):
                async for message in outgoing:
                    await ws.send(message)
        except ClientError:
            await finish(ws, receiver)
            raise
        await finish(ws, receiver)
    except asyncio.CancelledError:
        receiver.cancel()
        await asyncio.gather(receiver, return_exceptions=True)  # how it ended: not an error now
        await ws.close(CloseCode.GOING_AWAY)
        raise


def add_subtitle_args(ap: argparse.ArgumentParser) -> None:
    """The flags of the subtitle files' cues (:class:`CueOptions`: ``--max-line-chars``, ...)."""
    add_config_flags(ap.add_argument_group("the cues of the .srt and .vtt files"), CueOptions)


class Transcript:
    """What a client writes its subtitle files from: the caption lines received, in order, and the
    times of their words, by stream index (from the words messages); ``options``: the cues' rules
    (:func:`add_subtitle_args`'s flags: ``Transcript.of(args)``)."""

    def __init__(self, options: CueOptions | None = None) -> None:
        self.options = options
        self.captions: list[Caption] = []
        self.words: dict[int, Word] = {}

    @classmethod
    def of(cls, args: argparse.Namespace) -> Transcript:
        return cls(config_from_flags(args, CueOptions))

    def see(self, msg: P.ServerMessage) -> None:
        if isinstance(msg, P.Recognised):
            self.words.update((msg.first + i, w) for i, w in enumerate(msg.committed))
        elif isinstance(msg, P.Captioned):
            self.captions.append(msg.caption)

    def write(self, prefix: str) -> list[Path]:
        """``PREFIX.srt`` and ``PREFIX.vtt``."""
        cues = subtitle_cues(self.captions, self.words, self.options)
        paths = [Path(prefix + ".srt"), Path(prefix + ".vtt")]
        paths[0].write_text(to_srt(cues))
        paths[1].write_text(to_vtt(cues))
        return paths

    def keep(self, lost: SessionLost, prefix: str | None) -> SessionLost:
        """Write the subtitles of the captions received before the loss (none if ``prefix`` is
        None); the loss, its line saying what was kept."""
        n = len(self.captions)
        notes = [f"after {n} caption{'' if n == 1 else 's'}"]
        if prefix is not None:
            notes.append("wrote " + ", ".join(str(p) for p in self.write(prefix)))
        return lost.noting(*notes)


async def _with_server(main: Callable[[argparse.Namespace], Any], args: argparse.Namespace) -> Any:
    """Run the client against ``--url``, or without it against a server embedded in this process
    (streampunct.server.app.embedded: the same sessions as ``streampunct serve``, on a loopback port)."""
    if args.url is not None:
        return await main(args)
    try:
        from streampunct.server.app import embedded
    except ImportError as e:
        raise ClientError(
            f"no --url, and the models cannot run in this process ({e}): give a server's --url, or "
            "install them with: pip install 'streampunct[model,asr]'"
        ) from e
    print("streampunct: loading the models in this process (--url to use a server) ...", file=sys.stderr)
    _SERVER.set("")
    # The server's log is an operator's (/metrics counts its events); what a user needs of it (a
    # skip, a refusal) comes in the protocol and the client says it. Its failures alone, on stderr.
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s", stream=sys.stderr)
    async with embedded(args.model, args.asr_model, args.device, args.int8) as (args.url, args.token):
        return await main(args)


async def _interruptible(client: Awaitable[Any]) -> Any:
    """Await ``client`` with each Ctrl-C (SIGINT) cancelling it, the second too: a client catches
    the CancelledError where it keeps what it has shown (asyncio.run cancels at the first alone,
    from Python 3.11; its second raises KeyboardInterrupt past the client). A process started with
    SIGINT ignored (a background job) keeps it ignored."""
    loop, task = asyncio.get_running_loop(), asyncio.current_task()
    if task is None or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return await client
    try:
        loop.add_signal_handler(signal.SIGINT, task.cancel)
    except NotImplementedError:  # Windows: asyncio.run's own
        return await client
    try:
        return await client
    finally:
        loop.remove_signal_handler(signal.SIGINT)


def run_client(
    main: Callable[[argparse.Namespace], Any],
    ap: argparse.ArgumentParser,
    argv: list[str] | None,
    check: Callable[[argparse.Namespace], None] | None = None,
) -> int:
    """Parse arguments, ``check`` them (before any model loads), run the client's coroutine, turn
    failures and Ctrl-C into one clear line."""
    args = ap.parse_args(argv)
    try:
        if check is not None:
            check(args)
        return int(asyncio.run(_interruptible(_with_server(main, args))) or 0)
    except ClientError as e:
        print(f"{ap.prog}: {'' if isinstance(e, Interrupted) else 'error: '}{e}", file=sys.stderr)
        return e.exit_status
    except StreamPunctError as e:  # the embedded server's models
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, asyncio.CancelledError):  # before the client kept anything
        print(f"{ap.prog}: interrupted", file=sys.stderr)
        return Interrupted.exit_status
