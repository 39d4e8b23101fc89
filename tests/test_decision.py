"""The live decision as one object (streampunct.decision): a stream, predict() and a replay hand
every final decision to one hook, once and in order, with the text model's logits and the fused
ones; a checkpoint without pause fusion decides from the text alone."""

from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np
import pytest
import torch

from streampunct import Punctuator
from streampunct.decision import Decider, Decision, place
from streampunct.hearing import SpeechFusion
from streampunct.model import ModelConfig, PunctModel
from streampunct.pieces import WordPieces
from streampunct.pipeline import call_to_json, replay
from streampunct.punctuator import DEFAULT_CHECKPOINT
from streampunct.stream import Finish, Push
from streampunct.text import LABELS, normalize_text
from streampunct.types import Cues, Word

TEXT = "so i think we should go now yeah okay what do you think don't you agree it's late".split()
SHAPE = dict(n_layer=2, n_head=2, n_embd=32, n_inner=64, block=4, context=6, dropout=0.0)


@functools.cache
def fused() -> Punctuator:
    """A random model whose pause fusion (reading the recogniser's marks) corrects a lot, and a
    hearing that marks PERIOD where the decoder gave a period over a half."""
    torch.manual_seed(2)
    cfg = ModelConfig(**SHAPE, pause_hidden=8, pause_marks=True)
    p = Punctuator(PunctModel(cfg).eval(), WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces))
    with torch.no_grad():
        p.decider.pause_fusion.out.weight.normal_(0, 3.0)
    hearing = SpeechFusion.identity()
    hearing.weights[:, 12, 2] = 20.0  # log P(PERIOD) -> the PERIOD logit
    hearing.weights[:, 10, 2] = 20.0 * np.log(2)
    return p.deciding_with(replace(p.decider, hearing=hearing))


def words(texts: list[str], start: float = 0.0) -> list[Word]:
    """Timed words with varied pauses and cues (a period heard after every fourth)."""
    out, clock = [], start
    for i, w in enumerate(texts):
        cues = Cues((0.0, 0.9, 0.0, 0.05) if i % 4 == 3 else (0.01, 0.01, 0.0, 0.01))
        out.append(Word(w + ("." if i % 5 == 4 else ""), round(clock, 3), round(clock + 0.25, 3), cues))
        clock += 0.3 + (1.2 if i % 3 == 2 else 0.0)
    return out


def heard_by(seen: list[tuple[int, Decision]]):
    return lambda word, decision: seen.append((word, decision))


def test_on_decision_sees_every_final_decision_once_in_order():
    """Pushes, revisions and the finish: the hook sees one decision a token of the final words, in
    token order, each the argmax of its fused logits, and a word's last one is its final label."""
    p = fused()
    first, revised = words(TEXT[:12]), words(TEXT[:3:-1], start=20.0)
    seen: list[tuple[int, Decision]] = []
    s = p.stream(lookahead=2, on_decision=heard_by(seen))
    events = []
    for i in range(0, 12, 3):
        events += s.push(first[i : i + 3])
    events += s.revise(10, revised[:4])  # words 10 and 11, not final, replaced
    events += s.revise(s.n_final, revised[s.n_final - 10 :])
    events += s.finish()
    _, source = normalize_text([w.text for w in first[:10] + revised])
    assert [w for w, _ in seen] == source  # every final decision once, in order
    last = dict(seen)  # a word's label is its last token's
    assert [(e.index, e.label) for e in events if e.final] == [
        (i, LABELS[last[i].label]) for i in range(len(last))
    ]
    for _, d in seen:
        assert d.label == int(d.logits.argmax())
        if d.paused is not None:  # the pause fusion's correction, as it computes it
            assert torch.equal(d.paused, p.decider.pause_fusion.correct(d.text, d.features, d.ahead))
    assert any(not torch.equal(d.logits, d.text) for _, d in seen)  # the evidence decided some
    ends = [d for _, d in seen if d.cues is not None]  # the words' last tokens: the hearing read them
    assert ends and all(d.heard is not None for d in ends)


