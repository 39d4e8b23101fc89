"""The IWSLT punctuation metric: per-class P/R/F1, micro-F1 over the marks, macro-F1, SER.

Counting follows punctuator2's ``error_calculator.py``: at each word the reference and the
predicted mark are compared; a match of two marks is correct, a mark for none an insertion, none
for a mark a deletion, one mark for another a substitution (a false positive of the predicted class
and a false negative of the reference class). SER = (S + D + I) / (C + S + D), the errors over the
number of reference marks (over 1 when the reference has none). O is never a class of its own in the scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .errors import InputError

__all__ = ["ClassScore", "Counts", "Report", "count", "score", "MARK_CLASSES"]

MARK_CLASSES = ("COMMA", "PERIOD", "QUESTION")


def _prf(tp: int, fp: int, fn: int) -> tuple[float, float, float]:
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return 100 * p, 100 * r, 100 * f


@dataclass(frozen=True)
class ClassScore:
    precision: float
    recall: float
    f1: float
    support: int


@dataclass(frozen=True)
class Report:
    classes: dict[str, ClassScore]
    micro_f1: float
    macro_f1: float
    ser: float
    words: int

    def to_dict(self) -> dict[str, object]:
        """The JSON shape of ``streampunct evaluate --json``; values in percent."""
        out: dict[str, object] = {
            c: {"precision": s.precision, "recall": s.recall, "f1": s.f1} for c, s in self.classes.items()
        }
        out.update(micro_f1=self.micro_f1, macro_f1=self.macro_f1, ser=self.ser, words=self.words)
        return out

    def table(self) -> str:
        lines = [f"{'class':<10}{'P':>8}{'R':>8}{'F1':>8}{'n':>8}"]
        for c, s in self.classes.items():
            lines.append(f"{c:<10}{s.precision:8.1f}{s.recall:8.1f}{s.f1:8.1f}{s.support:8d}")
        lines.append(
            f"micro-F1 {self.micro_f1:.1f}  macro-F1 {self.macro_f1:.1f}  SER {self.ser:.1f}  words {self.words}"
        )
        return "\n".join(lines)


@dataclass(frozen=True)
class Counts:
    """Marks counted word by word: per class the true positives, false positives and false
    negatives; and SER's correct, substituted, deleted and inserted marks."""

    tp: dict[str, int]
    fp: dict[str, int]
    fn: dict[str, int]
    correct: int
    subs: int
    dels: int
    ins: int


def count(reference: Sequence[str], predicted: Sequence[str]) -> Counts:
    """Count predicted labels against reference labels, word by word (the module's rule)."""
    if len(reference) != len(predicted):
        raise InputError(f"{len(reference)} reference labels but {len(predicted)} predicted")
    tp = dict.fromkeys(MARK_CLASSES, 0)
    fp = dict.fromkeys(MARK_CLASSES, 0)
    fn = dict.fromkeys(MARK_CLASSES, 0)
    correct = subs = dels = ins = 0
    unknown = (set(reference) | set(predicted)) - {"O", *MARK_CLASSES}
    if unknown:
        raise InputError(f"unknown labels {sorted(unknown)} (expected O, {', '.join(MARK_CLASSES)})")
    for ref, hyp in zip(reference, predicted):
        if ref == hyp:
            if ref != "O":
                tp[ref] += 1
                correct += 1
            continue
        if hyp != "O":
            fp[hyp] += 1
        if ref != "O":
            fn[ref] += 1
        if ref == "O":
            ins += 1
        elif hyp == "O":
            dels += 1
        else:
            subs += 1
    return Counts(tp, fp, fn, correct, subs, dels, ins)


def score(reference: Sequence[str], predicted: Sequence[str]) -> Report:
    """Score predicted labels against reference labels, word by word."""
    n = count(reference, predicted)
    classes = {}
    for c in MARK_CLASSES:
        p, r, f = _prf(n.tp[c], n.fp[c], n.fn[c])
        classes[c] = ClassScore(p, r, f, n.tp[c] + n.fn[c])
    micro = _prf(sum(n.tp.values()), sum(n.fp.values()), sum(n.fn.values()))[2]
    macro = sum(s.f1 for s in classes.values()) / len(classes)
    n_ref = n.correct + n.subs + n.dels
    ser = 100 * (n.subs + n.dels + n.ins) / max(n_ref, 1)  # no reference marks: 100 per insertion
    return Report(classes, micro, macro, ser, len(reference))
