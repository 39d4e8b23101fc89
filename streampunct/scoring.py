"""Punctuated words scored against a punctuated reference, by the IWSLT protocol, where the words
differ (a recogniser's): the reference tokens are aligned to the hypothesis tokens by edit
distance, each reference mark moves onto the hypothesis token aligned to its token, and
:func:`streampunct.metrics.score` scores the marks; WER comes from the same alignment. Runs pool by
concatenation (:func:`pool`); :func:`accuracy` compares a stream's recognised words, each with its
final label, with the reference text. Two systems on the same audio: the paired bootstrap
(:func:`paired`) resamples units of their :data:`TALLY` counts (word errors, reference words, the
marks' true positives, false positives and misses) for the difference in micro-F1 and WER. The
speech benchmarks and ``streampunct calibrate --speech`` use it. No torch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .metrics import MARK_CLASSES, count, score
from .text import labeled_words, normalize, normalize_labeled

__all__ = [
    "align", "move_marks", "compare", "pool", "metrics", "reference", "whisper_tokens", "word_tokens",
    "word_references", "accuracy", "TALLY", "UNIT_TOKENS", "unit_tallies", "micro_f1", "wer", "paired",
]  # fmt: skip

TALLY = ("edits", "ref_words", "tp", "fp", "fn")  # a unit's counts in the paired bootstrap (:func:`paired`)
UNIT_TOKENS = 60  # reference tokens a unit of the bootstrap (:func:`unit_tallies`)


def _key(token: str) -> str:
    """A token as alignment compares it: lowercase, normalised, no final dot ("mr." = "mr")."""
    return ("".join(normalize(token)) or token.lower()).rstrip(".") or token.lower()


def align(ref: Sequence[str], hyp: Sequence[str]) -> list[tuple[str, int | None, int | None]]:
    """A minimum edit-distance path from ``ref`` to ``hyp``: (op, ref index, hyp index) in order;
    op is "=" (match), "S" (substitution), "D" (a reference token deleted) or "I" (inserted)."""
    a = [_key(t) for t in ref]
    b = [_key(t) for t in hyp]
    n, m = len(a), len(b)
    cost = [list(range(m + 1))]
    for i in range(1, n + 1):
        prev, row = cost[-1], [i] + [0] * m
        ai = a[i - 1]
        for j in range(1, m + 1):
            row[j] = min(prev[j - 1] + (ai != b[j - 1]), prev[j] + 1, row[j - 1] + 1)
        cost.append(row)
    path: list[tuple[str, int | None, int | None]] = []
    i, j = n, m
    while i or j:  # back from the end: a diagonal step first, then a deletion, then an insertion
        if i and j and cost[i][j] == cost[i - 1][j - 1] + (a[i - 1] != b[j - 1]):
            path.append(("=" if a[i - 1] == b[j - 1] else "S", i - 1, j - 1))
            i, j = i - 1, j - 1
        elif i and cost[i][j] == cost[i - 1][j] + 1:
            path.append(("D", i - 1, None))
            i -= 1
        else:
            path.append(("I", None, j - 1))
            j -= 1
    return path[::-1]


def move_marks(
    path: Sequence[tuple[str, int | None, int | None]], ref_labels: Sequence[str], n_hyp: int
) -> tuple[list[str], int]:
    """The reference marks on the hypothesis tokens, and how many were lost (a deleted token with
    no hypothesis token before it). A mark on a deleted token goes to the hypothesis token before
    it; of two marks on one token the later wins, but a COMMA never replaces a PERIOD or QUESTION."""
    out = ["O"] * n_hyp
    last: int | None = None  # the last hypothesis token of the path so far
    lost = 0
    for op, i, j in path:
        if j is not None:
            last = j
        if i is None or ref_labels[i] == "O":
            continue
        target = j if op in ("=", "S") else last
        if target is None:
            lost += 1
        elif not (ref_labels[i] == "COMMA" and out[target] in ("PERIOD", "QUESTION")):
            out[target] = ref_labels[i]
    return out, lost


def compare(
    ref_tokens: Sequence[str], ref_labels: Sequence[str], hyp_tokens: Sequence[str], hyp_labels: Sequence[str]
) -> dict[str, Any]:
    """Align and move the marks: what :func:`metrics` scores (lists, so that runs pool), and the
    alignment's path."""
    path = align(ref_tokens, hyp_tokens)
    moved, lost = move_marks(path, ref_labels, len(hyp_tokens))
    ops = {op: sum(1 for p in path if p[0] == op) for op in "=SDI"}
    return {
        "ref": moved,
        "hyp": list(hyp_labels),
        "edits": ops["S"] + ops["D"] + ops["I"],
        "ref_tokens": len(ref_tokens),
        "ref_marks": sum(lab != "O" for lab in ref_labels),
        "lost": lost,
        "path": path,
    }


