"""The soak, short: benchmarks/soak.py's own code against a real `streampunct serve`, on text made
here (no shared data): three /v1/punct streams of three simulated minutes each with a recogniser's
habits (bursts, pauses with ticks, revisions of the tail, late revisions that must be refused), and
espeak-ng reading that text through /v1/asr, with pauses and a sentence said five times in a row. No
session may fail, every word gets exactly one final decision, and the recogniser's buffer stays
under its limit. The hour-long run is `python -m benchmarks.soak` (docs/soak.md)."""

from __future__ import annotations

import asyncio
import random
import shutil

import pytest

from benchmarks.common import start_server
from benchmarks.lib.speech import make_speech
from benchmarks.soak import hours_audio, passed, slope_mb_per_h, soak, table

SUBJECTS = "i we you they people my friend the teacher our city this idea".split()
VERBS = "think know see want made found said built tried loved asked".split()
OBJECTS = (
    "the answer a problem the water this machine the music a small house every child the light the "
    "story our future a new school the ocean"
).split(" ")
LINKS = "and but so because then when if".split()


def make_text(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """``n`` words of simple sentences, tokenised and labelled as in IWSLT (``word<TAB>LABEL``):
    commas, periods, questions, clitics ("do n't", "it 's") and a few "--" that carry no token."""
    rng = random.Random(seed)
    words: list[str] = []
    labels: list[str] = []

    def say(tokens: list[str], end: str) -> None:
        words.extend(tokens)
        labels.extend(["O"] * (len(tokens) - 1) + [end])

    while len(words) < n:
        if rng.random() < 0.2:
            say(["do", "you", "think", *rng.choice(OBJECTS).split(), "is", "real"], "QUESTION")
            continue
        clause = [rng.choice(SUBJECTS), *rng.choice(["do n't", "did", "really"]).split()][: rng.randint(1, 3)]
        say(
            [*clause, rng.choice(VERBS), *rng.choice(OBJECTS).split()], "COMMA" if rng.random() < 0.4 else "O"
        )
        if rng.random() < 0.05:
            say(["--"], "O")
        say([rng.choice(LINKS), "it", "'s", *rng.choice(OBJECTS).split()], "PERIOD")
    return words[:n], labels[:n]


@pytest.fixture(scope="module")
def server():
    srv = start_server("--device", "cpu", env={"OMP_NUM_THREADS": "1"})
    yield srv
    srv.stop()


def test_make_text_is_iwslt_like():
    words, labels = make_text(500)
    assert len(words) == len(labels) == 500
    assert {"O", "COMMA", "PERIOD", "QUESTION"} == set(labels)
    assert "n't" in words and "'s" in words


def test_punct_soak(server):
    words, _ = make_text(4000)
    figures = asyncio.run(soak(server, words, streams=3, punct_minutes=2, sample_s=0.5, progress_s=600))
    print(table(figures))
    total = figures["total"]
    assert passed(figures), figures["failures"]
    assert total["failed"] == 0 and total["words_without_one_final"] == 0
    assert total["speech_minutes"] >= 3 * 2
    assert total["words"] > 3 * 2 * 60 * 2  # about 3 words a second of simulated speech, with pauses
    assert total["revisions"] > 0 and total["ticks"] > 0 and total["late_revisions_refused"] > 0
    assert total["other_errors"] == 0
    assert len(figures["streams"]) == 4  # three streams and the warm-up
    memory = figures["memory"]
    assert 0 < memory["max_mb"] < 1000, memory["max_mb"]  # 3 streams: about 0.6 GB on 2 cores
    assert memory["slope_second_half_mb_per_h"] is not None


def test_the_memory_slope_is_a_least_squares_line():
    assert slope_mb_per_h([(0.0, 100.0), (1800.0, 103.0), (3600.0, 104.0)]) == 4.0
    assert slope_mb_per_h([(0.0, 100.0)]) is None


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
def test_asr_soak(server, tmp_path):
    from streampunct.clients.file import load_audio

    words, labels = make_text(400, seed=1)
    wav, _ = make_speech(words, labels, minutes=0.25, cache=tmp_path, piece_words=30)
    speech = load_audio(str(wav))
    assert 10 < len(speech) / 16000 < 35
    # pauses of 1 to 2 s (room noise) every 8 s of speech, and a sentence said five times in a row
    audio, layout = hours_audio(speech, 8.0, (1.0, 2.0), trap=5, seed=0)
    assert len(layout["pauses"]) >= 2 and layout["trap"]["copies"] == 5
    figures = asyncio.run(soak(server, words, streams=0, audio=audio, sample_s=0.5, warm_up=False))
    print(table(figures))
    asr = figures["streams"]["asr"]
    assert passed(figures), figures["failures"]
    assert asr["sessions"] == 1 and asr["failed"] == 0
    assert asr["words"] > 30 and asr["words_one_final"] == asr["words"]
    assert asr["captions"] > 0
    recognition = figures["recognition"]
    assert 0 < recognition["buffer_max_s"] <= recognition["buffer_limit_s"]


def test_the_soak_counted_in_events_counts_every_event_and_its_leaking_control_fails():
    """Issue 76: benchmarks/soak_events.py's cycles (punct streams with revisions and ticks, and
    churn: clean and RST closes, clients that stop reading, bad frames, a reconnect storm) against a
    real server, with its census after each: every word final once, no session failed, nothing
    kept; against a server that keeps every closed session (the control) the rule fails, else a
    flat line would prove nothing. (Whether the real server holds flat: the benchmark's cycles,
    minutes each; short ones here still warm up.)"""
    from benchmarks.soak_events import run_cycles, serve, verdict

    words, _ = make_text(4000)
    per = {"punct_streams": 3, "punct_seconds": 20.0, "connections": 40, "asr_seconds": 0.0}
    for leak, cycles_run in ((False, 2), (True, 3)):
        server = serve({"STREAMPUNCT_LEAK": "connection"} if leak else {}, False)
        try:
            cycles = asyncio.run(run_cycles(server, cycles_run, per, words, None, 0, settle_s=0.5))
        finally:
            assert server.stop() == 0
        assert all(c["sessions_failed"] == 0 and c["finals"] == c["words"] > 0 for c in cycles), cycles
        assert all(min(c["churn"][k] for k in ("clean", "rst", "deaf", "bad", "storm")) for c in cycles), (
            cycles
        )
        assert all(c["traced_mb"] and c["objects"] and c["fds"] and c["threads"] for c in cycles)
        assert all(c["heap_mb"]["in_use"] > 0 and c["heap_mb"]["free"] >= 0 for c in cycles), cycles
        kept = sum(c["connections"] for c in cycles) if leak else 0
        assert cycles[-1]["kept"] == kept
    rule = verdict(cycles, 1)
    assert not rule["passed"] and any("_asyncio.Task" in b for b in rule["broken"]), rule


def test_the_soak_rule_holds_flat_cycles_and_breaks_on_each_kind_of_growth():
    from benchmarks.soak_events import OBJECT_SLACK, RSS_BAND_MB, TRACED_MB, verdict

    def cycle(n: int, **over: object) -> dict:
        base = {"cycle": n, "traced_mb": 70.0, "objects": {"a.Session": 100, "b.Task": 60}, "fds": 9,
                "tasks": 5, "threads": 4, "rss_after_trim_mb": 800.0, "sessions_failed": 0}  # fmt: skip
        return {**base, **over}

    flat = [cycle(0, rss_after_trim_mb=600.0), cycle(1), cycle(2, threads=6), cycle(3)]
    assert verdict(flat, 1) == {"passed": True, "broken": []}
    grown = {
        "traced": cycle(3, traced_mb=70.0 + TRACED_MB + 0.1),
        "objects": cycle(3, objects={"a.Session": 100 + OBJECT_SLACK + 1, "b.Task": 60}),
        "a new type": cycle(3, objects={"a.Session": 100, "b.Task": 60, "c.Kept": 200}),
        "fds": cycle(3, fds=10),
        "memory": cycle(3, rss_after_trim_mb=800.0 + RSS_BAND_MB + 1),
        "a failed session": cycle(3, sessions_failed=1),
    }
    for what, last in grown.items():
        assert not verdict([*flat[:3], last], 1)["passed"], what
    assert not verdict(flat[:2], 1)["passed"]  # one cycle counted shows no trend
