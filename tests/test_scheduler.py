"""Many streams batched into one pass: the same events as streams run alone."""

import asyncio
import random

import pytest

from streampunct import InputError
from streampunct.scheduler import Batcher, Job, run_batch
from tests.test_stream import check_events, varied_words


def test_run_batch_equals_streams_alone(tiny):
    """Streams of both engines and several lookaheads in one batch."""
    rng = random.Random(1)
    ks = [0, 1, 2, 4, 2, 3, 0]
    engines = ["masked", "window", "masked", "window", "window", "masked", "window"]
    texts = [varied_words(400, seed=20 + i) for i in range(len(ks))]
    alone = [tiny.stream(lookahead=k, engine=e) for k, e in zip(ks, engines)]
    batched = [tiny.stream(lookahead=k, engine=e) for k, e in zip(ks, engines)]
    pos = [0] * len(ks)
    while any(p < len(t) for p, t in zip(pos, texts)):
        jobs, expected = [], []
        for i, (s_alone, s_b) in enumerate(zip(alone, batched)):
            if pos[i] >= len(texts[i]) or rng.random() < 0.3:
                continue  # streams speak at their own pace
            n = rng.randint(1, 4)
            words = texts[i][pos[i] : pos[i] + n]
            pos[i] += n
            jobs.append(Job(s_b, "push", words))
            expected.append(s_alone.push(words))
        assert run_batch(jobs) == expected
    assert run_batch([Job(s, "finish") for s in batched]) == [s.finish() for s in alone]


def test_errors_stay_with_their_stream(tiny):
    good, bad = tiny.stream(lookahead=1), tiny.stream(lookahead=1)
    bad.push(["a", "b", "c"])
    results = run_batch([Job(good, "push", ["hello", "world"]), Job(bad, "revise", ["x"], index=0)])
    assert isinstance(results[1], InputError)
    assert [e.index for e in results[0] if e.final] == [0]


def test_batcher_serves_concurrent_streams(tiny):
    texts = [varied_words(150, seed=40 + i) for i in range(8)]

    async def speaker(batcher, stream, words):
        finals: dict[int, str] = {}
        for i in range(0, len(words), 3):
            check_events(await batcher.push(stream, words[i : i + 3]), finals)
            await asyncio.sleep(0)
        check_events(await batcher.finish(stream), finals)
        return [finals[i] for i in range(len(words))]

    async def main():
        batcher = Batcher(max_batch=16)
        streams = [tiny.stream(lookahead=2) for _ in texts]
        out = await asyncio.gather(*(speaker(batcher, s, t) for s, t in zip(streams, texts)))
        # the same stream twice in a row, queued before the first runs: order is kept
        s = tiny.stream(lookahead=0)
        a, b = await asyncio.gather(batcher.push(s, ["one"]), batcher.push(s, ["two"]))
        assert [e.index for e in a if e.final] == [0] and [e.index for e in b if e.final] == [1]
        with pytest.raises(InputError):
            await batcher.revise(s, 0, ["x"])
        stats = (batcher.batches, batcher.jobs)
        await batcher.close()
        return out, stats

    out, (batches, jobs) = asyncio.run(main())
    for words, labels in zip(texts, out):
        assert labels == tiny.predict(words, lookahead=2)
    assert batches < jobs  # jobs of several streams did share passes
