"""Many streams batched into one pass: the same events as streams run alone."""

import asyncio
import copy
import random

import pytest
import torch

from streampunct import InputError, Punctuator
from streampunct.model import PunctModel, int8_available
from streampunct.scheduler import Batcher, Job, Load, run_batch
from streampunct.stream import Finish, Push, Revise
from tests.test_stream import check_events, varied_words


@pytest.mark.parametrize("int8", [False, True])
def test_run_batch_equals_streams_alone(tiny, int8):
    """Streams of both engines and several lookaheads in one batch; in int8 too, where a stream's
    labels equal its labels alone exactly (each row is quantized on its own)."""
    if int8:
        if not int8_available():
            pytest.skip("torch._int_mm does not run on this CPU")
        tiny = Punctuator(copy.deepcopy(tiny.model).quantize_int8(), tiny.pieces)
    rng = random.Random(1)
    ks = [0, 1, 2, 4, 2, 3, 0]
    engines = ["masked", "window", "masked", "window", "window", "masked", "window"]
    texts = [varied_words(150 if int8 else 400, seed=20 + i) for i in range(len(ks))]
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
            jobs.append(Job(s_b, Push(tuple(words))))
            expected.append(s_alone.push(words))
        assert run_batch(jobs) == expected
    assert run_batch([Job(s, Finish()) for s in batched]) == [s.finish() for s in alone]


def test_errors_stay_with_their_stream(tiny):
    good, bad = tiny.stream(lookahead=1), tiny.stream(lookahead=1)
    bad.push(["a", "b", "c"])
    results = run_batch([Job(good, Push(("hello", "world"))), Job(bad, Revise(0, ("x",)))])
    assert isinstance(results[1], InputError)
    assert [e.index for e in results[0] if e.final] == [0]


@pytest.mark.parametrize("lanes", [1, 2])
def test_batcher_serves_concurrent_streams(tiny, lanes):
    """On one lane or two (threads computing at once), every stream's labels are its labels alone,
    its calls run in order, and the streams are spread evenly over the lanes."""
    texts = [varied_words(150, seed=40 + i) for i in range(8)]

    async def speaker(batcher, stream, words):
        finals: dict[int, str] = {}
        for i in range(0, len(words), 3):
            check_events(await batcher.push(stream, words[i : i + 3]), finals)
            await asyncio.sleep(0)
        check_events(await batcher.finish(stream), finals)
        return [finals[i] for i in range(len(words))]

    async def main():
        batcher = Batcher(max_batch=16, lanes=lanes)
        streams = [tiny.stream(lookahead=2) for _ in texts]
        out = await asyncio.gather(*(speaker(batcher, s, t) for s, t in zip(streams, texts)))
        spread = [sum(batcher.lane_of(s) is lane for s in streams) for lane in batcher.lanes]
        assert spread == [len(texts) // lanes] * lanes
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


def broken_copy(p: Punctuator) -> Punctuator:
    """A model that fails on every real word: its embedding table has ten rows."""
    model = PunctModel(p.model.cfg).eval()
    model.tok_emb = torch.nn.Embedding(10, p.model.cfg.n_embd)
    return Punctuator(model, p.pieces)


def test_a_large_message_does_not_hold_up_other_streams(tiny):
    """One stream pushes 600 words in one call: it runs as jobs of max_job_words, and a
    neighbour's three words wait at most for the batch in flight."""
    big = varied_words(600, seed=1)

    async def main():
        batcher = Batcher(max_job_words=16, max_batch_words=32, slice_s=60.0)  # words bound it
        hog, neighbour = tiny.stream(lookahead=4), tiny.stream(lookahead=1)
        hogging = asyncio.create_task(batcher.push(hog, big))
        await asyncio.sleep(0.01)  # the hog's first job is under way
        waits = []
        for _ in range(5):
            before = batcher.batches
            await batcher.push(neighbour, ["so", "we", "went"])
            waits.append(batcher.batches - before)
        finals: dict[int, str] = {}
        check_events(await hogging, finals)
        check_events(await batcher.finish(hog), finals)
        jobs = batcher.jobs
        await batcher.close()
        return waits, [finals[i] for i in range(len(big))], jobs

    waits, labels, jobs = asyncio.run(main())
    assert max(waits) <= 2, waits
    assert jobs >= 600 // 16  # the message was split
    assert labels == tiny.predict(big, lookahead=4)  # as if pushed at once: no time limit here


def test_a_failed_job_keeps_nothing_of_the_batch(tiny):
    """A stream whose computation fails hears it alone; the error it gets holds no frame of the
    worker (and so none of its tensors), and the batcher counts the fault until a batch works."""
    broken = broken_copy(tiny)

    async def main():
        batcher = Batcher()
        good, bad = tiny.stream(lookahead=1), broken.stream(lookahead=1)
        results = await asyncio.gather(
            batcher.push(good, ["hello", "there", "friend"]),
            batcher.push(bad, ["hello"]),
            return_exceptions=True,
        )
        faults = batcher.faults
        alone = await asyncio.gather(batcher.push(bad, ["again"]), return_exceptions=True)
        faults_alone = batcher.faults
        await batcher.push(good, ["more"])
        after = batcher.faults
        await batcher.close()
        return results, alone[0], (faults, faults_alone, after)

    (events, error), error_alone, faults = asyncio.run(main())
    assert [e.index for e in events if e.final] == [0, 1]
    assert isinstance(error, IndexError) and isinstance(error_alone, IndexError)
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert not {"run_batch", "compute_many", "embed"} & set(frames), frames
    assert faults == (0, 1, 0)  # a batch with a healthy job is no fault of the batcher


def test_a_costly_stream_runs_in_slices_of_bounded_compute(tiny):
    """Issue 48: a 32-word job of long words at lookahead 64 took about 3 s of compute, and every
    other stream waited for it each batch. A stream's jobs are sized by its measured cost a word,
    so that each takes about ``slice_s`` of compute: one final word at least, ``max_job_words`` words
    at most."""
    words = varied_words(120, seed=3)

    async def main(slice_s):
        batcher = Batcher(slice_s=slice_s)
        stream = tiny.stream(lookahead=8)
        finals: dict[int, str] = {}
        check_events(await batcher.push(stream, words), finals)
        check_events(await batcher.finish(stream), finals)
        await batcher.close()
        return batcher.jobs, [finals[i] for i in range(len(words))]

    thin, labels = asyncio.run(main(1e-6))  # every word costs more than that: one word a job
    thick, _ = asyncio.run(main(60.0))  # nothing does: max_job_words a job
    assert thin >= len(words) // 2 and thick <= len(words) // 32 + 3
    assert labels == tiny.predict(words, lookahead=8)  # slicing changes no label


def test_load_is_the_share_of_time_computing_and_capacity_what_it_got_done():
    clock = [100.0]
    load = Load(window_s=5.0, clock=lambda: clock[0])
    assert load.busy() == 0.0 and load.capacity() is None
    load.start()
    clock[0] = 102.0
    load.stop(200)  # 200 words in 2 s
    clock[0] = 103.0
    assert load.busy() == pytest.approx(0.4) and load.capacity() == pytest.approx(100.0)
    load.start()
    clock[0] = 106.0  # computing since 103, not done yet: counts
    assert load.busy() == pytest.approx(4.0 / 5.0)
    clock[0] = 120.0  # done: the first span has left the window, and its words the capacity
    load.stop(300)
    assert load.busy() == pytest.approx(1.0) and load.capacity() == pytest.approx(300 / 17)
    clock[0] = 130.0
    assert load.busy() == 0.0
