"""Unit tests of streampunct.metrics.score against hand-computed IWSLT scores.

Protocol (punctuator2's error_calculator.py): per word, ref == hyp != O is correct (TP of the class,
C); ref O / hyp mark is an insertion (FP of hyp, I); ref mark / hyp O is a deletion (FN of ref, D);
mark for another mark is a substitution (FP of hyp + FN of ref, S). P/R/F1 in percent; micro-F1
from the summed tp/fp/fn of COMMA, PERIOD, QUESTION; macro-F1 = mean of the three F1s;
SER = 100 * (S + D + I) / (C + S + D).
"""

import pytest

from streampunct.metrics import MARK_CLASSES, Report, score

O, C, P, Q = "O", "COMMA", "PERIOD", "QUESTION"


def test_mark_classes_exclude_o():
    assert MARK_CLASSES == ("COMMA", "PERIOD", "QUESTION")


def test_perfect_prediction_all_classes():
    ref = [O, C, O, P, O, O, Q, C, O, P]
    rep = score(ref, list(ref))
    # every class: fp = fn = 0, tp > 0 -> P = R = F1 = 100
    for cls, support in ((C, 2), (P, 2), (Q, 1)):
        s = rep.classes[cls]
        assert s.precision == pytest.approx(100.0)
        assert s.recall == pytest.approx(100.0)
        assert s.f1 == pytest.approx(100.0)
        assert s.support == support  # tp + fn = number of reference marks of the class
    assert rep.micro_f1 == pytest.approx(100.0)  # tp=5, fp=0, fn=0
    assert rep.macro_f1 == pytest.approx(100.0)  # (100 + 100 + 100) / 3
    assert rep.ser == pytest.approx(0.0)  # S=D=I=0 -> 0 / (5+0+0)
    assert rep.words == 10


# Hand-made 18-word case. Columns: reference / predicted -> kind; counts.
HAND_REF = [
    O,  # 1  O/O                 nothing
    C,  # 2  COMMA/COMMA         C   tp COMMA
    O,  # 3  O/COMMA             I   fp COMMA
    P,  # 4  PERIOD/PERIOD       C   tp PERIOD
    C,  # 5  COMMA/O             D   fn COMMA
    Q,  # 6  QUESTION/QUESTION   C   tp QUESTION
    O,  # 7  O/PERIOD            I   fp PERIOD
    P,  # 8  PERIOD/O            D   fn PERIOD
    C,  # 9  COMMA/PERIOD        S   fp PERIOD, fn COMMA
    Q,  # 10 QUESTION/PERIOD     S   fp PERIOD, fn QUESTION
    P,  # 11 PERIOD/QUESTION     S   fp QUESTION, fn PERIOD
    O,  # 12 O/QUESTION          I   fp QUESTION
    Q,  # 13 QUESTION/O          D   fn QUESTION
    C,  # 14 COMMA/COMMA         C   tp COMMA
    P,  # 15 PERIOD/COMMA        S   fp COMMA, fn PERIOD
    C,  # 16 COMMA/COMMA         C   tp COMMA
    O,  # 17 O/COMMA             I   fp COMMA
    P,  # 18 PERIOD/O            D   fn PERIOD
]
HAND_HYP = [O, C, C, P, O, Q, P, O, P, P, Q, Q, O, C, C, C, C, O]


