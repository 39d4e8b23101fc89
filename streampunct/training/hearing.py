"""Fitting the fusion with what was heard (:class:`~streampunct.hearing.SpeechFusion`) on recorded
recognised speech, and what it is worth there, left out per recording.

A recording is the calls the caption pipeline made on the punctuation stream
(:func:`streampunct.pipeline.call_to_json`: the committed words with their times and cues, the
provisional words, the pause clock), and its punctuated reference. Each recording runs through a
stream as the server runs it (:func:`streampunct.pipeline.replay`), at each lookahead, deciding
as the pause fusion does: every word's final decision, read from the stream's ``on_decision``,
gives the hearing's inputs and slot (:class:`~streampunct.decision.Decision`), and the
reference's mark moved onto it (:func:`streampunct.scoring.compare`) its label. The decisions are
the stream's own, made where the stream makes them: nothing is recomputed beside it.

Per slot, a multinomial logistic model is fitted by L-BFGS with an L2 penalty that pulls it
towards the text model's decision (with little data it stays there; the pause fusion's, with
``prior``, held on speech dev but cost the talks: docs/decisions.md), on the rows
and on copies of them with the recogniser's marks taken away (so that a word without them is
decided on the rest); then each slot's decision offsets are tuned for
micro-F1 (:func:`~streampunct.training.calibrate.tune_offsets`). Left out: each recording is
decided by a fusion fitted on the others, and scored as a stream's words are
(:func:`left_out`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from ..decision import Decision
from ..hearing import GATED, INPUTS, N_LABELS, SLOTS, SpeechFusion
from ..pipeline import replay
from ..scoring import compare, metrics, pool, reference, word_references, word_tokens
from ..text import LABELS
from .calibrate import tune_offsets

__all__ = ["Traced", "trace", "Rows", "rows_of", "fit", "decide", "held_out", "left_out", "BLOCKS"]

# The inputs of each evidence source (hearing.inputs' layout), for the ablation and the dropout.
BLOCKS: dict[str, slice] = {
    "text": slice(0, 4),
    "pause fusion": slice(4, 8),
    "pause": slice(8, 10),
    "marks": slice(10, INPUTS),
    "gated": slice(INPUTS - GATED, INPUTS),  # the marks scaled by the text model's confidence
}
PRIORS = ("text", "pause fusion")  # the decision a fit is pulled towards: the text model's, by default
LABEL_ID = {label: i for i, label in enumerate(LABELS)}


@dataclass
class Traced:
    """One recording through one stream: its words, each one's final label, the reference's mark
    on each (moved onto the recognised words), and the traced final decision of each word the
    fusion decides (word index -> inputs, slot)."""

    words: list[str]
    labels: list[str]
    gold: list[str]
    rows: dict[int, tuple[np.ndarray, int]] = field(default_factory=dict)


def trace(p: Any, text: str, records: Sequence[dict], lookahead: int, max_delay_ms: float | None) -> Traced:
    """``records`` (one recording's calls) through a fresh stream of ``p`` (a Punctuator with pause
    fusion) at ``lookahead``, without its hearing; ``text``: the punctuated reference."""
    rows: dict[int, tuple[np.ndarray, int]] = {}

    def read(word: int, d: Decision) -> None:
        if d.heard is not None:  # a word's last token, with cues
            rows[word] = (d.heard, d.slot)

    settings = {"lookahead": lookahead, "max_delay_ms": max_delay_ms}
    p = p.deciding_with(replace(p.decider, hearing=None))
    words = replay(p, (settings, list(records)), on_decision=read)
    texts = [w["text"] for w in words]
    return Traced(texts, [w["label"] for w in words], word_references(text, texts), rows)


@dataclass
class Rows:
    """The traced decisions of many recordings and lookaheads, as arrays."""

    x: np.ndarray  # (N, INPUTS)
    slot: np.ndarray  # (N,)
    gold: np.ndarray  # (N,) label ids
    recording: np.ndarray  # (N,)


def rows_of(traced: Sequence[tuple[int, Traced]]) -> Rows:
    """(recording index, traced run) pairs -> their decisions as arrays."""
    x, slot, gold, rec = [], [], [], []
    for n, t in traced:
        for i, (inputs, s) in sorted(t.rows.items()):
            x.append(inputs)
            slot.append(s)
            gold.append(LABEL_ID[t.gold[i]])
            rec.append(n)
    return Rows(np.stack(x), np.array(slot), np.array(gold), np.array(rec))


def _without(x: np.ndarray, blocks: Sequence[str]) -> np.ndarray:
    x = x.copy()
    for b in blocks:
        x[:, BLOCKS[b]] = 0.0
    return x


def fit(
    rows: Rows,
    keep: np.ndarray | None = None,
    l2: float = 1.0,
    drop: Sequence[str] = (),
    tune: bool = True,
    prior: str = PRIORS[0],
) -> SpeechFusion:
    """A fusion fitted on ``rows`` (those where ``keep``), with the input blocks ``drop`` left out
    (the ablation): per slot, L2 towards the ``prior``'s decision (the pause fusion's, or the text
    model's), the rows and copies of them without the marks (at a third of the weight); then the
    offsets."""
    fusion = SpeechFusion.identity(BLOCKS[prior].start)
    keep = np.ones(len(rows.gold), dtype=bool) if keep is None else keep
    x_all = _without(rows.x, drop)
    for s in range(len(SLOTS)):
        mask = keep & (rows.slot == s)
        if mask.sum() < 50 or len(set(rows.gold[mask].tolist())) < 2:
            continue  # too few decisions: the identity
        x = x_all[mask]
        copies = [x, _without(x, ["marks"])]
        weight = np.concatenate([np.ones(len(x)), np.full(len(x), 1 / 3)])
        w, b = _logistic(
            np.concatenate(copies),
            np.tile(rows.gold[mask], len(copies)),
            weight,
            fusion.weights[s],
            l2 / len(x),
        )
        fusion.weights[s], fusion.bias[s] = w, b
        if tune:
            logits = torch.tensor(fusion.logits(x, np.full(len(x), s)))
            fusion.offsets[s] = tune_offsets(logits, torch.tensor(rows.gold[mask]))[0]
    for b_ in drop:  # a dropped block reads nothing
        fusion.weights[:, BLOCKS[b_]] = 0.0
    return fusion


def _logistic(
    x: np.ndarray, y: np.ndarray, weight: np.ndarray, prior: np.ndarray, l2: float
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted multinomial logistic regression by L-BFGS, L2 towards ``prior``: weights, bias."""
    xs, ys, ws = (torch.tensor(a) for a in (x.astype(np.float64), y, weight))
    p = torch.tensor(prior)
    w = p.clone().requires_grad_(True)
    b = torch.zeros(N_LABELS, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=200, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        nll = torch.nn.functional.cross_entropy(xs @ w + b, ys, reduction="none")
        loss = (nll * ws).sum() / ws.sum() + l2 * ((w - p) ** 2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach().numpy(), b.detach().numpy()


def decide(fusion: SpeechFusion, t: Traced) -> list[str]:
    """A traced run's final labels with ``fusion`` deciding the words it decides (the others as
    the stream decided them)."""
    labels = list(t.labels)
    if t.rows:
        idx = sorted(t.rows)
        x = np.stack([t.rows[i][0] for i in idx])
        slots = np.array([t.rows[i][1] for i in idx])
        for i, label in zip(idx, fusion.logits(x, slots).argmax(-1)):
            labels[i] = LABELS[label]
    return labels


def left_out(
    traced: dict[tuple[int, int], Traced],
    texts: Sequence[str],
    l2: float = 1.0,
    drop: Sequence[str] = (),
    **how: Any,
) -> dict[int, dict[int, list[str]]]:
    """Each recording's labels at each lookahead, decided by a fusion fitted on the other
    recordings (``traced``: (recording, lookahead) -> run; ``how``: :func:`held_out`'s)."""
    fits = held_out(rows_of([(n, t) for (n, _), t in traced.items()]), l2, drop, **how)
    return {n: {k: decide(fusion, t) for (m, k), t in traced.items() if m == n} for n, fusion in fits.items()}


def rows_in(rows: Rows, recordings: Sequence[int] | None) -> np.ndarray:
    """Which of ``rows`` are of ``recordings`` (None: all)."""
    return (
        np.ones(len(rows.recording), dtype=bool)
        if recordings is None
        else np.isin(rows.recording, recordings)
    )


def held_out(
    rows: Rows,
    l2: float = 1.0,
    drop: Sequence[str] = (),
    fit_on: Sequence[int] | None = None,
    prior: str = PRIORS[0],
) -> dict[int, SpeechFusion]:
    """For each recording of ``rows``, a fusion fitted on the other recordings' rows (of those in
    ``fit_on``, if given)."""
    allowed = rows_in(rows, fit_on)
    return {
        int(n): fit(rows, allowed & (rows.recording != n), l2, drop, prior=prior)
        for n in np.unique(rows.recording)
    }


def micro_f1_of(runs: Sequence[tuple[Sequence[str], Sequence[str], str]]) -> dict[str, Any]:
    """Pooled IWSLT metrics of (words, labels, reference text) runs."""
    parts = []
    for words, labels, text in runs:
        tokens, hyp = word_tokens(words, labels)
        parts.append(compare(*reference(text), tokens, hyp))
    return metrics(pool(parts))


def trace_all(
    p: Any,
    recordings: Sequence[tuple[str, str, Sequence[dict]]],
    lookaheads: Sequence[int],
    max_delay_ms: float | None,
) -> dict[tuple[int, int], Traced]:
    """Every one of ``recordings`` ((name, punctuated reference, calls)) traced at each lookahead."""
    return {
        (n, k): trace(p, text, calls, k, max_delay_ms)
        for n, (_, text, calls) in enumerate(recordings)
        for k in lookaheads
    }


def fit_hearing(
    traced: dict[tuple[int, int], Traced],
    recordings: Sequence[tuple[str, str, Sequence[dict]]],
    l2: float = 10.0,
    log=print,
    prior: str = PRIORS[0],
) -> tuple[SpeechFusion, dict[str, Any]]:
    """The fusion fitted on every one of ``recordings`` ((name, punctuated reference, calls)),
    traced (:func:`trace_all`), and its report: per lookahead, micro-F1 of the stream as it was
    (the pause fusion) and with the fusion, each recording decided by a fusion fitted on the others
    (left out), pooled and per recording; and the ablation at the largest lookahead, each evidence
    source left out in turn (left out per recording too)."""
    lookaheads = sorted({k for _, k in traced})
    texts = [text for _, text, _ in recordings]
    names = [name for name, _, _ in recordings]
    everything = rows_of([(n, t) for (n, _), t in traced.items()])

    def scored(labels: dict[int, dict[int, list[str]]], k: int) -> dict[str, Any]:
        runs = {n: (traced[n, k].words, labels[n][k], texts[n]) for n in range(len(recordings))}
        return {
            "micro_f1": micro_f1_of(list(runs.values()))["micro_f1"],
            "per_recording": {names[n]: micro_f1_of([r])["micro_f1"] for n, r in runs.items()},
        }

    before = {n: {k: traced[n, k].labels for k in lookaheads} for n in range(len(recordings))}
    after = left_out(traced, texts, l2, prior=prior)
    slots, counts = np.unique(everything.slot, return_counts=True)
    report: dict[str, Any] = {
        "recordings": names,
        "lookaheads": lookaheads,
        "l2": l2,
        "decisions": {SLOTS[s]: int(c) for s, c in zip(slots, counts)},
    }
    for k in lookaheads:
        b, a = scored(before, k), scored(after, k)
        report[f"k={k}"] = {"pause_fusion": b, "left_out": a}
        log(
            f"k={k}: micro-F1 {b['micro_f1']} (pause fusion) -> {a['micro_f1']} (with what was heard, left out)"
        )
    k = max(lookaheads)
    report["ablation"] = {}
    for block in BLOCKS:
        a = scored(left_out(traced, texts, l2, drop=[block], prior=prior), k)
        report["ablation"][block] = a
        log(f"k={k} without {block}: {a['micro_f1']} (left out)")
    fusion = fit(everything, None, l2, prior=prior)
    fusion.report = report
    return fusion, report
