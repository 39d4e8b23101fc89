"""``streampunct serve``: the websocket server. It only drives the sans-I/O cores.

- ``/v1/punct``: word hypotheses from any recogniser in, punctuation events out.
- ``/v1/asr``: 16 kHz PCM16 audio in; recognised words, punctuation events and caption lines out.
- ``/health``: plain HTTP, JSON status; ``/metrics``: Prometheus text (:mod:`.metrics`). ``/``: the browser caption page.

Per-connection state lives in one session object per connection; all punctuation work goes through
the host (:class:`~.host.LocalHost`: one :class:`~streampunct.scheduler.Batcher`, many streams, one
forward pass), and speech recognition through one worker thread (:class:`~.host.Recognition`). A bad message gets an ``error`` message and changes
nothing; an unexpected fault closes that connection alone (1011). On SIGINT or SIGTERM the server
stops accepting streams, finishes the open ones (every word final, ``end`` sent), then exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import errno
import itertools
import logging
import math
import os
import secrets
import signal
import ssl
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from streampunct import Punctuator, StreamPunctError
from streampunct import protocol as P
from streampunct.flags import Parser, add_config_flags, add_int8_flag, flags_given, port
from streampunct.options import (
    STREAMS_PER_CLIENT,
    TABLES,
    Limits,
    options_from_config,
    read_config,
)
from streampunct.scheduler import LOAD_WINDOW_S
from streampunct.server import census
from streampunct.server.allocator import keep_trimmed, run_with_arena_cap
from streampunct.server.guard import LOOPBACK_HOSTS, Access, is_loopback
from streampunct.server.host import Host, LocalHost, Recognition
from streampunct.server.logs import JsonFormatter, log, log_event
from streampunct.server.metrics import CONTENT_TYPE_LATEST, Metrics
from streampunct.server.sessions import AsrSession, Context, PunctSession, Session
from streampunct.server.web import json_response, page_response

# The limits an operator sets as flags (each also in --config's [limits], the flag over the file).
OPERATOR_LIMITS = ("max_streams", "max_streams_per_client", "max_load", "shutdown_grace_s")


class App:
    """A server's sessions on a :class:`~.host.Host`: its guard (:meth:`admit`), ``/health``,
    ``/metrics`` and a session per stream (:meth:`handler`). ``serve`` runs one on a
    :class:`~.host.LocalHost` with a :class:`~.host.Recognition` (``/v1/asr`` and the caption
    page); each serve-ray session replica one on its encoder replicas, without."""

    def __init__(
        self,
        host: Host,
        *,
        recognition: Recognition | None = None,
        access: Access | None = None,
        limits: Limits | None = None,
        secure: bool = False,
    ):
        self.host = host
        self.recognition = recognition
        self.access = access or Access()
        self.limits = limits or Limits()
        self.secure = secure  # TLS: the page's own origin is https://
        self.streams = ("/v1/punct", "/v1/asr") if recognition is not None else ("/v1/punct",)
        self.sessions: dict[str, Session] = {}  # the open ones, by id
        self.streams_of: Counter[str | None] = Counter()  # open streams by client address
        self.metrics = Metrics(self.sessions, host.load, recognition.load if recognition else None)
        host.report_to(self.metrics)
        self.context = Context(host, self.limits, self.metrics, self.sessions)
        self.stopping = self.context.stopping  # set on SIGTERM (or SIGINT)
        self._ids = itertools.count(1)
        self.url = ""  # where it listens, once it does

    # --- HTTP ------------------------------------------------------------------------------

    async def health(self) -> Response:
        """``ok``, ``stopping``, or ``failing`` (HTTP 503) while the host cannot compute streams
        (:meth:`~.host.Host.check`: on ``serve``, after a batch of streams failed as a whole; on
        serve-ray, while no encoder replica answers)."""
        fault = await self.host.check()
        body: dict[str, Any] = {"status": "ok", "streams": len(self.sessions), "protocol": P.VERSION}
        body["lanes"] = self.host.lanes  # punctuation workers, each computing its streams
        # how busy each worker is and what it gets done (what a load balancer weighs; new streams
        # are refused past --max-load): the share of the last 5 s it computed, and units a second
        # of computing (None until it has computed)
        workers = [("punctuation", self.host.load)]
        if self.recognition is not None:
            workers.append(("recognition", self.recognition.load))
        for name, load in workers:
            capacity = load.capacity()
            body[name] = {"load": round(load.busy(), 3), "capacity": capacity and round(capacity, 1)}
        if self.recognition is not None:  # seconds per audio second, and the passes its guards cut
            ratio = self.recognition.load.seconds_per_unit()
            body["recognition"].update(
                compute_ratio=ratio and round(ratio, 3), guarded=self.metrics.guarded_passes()
            )
        if self.stopping.is_set():  # a load balancer sends new streams elsewhere while it drains
            body["status"] = "stopping"
            return json_response(HTTPStatus.SERVICE_UNAVAILABLE, body)
        if fault is not None:
            body.update(status="failing", error=fault)
            return json_response(HTTPStatus.SERVICE_UNAVAILABLE, body)
        return json_response(HTTPStatus.OK, body)

    async def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        return await self.admit(request, connection.local_address[1], _peer(connection))

    async def admit(self, request: Request, port: int, peer: str | None) -> Response | None:
        """The answer to a request before any websocket opens (None: open the stream). Every
        server's guard: ``serve``'s handshakes and serve-ray's session replicas
        (:mod:`.cluster`) ask it. ``port``: where the request came in; ``peer``: the client's address."""
        path = urlparse(request.path).path
        stream = path in self.streams
        refusal = self.access.refuse(request, self.secure, port, stream)
        if refusal is not None:
            log_event(
                logging.WARNING,
                "refused",
                code=refusal.code,
                host=", ".join(request.headers.get_all("Host"))[:100],
                origin=", ".join(request.headers.get_all("Origin"))[:100],
            )
            response = json_response(refusal.status, P.Error(refusal.code, refusal.message))
            if refusal.status == HTTPStatus.UNAUTHORIZED:
                response.headers["WWW-Authenticate"] = 'Bearer realm="streampunct"'
            return response
        if path == "/health":
            return await self.health()
        if path == "/metrics":
            return Response(200, "OK", Headers({"Content-Type": CONTENT_TYPE_LATEST}), self.metrics.render())
        if path == "/debug/census" and census.ENABLED:  # the soak's (benchmarks/soak_events.py)
            return json_response(HTTPStatus.OK, census.census())
        if path in ("/", "/index.html") and self.recognition is not None:  # the page needs /v1/asr
            return page_response()
        if not stream:
            paths = ", ".join((*self.streams, "/health"))
            return json_response(
                HTTPStatus.NOT_FOUND, P.Error("not_found", f"no endpoint {path}; try {paths} or /metrics")
            )
        if self.stopping.is_set():
            return json_response(
                HTTPStatus.SERVICE_UNAVAILABLE, P.Error("shutting_down", "the server is shutting down")
            )
        if len(self.sessions) >= self.limits.max_streams:
            return json_response(
                HTTPStatus.SERVICE_UNAVAILABLE,
                P.Error(
                    "too_many_streams", f"the server is at its limit of {self.limits.max_streams} streams"
                ),
            )
        if (full := self.client_full(peer)) is not None:
            return json_response(HTTPStatus.TOO_MANY_REQUESTS, full)
        if (fault := await self.host.check()) is not None:
            return _try_later(P.Error("unavailable", f"the server cannot compute streams now: {fault}"))
        if (busy := self.busy(path)) is not None:
            return _try_later(busy)
        return None

    def busy(self, path: str) -> P.Error | None:
        """Why the server takes no new stream on ``path`` now (its worker is past ``max_load``), or
        None: a new stream would slow every open one past its bounds."""
        most = self.limits.max_load
        loads = [("punctuation", self.host.load, "words")]
        if path == "/v1/asr" and self.recognition is not None:
            loads.append(("speech recognition", self.recognition.load, "audio seconds"))
        for what, load, unit in loads:
            if most is not None and (busy := load.busy()) >= most:
                capacity = load.capacity()
                about = f" (about {capacity:.0f} {unit} a second)" if capacity else ""
                log_event(logging.WARNING, "busy", worker=what, load=round(busy, 3), capacity=capacity)
                message = f"the server's {what} is at {busy:.0%} of its capacity{about}: try again later"
                return P.Error("busy", message)
        return None

    def client_full(self, peer: str | None) -> P.Error | None:
        """Why a client address may open no more streams (it holds its limit), or None."""
        most = self.limits.max_streams_per_client
        if most is None or self.streams_of[peer] < most:
            return None
        message = f"a client may hold {most:g} streams at once: close one first"
        return P.Error("too_many_client_streams", message)

    # --- websockets ------------------------------------------------------------------------

    async def handler(self, connection: ServerConnection) -> None:
        """A session, until its stream ends; its stream is forgotten in the host however it ended."""
        path = urlparse(connection.request.path).path if connection.request else ""
        session_id = f"{next(self._ids):06d}"
        peer = _peer(connection)
        if (full := self.client_full(peer)) is not None:  # its handshakes passed process_request together
            await connection.send(full.to_json())
            await connection.close(1013, "too many streams")
            return
        if len(self.sessions) >= self.limits.max_streams:  # handshakes that passed process_request together
            message = f"the server is at its limit of {self.limits.max_streams} streams"
            await connection.send(P.Error("too_many_streams", message).to_json())
            await connection.close(1013, "too many streams")
            return
        self.streams_of[peer] += 1
        log_event(logging.INFO, "connect", session=session_id, path=path, peer=peer)
        session: Session = (
            AsrSession(self.context, self.recognition, connection, session_id)
            if path == "/v1/asr" and self.recognition is not None
            else PunctSession(self.context, connection, session_id)
        )
        self.sessions[session_id] = session
        self.metrics.sessions.labels(session.endpoint).inc()
        try:
            await session.run()
        except ConnectionClosed as e:
            log_event(
                logging.INFO, "connection_closed", session=session_id, code=e.rcvd.code if e.rcvd else None
            )
        except Exception:
            stopped = session.stream.n_final if session.stream is not None else None
            log.exception("session_failed", extra={"fields": {"session": session_id, "word": stopped}})
            self.metrics.failed.labels(session.endpoint).inc()
            try:
                message = "the server failed on this stream; it is closed"
                if stopped is not None:
                    message += f" (words before {stopped} are final)"
                await connection.send(P.Error("internal", message, stopped).to_json())
                await connection.close(1011, "internal error")
            except ConnectionClosed:
                pass
        finally:
            census.keep(session)  # the soak's control, else nothing
            del self.sessions[session_id]
            self.streams_of[peer] -= 1
            if not self.streams_of[peer]:
                del self.streams_of[peer]
            log_event(logging.INFO, "disconnect", session=session_id, words=session.words_in)
            if session.stream is not None:
                await self.host.close(session.stream)