def test_hand_made_case_per_class():
    rep = score(HAND_REF, HAND_HYP)
    com, per, que = rep.classes[C], rep.classes[P], rep.classes[Q]

    # COMMA: tp = {2,14,16} = 3, fp = {3,15,17} = 3, fn = {5,9} = 2
    # P = 3/6 = 50, R = 3/5 = 60, F1 = 2*3/(2*3+3+2) = 6/11 = 54.5454...
    assert com.precision == pytest.approx(50.0)
    assert com.recall == pytest.approx(60.0)
    assert com.f1 == pytest.approx(100 * 6 / 11)
    assert com.support == 5  # tp + fn = 3 + 2

    # PERIOD: tp = {4} = 1, fp = {7,9,10} = 3, fn = {8,11,15,18} = 4
    # P = 1/4 = 25, R = 1/5 = 20, F1 = 2*1/(2*1+3+4) = 2/9 = 22.222...
    assert per.precision == pytest.approx(25.0)
    assert per.recall == pytest.approx(20.0)
    assert per.f1 == pytest.approx(100 * 2 / 9)
    assert per.support == 5  # 1 + 4

    # QUESTION: tp = {6} = 1, fp = {11,12} = 2, fn = {10,13} = 2
    # P = 1/3, R = 1/3, F1 = 2*1/(2+2+2) = 1/3 = 33.333...
    assert que.precision == pytest.approx(100 / 3)
    assert que.recall == pytest.approx(100 / 3)
    assert que.f1 == pytest.approx(100 / 3)
    assert que.support == 3  # 1 + 2


def test_hand_made_case_summary():
    rep = score(HAND_REF, HAND_HYP)
    # micro: tp = 3+1+1 = 5, fp = 3+3+2 = 8, fn = 2+4+2 = 8
    # P = 5/13, R = 5/13, F1 = 2*5/(2*5+8+8) = 10/26 = 38.4615...
    assert rep.micro_f1 == pytest.approx(100 * 10 / 26)
    # macro: (6/11 + 2/9 + 1/3) / 3 * 100 = (0.545454 + 0.222222 + 0.333333) / 3 * 100 = 36.7003...
    assert rep.macro_f1 == pytest.approx(100 * (6 / 11 + 2 / 9 + 1 / 3) / 3)
    assert rep.macro_f1 == pytest.approx(36.7003367, abs=1e-6)
    # C = {2,4,6,14,16} = 5, S = {9,10,11,15} = 4, D = {5,8,13,18} = 4, I = {3,7,12,17} = 4
    # SER = 100 * (4 + 4 + 4) / (5 + 4 + 4) = 1200 / 13 = 92.3077...
    assert rep.ser == pytest.approx(1200 / 13)
    assert rep.words == 18


def test_class_absent_from_reference_and_prediction_counts_zero_in_macro():
    ref = [O, C, O, P, O, C]
    rep = score(ref, list(ref))
    # QUESTION: tp = fp = fn = 0 -> P = R = F1 = 0 (0/0 is taken as 0), support 0
    q = rep.classes[Q]
    assert (q.precision, q.recall, q.f1, q.support) == (0.0, 0.0, 0.0, 0)
    # COMMA tp=2, PERIOD tp=1, no errors -> F1 100 each
    assert rep.classes[C].f1 == pytest.approx(100.0)
    assert rep.classes[P].f1 == pytest.approx(100.0)
    # micro: tp=3, fp=0, fn=0 -> 100 (the absent class adds nothing)
    assert rep.micro_f1 == pytest.approx(100.0)
    # macro: the absent class still counts, as 0: (100 + 100 + 0) / 3 = 66.666...
    assert rep.macro_f1 == pytest.approx(200 / 3)
    # SER: C=3, S=D=I=0 -> 0
    assert rep.ser == pytest.approx(0.0)


def test_all_o_prediction():
    ref = [C, O, P, Q, O, C, O, O]
    rep = score(ref, [O] * len(ref))
    # every mark is a deletion: fn COMMA=2, PERIOD=1, QUESTION=1; tp = fp = 0 everywhere
    # P = 0/0 -> 0, R = 0/(0+fn) = 0, F1 = 0
    for cls, support in ((C, 2), (P, 1), (Q, 1)):
        s = rep.classes[cls]
        assert (s.precision, s.recall, s.f1) == (0.0, 0.0, 0.0)
        assert s.support == support
    assert rep.micro_f1 == pytest.approx(0.0)  # tp=0, fp=0, fn=4
    assert rep.macro_f1 == pytest.approx(0.0)  # (0+0+0)/3
    # C=0, S=0, D=4, I=0 -> SER = 100 * 4 / (0+0+4) = 100
    assert rep.ser == pytest.approx(100.0)
    assert rep.words == 8


