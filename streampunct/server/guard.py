"""What the server lets in, and how much: access control at the HTTP handshake, limits per connection.

- :class:`Access` decides a request before it is answered: a ``Host`` allow-list (a web page whose
  name an attacker has pointed at this server, DNS rebinding, names itself), and for a stream,
  before the websocket opens, a shared secret (``Authorization: Bearer``, or ``?token=`` for a
  browser, which cannot set headers) and an ``Origin`` allow-list (by default only the server's own
  page: a web page elsewhere cannot open streams on a server it can reach, the cross-site WebSocket
  hijacking that a token-less loopback server invites).
- :class:`~streampunct.options.Limits` (in streampunct/options.py, with every other default) holds
  every limit of a connection: the operator's as flags of ``serve``, each in ``--config``'s [limits].
- :class:`Pace` slows a connection that sends faster than its limit, and says when it is too far
  ahead to be slowed (the server then finishes its stream with ``rate_limited``).

docs/protocol.md ("Security") documents each, with the error codes.
"""

from __future__ import annotations

import hmac
import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import parse_qs, urlparse, urlsplit

from websockets.http11 import Request


@dataclass(frozen=True)
class Refusal:
    """Why a handshake is refused: the HTTP status and the error message's code and sentence."""

    status: HTTPStatus
    code: str
    message: str


LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")  # names every server answers to, with the bound address


def host_name(value: str) -> str | None:
    """The host of a ``Host`` header or an allow-list entry, as they compare: lower case, an IPv6
    address without its brackets, no port (None: not a host)."""
    if value.count(":") > 1 and not value.startswith("["):  # an IPv6 address as --host takes it
        return value.lower()
    try:
        return urlsplit("//" + value).hostname or None
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """Whether a server bound to ``host`` is reachable from this machine alone."""
    try:
        return host_name(host) == "localhost" or ipaddress.ip_address(host_name(host) or "").is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Access:
    """``token``: the shared secret every stream must present (None: none needed). ``origins``:
    the web origins allowed besides the server's own page (``*``: any; ``null``: sandboxed and
    file pages). ``hosts``: the names the server answers to (``Host``); its own page is on one of
    them, on its port. A request without ``Origin`` (not a browser) is judged by the token alone."""

    token: str | None = None
    origins: tuple[str, ...] = ()
    hosts: tuple[str, ...] = LOOPBACK_HOSTS

    def refuse(self, request: Request, secure: bool, port: int, stream: bool = True) -> Refusal | None:
        """Why this request may not be answered (any path: its Host), or, for a ``stream``, may not
        open (its token and Origin); None: it may. ``port``: where the request came in."""
        for name in ("Host", "Origin", "Authorization"):
            if len(request.headers.get_all(name)) > 1:
                return Refusal(
                    HTTPStatus.BAD_REQUEST, "bad_request", f"a request has one {name} header at most"
                )
        host = request.headers.get("Host", "")
        if not self._answers(host):
            return Refusal(
                HTTPStatus.FORBIDDEN,
                "forbidden_host",
                f"this server does not answer to the host {host[:100]!r} (serve --allow-host)",
            )
        if not stream:
            return None
        if self.token is not None and not self._has_token(request):
            return Refusal(
                HTTPStatus.UNAUTHORIZED,
                "unauthorized",
                "this server needs a token: send `Authorization: Bearer TOKEN` (or ?token=TOKEN)",
            )
        origin = request.headers.get("Origin")
        if origin is not None and not self._allows(origin, secure, port):
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

    def _answers(self, host: str) -> bool:
        return host_name(host) in {host_name(h) for h in self.hosts} - {None}

    def _allows(self, origin: str, secure: bool, port: int) -> bool:
        """An allowed origin, or the server's own page: its scheme, a host it answers to, its port."""
        if "*" in self.origins or origin in self.origins:
            return True
        scheme = "https" if secure else "http"
        try:
            page = urlsplit(origin)
            own_port = page.port or {"http": 80, "https": 443}.get(page.scheme)
        except ValueError:
            return False
        return page.scheme == scheme and own_port == port and self._answers(page.netloc)


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