def _try_later(error: P.Error) -> Response:
    """HTTP 503 to a handshake, with the seconds after which a new one may be taken (a worker's
    load reads the last LOAD_WINDOW_S)."""
    response = json_response(HTTPStatus.SERVICE_UNAVAILABLE, error)
    response.headers["Retry-After"] = str(math.ceil(LOAD_WINDOW_S))
    return response


def _peer(connection: ServerConnection) -> str | None:
    """The client's address."""
    return connection.remote_address[0] if connection.remote_address else None


async def run_server(
    app: App,
    host: str,
    port: int,
    ready: asyncio.Event | None = None,
    tls: ssl.SSLContext | None = None,
    standalone: bool = True,
) -> None:
    """Serve until ``app.stopping`` is set, then finish the open streams. ``standalone``: the
    server is the process (it says where it listens on stdout, and SIGINT or SIGTERM stop it);
    else it is embedded in a client's event loop (:func:`embedded`)."""
    async with serve(
        app.handler,
        host,
        port,
        process_request=app.process_request,
        max_size=2**20,
        max_queue=32,
        ping_interval=20,
        server_header="streampunct",  # no versions
        ssl=tls,
    ) as server:
        actual = server.sockets[0].getsockname()[1] if server.sockets else port
        app.url = f"{'wss' if tls else 'ws'}://{host}:{actual}"
        log_event(
            logging.INFO,
            "listening",
            url=app.url,
            streams=app.limits.max_streams,
            token=app.access.token is not None,
        )
        if standalone:  # the signals are handled before anyone is told where to connect
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, app.stopping.set)
            print(f"streampunct serving on {app.url}", flush=True)
            print(f"live captions in a browser: {app.url.replace('ws', 'http', 1)}/", flush=True)
        if ready is not None:
            ready.set()
        trimming = asyncio.create_task(keep_trimmed()) if standalone else None
        await app.stopping.wait()
        if trimming is not None:
            trimming.cancel()
        stopped_at = app.context.stopped_at = time.monotonic()
        log_event(logging.INFO, "shutting_down", streams=len(app.sessions))
        # Sessions take what their clients sent (a grace period at most), finish their streams
        # and close themselves (another at most: recognising the audio that waits, say).
        while app.sessions and time.monotonic() < stopped_at + 2 * app.limits.shutdown_grace_s:
            await asyncio.sleep(0.1)
        if app.sessions:
            log_event(logging.WARNING, "grace_period_over", streams=len(app.sessions))
        server.close()
        await server.wait_closed()
    await app.host.stop()
    if app.recognition is not None:
        app.recognition.stop()
    log_event(logging.INFO, "stopped")


