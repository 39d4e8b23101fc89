"""streampunct on Ray Serve: websocket sessions on replicas, one encoder replica shared by them.

    pip install -e ".[cluster]"
    streampunct serve-ray --port 8000 --session-replicas 2      # a local Ray
    streampunct serve-ray --address auto ...                   # an existing cluster

(Not ``python -m``: Ray pickles the deployments by reference to this module, which ``__main__`` is not.)

Two Ray Serve applications:

- ``encoder-0`` ... (:class:`Encoder`, ``--encoder-replicas`` of them, each an application of its
  own with one replica and one CPU or GPU): the model, the state of its streams and one
  :class:`~streampunct.scheduler.Batcher`, so that the words of its streams from every session
  replica are computed together, in one pass a batch, exactly as in ``streampunct serve`` (the same
  slices, and a stream's labels never depend on its batch-mates). A new stream goes to the encoder
  least busy, and its calls to that one to its end;
- ``sessions`` (:class:`Sessions`, ``--session-replicas`` of them): streampunct's own sessions
  (:class:`~streampunct.server.app.App`: the protocol, its limits, pacing, ``busy``, the order of the
  replies, ``/health``, ``/metrics``) at ``/v1/punct`` behind Ray's HTTP proxy, each reading its
  websocket through :class:`StarletteConnection`; their streams live in the encoders
  (:class:`ClusterHost`). A stream whose encoder replica stops ends with ``unavailable`` and its
  ``end``; while no encoder answers (starting, restarting), a new stream gets HTTP 503.

A websocket is one ongoing request for its whole life: the proxy sends a new stream to a session
replica with few open ones, and Ray Serve's autoscaling on ``target_ongoing_requests`` (not set
here) would scale the session replicas on open streams. A session replica that stops (a new
version of the sessions, a scale-down) takes no new streams and serves its open ones to their end,
for ``--drain-s`` at most. With ``--device cuda`` the encoder replica asks Ray for a GPU.
The encoders are applications of their own, so that redeploying the sessions leaves every
stream's state where it is. Only ``/v1/punct``: a recogniser per stream belongs beside the
session that reads its audio, which ``streampunct serve`` replicas do (deploy/haproxy.cfg).

The guard is ``serve``'s (:meth:`~streampunct.server.app.App.admit`, the same flags): the token,
the Host and Origin allow-lists, the stream limits, and admission by the real load of the least
busy encoder (the share of the last 5 s its batcher computed): past ``--max-load`` a new stream gets HTTP 503 ``busy``
with Retry-After, before its websocket opens. Ray's own ports: deploy/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import signal
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from types import SimpleNamespace
from typing import Any

from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.frames import Close
from websockets.http11 import Request, Response

from .. import protocol as P
from ..errors import InputError, StreamPunctError
from ..flags import Parser, add_int8_flag, port
from ..options import Limits
from ..punctuator import Punctuator
from ..scheduler import Batcher, Load
from ..stream import Call, Finish
from ..types import PunctEvent, Sentence
from .allocator import ARENA_ENV, keep_trimmed
from .app import App, access_from_flags, add_config_flag, add_guard_flags, options_from_args
from .guard import Access
from .host import StreamLost
from .metrics import Metrics
from .web import json_response

try:
    from fastapi import FastAPI, WebSocket
    from fastapi.requests import HTTPConnection
    from fastapi.requests import Request as HttpRequest
    from fastapi.responses import Response as HttpResponse
    from ray import serve
except ImportError as e:  # pragma: no cover - the [cluster] extra
    raise InputError(
        "streampunct on Ray Serve needs the cluster extra: pip install 'streampunct[cluster]'"
    ) from e

__all__ = [
    "Encoder",
    "Sessions",
    "EncoderReplica",
    "SessionReplica",
    "ClusterHost",
    "StarletteConnection",
    "deploy",
    "main",
]

ENCODER_APP, SESSIONS_APP = "encoder", "sessions"
DRAIN_S = 600.0  # a stopping session replica serves its open streams this long at most
CHECK_S = 2.0  # an encoder that does not answer a load reading this long takes no new stream


@dataclass(frozen=True)
class Reply:
    """The encoder's answer to one call on a stream."""

    events: list[PunctEvent]
    n_words: int
    n_final: int
    error: StreamPunctError | None = None  # the stream refused the call, and is unchanged
    sentences: tuple[Sentence, ...] = ()  # those the call closed


