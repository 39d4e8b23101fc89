"""benchmarks/latency_f1.py: a live stream's recording (caption_latency.py's timelines) replayed, on a
hand-made one, and its quick mode end to end (the shipped accuracy tables against emission delays
measured with the shipped model)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.lib.recordings import recording_of
from streampunct.options import read_config
from streampunct.pipeline import Recorder, calls_from_json, replay

ROOT = Path(__file__).resolve().parent.parent


WORDS = [
    {"text": t, "start": 0.5 * i, "end": 0.5 * i + 0.4}
    for i, t in enumerate("so how are you doing today i am fine thanks".split())
]
CALLS = [  # three passes of the recogniser (their provisional words as lookahead), a tick in the pause
    {"clock": 1.6, "push": WORDS[0:3], "now": 1.4, "tentative": WORDS[3:5]},
    {"clock": 3.6, "push": WORDS[3:7], "now": 3.4, "tentative": []},
    {"clock": 5.9, "push": WORDS[7:10], "now": 5.0, "tentative": []},
    {"clock": 7.0, "tick": 6.6},
    {"clock": 8.0, "finish": True},
]


@pytest.mark.unit
def test_a_servers_recording_goes_into_the_timelines_and_replays_for_each_lookahead(tiny, tmp_path):
    """caption_latency.py finds a stream's recording (``serve --record DIR``: DIR/SESSION.jsonl, the
    one file new since the last stream) and keeps it in the timelines; latency_f1.py replays it with
    ``streampunct.pipeline.replay`` for each k: every word final once, at or after its push, at
    its own push for k=0, and by the tick in the pause (the time limit) for the last words at k=4."""
    from benchmarks.caption_latency import server_recording, word_times
    from benchmarks.latency_f1 import LOOKAHEADS, pipeline_panel

    (tmp_path / "000001.jsonl").write_text("")  # an earlier stream's
    seen = {tmp_path / "000001.jsonl"}
    recorder = Recorder(tmp_path / "000002.jsonl", 2, 1500, "masked")
    for call, record in zip(calls_from_json(CALLS), CALLS):
        recorder.add(call, record["clock"])
    recorder.close()
    session, kept = server_recording(tmp_path, seen)
    settings = {"recording": 1, "lookahead": 2, "max_delay_ms": 1500, "engine": "masked"}
    assert session == "000002" and kept == {"settings": settings, "calls": CALLS}
    assert tmp_path / "000002.jsonl" in seen
    pushed_at = [c["clock"] for c in CALLS if "push" in c for _ in c["push"]]
    for k in (0, 2, 4):
        out = replay(tiny, recording_of(kept), k, 1500, "auto")
        assert [w["text"] for w in out] == [w["text"] for w in WORDS]
        assert all(w["clock"] >= t for w, t in zip(out, pushed_at))
        assert all(w["label"] in ("O", "COMMA", "PERIOD", "QUESTION") for w in out)
        if k == 0:  # no lookahead: final at its own push
            assert [w["clock"] for w in out] == pushed_at
        if k == 4:  # the last three decided by the tick in the pause (their time limit), not the end
            assert [w["clock"] for w in out][-3:] == [7.0, 7.0, 7.0]
    # the client's timeline gives each word's stages (its final punctuation: the final event's arrival)
    timeline = [
        (1.7, {"type": "words", "first": 0, "committed": [{**WORDS[0], "index": 0}], "provisional": []}),
        (1.8, {"type": "events", "events": [{"index": 0, "label": "COMMA", "final": True}]}),
    ]
    (word,) = word_times(timeline)
    assert (word["seen"], word["committed"], word["final"], word["label"]) == (1.7, 1.7, 1.8, "COMMA")
    stream = {"name": "a", "set": "clips", "text": "So how are you doing today? I am fine, thanks.", "run": 0}
    (tmp_path / "x.json").write_text(
        json.dumps({"frontend": "x", "streams": [{**stream, "recording": kept}]})
    )
    rows = pipeline_panel(tiny, tmp_path, 1500)
    assert [(r["frontend"], r["set"], r["lookahead"], r["words"]) for r in rows] == [
        ("x", "clips", k, len(WORDS)) for k in LOOKAHEADS
    ]
    assert rows[0]["latency_s"]["median"] >= 0 and rows[0]["wer"] == 0


def test_quick_mode_writes_both_panels(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.latency_f1", "--quick", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    payload = json.loads((tmp_path / "latency_f1.json").read_text())
    rows = payload["punctuator"]
    assert {r["model"] for r in rows} == {"default", "base"}
    assert {r["mode"] for r in rows} == {"k=0", "k=1", "k=2", "k=3", "k=4", "offline"}
    delays = {r["mode"]: r["delay"] for r in rows if r["model"] == "default" and r["engine"] == "window"}
    # no time limit: a word waits for exactly k words, so the delay grows with k
    assert [delays[f"k={k}"]["words"]["median"] for k in range(5)] == [0, 1, 2, 3, 4]
    ms = [delays[f"k={k}"]["ms"]["median"] for k in range(5)]
    assert ms[0] == 0 and ms == sorted(ms) and ms[4] > ms[1] > 0
    assert payload["pipeline"] == []  # no timelines given


@pytest.mark.skipif(sys.version_info < (3, 11), reason="--config files need tomllib")
def test_each_named_front_end_sets_every_recogniser_setting(tmp_path):
    """A named front end stays what it was measured as when the server's defaults change: its
    --config file gives every setting (``today`` once took the 12 s pad and settling that came
    after it), and the server reads the file back as the options it was written from."""
    from benchmarks.lib.caption_frontends import FRONTENDS, server_args, settings
    from streampunct.options import FrontEndOptions, RecognizerOptions, config_toml
    from streampunct.server.app import build_parser, options_from_args

    fields = {f.name for cls in (RecognizerOptions, FrontEndOptions) for f in dataclasses.fields(cls)}
    ap = build_parser()
    read = {}
    for name, text in FRONTENDS.items():
        args = ap.parse_args(server_args(name, tmp_path))
        options = read[name] = options_from_args(ap, args, ("recognizer", "front_end"))
        if name == "default":  # no file: the server's defaults, whatever they are
            assert text == "" and args.config is None and settings(name) == []
            assert options == {"recognizer": RecognizerOptions(), "front_end": FrontEndOptions()}
            continue
        given = read_config(args.config)
        assert set(given) == {"recognizer", "front_end"}, name
        keys = [k for table in given.values() for k in table]
        assert len(keys) == len(set(keys)) == len(fields) and set(keys) == fields, (name, keys)
        assert [s.split("=")[0] for s in settings(name)] == keys
        assert config_toml(options["recognizer"], options["front_end"]) == text, name
    today = read["today"]["recognizer"]
    assert (today.min_chunk_s, today.end_of_speech_s, today.prompt, today.encoder_pad_s) == (
        1.0,
        None,
        True,
        None,
    )


def test_tallies_count_each_error_in_the_unit_of_its_audio():
    from benchmarks.paired import tallies
    from streampunct.scoring import TALLY, micro_f1, wer

    text = "Hello there, my friend. How are you? Fine thanks."
    said = "hello there my friend how are you fine thanks".split()
    labels = ["O", "COMMA", "O", "PERIOD", "O", "O", "QUESTION", "O", "PERIOD"]
    words = [{"text": t, "end": 2.0 * i + 0.5, "label": lab} for i, (t, lab) in enumerate(zip(said, labels))]
    exact = tallies(words, text, unit_s=6.0)  # words end at 0.5, 2.5, 4.5 | 6.5, ... | 12.5, ... | 16.5
    assert sorted(exact) == [0, 1, 2]
    total = sum(exact.values())
    assert dict(zip(TALLY, total.tolist())) == {"edits": 0, "ref_words": 9, "tp": 4, "fp": 0, "fn": 0}
    assert micro_f1(total) == 100 and wer(total) == 0
    # "my" misheard as "by" (unit 0), "how" left out (its mark-free deletion counts in unit 1, the word
    # before it), the comma missed and a period written after "are" (unit 1)
    wrong = [dict(w) for w in words if w["text"] != "how"]
    wrong[2]["text"] = "by"
    wrong[1]["label"] = "O"
    wrong[4]["label"] = "PERIOD"
    t = tallies(wrong, text, unit_s=6.0)
    assert t[0].tolist() == [1, 3, 0, 0, 1]  # by; hello there my; the comma missed
    assert t[1].tolist() == [1, 3, 1, 1, 0]  # how deleted; friend how are; PERIOD right, PERIOD wrong
    assert t[2].tolist() == [0, 3, 2, 0, 0]  # you? fine thanks.


def test_paired_bootstrap_tells_a_real_difference_from_none():
    import numpy as np

    from streampunct.scoring import paired

    rng = np.random.default_rng(1)
    a = {
        u: np.array([rng.integers(0, 5), 50, rng.integers(2, 8), rng.integers(0, 3), rng.integers(0, 3)])
        for u in range(30)
    }
    same = paired(a, dict(a))
    assert (
        same["micro_f1"]["diff"] == 0
        and same["micro_f1"]["ci95"] == [0, 0]
        and same["micro_f1"]["p_worse"] == 0
    )
    assert same["wer"]["ci95"] == [0, 0]
    # b misses one more mark and makes one more word error in every unit: a is better, surely
    b = {u: t + np.array([1, 0, -1, 0, 1]) for u, t in a.items()}
    better = paired(a, b)
    assert better["micro_f1"]["ci95"][0] > 0 and better["micro_f1"]["p_worse"] == 0
    assert better["wer"]["ci95"][1] < 0 and better["wer"]["p_worse"] == 0
    # a unit only one of them has (words the other never recognised) counts as zeros for the other
    assert paired({**a, 99: np.array([0, 0, 0, 1, 0])}, a)["units"] == 31