@contextlib.asynccontextmanager
async def embedded(
    model: str | None = None, asr_model: str | None = None, device: str = "auto", int8: bool = False
) -> AsyncIterator[tuple[str, str]]:
    """A server in this event loop, on a free loopback port with a random token, for the clients
    run without ``--url``: the same sessions as ``streampunct serve``, with its defaults. Yields
    its URL and token; stops it (every stream finished) on leaving."""
    punctuator = await asyncio.to_thread(lambda: Punctuator.load(model, device=device, int8=int8).prepare())
    token = secrets.token_urlsafe(16)
    app = App(LocalHost(punctuator), recognition=Recognition(asr_model, device), access=Access(token))
    ready = asyncio.Event()
    server = asyncio.create_task(run_server(app, "127.0.0.1", 0, ready, standalone=False))
    waiting = asyncio.create_task(ready.wait())
    await asyncio.wait({server, waiting}, return_when=asyncio.FIRST_COMPLETED)
    if server.done():  # it failed to start: say why
        waiting.cancel()
        server.result()
    try:
        yield app.url, token
    finally:
        app.stopping.set()
        await server


def add_guard_flags(
    ap: argparse.ArgumentParser, limits: tuple[str, ...] = OPERATOR_LIMITS
) -> argparse._ArgumentGroup:
    """The access flags of every server (``serve``, ``serve-ray``), and a flag for each of the
    ``limits`` (fields of :class:`~streampunct.options.Limits`); the access group."""
    security = ap.add_argument_group("access (docs/protocol.md, Security)")
    security.add_argument(
        "--token",
        default=os.environ.get("STREAMPUNCT_TOKEN"),
        help="a shared secret every stream must present: `Authorization: Bearer TOKEN`, or ?token=TOKEN "
        "from a browser (default: $STREAMPUNCT_TOKEN; unset: no token)",
    )
    security.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a web origin (https://example.org) whose pages may open streams, besides this server's "
        "own page; repeatable; * allows any (default: only the server's own page)",
    )
    security.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a name clients reach this server by (its Host header), besides the --host address and "
        f"{', '.join(LOOPBACK_HOSTS)}; repeatable; any other is refused (DNS rebinding)",
    )
    group = ap.add_argument_group("limits (docs/protocol.md, Security; every other one: --config)")
    counts = {"metavar": "N"}
    add_config_flags(
        group, Limits, only=limits, defaults=False, max_streams=counts, max_streams_per_client=counts
    )
    return security


