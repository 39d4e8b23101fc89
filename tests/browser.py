"""A headless chromium driven over the DevTools protocol, for the tests of the browser page."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from benchmarks.common import free_port


async def cdp_eval(ws_url: str, expression: str, gesture: bool = False) -> object:
    """Evaluate in the page (``gesture``: as if the user did it, e.g. pressing a button)."""
    async with connect(ws_url, max_size=2**24) as ws:
        params = {"expression": expression, "returnByValue": True, "userGesture": gesture}
        await ws.send(json.dumps({"id": 1, "method": "Runtime.evaluate", "params": params}))
        reply = json.loads(await ws.recv())
        return reply["result"]["result"].get("value")


async def cdp_screenshot(ws_url: str, path: Path) -> None:
    import base64

    async with connect(ws_url, max_size=2**25) as ws:
        await ws.send(json.dumps({"id": 2, "method": "Page.captureScreenshot", "params": {"format": "png"}}))
        reply = json.loads(await ws.recv())
        path.write_bytes(base64.b64decode(reply["result"]["data"]))


needs_chromium = pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")


@contextlib.contextmanager
def chromium(url: str, *flags: str) -> Iterator[str]:
    """A headless chromium showing ``url``; yields its page's DevTools websocket address."""
    port = free_port()
    profile = tempfile.mkdtemp(prefix="streampunct-chromium-")
    chrome = subprocess.Popen(
        [
            "chromium",
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-sync",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-quic",
            f"--user-data-dir={profile}",
            f"--remote-debugging-port={port}",
            "--window-size=1100,700",
            *flags,
            url,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        target = None
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json") as r:
                    pages = [t for t in json.loads(r.read()) if t["type"] == "page"]
                if pages:
                    target = pages[0]["webSocketDebuggerUrl"]
                    break
            except OSError:
                pass
            time.sleep(0.2)
        assert target, "chromium did not start"
        for _ in range(50):
            # the page asked for, loaded (not the about:blank chromium starts with)
            page = "location.href + ' ' + document.readyState"
            if asyncio.run(cdp_eval(target, page)) == f"{url} complete":
                break
            time.sleep(0.1)
        yield target
    finally:
        chrome.terminate()
        chrome.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)
