"""What the server lets in, and how much: access control at the HTTP handshake, limits per connection.

- :class:`Access` decides a handshake before the websocket opens: a shared secret (``Authorization:
  Bearer``, or ``?token=`` for a browser, which cannot set headers) and an ``Origin`` allow-list
  (by default only the server's own page: a web page elsewhere cannot open streams on a server it
  can reach, the cross-site WebSocket hijacking that a token-less loopback server invites).
- :class:`Limits` holds every limit of a connection, each configurable with a flag of ``serve``.
- :class:`Pace` slows a connection that sends faster than its limit, and says when it is too far
  ahead to be slowed (the server then finishes its stream with ``rate_limited``).

docs/protocol.md ("Security") documents each, with the error codes.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

from websockets.http11 import Request


@dataclass(frozen=True)
class Refusal:
    """Why a handshake is refused: the HTTP status and the error message's code and sentence."""

    status: HTTPStatus
    code: str
    message: str


@dataclass(frozen=True)
class Access:
    """``token``: the shared secret every stream must present (None: none needed). ``origins``:
    the web origins allowed besides the server's own page (``*``: any; ``null``: sandboxed and
    file pages). A request without ``Origin`` (not a browser) is judged by the token alone."""

    token: str | None = None
    origins: tuple[str, ...] = ()

    def refuse(self, request: Request, secure: bool) -> Refusal | None:
        """Why this websocket handshake may not open, or None."""
        if self.token is not None and not self._has_token(request):
            return Refusal(
                HTTPStatus.UNAUTHORIZED,
                "unauthorized",
                "this server needs a token: send `Authorization: Bearer TOKEN` (or ?token=TOKEN)",
            )
        origin = request.headers.get("Origin")
        if origin is not None and not self._allows(origin, request.headers.get("Host", ""), secure):
            return Refusal(
                HTTPStatus.FORBIDDEN,
                "forbidden_origin",
                f"pages from {origin[:100]} may not open streams here (serve --allow-origin)",
            )
        return None

    def _has_token(self, request: Request) -> bool:
        assert self.token is not None
        given = request.headers.get("Authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() != "bearer":
            value = (parse_qs(urlparse(request.path).query).get("token") or [""])[0]
        return hmac.compare_digest(value.strip().encode(), self.token.encode())

    def _allows(self, origin: str, host: str, secure: bool) -> bool:
        own = f"{'https' if secure else 'http'}://{host}"
        return origin == own or "*" in self.origins or origin in self.origins


@dataclass(frozen=True)
class Limits:
    """A connection's limits (None: no limit). Rates are sustained rates with a burst allowance:
    a client ahead of its rate is slowed; one more than ``max_wait_s`` ahead is refused."""

    max_streams: int = 64
    config_timeout_s: float | None = 10.0
    idle_timeout_s: float | None = 600.0
    max_session_s: float | None = 12 * 3600.0
    words_per_s: float | None = 200.0
    words_burst: float = 2000.0
    audio_speed: float | None = 10.0
    audio_burst_s: float = 60.0
    max_wait_s: float = 5.0
    shutdown_grace_s: float = 10.0

    HELP: ClassVar[dict[str, str]] = {  # what each is, and the help of its `serve` flag
        "max_streams": "streams open at once, all clients together (HTTP 503 beyond)",
        "config_timeout_s": "seconds from connecting to the config message",
        "idle_timeout_s": "seconds without a message (a tick counts) before the stream is finished",
        "max_session_s": "seconds a stream may last, from its config",
        "words_per_s": "words a second per /v1/punct stream, sustained (speech: about 3); a client ahead "
        "is slowed",
        "words_burst": "words a /v1/punct stream may send at once beyond its rate",
        "audio_speed": "audio seconds a second per /v1/asr stream (1: real time), sustained",
        "audio_burst_s": "audio seconds a /v1/asr stream may send at once beyond its rate",
        "max_wait_s": "seconds a client may be slowed for one message; further ahead it is refused",
        "shutdown_grace_s": "on SIGTERM, seconds the open streams take what their clients send before "
        "they are finished; as long again to finish them",
    }


class Pace:
    """A token bucket: ``rate`` units a second, ``burst`` at most in hand (rate None: unlimited)."""

    def __init__(self, rate: float | None, burst: float, clock: Callable[[], float] = time.monotonic):
        self.rate, self.burst, self.clock = rate, burst, clock
        self.tokens, self.last = burst, clock()

    def wait(self, amount: float) -> float:
        """Take ``amount``; the seconds to wait before acting on it (0: at once)."""
        if self.rate is None:
            return 0.0
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        self.tokens -= amount
        return max(0.0, -self.tokens / self.rate)

    def give_back(self, amount: float) -> None:
        """Undo a take that was refused."""
        self.tokens += amount