def add_config_flag(ap: argparse.ArgumentParser, tables: tuple[str, ...]) -> None:
    """``--config FILE``: the settings of ``tables`` (names in :data:`streampunct.options.TABLES`)."""
    ap.add_argument(
        "--config",
        metavar="FILE",
        help=f"a TOML file of settings: {', '.join(f'[{t}]' for t in tables)}, each key a field of its "
        "options class (docs/usage.md); a flag wins over it",
    )


def options_from_args(
    ap: argparse.ArgumentParser, args: argparse.Namespace, tables: tuple[str, ...]
) -> dict[str, Any]:
    """The options of ``tables`` that ``--config`` and the flags set (a flag over the file), for a
    server on ``args.host``; the file read is logged, a bad setting ends the command: one line,
    exit status 2."""
    given = {"limits": flags_given(args, Limits)}
    try:
        config = read_config(args.config)
        options = options_from_config(config, tables, args.config or "flags", **given)
    except StreamPunctError as e:
        ap.exit(2, f"{ap.prog}: error: {e}\n")
    if args.config is not None:  # which file, and what it set
        settings = [f"{table}.{key}" for table, keys in config.items() for key in keys]
        log_event(logging.INFO, "config", path=str(Path(args.config).resolve()), settings=settings)
    per_client = "max_streams_per_client" in {**config.get("limits", {}), **given["limits"]}
    if not per_client and not is_loopback(args.host):
        options["limits"] = dataclasses.replace(options["limits"], max_streams_per_client=STREAMS_PER_CLIENT)
    return options