class EncoderReplica:
    """The model, every stream and the batcher that runs their calls together."""

    def __init__(self, model: str | None = None, device: str = "auto", int8: bool = False):
        self.punctuator = Punctuator.load(model, device=device, int8=int8).prepare()
        self.streams: dict[str, Any] = {}
        self.batcher = Batcher()
        self.trimming: asyncio.Task[None] | None = None

    async def open(
        self, lookahead: int, max_delay_ms: float | None, engine: str, sentences: bool
    ) -> tuple[str, str]:
        """A new stream: its id and the engine it got."""
        if self.trimming is None:  # the actor's event loop runs now: trim as serve does
            self.trimming = asyncio.create_task(keep_trimmed())
        stream = self.punctuator.stream(lookahead, max_delay_ms, engine, sentences=sentences)
        stream_id = uuid.uuid4().hex
        self.streams[stream_id] = stream
        return stream_id, stream.engine

    async def run(self, stream_id: str, call: Call) -> Reply:
        """One call on a stream, batched with the calls of every other stream; a finished stream is forgotten."""
        stream = self.streams.get(stream_id)
        if stream is None:
            raise InputError(f"no stream {stream_id} in this encoder")
        try:
            events = await self.batcher.run(stream, call)
        except StreamPunctError as e:
            return Reply([], stream.n_words, stream.n_final, e)
        finally:
            if isinstance(call, Finish):
                self.streams.pop(stream_id, None)  # (a lost session may have closed it)
        return Reply(events, stream.n_words, stream.n_final, sentences=tuple(stream.take_sentences()))

    def close(self, stream_id: str) -> None:
        """Forget a stream that ended without ``finish`` (its connection was lost)."""
        self.streams.pop(stream_id, None)

    def open_streams(self) -> int:
        return len(self.streams)

    def load(self) -> tuple[float, float | None, int]:
        """The batcher's load and capacity (:class:`~streampunct.scheduler.Load`), for admission,
        and the streams open here, for the choice of an encoder."""
        return self.batcher.load.busy(), self.batcher.load.capacity(), len(self.streams)


class RemoteStream:
    """A session's view of its stream in an encoder: what the session reads of it, and which encoder."""

    def __init__(self, encoder: Any, stream_id: str, engine: str):
        self.encoder, self.id, self.engine = encoder, stream_id, engine
        self.n_words = self.n_final = 0
        self.sentences: list[Sentence] = []  # closed there, not taken here yet

    def take_sentences(self) -> list[Sentence]:
        closed, self.sentences = self.sentences, []
        return closed


class RemoteLoad(Load):
    """The load of the encoder a new stream would go to (the least busy), as a session replica last
    read the encoders' (:meth:`ClusterHost.check`)."""

    def __init__(self) -> None:
        super().__init__()
        self.last: tuple[float, float | None] = (0.0, None)

    def busy(self) -> float:
        return self.last[0]

    def capacity(self) -> float | None:
        return self.last[1]


class ClusterHost:
    """A session replica's :class:`~streampunct.server.host.Host`: it computes nothing; each call
    goes to its stream's encoder replica, whose batcher runs it with the calls of every session
    replica's streams there. A new stream goes to the encoder least busy of those that answer
    when it opens, and stays there. A call that fails there (the replica stopped; the one Ray starts
    instead holds none of its streams) loses the stream: :class:`~streampunct.server.host.StreamLost`,
    Ray's error kept for the log."""

    def __init__(self, encoders: Sequence[Any]):
        self.encoders = list(encoders)
        self.lanes = len(self.encoders)
        self.loads: list[tuple[float, float | None, int]] = [(0.0, None, 0)] * len(self.encoders)
        self.opening = [0] * len(self.encoders)  # streams this replica is opening there now
        self.load = RemoteLoad()

    async def check(self) -> str | None:
        """Read the encoders' loads (before admitting a stream, and for ``/health``); one that does
        not answer within CHECK_S takes no new stream."""
        loads = await asyncio.gather(*(_reading(e) for e in self.encoders))
        if all(load is None for load in loads):
            return "its encoder is not answering (starting, or restarting after a fault)"
        self.loads = [load or (math.inf, None, 0) for load in loads]
        busy, capacity, _ = self.loads[self.least_busy()]
        self.load.last = (busy, capacity)
        return None

    def least_busy(self) -> int:
        """The encoder a new stream goes to: the least busy (to a tenth), then the fewest streams."""
        return min(
            range(len(self.encoders)),
            key=lambda i: (round(self.loads[i][0], 1), self.loads[i][2] + self.opening[i]),
        )

    async def open(
        self, lookahead: int, max_delay_ms: float | None, engine: str, sentences: bool
    ) -> RemoteStream:
        i = self.least_busy()
        self.opening[i] += 1
        try:
            opened = await _answer(self.encoders[i].open.remote(lookahead, max_delay_ms, engine, sentences))
        finally:
            self.opening[i] -= 1
        busy, capacity, streams = self.loads[i]
        self.loads[i] = (busy, capacity, streams + 1)
        return RemoteStream(self.encoders[i], *opened)

    async def run(self, stream: Any, call: Call) -> list[PunctEvent]:
        try:
            reply: Reply = await _answer(stream.encoder.run.remote(stream.id, call))
        except Exception as e:  # Ray's, with its traceback, ids and addresses: for the log alone
            raise StreamLost("the encoder that held this stream stopped") from e
        stream.n_words, stream.n_final = reply.n_words, reply.n_final
        stream.sentences += reply.sentences
        if reply.error is not None:
            raise reply.error
        return reply.events

    async def close(self, stream: Any) -> None:
        with contextlib.suppress(Exception):  # an encoder that stopped holds it no more
            await asyncio.wait_for(_answer(stream.encoder.close.remote(stream.id)), CHECK_S)

    def report_to(self, metrics: Metrics) -> None:
        """Nothing: the batches run in the encoders."""

    async def stop(self) -> None:
        """Nothing: the encoders are applications of their own."""


