"""Decision offsets per lookahead, tuned on dev data: ``streampunct calibrate``.

A model trained on cross-entropy takes the argmax of its logits, which marks too rarely where it
sees little ahead: at k=0 a word's mark is a guess, and O is the safe one. Adding an offset to
each mark's logit before the argmax moves precision against recall. Here the offsets are chosen,
for each lookahead k = 0 .. 4 and for offline, to maximise micro-F1 on dev data (coordinate ascent
over a grid, O's offset fixed at 0), and written into the checkpoint's ``config.json`` as
``label_bias`` (see :meth:`~streampunct.model.PunctModel.biased`); the window engine's, per k, as
``window_bias``. Both engines' calibrated scores on the same words then set ``window_from``, where
``engine="auto"`` turns from the masked engine to the window one. The weights are not touched.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..decision import Decision
from ..engines import token_logits
from ..errors import InputError
from ..metrics import _prf
from ..options import StreamOptions
from ..punctuator import Punctuator
from ..text import LABEL_ID

__all__ = [
    "LOOKAHEADS",
    "calibrate",
    "calibrate_speech",
    "choose_window_from",
    "retune_offline",
    "speech_decisions",
    "tune_offsets",
]

LOOKAHEADS: tuple[int | None, ...] = (0, 1, 2, 3, 4, None)  # k = 4's offsets serve every larger k
MODES = [("masked", k) for k in LOOKAHEADS] + [("window", k) for k in LOOKAHEADS if k is not None]
GRID = torch.arange(-3.0, 3.0001, 0.05)


def _micro_f1(pred: torch.Tensor, gold: torch.Tensor) -> float:
    """IWSLT micro-F1 over the marks (label 0 is O), from label ids: ``metrics.score``'s, counted
    on tensors (the grid search scores thousands of trials)."""
    correct = int(((pred == gold) & (gold != 0)).sum())
    predicted, wanted = int((pred != 0).sum()), int((gold != 0).sum())
    return _prf(correct, predicted - correct, wanted - correct)[2]


def tune_offsets(logits: torch.Tensor, gold: torch.Tensor, rounds: int = 3) -> tuple[list[float], float]:
    """Offsets (one per label, O's 0) that maximise micro-F1 of ``argmax(logits + offsets)``."""
    offsets = torch.zeros(logits.shape[-1])
    best = _micro_f1(logits.argmax(-1), gold)
    for _ in range(rounds):
        for label in range(1, logits.shape[-1]):
            for value in GRID:
                trial = offsets.clone()
                trial[label] = value
                f1 = _micro_f1((logits + trial).argmax(-1), gold)
                if f1 > best + 1e-9:
                    best, offsets = f1, trial
    rounded = [round(x, 2) + 0.0 for x in offsets.tolist()]  # as config.json keeps them
    return rounded, _micro_f1((logits + torch.tensor(rounded)).argmax(-1), gold)


def choose_window_from(masked: dict[int, float], window: dict[int, float]) -> int:
    """The smallest k from which the window engine scores at least the masked one's micro-F1 at
    every calibrated lookahead (``max(window) + 1``: it never does)."""
    ks = sorted(window)
    for i, k in enumerate(ks):
        if all(window[j] >= masked[j] for j in ks[i:]):
            return k
    return ks[-1] + 1


def _plain_logits(
    p: Punctuator, tokens: Sequence[str], labels: Sequence[str], k: int | None, engine: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gold label ids of dev tokens and the model's logits for them at ``k`` under ``engine``
    (whatever offsets the model holds: the callers clear them first)."""
    gold = torch.tensor([LABEL_ID[label] for label in labels])
    return gold, token_logits(p.model, p.pieces, tokens, k, tags=p.tags(tokens, k), engine=engine)


def calibrate(
    p: Punctuator, tokens: Sequence[str], labels: Sequence[str], window_words: int | None = None, log=print
) -> list[dict[str, object]]:
    """Tune ``p.model``'s offsets on normalised dev tokens and their labels (the window engine's on
    the first ``window_words`` of them: it costs a pass per word), and set them on the model;
    returns, per mode, the offsets and dev micro-F1 before and after."""
    model = p.model
    model.set_label_bias(())  # tune on the plain logits
    rows: dict[str, list[list[float]]] = {"masked": [], "window": []}
    masked: dict[int | None, torch.Tensor] = {}  # the masked engine's calibrated logits, per k
    same_words: dict[str, dict[int, float]] = {"masked": {}, "window": {}}  # for window_from
    report = []
    for engine, k in MODES:
        if engine == "window" and model.cfg.n_tags:
            continue  # the window engine does not fuse tags
        n = len(tokens) if engine == "masked" else window_words or len(tokens)
        gold, logits = _plain_logits(p, tokens[:n], labels[:n], k, engine)
        offsets, after = tune_offsets(logits, gold)
        before = _micro_f1(logits.argmax(-1), gold)
        rows[engine].append(offsets)
        mode = "offline" if k is None else f"k={k}" + (" window" if engine == "window" else "")
        row = {
            "mode": mode,
            "offsets": offsets,
            "dev_micro_f1": round(before, 2),
            "calibrated": round(after, 2),
        }
        if engine == "masked":
            masked[k] = logits + torch.tensor(offsets)
        else:  # and the masked engine's on the same words
            assert k is not None  # MODES: the window engine's lookaheads are all bounded
            same = round(_micro_f1(masked[k][:n].argmax(-1), gold), 2)
            row["masked_same_words"] = same
            same_words["masked"][k], same_words["window"][k] = same, round(after, 2)
        report.append(row)
        log(f"{mode:9} COMMA, PERIOD, QUESTION {offsets[1:]}: dev micro-F1 {before:.2f} -> {after:.2f}")
    window_from = choose_window_from(**same_words) if same_words["window"] else None
    model.set_label_bias(rows["masked"], rows["window"], window_from)
    if window_from is not None:
        log(f"engine auto: masked below k={window_from}, window from k={window_from}")
    return report


def retune_offline(p: Punctuator, tokens: Sequence[str], labels: Sequence[str]) -> tuple[list[float], float]:
    """Tune the offline offsets alone on these dev tokens, keep every other one, and set them on
    ``p.model``; returns the offsets and their dev micro-F1. For a model calibrated already, on
    other words: a mix of dev sets whose balance suits the offline mode better."""
    model = p.model
    rows, window_rows = [list(row) for row in model.cfg.label_bias], model.cfg.window_bias
    if not rows:
        raise InputError("the model has no offsets to keep: calibrate every mode first")
    model.set_label_bias(())  # tune on the plain logits
    gold, logits = _plain_logits(p, tokens, labels, None, "masked")
    offsets, after = tune_offsets(logits, gold)
    rows[-1] = offsets  # label_bias: k = 0 .. 4, then offline
    model.set_label_bias(rows, window_rows)
    return offsets, after


# --- the pause fusion's offsets, on recognised speech ----------------------------------------


def _fused_decisions(
    p: Punctuator, records: Sequence[dict], lookahead: int, max_delay_ms: float | None, marks: bool = True
) -> tuple[list[str], dict[int, tuple[torch.Tensor, int]]]:
    """One recording's calls through a fresh stream (:func:`streampunct.pipeline.replay`): its
    words, and for each word whose final decision the pause fusion corrected, the corrected logits
    before the fusion's offsets and the lookahead slot, read from the stream's ``on_decision``."""
    from ..pipeline import replay

    fusion = p.decider.pause_fusion
    assert fusion is not None
    decided: dict[int, tuple[torch.Tensor, int]] = {}

    def read(word: int, d: Decision) -> None:
        if d.paused is None:  # a word's decision is its last token's
            decided.pop(word, None)
        else:
            decided[word] = (d.paused - fusion.offsets[d.pause_slot], d.pause_slot)

    settings = {"lookahead": lookahead, "max_delay_ms": max_delay_ms}
    words = replay(p, (settings, list(records)), marks=marks, on_decision=read)
    return [w["text"] for w in words], decided


@torch.no_grad()
def speech_decisions(
    p: Punctuator,
    recordings: Sequence[tuple[str, Sequence[dict]]],
    lookahead: int,
    max_delay_ms: float | None,
    marks: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each recording (its punctuated reference, and the calls the caption pipeline made, recorded:
    :func:`streampunct.pipeline.calls_from_json`; without ``marks``, the recogniser's marks taken
    off its words, as from a recogniser that writes none) through a stream as the server runs it: every
    final decision the pause fusion corrected, as its corrected logits before the fusion's
    offsets, its lookahead slot, the reference's mark for its word (moved onto the recognised
    words, :func:`streampunct.scoring.compare`) and the recording's index."""
    from ..scoring import word_references
    from ..text import normalize

    if p.decider.pause_fusion is None:
        raise InputError("the model has no pause fusion to calibrate")
    logits, slots, gold, where = [], [], [], []
    for n, (text, records) in enumerate(recordings):
        words, decided = _fused_decisions(p, records, lookahead, max_delay_ms, marks)
        for i, (w, ref) in enumerate(zip(words, word_references(text, words))):
            if normalize(w) and i in decided:
                x, slot = decided[i]
                logits.append(x)
                slots.append(slot)
                gold.append(LABEL_ID[ref])
                where.append(n)
    return torch.stack(logits), torch.tensor(slots), torch.tensor(gold), torch.tensor(where)


def calibrate_speech(
    p: Punctuator,
    recordings: Sequence[tuple[str, Sequence[dict]]],
    lookaheads: Sequence[int] = (2,),
    max_delay_ms: float | None = StreamOptions.max_delay_ms,
    slots: Sequence[int] = (1, 2),
    log=print,
) -> dict[str, object]:
    """Tune the pause fusion's offsets of these lookahead ``slots`` for micro-F1 on these
    recordings of recognised speech, and set them on ``p.decider``. Each slot is tuned on the
    decisions made with that many words ahead by streams at every one of ``lookaheads``, on the
    recogniser's words with its marks and without them (a recogniser that writes none), pooled:
    one set of offsets serves both. Slot 0 (nothing ahead) is left as trained by default: it is a
    time limit's decision in a k=2 stream but every decision of a k=0 stream, and tuned for either
    it lost on the other on speech dev. Reports, per lookahead and marks, micro-F1 over the fused
    decisions before and after, in sample and left out: each recording scored with offsets tuned
    on the others (what the tuning is worth on speech it did not see)."""
    fusion = p.decider.pause_fusion
    if fusion is None:
        raise InputError("the model has no pause fusion to calibrate")
    rows = {
        (k, marks): speech_decisions(p, recordings, k, max_delay_ms, marks)
        for k in lookaheads
        for marks in (True, False)
    }
    before = fusion.offsets.detach().clone()
    used = [s for s in sorted({s for _, sl, _, _ in rows.values() for s in sl.tolist()}) if s in slots]

    def pooled(s: int, keep: dict) -> tuple[torch.Tensor, torch.Tensor]:
        logits = torch.cat([x[(sl == s) & keep[c]] for c, (x, sl, _, _) in rows.items()])
        return logits, torch.cat([g[(sl == s) & keep[c]] for c, (_, sl, g, _) in rows.items()])

    def tuned(keep: dict) -> torch.Tensor:
        offsets = before.clone()
        for s in used:
            offsets[s] = torch.tensor(tune_offsets(*pooled(s, keep))[0])
        return offsets

    def decide(c: tuple[int, bool], offsets: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        logits, sl, _, _ = rows[c]
        return (logits[keep] + offsets[sl[keep]]).argmax(-1)

    everything = {c: torch.ones_like(r[1], dtype=torch.bool) for c, r in rows.items()}
    after = tuned(everything)
    by_slot = {}
    for s in used:  # what the tuning maximised: each slot's decisions, pooled
        logits, gold = pooled(s, everything)
        by_slot[s] = [round(_micro_f1((logits + o[s]).argmax(-1), gold), 2) for o in (before, after)]
    report: dict[str, object] = {
        "lookaheads": list(lookaheads),
        "max_delay_ms": max_delay_ms,
        "slots": used,
        "offsets_before": {s: before[s].tolist() for s in used},
        "offsets": {s: after[s].tolist() for s in used},
        "slot_micro_f1_before_after": by_slot,
    }
    left_out = {c: torch.empty_like(r[2]) for c, r in rows.items()}
    for n in range(len(recordings)):
        offsets = tuned({c: r[3] != n for c, r in rows.items()})
        for c, (_, _, _, where) in rows.items():
            left_out[c][where == n] = decide(c, offsets, where == n)
    for c, (_, sl, gold, _) in rows.items():
        name = f"k={c[0]} marks={'on' if c[1] else 'off'}"
        line = {
            "decisions": len(gold),
            "by_slot": {s: int((sl == s).sum()) for s in sorted(set(sl.tolist()))},
            "micro_f1_before": round(_micro_f1(decide(c, before, everything[c]), gold), 2),
            "micro_f1_after": round(_micro_f1(decide(c, after, everything[c]), gold), 2),
            "micro_f1_left_out": round(_micro_f1(left_out[c], gold), 2),
        }
        report[name] = line
        log(
            f"{name}: {line['decisions']} fused decisions, micro-F1 {line['micro_f1_before']} -> "
            f"{line['micro_f1_after']} (each recording left out of its own tuning: {line['micro_f1_left_out']})"
        )
    with torch.no_grad():
        fusion.offsets.copy_(after)
    return report