def access_from_flags(args: argparse.Namespace) -> Access:
    """The access that :func:`add_guard_flags`' flags say, for a server on ``args.host``."""
    return Access(
        args.token or None, tuple(args.allow_origin), (*LOOPBACK_HOSTS, args.host, *args.allow_host)
    )


def build_parser() -> argparse.ArgumentParser:
    ap = Parser(
        prog="streampunct serve",
        description="Run the streampunct websocket server. Its flags are an operator's; every other "
        "setting is a --config file's (docs/usage.md).",
    )
    ap.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)"
    )
    ap.add_argument("--port", type=port, default=8765, help="port (0: any free port)")
    ap.add_argument("--model", help="punctuation model: default, base (shipped) or a checkpoint folder")
    ap.add_argument("--device", default="auto", help="cpu, cuda, ... (default: cuda if present)")
    add_int8_flag(ap)
    ap.add_argument("--asr-model", help="tiny.en (default), base, or a CTranslate2 Whisper folder")
    ap.add_argument(
        "--preload-asr",
        action="store_true",
        help="load the speech model at start, not at the first /v1/asr stream",
    )
    levels = ("debug", "info", "warning", "error")
    ap.add_argument("--log-level", default="info", type=str.lower, choices=levels, help="default: info")
    ap.add_argument(
        "--record",
        metavar="DIR",
        type=Path,
        help="write each /v1/asr stream's punctuation calls to DIR/SESSION.jsonl (pipeline.replay reads them)",
    )
    add_config_flag(ap, tuple(TABLES))
    security = add_guard_flags(ap)
    security.add_argument("--certfile", help="TLS certificate chain (PEM): serve wss:// and https://")
    security.add_argument("--keyfile", help="TLS private key (PEM), with --certfile")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if bool(args.certfile) != bool(args.keyfile):
        ap.error("--certfile and --keyfile go together")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=args.log_level.upper(), handlers=[handler])
    logging.getLogger("faster_whisper").setLevel(logging.WARNING)
    options = options_from_args(ap, args, tuple(TABLES))
    try:
        punctuator = Punctuator.load(
            args.model, device=args.device, int8=args.int8
        ).prepare()  # fails here, not in a stream
        tls = None
        if args.certfile:
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            tls.load_cert_chain(args.certfile, args.keyfile)
        recognition = Recognition(
            args.asr_model, args.device, options["recognizer"], options["front_end"], args.record
        )
        app = App(
            LocalHost(punctuator),
            recognition=recognition,
            access=access_from_flags(args),
            limits=options["limits"],
            secure=tls is not None,
        )
        if args.record:
            args.record.mkdir(parents=True, exist_ok=True)

        async def start() -> None:
            if args.preload_asr:
                await recognition.model()
            await run_server(app, args.host, args.port, tls=tls)

        asyncio.run(start())
    except StreamPunctError as e:
        print(f"streampunct serve: error: {e}", file=sys.stderr)
        return 2
    except ssl.SSLError as e:
        print(
            f"streampunct serve: error: cannot use {args.certfile} and {args.keyfile}: {e}", file=sys.stderr
        )
        return 2
    except OSError as e:  # asyncio's says the address again: the system's reason alone
        why = os.strerror(e.errno).lower() if e.errno else str(e)
        if e.errno == errno.EADDRINUSE:
            why += " (another server there? another --port, or 0 for any free one)"
        print(f"streampunct serve: error: cannot listen on {args.host}:{args.port}: {why}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    run_with_arena_cap()
    sys.exit(main())