async def _answer(response: Any) -> Any:
    """A Ray Serve call's result; cancelled in the replica too if its caller is (a session whose
    client has gone drops its work at once, as on ``serve``)."""
    try:
        return await response
    except asyncio.CancelledError:
        response.cancel()
        raise


async def _reading(encoder: Any) -> tuple[float, float | None, int] | None:
    """An encoder's load (EncoderReplica.load), or None if it does not answer within CHECK_S."""
    try:
        return await asyncio.wait_for(_answer(encoder.load.remote()), CHECK_S)
    except Exception:
        return None


class StarletteConnection:
    """A Starlette websocket as the sessions read theirs (websockets' ``ServerConnection``: ``recv``,
    ``send``, ``close``, ``wait_closed``, ``request.path``, ``remote_address``). One task reads the
    socket into a queue, so that a ``recv()`` the session's timers cancel loses no message."""

    def __init__(self, websocket: WebSocket, path: str):
        self.websocket = websocket
        self.request = SimpleNamespace(path=path, headers=websocket.headers)
        client = websocket.client
        self.remote_address = (client.host, client.port) if client else None
        self.messages: asyncio.Queue[str | bytes | None] = asyncio.Queue()
        self.code: int | None = None  # the close code, once closed
        self.closed = asyncio.Event()
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    self.code = message.get("code", 1005)
                    return
                data = message.get("text")
                await self.messages.put(data if data is not None else message.get("bytes", b""))
        except Exception:  # the socket is gone however it went
            self.code = self.code or 1006
        finally:
            self.closed.set()
            self.messages.put_nowait(None)

    def _closed(self) -> ConnectionClosed:
        return ConnectionClosed(Close(self.code or 1006, ""), None)

    async def recv(self) -> str | bytes:
        message = await self.messages.get()
        if message is None:
            self.messages.put_nowait(None)  # for the next recv()
            raise self._closed()
        return message

    async def send(self, message: str | bytes) -> None:
        if self.closed.is_set():
            raise self._closed()
        try:
            if isinstance(message, str):
                await self.websocket.send_text(message)
            else:
                await self.websocket.send_bytes(message)
        except Exception as e:
            raise self._closed() from e

    async def close(self, code: int = 1000, reason: str = "") -> None:
        if not self.closed.is_set():
            self.code = code
            with contextlib.suppress(Exception):
                await self.websocket.close(code, reason)
            self.reader.cancel()
            await asyncio.wait([self.reader])

    async def wait_closed(self) -> None:
        await self.closed.wait()


api = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)  # only the routes below: none unguarded


class SessionReplica:
    """streampunct's sessions at ``/v1/punct``, their streams in the encoder applications; every
    request, stream or not, answered first by ``serve``'s guard (:meth:`App.admit`)."""

    def __init__(self, access: Access | None = None, limits: Limits | None = None, encoders: int = 1):
        self.access, self.limits, self.encoders = access, limits, encoders
        self._server: App | None = None  # (``app`` is Ray's: the FastAPI ingress)

    def server(self) -> App:
        if self._server is None:  # made in the event loop that serves the requests
            handles = [  # (an encoder still starting answers no load: CHECK_S)
                serve.get_deployment_handle(Encoder.name, app_name=encoder_app(i), _check_exists=False)
                for i in range(self.encoders)
            ]
            self._server = App(ClusterHost(handles), access=self.access, limits=self.limits)
        return self._server

    @api.websocket("/{path:path}")
    async def stream(self, websocket: WebSocket) -> None:
        request, port, peer = handshake(websocket)
        refusal = await self.server().admit(request, port, peer)
        if refusal is not None:  # an HTTP answer to the handshake, as serve gives it
            await websocket.send_denial_response(starlette_response(refusal))
            return
        await websocket.accept()
        connection: Any = StarletteConnection(websocket, request.path)  # read as websockets' own
        try:
            await self.server().handler(connection)
        finally:
            await connection.close()

    @api.get("/{path:path}")
    async def http(self, request: HttpRequest) -> HttpResponse:
        """``/health``, ``/metrics``, or 404, as ``serve`` answers them."""
        answer = await self.server().admit(*handshake(request))
        if answer is None:  # a stream's path, without a websocket handshake
            error = P.Error("bad_request", "a stream opens with a websocket handshake")
            answer = json_response(HTTPStatus.UPGRADE_REQUIRED, error)
        return starlette_response(answer)