@pytest.mark.parametrize("engine", ["masked", "window"])
def test_a_streams_decisions_are_predicts(engine):
    """The same decisions, text model's logits and fused ones, from a stream and from predict()."""
    p, ws = fused(), words(TEXT)
    streamed: list[tuple[int, Decision]] = []
    s = p.stream(lookahead=2, engine=engine, on_decision=heard_by(streamed))
    for i in range(0, len(ws), 3):
        s.push(ws[i : i + 3])
    s.finish()
    predicted: list[tuple[int, Decision]] = []
    p.predict(ws, 2, engine, on_decision=heard_by(predicted))
    assert [w for w, _ in streamed] == [w for w, _ in predicted]
    for (_, d), (_, e) in zip(streamed, predicted):
        assert d.label == e.label and (d.ahead, d.features, d.cues) == (e.ahead, e.features, e.cues)
        assert torch.allclose(d.text, e.text, atol=1e-5) and torch.allclose(d.logits, e.logits, atol=1e-4)


def test_a_decision_at_the_deadline_reads_the_silence_and_is_seen_once():
    """With a time limit and ticks through the silences: decisions at a deadline with nothing after
    them read the silence (their slot is the time limit's), and the hook still sees each final
    decision once, in order, agreeing with the final events."""
    p = fused()
    ws = words(TEXT)
    seen: list[tuple[int, Decision]] = []
    s = p.stream(lookahead=2, max_delay_ms=800, on_decision=heard_by(seen))
    events = []
    for w in ws:
        events += s.push([w], now=w.end)
        events += s.tick(w.end + 1.0)
    events += s.finish()
    _, source = normalize_text([w.text for w in ws])
    assert [w for w, _ in seen] == source
    last = dict(seen)  # a word's label is its last token's
    assert [LABELS[last[e.index].label] for e in events if e.final] == [e.label for e in events if e.final]
    silent = [d for _, d in seen if d.silence]
    assert silent and all(d.ahead == 0 and d.slot == 3 for d in silent)


def test_a_replay_hands_its_decisions_to_the_hook():
    ws = words(TEXT)
    records = [
        call_to_json(Push(tuple(ws[i : i + 4]), ws[min(i + 3, len(ws) - 1)].end)) for i in range(0, 18, 4)
    ]
    records.append(call_to_json(Finish()))
    settings = {"lookahead": 1, "max_delay_ms": None, "engine": "masked"}
    seen: list[tuple[int, Decision]] = []
    out = replay(fused(), (settings, records), on_decision=heard_by(seen))
    last = dict(seen)
    assert [w["label"] for w in out] == fused().predict(ws, 1, "masked")
    assert [LABELS[last[i].label] for i in range(len(ws))] == [w["label"] for w in out]


def test_without_pause_fusion_the_fused_logits_are_the_text_models(tiny):
    """A checkpoint without pause fusion (the shipped base, ``tiny``): every decision's fused
    logits are the text model's, and nothing else was read, however much the words carry."""
    base = DEFAULT_CHECKPOINT.parent / "base"
    assert Decider.load(base, ModelConfig.read(base)) == Decider(None, None, False, False)
    ws = words(TEXT)
    seen: list[tuple[int, Decision]] = []
    tiny.predict(ws, 2, on_decision=heard_by(seen))
    s = tiny.stream(lookahead=1, max_delay_ms=500, on_decision=heard_by(seen))
    for w in ws:
        s.push([w], now=w.end + 1.0)
    s.finish()
    assert len(seen) == 2 * len(normalize_text(TEXT)[0])
    for _, d in seen:
        assert torch.equal(d.logits, d.text) and d.label == int(d.text.argmax())
        assert d.paused is None and d.features is None and d.heard is None


def test_pauses_off_decides_from_the_text_alone():
    p = fused()
    ws = words(TEXT)
    seen: list[tuple[int, Decision]] = []
    s = p.stream(lookahead=2, pauses=False, on_decision=heard_by(seen))
    s.push(ws)
    s.finish()
    assert seen and all(torch.equal(d.logits, d.text) and d.features is None for _, d in seen)
    assert p.predict(ws, 2, pauses=False) == p.predict(TEXT, 2)


def test_the_silence_is_read_on_a_words_last_token_with_nothing_after_it_seen():
    ws = [Word("i", 0.0, 0.1), Word("don't", 0.5, 0.8), Word("know", 1.8, 2.0)]
    token_words, silence = [0, 1, 1, 2], Word("", 1.5, 1.5)
    at = [place(t, 4, 0, token_words.__getitem__, ws.__getitem__, silence) for t in range(4)]
    assert [a.silence for a in at] == [True, False, True, True]  # "do" of "do n't": inside a word
    assert at[1].after is None and at[2].after is silence
    seen = place(2, 4, 1, token_words.__getitem__, ws.__getitem__, silence)
    assert seen.after == ws[2] and not seen.silence  # a word after it is seen: no silence
