"""Hearing where a sentence ends: one fusion of the text model's decision with what the recogniser
heard at the word's end.

The recogniser heard the whole of a word's end, the pause and what came after as far as its
buffer reaches, and its decoder has a belief about the mark after each word, of which the mark
it wrote is one bit. :class:`SpeechFusion` reads, for a word's last token:

- the text model's decision (its log probabilities at the decision's lookahead) and the pause
  fusion's (:class:`~streampunct.prosody.PauseFusion`: the pauses, the marks the recogniser wrote);
- the pause after the word, as far as the decision may see it;
- the recogniser's mark probabilities (:attr:`Cues.marks <streampunct.types.Cues>`,
  :mod:`streampunct.speech.marks`), with a flag saying whether they are there, and the same
  log probabilities scaled by the text model's confidence (its largest probability), so that a
  slot's linear model can trust the recogniser less where the text model is sure;

and gives the decision's logits by a multinomial logistic model, one per decision slot: nothing
ahead (k=0), one word ahead, two or more (and offline), and a word decided at its time limit. It
is small (88 weights a slot), so that it is fitted on recognised human speech itself
(``streampunct calibrate --speech ... --hearing``, :mod:`streampunct.training.hearing`) rather
than on text given synthetic times. A word without a decoder score has zeros and a flag of 0
there and is decided on the rest (the fit learns that case from copies of its rows without the
scores); a word with no cues at all (words from another recogniser) keeps the pause fusion's
decision. The voice at the word's end (pitch slope and reset, energy, lengthening) was measured
as a third source and did not pay on speech dev (docs/decisions.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .errors import CheckpointError
from .types import Cues

__all__ = ["SpeechFusion", "SLOTS", "slot_of", "inputs", "INPUTS", "MARK_INPUTS"]

SLOTS = ("k=0", "k=1", "k>=2", "time limit")
N_LABELS = 4
MARK_INPUTS = 11  # there, log P of COMMA, PERIOD, QUESTION, a segment's end, going on; those five gated
GATED = 5  # the last MARK_INPUTS: the five log probabilities times the text model's largest probability
INPUTS = 2 * N_LABELS + 2 + MARK_INPUTS
FLOOR = 1e-4  # probabilities under this read as this


def slot_of(ahead: int | None, deadline: bool) -> int:
    """A decision's slot: by the words it sees ahead (None: offline), or decided at its time limit."""
    if deadline:
        return 3
    return 2 if ahead is None else min(ahead, 2)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max()
    return z - math.log(float(np.exp(z).sum()))


def inputs(text: np.ndarray, fused: np.ndarray, pause: Sequence[float] | None, cues: Cues) -> np.ndarray:
    """One decision's inputs: the text model's and the pause fusion's log probabilities (N_LABELS
    each), whether the pause after the word is known and its log-scaled length (the first two of
    ``prosody.pause_features``), and the marks (a flag, then five log probabilities; zeros where
    the word has none), then those five times the text model's largest probability."""
    x = np.zeros(INPUTS, dtype=np.float32)
    x[:N_LABELS] = _log_softmax(text.astype(np.float64))
    x[N_LABELS : 2 * N_LABELS] = _log_softmax(fused.astype(np.float64))
    if pause is not None:
        x[8:10] = pause[:2]
    if cues.marks is not None:  # four probabilities (Cues checks them)
        p = [*cues.marks, 1.0 - sum(cues.marks)]
        x[10] = 1.0
        x[11:16] = [math.log(max(FLOOR, v)) for v in p]
        x[16:] = x[11:16] * math.exp(float(x[:N_LABELS].max()))
    return x


class SpeechFusion:
    """``logits = inputs @ weights[slot] + bias[slot] + offsets[slot]`` (module docstring).
    ``offsets`` are the decision offsets tuned for micro-F1 after the fit. It decides in
    :meth:`streampunct.decision.Decider.decide`, whose decisions keep its inputs (what the fit reads)."""

    def __init__(
        self,
        weights: np.ndarray | None = None,
        bias: np.ndarray | None = None,
        offsets: np.ndarray | None = None,
        report: dict | None = None,
    ):
        self.weights = np.zeros((len(SLOTS), INPUTS, N_LABELS)) if weights is None else weights
        self.bias = np.zeros((len(SLOTS), N_LABELS)) if bias is None else bias
        self.offsets = np.zeros((len(SLOTS), N_LABELS)) if offsets is None else offsets
        self.report = report or {}

    @staticmethod
    def identity(first: int = N_LABELS) -> SpeechFusion:
        """The fusion that gives back the decision whose log probabilities start at input ``first``:
        the pause fusion's (where a fit starts), or the text model's (0)."""
        fusion = SpeechFusion()
        for s in range(len(SLOTS)):
            fusion.weights[s, first : first + N_LABELS] = np.eye(N_LABELS)
        return fusion

    def logits(self, x: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """(N, INPUTS) inputs and (N,) slots -> (N, N_LABELS) logits, offsets included."""
        return np.einsum("ni,nil->nl", x, self.weights[slots]) + self.bias[slots] + self.offsets[slots]

    # --- a checkpoint's hearing.json ----------------------------------------------------------

    def save(self, path: str | Path) -> None:
        data = {
            "slots": list(SLOTS),
            "inputs": INPUTS,
            "weights": np.round(self.weights, 6).tolist(),
            "bias": np.round(self.bias, 6).tolist(),
            "offsets": np.round(self.offsets, 6).tolist(),
            "report": self.report,
        }
        Path(path).write_text(json.dumps(data, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> SpeechFusion:
        try:
            data = json.loads(Path(path).read_text())
            fusion = cls(
                np.array(data["weights"], dtype=np.float64),
                np.array(data["bias"], dtype=np.float64),
                np.array(data["offsets"], dtype=np.float64),
                data.get("report"),
            )
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"cannot read {path}: {e}") from e
        if fusion.weights.ndim == 3 and fusion.weights.shape[1] == INPUTS - GATED:  # fitted without them
            fusion.weights = np.concatenate([fusion.weights, np.zeros((len(SLOTS), GATED, N_LABELS))], 1)
        shape = (len(SLOTS), INPUTS, N_LABELS)
        if (
            fusion.weights.shape != shape
            or fusion.bias.shape != shape[::2]
            or fusion.offsets.shape != shape[::2]
        ):
            raise CheckpointError(f"{path}: weights of shape {fusion.weights.shape}, not {shape}")
        return fusion
