"""The server's plain HTTP answers: JSON bodies, and the caption page with its security headers."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
from http import HTTPStatus
from pathlib import Path
from typing import Any

from websockets.datastructures import Headers
from websockets.http11 import Response

from streampunct import protocol as P

PAGE = Path(__file__).parent / "page" / "index.html"


def json_response(status: HTTPStatus, payload: dict[str, Any] | P.Message) -> Response:
    body = (payload.to_json() if isinstance(payload, P.Message) else json.dumps(payload)).encode()
    return Response(status.value, status.phrase, Headers({"Content-Type": "application/json"}), body)


def page_response() -> Response:
    """The caption page, with its headers (a fresh copy: websockets adds ``Server`` to them)."""
    headers, html = _page()
    return Response(200, "OK", Headers(headers), html)


@functools.cache
def _page() -> tuple[dict[str, str], bytes]:
    """The caption page, with a Content-Security-Policy that admits its own inline script and style
    (by hash) and nothing else: no other scripts, no framing, connections to this server only."""
    html = PAGE.read_bytes()
    digests = {
        kind: " ".join(
            f"'sha256-{base64.b64encode(hashlib.sha256(m).digest()).decode()}'"
            for m in re.findall(rb"<%s>(.*?)</%s>" % (kind, kind), html, re.S)
        )
        for kind in (b"script", b"style")
    }
    csp = (
        f"default-src 'none'; script-src {digests[b'script']}; style-src {digests[b'style']}; "
        "connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    headers = {
        "Content-Type": "text/html; charset=utf-8",
        "Content-Security-Policy": csp,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Permissions-Policy": "microphone=(self)",
    }
    return headers, html
