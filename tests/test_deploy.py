"""deploy/: replicas behind HAProxy, run for real on loopback.

deploy/haproxy.cfg is checked by HAProxy itself, then run in front of two real `streampunct serve`
replicas (its ports replaced by free ones). Streams go through it; one replica is stopped (SIGTERM)
in the middle of its streams: they finish with every word final, and the streams opened after it go
to the other replica, none refused.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from benchmarks.common import WORDS, finals, free_port
from benchmarks.common import spawn_server as start_server

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "deploy" / "haproxy.cfg"

needs_haproxy = pytest.mark.skipif(
    shutil.which("haproxy") is None, reason="needs haproxy (apt-get install haproxy)"
)


@needs_haproxy
def test_the_haproxy_configuration_is_valid():
    check = subprocess.run(["haproxy", "-c", "-f", str(CONFIG)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def stream(
    url: str, words: list[str], started: asyncio.Event | None = None, gap_s: float = 0.0
) -> list[str]:
    """One /v1/punct stream, the words three at a time ``gap_s`` apart; each word's final label."""
    replies = []
    try:
        ws = await connect(url + "/v1/punct")
    except InvalidStatus as e:  # refused: by whom, and why
        raise AssertionError(f"refused: {e.response.status_code} {e.response.body!r}") from None
    async with ws:
        await ws.send(json.dumps({"type": "config", "version": 1, "lookahead": 2, "max_delay_ms": None}))
        replies.append(json.loads(await ws.recv()))
        for i in range(0, len(words), 3):
            await ws.send(json.dumps({"type": "words", "words": words[i : i + 3]}))
            if started is not None:
                started.set()
            await asyncio.sleep(gap_s)
        await ws.send(json.dumps({"type": "end"}))
        async for raw in ws:
            replies.append(json.loads(raw))
    assert replies[-1] == {"type": "end", "words": len(words)}, replies[-3:]
    return finals(replies)


def streams(url: str) -> int:
    """The streams open on a server, by its /health."""
    with urllib.request.urlopen(url.replace("ws://", "http://") + "/health", timeout=5) as r:
        return json.loads(r.read())["streams"]


def health(url: str) -> int:
    try:
        with urllib.request.urlopen(url.replace("ws://", "http://") + "/health", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except urllib.error.URLError:  # not listening (yet)
        return 0


@needs_haproxy
def test_a_replica_stopped_mid_stream_finishes_its_streams_and_the_next_go_to_the_other(shipped, tmp_path):
    replicas = [start_server() for _ in range(2)]
    front = free_port()
    config = CONFIG.read_text()
    for old, new in (
        ("*:8080", f"127.0.0.1:{front}"),
        ("127.0.0.1:8765", replicas[0][1][5:]),
        ("127.0.0.1:8766", replicas[1][1][5:]),
    ):
        assert old in config
        config = config.replace(old, new)
    (tmp_path / "haproxy.cfg").write_text(config)
    proxy = subprocess.Popen(
        ["haproxy", "-db", "-f", str(tmp_path / "haproxy.cfg")], stderr=subprocess.PIPE, text=True
    )
    url = f"ws://127.0.0.1:{front}"
    texts = [WORDS[i:] + WORDS[:i] for i in range(10)]
    try:
        deadline = time.monotonic() + 20
        while health(url) != 200:  # the proxy is up and has seen a replica healthy
            assert time.monotonic() < deadline and proxy.poll() is None, "haproxy did not come up"
            time.sleep(0.2)

        async def go():
            first = asyncio.Event()
            # ten streams, leastconn: five on each replica; a word every ~0.1 s
            before = [asyncio.create_task(stream(url, t, first, gap_s=0.3)) for t in texts]
            await first.wait()
            await asyncio.sleep(0.5)
            open_on = await asyncio.to_thread(lambda: [streams(u) for _, u in replicas])
            assert open_on[0] >= 3 and sum(open_on) == len(texts), open_on  # shared out, all open
            replicas[0][0].send_signal(signal.SIGTERM)  # mid-stream: it drains, then exits
            await asyncio.sleep(0.5)
            after = [asyncio.create_task(stream(url, t)) for t in texts]  # while it drains, and after
            return await asyncio.gather(*before), await asyncio.gather(*after)

        before, after = asyncio.run(go())
        assert replicas[0][0].wait(timeout=30) == 0  # the stopped replica exited cleanly
        for got in (before, after):
            for words, labels in zip(texts, got, strict=True):
                assert labels == shipped.predict(words, lookahead=2)  # every word final, once, as predict
        assert health(replicas[1][1]) == 200
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
        for proc, _ in replicas:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=30)


def test_the_kubernetes_manifest_drains_within_its_grace_period_and_probes_health():
    """deploy/kubernetes.yaml, parsed: the container's arguments are `streampunct serve`'s flags;
    readiness and liveness read /health on the served port with a Host it answers; preStop, then
    the server's drain (twice --shutdown-grace-s), fit in terminationGracePeriodSeconds."""
    yaml = pytest.importorskip("yaml")
    from streampunct.server.app import build_parser

    docs = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "deploy" / "kubernetes.yaml").read_text())}
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"][0] == "serve"
    args = build_parser().parse_args(container["args"][1:])  # flags the server takes
    port = container["ports"][0]
    assert port["containerPort"] == args.port and args.host == "0.0.0.0"
    assert docs["Service"]["metadata"]["name"] in args.allow_host
    assert docs["Service"]["spec"]["ports"][0]["targetPort"] == port["name"]
    for probe in ("readinessProbe", "livenessProbe"):
        get = container[probe]["httpGet"]
        assert get["path"] == "/health" and get["port"] == port["name"]
        assert {"name": "Host", "value": "localhost"} in get["httpHeaders"]
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    drain = float(pre_stop[1]) + 2 * args.shutdown_grace_s
    assert pod["terminationGracePeriodSeconds"] >= drain + 5
