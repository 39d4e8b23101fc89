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
  replies) at ``/v1/punct`` behind Ray's HTTP proxy, each reading its websocket through
  :class:`StarletteConnection`; their streams live in the encoder (:class:`ClusterApp`).

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
import contextvars
import signal
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.frames import Close
from websockets.http11 import Request, Response

from ..errors import InputError, StreamPunctError
from ..flags import Parser, add_int8_flag, port
from ..options import Limits
from ..punctuator import Punctuator
from ..scheduler import Batcher, Load
from ..stream import Call, Finish, Push, Revise, Tick
from ..types import PunctEvent, Sentence, Word
from .allocator import ARENA_ENV, keep_trimmed
from .app import App, access_from_flags, add_config_flag, add_guard_flags, options_from_args
from .guard import Access

try:
    from fastapi import FastAPI, WebSocket
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
    "ClusterApp",
    "RemoteBatcher",
    "StarletteConnection",
    "deploy",
    "main",
]

ENCODER_APP, SESSIONS_APP = "encoder", "sessions"
DRAIN_S = 600.0  # a stopping session replica serves its open streams this long at most


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
    read the encoders' (:meth:`RemoteBatcher.refresh`)."""

    def __init__(self) -> None:
        super().__init__()
        self.last: tuple[float, float | None] = (0.0, None)

    def busy(self) -> float:
        return self.last[0]

    def capacity(self) -> float | None:
        return self.last[1]


class RemoteBatcher(Batcher):
    """A session replica's batcher: it computes nothing; each call goes to its stream's encoder
    replica, whose batcher runs it with the calls of every session replica's streams there. A new
    stream goes to the encoder least busy when it opens, and stays there."""

    def __init__(self, encoders: Sequence[Any]):
        super().__init__()
        self.encoders = list(encoders)
        self.loads: list[tuple[float, float | None, int]] = [(0.0, None, 0)] * len(self.encoders)
        self.opening = [0] * len(self.encoders)  # streams this replica is opening there now
        self.load = self.encoder_load = RemoteLoad()

    async def refresh(self) -> None:
        """Read the encoders' loads (before admitting a stream)."""
        self.loads = list(await asyncio.gather(*(e.load.remote() for e in self.encoders)))
        busy, capacity, _ = self.loads[self.least_busy()]
        self.encoder_load.last = (busy, capacity)

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
            opened = await self.encoders[i].open.remote(lookahead, max_delay_ms, engine, sentences)
        finally:
            self.opening[i] -= 1
        busy, capacity, streams = self.loads[i]
        self.loads[i] = (busy, capacity, streams + 1)
        return RemoteStream(self.encoders[i], *opened)

    async def run(self, stream: Any, call: Call) -> list[PunctEvent]:
        reply: Reply = await stream.encoder.run.remote(stream.id, call)
        stream.n_words, stream.n_final = reply.n_words, reply.n_final
        stream.sentences += reply.sentences
        if reply.error is not None:
            raise reply.error
        return reply.events

    async def push(
        self,
        stream: Any,
        words: Iterable[str | Word],
        now: float | None = None,
        tentative: Iterable[str | Word] = (),
    ) -> list[PunctEvent]:
        return await self.run(stream, Push(tuple(words), now, tuple(tentative)))

    async def revise(
        self, stream: Any, index: int, words: Iterable[str | Word], now: float | None = None
    ) -> list[PunctEvent]:
        return await self.run(stream, Revise(index, tuple(words), now))

    async def tick(self, stream: Any, now: float) -> list[PunctEvent]:
        return await self.run(stream, Tick(now))

    async def finish(self, stream: Any) -> list[PunctEvent]:
        return await self.run(stream, Finish())


