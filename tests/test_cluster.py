"""streampunct on Ray Serve (streampunct/server/cluster.py), run for real on a local Ray: two session
replicas and one encoder replica behind Ray's HTTP proxy, 20 streams. Mid-run the sessions are
redeployed as one new replica, and Ray stops one old replica: it serves its open streams to the end,
every word final once, as predict() labels it, and the streams opened while it drains go to the
other; the encoder, an application of its own, keeps every stream's state throughout."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from benchmarks.common import WORDS, free_port, talk
from tests.test_deploy import stream

serve = pytest.importorskip("ray.serve", reason="needs the cluster extra (ray[serve])")
cluster = pytest.importorskip("streampunct.server.cluster")


def replicas(app: str, deployment: str) -> dict[str, int]:
    status = serve.status().applications[app].deployments[deployment]
    return {str(state): n for state, n in status.replica_states.items()}


def open_streams(url: str) -> int:
    with urllib.request.urlopen(url.replace("ws://", "http://") + "/health", timeout=10) as r:
        return json.loads(r.read())["streams"]


@pytest.fixture(scope="module")
def ray_serve():
    import ray

    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield f"ws://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def test_a_session_replica_stopped_mid_stream_finishes_its_streams_and_the_next_go_to_the_other(
    ray_serve, shipped
):
    url = ray_serve
    cluster.deploy(session_replicas=2, device="cpu", drain_s=120)
    assert replicas("sessions", "Sessions") == {"RUNNING": 2}
    texts = [WORDS[i:] + WORDS[:i] + WORDS[:10] for i in range(20)]  # 30 words a stream
    later = texts[:4]

    async def go():
        first = asyncio.Event()
        before = [asyncio.create_task(stream(url, t, first, gap_s=0.3)) for t in texts]
        await first.wait()
        await asyncio.sleep(1.0)
        # a new version of the sessions, one replica: Ray stops one old replica (it drains: no new
        # streams, its open ones to their end), starts the new one, then stops the other old one
        redeploy = asyncio.create_task(
            asyncio.to_thread(cluster.deploy, session_replicas=1, device="cpu", drain_s=120, encoder=False)
        )
        for _ in range(100):
            states = await asyncio.to_thread(replicas, "sessions", "Sessions")
            if states.get("STOPPING"):
                break
            await asyncio.sleep(0.1)
        assert states.get("STOPPING") == 1 and states.get("RUNNING") == 1, states
        assert sum(not t.done() for t in before) >= 10  # mid-stream
        after = [asyncio.create_task(stream(url, t)) for t in later]  # to the replica still running
        results = await asyncio.gather(*before), await asyncio.gather(*after)
        await redeploy
        return results

    before, after = asyncio.run(go())
    for words, labels in zip(texts + later, before + after, strict=True):
        assert labels == shipped.predict(words, lookahead=2)  # every word final, once, as predict
    assert replicas("sessions", "Sessions") == {"RUNNING": 1}
    assert replicas("encoder-0", "Encoder") == {"RUNNING": 1}
    assert open_streams(url) == 0
    encoder = serve.get_deployment_handle("Encoder", app_name="encoder-0")
    assert encoder.open_streams.remote().result() == 0  # a finished stream is forgotten

    async def lost():  # a client gone without its end message
        async with connect(url + "/v1/punct") as ws:
            await ws.send(json.dumps({"type": "config", "version": 1, "lookahead": 2}))
            await ws.recv()
            await ws.send(json.dumps({"type": "words", "words": WORDS}))
            await ws.recv()

    asyncio.run(lost())
    deadline = time.monotonic() + 10
    while encoder.open_streams.remote().result():  # its stream is forgotten in the encoder too
        assert time.monotonic() < deadline, "the lost stream stayed in the encoder"
        time.sleep(0.1)
    # sentences, closed in the encoder, reach the session's client after their words' finals
    replies = asyncio.run(talk(url, [{"type": "words", "words": WORDS}], sentences=True))
    sentences = [r for r in replies if r["type"] == "sentence"]
    assert [s["first"] for s in sentences] == [0] + [s["last"] + 1 for s in sentences[:-1]]
    assert replies[0]["sentences"] and sentences[-1]["last"] == len(WORDS) - 1 and len(sentences) >= 2


def test_serve_ray_guards_its_streams_as_serve_does(ray_serve):
    """Issue 63: serve-ray made none of serve's checks, and its admission read a load that was
    always zero. Now the same guard: without the token 401, a foreign Origin or a rebinding Host
    403, an authorised stream served; past the encoder's real load a new stream gets 503 ``busy``
    with Retry-After before its websocket opens."""
    from streampunct.options import Limits
    from streampunct.server.guard import Access
    from tests.test_overload import LONG
    from tests.test_security import handshake

    url = ray_serve
    token = "s3cret"
    cluster.deploy(session_replicas=1, device="cpu", access=Access(token), limits=Limits(max_load=0.5))
    bearer = ("Authorization", f"Bearer {token}")
    host = ("Host", url.removeprefix("ws://"))
    assert handshake(url, host)[0] == 401
    status, body = handshake(url, host, bearer, ("Origin", "https://evil.example"))
    assert (status, body and body["code"]) == (403, "forbidden_origin")
    status, body = handshake(url, ("Host", "evil.example"), bearer)
    assert (status, body and body["code"]) == (403, "forbidden_host")
    auth = {"additional_headers": [bearer]}

    async def go():
        async with connect(url + "/v1/punct", **auth) as ws:  # served
            await ws.send(json.dumps({"type": "config", "lookahead": 2}))
            assert json.loads(await ws.recv())["type"] == "ready"
            await ws.send(json.dumps({"type": "words", "words": WORDS[:10]}))
            await ws.send(json.dumps({"type": "end"}))
            replies = [json.loads(m) async for m in ws]
        assert replies[-1] == {"type": "end", "words": 10}
        hog = await connect(url + "/v1/punct", **auth)  # about a minute of the encoder's compute
        await hog.send(json.dumps({"type": "config", "lookahead": 64}))
        await hog.recv()
        await hog.send(json.dumps({"type": "words", "words": [LONG[i % 4] for i in range(600)]}))
        deadline = time.monotonic() + 30
        while True:
            try:
                async with connect(url + "/v1/punct", **auth):
                    pass
            except InvalidStatus as e:
                return e.response
            assert time.monotonic() < deadline, "never refused past the encoder's capacity"
            await asyncio.sleep(1)

    refusal = asyncio.run(go())
    assert refusal.status_code == 503 and int(refusal.headers["Retry-After"]) >= 1
    assert json.loads(refusal.body)["code"] == "busy"
    # FastAPI's own pages answered without the token (issue 76): none is there
    for page in ("/docs", "/redoc", "/openapi.json"):
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url.replace("ws://", "http://") + page)
        assert missing.value.code == 404, page


def test_two_encoder_replicas_share_the_streams_and_each_stream_stays_on_its_own(ray_serve, shipped):
    """Issue 64: with ``--encoder-replicas 2`` a new stream goes to the encoder least busy, every
    call of a stream reaches the encoder that holds its state, and its labels are predict()'s."""
    url = ray_serve
    cluster.deploy(session_replicas=1, encoder_replicas=2, device="cpu")
    encoders = [serve.get_deployment_handle("Encoder", app_name=cluster.encoder_app(i)) for i in range(2)]
    texts = [WORDS[i:] + WORDS[:i] + WORDS[:10] for i in range(6)]

    async def go():
        first = asyncio.Event()
        tasks = [asyncio.create_task(stream(url, t, first, gap_s=0.3)) for t in texts]
        await first.wait()
        await asyncio.sleep(1.0)
        held = [await e.open_streams.remote() for e in encoders]
        return held, await asyncio.gather(*tasks)

    try:
        held, labels = asyncio.run(go())
        # both take streams (how many each: their load first, which a loaded machine skews; 5 and 1 seen)
        assert sum(held) == len(texts) and min(held) >= 1, held
        for words, got in zip(texts, labels, strict=True):
            assert got == shipped.predict(words, lookahead=2)
        assert [e.open_streams.remote().result() for e in encoders] == [0, 0]
    finally:
        serve.delete(cluster.encoder_app(1))  # its CPU back, for the tests after