def pool(parts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "ref": [x for p in parts for x in p["ref"]],
        "hyp": [x for p in parts for x in p["hyp"]],
        **{k: sum(p[k] for p in parts) for k in ("edits", "ref_tokens", "ref_marks", "lost")},
    }


def metrics(c: dict[str, Any]) -> dict[str, Any]:
    report = score(c["ref"], c["hyp"])
    out: dict[str, Any] = {k: round(v, 2) if isinstance(v, float) else v for k, v in report.to_dict().items()}
    for cls in MARK_CLASSES:
        out[cls] = {k: round(v, 2) for k, v in out[cls].items()}
        out[cls]["support"] = report.classes[cls].support
    out["wer"] = round(100 * c["edits"] / max(c["ref_tokens"], 1), 2)
    out["ref_tokens"] = c["ref_tokens"]
    out["ref_marks"] = c["ref_marks"]
    out["marks_lost"] = c["lost"]
    return out


def reference(text: str) -> tuple[list[str], list[str]]:
    return normalize_labeled(*labeled_words(text, turn_end=False))


def word_references(text: str, words: Sequence[str]) -> list[str]:
    """The punctuated reference ``text``'s mark after each recognised word (moved onto its last
    token by :func:`compare`; O for a word without tokens)."""
    tokens, _ = word_tokens(words, ["O"] * len(words))
    moved = compare(*reference(text), tokens, ["O"] * len(tokens))["ref"]
    out, last = [], -1
    for w in words:
        n = len(normalize(w))
        last += n
        out.append(moved[last] if n else "O")
    return out