class ClusterApp(App):
    """The server's sessions, with their streams in the encoder replicas."""

    def __init__(self, encoders: Sequence[Any], access: Access | None = None, limits: Limits | None = None):
        self.remote = RemoteBatcher(encoders)
        super().__init__(None, batcher=self.remote, access=access, limits=limits)

    async def admit(self, request: Request, port: int, peer: str | None) -> Response | None:
        """``serve``'s guard, on the encoder's load as it is now."""
        await self.remote.refresh()
        return await super().admit(request, port, peer)

    async def handler(self, connection: Any) -> None:
        """A session; its stream is forgotten in the encoder however the session ended (a
        connection lost before the end message leaves it unfinished)."""
        opened = _opened.set([])
        try:
            await super().handler(connection)
        finally:
            for stream in _opened.get():
                await stream.encoder.close.remote(stream.id)
            _opened.reset(opened)

    async def open_stream(
        self, lookahead: int, max_delay_ms: float | None, engine: str, sentences: bool
    ) -> RemoteStream:
        stream = await self.remote.open(lookahead, max_delay_ms, engine, sentences)
        opened = _opened.get(None)  # None: not a session's (the health probe, which finishes it)
        if opened is not None:
            opened.append(stream)
        return stream


# The streams the session in this context opened (ClusterApp.handler).
_opened: contextvars.ContextVar[list[RemoteStream]] = contextvars.ContextVar("opened")


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
    """streampunct's sessions at ``/v1/punct``, their streams in the encoder application."""

    def __init__(self, access: Access | None = None, limits: Limits | None = None, encoders: int = 1):
        self.access, self.limits, self.encoders = access, limits, encoders
        self._server: ClusterApp | None = None  # (``app`` is Ray's: the FastAPI ingress)

    def server(self) -> ClusterApp:
        if self._server is None:  # made in the event loop that serves the requests
            handles = [
                serve.get_deployment_handle(Encoder.name, app_name=encoder_app(i))
                for i in range(self.encoders)
            ]
            self._server = ClusterApp(handles, self.access, self.limits)
        return self._server

    @api.websocket("/v1/punct")
    async def punct(self, websocket: WebSocket) -> None:
        refusal = await self.server().admit(*handshake(websocket))
        if refusal is not None:  # an HTTP answer to the handshake, as serve gives it
            body, headers = refusal.body, dict(refusal.headers.raw_items())
            await websocket.send_denial_response(HttpResponse(body, refusal.status_code, headers))
            return
        await websocket.accept()
        connection = StarletteConnection(websocket, "/v1/punct")
        try:
            await self.server().handler(connection)
        finally:
            await connection.close()

    @api.get("/health")
    async def health(self) -> dict[str, Any]:
        return {"status": "ok", "streams": self.server().active}


def handshake(websocket: WebSocket) -> tuple[Request, int, str | None]:
    """The handshake as :meth:`App.admit` reads it: the request, the port it came in on, the client."""
    query = websocket.scope.get("query_string", b"").decode("latin-1")
    path = websocket.scope.get("path", "/v1/punct") + (f"?{query}" if query else "")
    headers = Headers([(k.decode("latin-1"), v.decode("latin-1")) for k, v in websocket.scope["headers"]])
    server = websocket.scope.get("server") or ("", 0)
    return Request(path, headers), int(server[1] or 0), websocket.client.host if websocket.client else None


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
    """The applications on the running Ray Serve: ``encoder_replicas`` encoders, each an application
    of its own (a stream's state is in one of them, and its calls must reach that one), and the
    sessions (``encoder=False``: the sessions alone, a new version of them beside the encoders
    already there)."""
    if encoder:  # a GPU of its own on --device cuda (Ray hides the GPUs an actor did not ask for)
        gpus = 1 if device.startswith("cuda") else 0
        started = {"num_cpus": 1, "num_gpus": gpus, "runtime_env": {"env_vars": ARENA_ENV}}  # see allocator
        encoder_deployment = Encoder.options(ray_actor_options=started)
        for i in range(encoder_replicas):
            serve.run(encoder_deployment.bind(model, device, int8), name=encoder_app(i), route_prefix=None)
    sessions = Sessions.options(num_replicas=session_replicas, graceful_shutdown_timeout_s=drain_s)
    serve.run(sessions.bind(access, limits, encoder_replicas), name=SESSIONS_APP, route_prefix="/")


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
