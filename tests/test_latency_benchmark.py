"""benchmarks/latency_f1.py: its pipeline replay on a hand-made recording, and its quick mode end to
end (the shipped accuracy tables against emission delays measured with the shipped model)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

from benchmarks.common import replay
from streampunct import Punctuator

ROOT = Path(__file__).resolve().parent.parent


def test_replay_gives_each_word_one_final_time_after_its_push():
    words = [
        {"text": t, "start": 0.5 * i, "end": 0.5 * i + 0.4}
        for i, t in enumerate("so how are you doing today i am fine thanks".split())
    ]
    pushes = [  # three passes of the recogniser, then a tick in the pause
        {"clock": 1.6, "first": 0, "words": 3, "now": 1.4},
        {"clock": 2.9, "first": 3, "words": 4, "now": 3.4},
        {"clock": 5.9, "first": 7, "words": 3, "now": 5.0},
        {"clock": 7.0, "first": 10, "words": 0, "now": 6.6},
    ]
    stream = {"words": words, "pushes": pushes, "end_clock": 8.0}
    p = Punctuator.load()
    for k in (0, 2, 4):
        out = replay(p, stream, k, 1500)
        assert [w["text"] for w in out] == [w["text"] for w in words]
        pushed_at = [
            next(q["clock"] for q in pushes if q["first"] <= i < q["first"] + q["words"]) for i in range(10)
        ]
        assert all(w["final"] >= t for w, t in zip(out, pushed_at))
        assert all(w["label"] in ("O", "COMMA", "PERIOD", "QUESTION") for w in out)
        if k == 0:  # no lookahead: final at its own push
            assert [w["final"] for w in out] == pushed_at
    # k=4: the last three words are decided by the tick in the pause (their time limit), not the end
    assert [w["final"] for w in replay(p, stream, 4, 1500)][-3:] == [7.0, 7.0, 7.0]


def test_quick_mode_writes_both_panels(tmp_path):
    run = subprocess.run(
        [sys.executable, "benchmarks/latency_f1.py", "--quick", "--out", str(tmp_path)],
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


def test_each_named_front_end_sets_every_recogniser_setting():
    """A named front end stays what it was measured as when the server's defaults change: it gives
    every setting (``today`` once took the 12 s pad and settling that came after it), and the
    server reads its flags back as the options it was written from."""
    from benchmarks.caption_latency import FRONTENDS
    from streampunct.flags import config_from_flags
    from streampunct.options import FrontEndOptions, RecognizerOptions
    from streampunct.server.app import build_parser

    fields = len(dataclasses.fields(RecognizerOptions)) + len(dataclasses.fields(FrontEndOptions))
    for name, flags in FRONTENDS.items():
        args = build_parser().parse_args(flags.split())
        options = (
            config_from_flags(args, RecognizerOptions, prefix="asr-"),
            config_from_flags(args, FrontEndOptions),
        )
        if name == "default":  # the server's defaults, whatever they are
            assert flags == "" and options == (RecognizerOptions(), FrontEndOptions())
            continue
        given = [f for f in flags.split() if f.startswith("--")]
        assert len(given) == len(set(given)) == fields, (name, given)
    args = build_parser().parse_args(FRONTENDS["today"].split())
    today = config_from_flags(args, RecognizerOptions, prefix="asr-")
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
