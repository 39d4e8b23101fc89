"""benchmarks/text_alone.py: the text model alone on each source's words, beside that recogniser's
own marks on the very same words, per recording and set, with the paired bootstrap."""

from __future__ import annotations

import argparse
import json

import pytest

from benchmarks import folds
from benchmarks.lib.recordings import as_recording
from benchmarks.text_alone import score, table
from streampunct import Punctuator
from streampunct.scoring import compare, metrics, reference, whisper_tokens, word_tokens

TEXT = "Yes, I saw it. Did you like it? We went on Sunday, and it rained all day."


def _timed(words):
    return [{"text": w, "start": 0.4 * i, "end": 0.4 * i + 0.3} for i, w in enumerate(words)]


def test_each_source_alone_and_its_own_marks(tmp_path):
    streamed = "yes I saw it. did you like it we went on Sunday and it rained. all day".split()
    offline = "Yes, I saw it. Did you like it? We want on Sunday and it rained all day.".split()
    asr = as_recording([{"push": _timed(streamed), "now": 7.0, "tentative": []}, {"finish": True}])
    for name in ("CAR0001", "GAS0001"):
        rec = {"name": name, "set": "speech_dev", "text": TEXT, "seconds": 7.0, "streaming": {"tiny.en": asr}}
        rec["offline"] = {"tiny.en": {"words": _timed(offline)}}
        (tmp_path / f"{name}.json").write_text(json.dumps(rec))
    args = argparse.Namespace(
        cache=str(tmp_path),
        set="speech_dev",
        models=["default"],
        left_out=None,
        lookaheads=[0, 2],
        unit_tokens=5,
        draws=200,
        sources=None,
    )
    out = score(args)
    results = out["results"]
    assert list(results) == ["tiny.en offline", "tiny.en streamed", "reference"]
    args.sources = ["tiny.en offline"]
    assert score(args)["results"] == {"tiny.en offline": results["tiny.en offline"]}
    assert out["lookaheads"] == ["k=0", "k=2", "offline"]
    p = Punctuator.load("default", device="cpu")
    ref = reference(TEXT)
    # the words with their marks taken off, no times: predict()'s labels
    for source, words in (("tiny.en offline", offline), ("tiny.en streamed", streamed)):
        entry = results[source]
        own = metrics(compare(*ref, *whisper_tokens(_timed(words))))
        assert entry["own marks"]["recordings"]["GAS0001"] == own
        assert entry["own marks"]["set"]["ref_tokens"] == 2 * own["ref_tokens"]  # the set pools both
        alone = compare(*ref, *word_tokens(words, p.predict(words, lookahead=2, pauses=False)))
        assert entry["default k=2"]["recordings"]["CAR0001"] == metrics(alone)
        assert (
            entry["default k=2 against own marks"]["micro_f1"]["b"] == entry["own marks"]["set"]["micro_f1"]
        )
    assert (
        "own marks" not in results["reference"] and results["reference"]["default offline"]["set"]["wer"] == 0
    )
    lines = table(out).splitlines()
    assert lines[0] == "| words | own marks | default k=0 | default k=2 | default offline |"
    assert lines[4].startswith("| reference |  | ")


def test_a_fold_learns_every_recording_but_the_one_it_leaves_out(tmp_path, monkeypatch):
    """benchmarks/folds.py: the fold named after a recording trains on the others' words (each
    recogniser's and the reference's, ``SPEECH_REPEAT`` times), speech-like text and, where given, other
    recognised speech; the taught text is TED, then chit-chat."""
    cache, conv = tmp_path / "e2e", tmp_path / "conv"
    cache.mkdir(), conv.mkdir()
    for name, said in (
        ("CAR0001", "one two three."),
        ("CAR0002", "four five."),
        ("GAS0001", "six."),
        ("GAS0002", "seven."),
    ):
        rec = {"name": name, "set": "speech_dev", "text": said, "streaming": {}}
        rec["offline"] = {"tiny.en": {"words": _timed(said.rstrip(".").split())}}
        (cache / f"{name}.json").write_text(json.dumps(rec))
    for f, word in (("ted_speechlike.tsv", "like"), ("chat_train.tsv", "chat")):
        (conv / f).write_text(f"{word}\tO\n" * 3)
    (tmp_path / "ted.tsv").write_text("ted\tPERIOD\n" * 3)
    monkeypatch.setattr(folds, "SPEECHLIKE_WORDS", 2)
    monkeypatch.setattr(folds, "TED_WORDS", 1)
    text = folds.fold_text(cache, conv, "CAR0002", tmp_path).read_text().splitlines()
    each = [["one\tO", "two\tO", "three\tPERIOD"], ["six\tPERIOD"], ["seven\tPERIOD"]]
    heard = [line for said in each for line in said * 2]  # a recording's reference, then tiny.en's words
    assert text == heard * folds.SPEECH_REPEAT + ["like\tO"] * 2
    (tmp_path / "other.tsv").write_text("heard\tCOMMA\n")  # --heard: a recogniser's words of other speech
    more = folds.fold_text(cache, conv, "CAR0001", tmp_path, tmp_path / "other.tsv").read_text().splitlines()
    assert more[-3:] == ["like\tO", "like\tO", "heard\tCOMMA"]
    taught = folds.taught_text(conv, tmp_path / "ted.tsv", tmp_path).read_text().splitlines()
    assert taught == ["ted\tPERIOD"] + ["chat\tO"] * 3
    with pytest.raises(SystemExit):
        folds.main(["--cache", str(cache), "--conv", str(conv), "--out", str(tmp_path), "--folds", "CAR0009"])