def whisper_tokens(words: Sequence[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """Whisper's words with its own punctuation, as tokens and labels."""
    return normalize_labeled(*labeled_words(" ".join(w["text"] for w in words), turn_end=False))


def word_tokens(words: Sequence[str], labels: Sequence[str]) -> tuple[list[str], list[str]]:
    """A word's label on its last token, O on its others; words without tokens vanish."""
    tokens: list[str] = []
    out: list[str] = []
    for w, lab in zip(words, labels):
        parts = normalize(w)
        tokens += parts
        out += ["O"] * (len(parts) - 1) + [lab] * bool(parts)
    return tokens, out


def accuracy(words: list[dict[str, Any]], text: str) -> dict[str, Any]:
    """A stream's recognised words (dicts with ``text`` and, once final, ``label``) against the
    punctuated reference ``text``: :func:`compare`'s comparison, with ``jiwer``, the reference's and
    the words' tokens as the strings jiwer scores."""
    ref_tokens, ref_labels = reference(text)
    hyp_tokens, hyp_labels = word_tokens([w["text"] for w in words], [w.get("label", "O") for w in words])
    c = compare(ref_tokens, ref_labels, hyp_tokens, hyp_labels)
    c["jiwer"] = (" ".join(ref_tokens), " ".join(hyp_tokens) or "-")
    return c


def unit_tallies(c: dict, unit_tokens: int = UNIT_TOKENS) -> dict[int, np.ndarray]:
    """One recording's comparison (:func:`compare`) per unit of ``unit_tokens`` consecutive
    reference tokens: ``streampunct.scoring.TALLY`` (word errors, reference tokens, true positives,
    false positives and misses over the marks). A step of the alignment, and the marks of its hypothesis
    token, count in the unit of its reference token; an inserted token's in the unit of the
    reference token before it (the first unit if none). Summed over the units: the table's counts."""
    out: dict[int, np.ndarray] = {}
    hyp_of: dict[int, list[int]] = {}  # a unit's hypothesis tokens
    unit = 0
    for op, i, j in c["path"]:
        if i is not None:
            unit = i // unit_tokens
        if j is not None:
            hyp_of.setdefault(unit, []).append(j)
        row = out.setdefault(unit, np.zeros(len(TALLY), dtype=np.int64))
        row[:2] += (op != "=", i is not None)
    for unit, js in hyp_of.items():
        n = count([c["ref"][j] for j in js], [c["hyp"][j] for j in js])
        out[unit][2:] += [sum(n.tp.values()), sum(n.fp.values()), sum(n.fn.values())]
    return out


def micro_f1(t: np.ndarray) -> np.ndarray:
    """Micro-F1 over the marks (%) from tallies summed over units (any leading axes)."""
    tp, fp, fn = t[..., 2], t[..., 3], t[..., 4]
    return np.where(tp > 0, 200 * tp / np.maximum(2 * tp + fp + fn, 1), 0.0)


def wer(t: np.ndarray) -> np.ndarray:
    """WER (%) from tallies summed over units (any leading axes)."""
    return 100 * t[..., 0] / np.maximum(t[..., 1], 1)


def paired(
    a: dict[Any, np.ndarray],
    b: dict[Any, np.ndarray],
    draws: int = 10000,
    seed: int = 0,
    nested: bool = False,
) -> dict:
    """Front end (or model, or system) ``a`` against ``b`` on the same units (:data:`TALLY` each): each
    one's micro-F1 and WER, the differences (a - b), their 95% bootstrap intervals, and the share of
    resamples in which ``a`` is worse. ``nested``: the keys are (recording, unit) and each resample
    draws recordings, then units inside each recording drawn (a two-level bootstrap: recordings
    differ by more than units inside one do)."""
    keys = sorted(set(a) | set(b), key=str)
    zero = np.zeros(len(TALLY), dtype=np.int64)
    ta = np.stack([a.get(k, zero) for k in keys])
    tb = np.stack([b.get(k, zero) for k in keys])
    rng = np.random.default_rng(seed)
    if nested:
        sa, sb = _nested_sums(ta, tb, [k[0] for k in keys], draws, rng)
    else:
        idx = rng.integers(0, len(keys), (draws, len(keys)))
        sa, sb = ta[idx].sum(axis=1), tb[idx].sum(axis=1)
    # marks: the reference's, as aligned onto a's words (its true positives and misses)
    out: dict[str, Any] = {"units": len(keys), "marks": int(ta[:, 2].sum() + ta[:, 4].sum())}
    for name, f, worse in (("micro_f1", micro_f1, np.less), ("wer", wer, np.greater)):
        diff = f(sa) - f(sb)
        out[name] = {
            "a": round(float(f(ta.sum(axis=0))), 2),
            "b": round(float(f(tb.sum(axis=0))), 2),
            "diff": round(float(f(ta.sum(axis=0)) - f(tb.sum(axis=0))), 2),
            "ci95": [round(float(x), 2) for x in np.percentile(diff, [2.5, 97.5])],
            "p_worse": round(float(worse(diff, 0).mean()), 3),
        }
    return out


def _nested_sums(
    ta: np.ndarray, tb: np.ndarray, groups: Sequence[Any], draws: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The tallies of ``draws`` two-level resamples: groups (recordings) drawn with replacement,
    then as many of each drawn group's units, with replacement, as it has; summed per draw."""
    members: dict[Any, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    names = list(members)
    sa = np.zeros((draws, ta.shape[1]), dtype=np.int64)
    sb = np.zeros_like(sa)
    for d in range(draws):
        for g in rng.integers(0, len(names), len(names)):
            idx = rng.choice(members[names[g]], len(members[names[g]]))
            sa[d] += ta[idx].sum(axis=0)
            sb[d] += tb[idx].sum(axis=0)
    return sa, sb