def handshake(connection: HTTPConnection) -> tuple[Request, int, str | None]:
    """A request as :meth:`App.admit` reads it: the request, the port it came in on, the client."""
    scope = connection.scope
    query = scope.get("query_string", b"").decode("latin-1")
    path = scope.get("path", "/") + (f"?{query}" if query else "")
    headers = Headers([(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]])
    server = scope.get("server") or ("", 0)
    return Request(path, headers), int(server[1] or 0), connection.client.host if connection.client else None


def starlette_response(response: Response) -> HttpResponse:
    """``serve``'s answer (websockets') as Starlette sends it."""
    return HttpResponse(response.body, response.status_code, dict(response.headers.raw_items()))


Encoder = serve.deployment(name="Encoder", max_ongoing_requests=100_000)(EncoderReplica)
Sessions = serve.deployment(
    name="Sessions",
    ray_actor_options={"num_cpus": 0, "runtime_env": {"env_vars": ARENA_ENV}},  # reads sockets: no compute
    max_ongoing_requests=10_000,
    graceful_shutdown_timeout_s=DRAIN_S,
)(serve.ingress(api)(SessionReplica))


def encoder_app(i: int) -> str:
    """The name of encoder replica ``i``'s application."""
    return f"{ENCODER_APP}-{i}"


def deploy(
    session_replicas: int = 2,
    encoder_replicas: int = 1,
    model: str | None = None,
    device: str = "auto",
    int8: bool = False,
    limits: Limits | None = None,
    drain_s: float = DRAIN_S,
    access: Access | None = None,
    encoder: bool = True,
) -> None:
    """The applications on the running Ray Serve: the sessions, then ``encoder_replicas``
    encoders, each an application of its own (a stream's state is in one of them, and its calls
    must reach that one); the sessions first, so that while the model loads a client is told 503
    by the guard (``encoder=False``: the sessions alone, a new version of them beside the encoders
    already there)."""
    sessions = Sessions.options(num_replicas=session_replicas, graceful_shutdown_timeout_s=drain_s)
    serve.run(sessions.bind(access, limits, encoder_replicas), name=SESSIONS_APP, route_prefix="/")
    if encoder:  # a GPU of its own on --device cuda (Ray hides the GPUs an actor did not ask for)
        gpus = 1 if device.startswith("cuda") else 0
        started = {"num_cpus": 1, "num_gpus": gpus, "runtime_env": {"env_vars": ARENA_ENV}}  # see allocator
        encoder_deployment = Encoder.options(ray_actor_options=started)
        for i in range(encoder_replicas):
            serve.run(encoder_deployment.bind(model, device, int8), name=encoder_app(i), route_prefix=None)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(
        prog="streampunct serve-ray",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--host", default="127.0.0.1", help="where Ray's HTTP proxy listens")
    ap.add_argument("--port", type=port, default=8000)
    ap.add_argument(
        "--address", default=None, help="an existing Ray cluster (auto, or ray://...); default: a local Ray"
    )
    ap.add_argument("--session-replicas", type=int, default=2)
    ap.add_argument(
        "--encoder-replicas", type=int, default=1, help="encoders, each with its streams and a CPU (or a GPU)"
    )
    ap.add_argument("--model", default=None, help="default, base, or a checkpoint folder")
    ap.add_argument("--device", default="auto")
    add_int8_flag(ap)
    ap.add_argument(
        "--drain-s", type=float, default=DRAIN_S, help="seconds a stopping session replica serves its streams"
    )
    add_config_flag(ap, ("limits",))
    add_guard_flags(ap, ("max_streams", "max_streams_per_client", "max_load"))  # a session replica's
    args = ap.parse_args(argv)
    access, limits = access_from_flags(args), options_from_args(ap, args, ("limits",))["limits"]
    import ray

    ray.init(address=args.address, include_dashboard=False)
    serve.start(http_options={"host": args.host, "port": args.port})
    deploy(
        args.session_replicas,
        args.encoder_replicas,
        args.model,
        args.device,
        args.int8,
        limits,
        args.drain_s,
        access,
    )
    print(f"streampunct on Ray Serve, serving on ws://{args.host}:{args.port}", flush=True)
    stop = asyncio.Event()

    async def wait() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()

    asyncio.run(wait())
    serve.shutdown()
    return 0