def test_all_o_reference_and_prediction():
    rep = score([O] * 5, [O] * 5)
    # nothing to count: every score 0, SER 0 (no reference marks, no errors)
    assert rep.micro_f1 == 0.0
    assert rep.macro_f1 == 0.0
    assert rep.ser == 0.0
    assert rep.words == 5


def test_only_substitutions():
    ref = [C, P, Q, O]
    hyp = [P, Q, C, O]
    rep = score(ref, hyp)
    # each class: tp=0, fp=1, fn=1 -> P = R = F1 = 0
    for cls in MARK_CLASSES:
        assert rep.classes[cls].f1 == 0.0
    # C=0, S=3, D=0, I=0 -> SER = 100 * 3 / 3 = 100
    assert rep.ser == pytest.approx(100.0)


def test_insertions_can_push_ser_above_100():
    ref = [C, O, O, O]
    hyp = [C, P, Q, C]
    rep = score(ref, hyp)
    # COMMA: tp=1, fp=1 (word 4), fn=0 -> P=50, R=100, F1 = 2*1/(2+1+0) = 66.666...
    assert rep.classes[C].precision == pytest.approx(50.0)
    assert rep.classes[C].recall == pytest.approx(100.0)
    assert rep.classes[C].f1 == pytest.approx(200 / 3)
    # PERIOD, QUESTION: tp=0, fp=1, fn=0 -> P=0, R=0 (0/0), F1=0
    assert rep.classes[P].f1 == 0.0
    assert rep.classes[Q].f1 == 0.0
    # micro: tp=1, fp=3, fn=0 -> 2/(2+3) = 40
    assert rep.micro_f1 == pytest.approx(40.0)
    # C=1, S=0, D=0, I=3 -> SER = 100 * 3 / 1 = 300
    assert rep.ser == pytest.approx(300.0)


def test_to_dict_shape():
    rep = score(HAND_REF, HAND_HYP)
    assert isinstance(rep, Report)
    d = rep.to_dict()
    assert set(d) == {"COMMA", "PERIOD", "QUESTION", "micro_f1", "macro_f1", "ser", "words"}
    for cls in MARK_CLASSES:
        assert set(d[cls]) == {"precision", "recall", "f1"}
        assert d[cls]["precision"] == pytest.approx(rep.classes[cls].precision)
        assert d[cls]["recall"] == pytest.approx(rep.classes[cls].recall)
        assert d[cls]["f1"] == pytest.approx(rep.classes[cls].f1)
    assert d["COMMA"]["f1"] == pytest.approx(100 * 6 / 11)  # values in percent
    assert d["micro_f1"] == pytest.approx(100 * 10 / 26)
    assert d["macro_f1"] == pytest.approx(100 * (6 / 11 + 2 / 9 + 1 / 3) / 3)
    assert d["ser"] == pytest.approx(1200 / 13)
    assert d["words"] == 18


def test_accepts_tuples():
    rep = score((C, O, P), (C, O, P))
    assert rep.micro_f1 == pytest.approx(100.0)


@pytest.mark.parametrize("ref,hyp", [([O, C], [O]), ([O], [O, P]), ([], [C])])
def test_length_mismatch_raises_value_error(ref, hyp):
    with pytest.raises(ValueError):
        score(ref, hyp)


def test_insertions_without_reference_marks_count():
    # C=S=D=0, I=2: SER = 100 * 2 / max(0, 1) = 200
    assert score(["O", "O"], ["COMMA", "PERIOD"]).ser == pytest.approx(200.0)


def test_unknown_label_is_a_clear_error():
    from streampunct import InputError

    with pytest.raises(InputError, match="comma"):
        score(["comma"], ["O"])
