"""Punctuated words scored against a punctuated reference, by the IWSLT protocol, where the words
differ (a recogniser's): the reference tokens are aligned to the hypothesis tokens by edit
distance, each reference mark moves onto the hypothesis token aligned to its token, and
:func:`streampunct.metrics.score` scores the marks; WER comes from the same alignment. Runs pool by
concatenation (:func:`pool`). The speech benchmarks and ``streampunct calibrate --speech`` use it.
No torch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .metrics import MARK_CLASSES, score
from .text import normalize, normalize_labeled
from .training.conversation import labeled_words

__all__ = ["align", "move_marks", "compare", "pool", "metrics", "reference", "whisper_tokens", "word_tokens"]


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
