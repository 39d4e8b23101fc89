"""The voice at a word's end: pitch, its fall or rise, a reset, a fade and a drawn-out last syllable.

Speakers mark boundaries with their voice as much as with pauses: the pitch falls to the end of a
statement and rises on many questions, the next sentence starts higher than the last one ended (a
reset), the voice fades, and the last syllable is drawn out. Text and word times miss all of this;
:class:`Voice` reads it from the 16 kHz mono audio the recogniser holds, as a few numbers of fixed
scale per word (the pause features' companions, :mod:`streampunct.prosody`).

Pitch is YIN (de Cheveigné & Kawahara 2002) on 25 ms frames every 10 ms, 60 to 400 Hz, computed
only where a word needs it: its last 200 ms and the next word's first 150 ms, at most 31 frames in
one batch of FFTs. Cost: 0.50 to 0.58 ms a word (a voiced word and its voiced successor, 2,000
calls, best of 7) on one core of a 2-core AMD EPYC VM, measured while other jobs kept both cores
busy; the brief's 2-core Intel Xeon was not at hand. The budget is 1 ms; the FFTs take about half.

The features (:meth:`Voice.at_word_end`), by index, each finite and within [-5, 5] (clipped), a part
that cannot be measured being zeros with its flag 0:

0. voiced: 1 when the word's last 200 ms hold at least 4 voiced frames, else 0.
1. slope: the F0 line's slope over those frames (least squares), semitones per 100 ms.
2. level: F0 at the word's end (the median over its last 150 ms) above the speaker's running level
   (the median of the last 50 voiced words' F0, each word's the median over its last 200 ms; 0
   while there is none), semitones / 6.
3. reset known: 1 when the next word is given, its first 150 ms lie in the audio and are voiced
   (3 frames or more), and the word is voiced.
4. reset: F0 at the next word's start (the median over its first 150 ms) minus F0 at this word's
   end, semitones / 6.
5. energy drop: the log-RMS energy of the word's last 100 ms minus the whole word's, dB / 10
   (voiced or not; 0 for digital silence).
6. lengthening: how long the word's last voiced stretch lasts within its last 200 ms, as a fraction
   of 200 ms (0 to 1): a drawn-out final vowel fills the window, a clipped one or a word that ends
   in a voiceless consonant does not. Beside the word's duration (a pause feature) it tells a long
   word from a long ending.

A word shorter than 200 ms (or 150 ms, 100 ms) is read whole: no stretch reaches past its start;
the energy of a word that began before the buffer is that of the part inside it.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from ..types import SAMPLE_RATE, Word

__all__ = ["VOICE_FEATURES", "Voice", "pitch"]

VOICE_FEATURES = 7

FRAME = SAMPLE_RATE * 25 // 1000  # 25 ms
HOP = SAMPLE_RATE // 100  # 10 ms
TAU_MIN = SAMPLE_RATE // 400  # the period of 400 Hz, in samples
TAU_MAX = -(-SAMPLE_RATE // 60)  # 60 Hz
NFFT = 720  # >= FRAME + TAU_MAX + 1: the autocorrelation without wrapping round (and a fast size)
THRESHOLD = 0.15  # YIN's absolute threshold on the cumulative mean normalised difference
GATE = 10 ** (-55 / 20)  # a frame quieter than -55 dBFS (RMS) is unvoiced

TAIL = 0.2  # s: the word's end, for voicing, slope and lengthening
END = 0.15  # s: F0 at the word's end
HEAD = 0.15  # s: F0 at the next word's start
LAST = 0.1  # s: the energy of the word's end
END_FRAMES = (round(END * SAMPLE_RATE) - FRAME) // HOP + 1  # the frames inside the word's last 150 ms
MIN_VOICED = 4  # frames in TAIL
MIN_VOICED_HEAD = 3  # frames in HEAD
OCTAVE = 7.0  # semitones: a frame this far from its stretch's median is an octave error, dropped
HISTORY = 50  # words in the running level
LIMIT = 5.0
SOUNDING = 25.0  # dB under a word's loudest 10 ms: where its sound has ended
FLOOR = 1e-5  # RMS: -100 dBFS, so that a silent end's drop is finite


def _frames(x: np.ndarray, at_end: bool) -> np.ndarray:
    """25 ms frames every 10 ms, flush with the end of ``x`` (or its start): (n, FRAME)."""
    n = (len(x) - FRAME) // HOP + 1
    if n <= 0:
        return np.zeros((0, FRAME))
    span = FRAME + (n - 1) * HOP
    x = x[len(x) - span :] if at_end else x[:span]
    return np.lib.stride_tricks.as_strided(x, (n, FRAME), (HOP * x.strides[0], x.strides[0]), writeable=False)


def _yin(frames: np.ndarray) -> np.ndarray:
    """F0 (Hz) of each row of ``frames``, 0 where unvoiced: YIN's steps 2 to 5."""
    x = frames - frames.mean(axis=1, keepdims=True)
    power = x * x
    f0 = np.zeros(len(x))
    loud = np.sqrt(power.mean(axis=1)) >= GATE
    if not loud.all():
        x, power = x[loud], power[loud]
    n = len(x)
    if n == 0:
        return f0
    spec = np.fft.rfft(x, NFFT)
    corr = np.fft.irfft(spec.real**2 + spec.imag**2, NFFT)[:, : TAU_MAX + 2]
    energy = np.zeros((n, FRAME + 1))
    np.cumsum(power, axis=1, out=energy[:, 1:])
    lags = np.arange(TAU_MAX + 2)
    # The difference function within the frame, over the FRAME - tau samples that overlap, as a mean
    # per sample so that long lags are not favoured for having fewer terms.
    diff = energy[:, FRAME - lags] + energy[:, -1:] - energy[:, lags] - 2 * corr
    diff = np.maximum(diff, 0.0) / (FRAME - lags)
    cmnd = np.ones_like(diff)
    cmnd[:, 1:] = diff[:, 1:] * lags[1:] / np.maximum(np.cumsum(diff[:, 1:], axis=1), 1e-20)

    search = cmnd[:, TAU_MIN : TAU_MAX + 1]
    below = search < THRESHOLD
    first = below.argmax(axis=1)
    # From the first lag under the threshold, on down to the bottom of its dip.
    no_lower = (search[:, 1:] >= search[:, :-1]) & (np.arange(search.shape[1] - 1) >= first[:, None])
    bottom = np.where(no_lower.any(axis=1), no_lower.argmax(axis=1), search.shape[1] - 1)
    tau = bottom + TAU_MIN
    rows = np.arange(n)
    a, b, c = cmnd[rows, tau - 1], cmnd[rows, tau], cmnd[rows, tau + 1]
    curve = a - 2 * b + c
    shift = np.where(curve > 0, 0.5 * (a - c) / np.where(curve > 0, curve, 1.0), 0.0)
    f0[loud] = np.where(below.any(axis=1), SAMPLE_RATE / (tau + np.clip(shift, -1.0, 1.0)), 0.0)
    return f0


def pitch(x: np.ndarray, at_end: bool = False) -> np.ndarray:
    """F0 (Hz) of 16 kHz audio ``x``, a 25 ms frame every 10 ms (flush with its start, or its end),
    0 where a frame is unvoiced or silent."""
    return _yin(_frames(np.asarray(x, dtype=np.float64), at_end))


def _median(x: np.ndarray) -> float:
    """np.median without its overhead (a tenth of the cost on the few values here)."""
    s = np.sort(x)
    return 0.5 * float(s[(len(s) - 1) // 2] + s[len(s) // 2])


def _semitones(f0: np.ndarray) -> np.ndarray:
    return 12.0 * np.log2(f0 / 100.0)


def _kept(f0: np.ndarray) -> np.ndarray:
    """Which frames count as voiced: voiced, and not an octave away from the stretch's median."""
    voiced = f0 > 0
    if not voiced.any():
        return voiced
    st = _semitones(np.where(voiced, f0, 100.0))
    return voiced & (np.abs(st - _median(st[voiced])) <= OCTAVE)


def _slope(st: np.ndarray, at: np.ndarray) -> float:
    """The least-squares slope of semitones ``st`` over times ``at`` (s), semitones per 100 ms."""
    t = at - at.mean()
    return 0.1 * float(np.dot(t, st - st.mean()) / np.dot(t, t))


def _last_stretch(kept: np.ndarray, length: int) -> int:
    """The length (samples) of the last run of voiced frames among end-flush frames ``kept`` of a
    stretch of ``length`` samples: from its first frame's start (the stretch's, where the run starts
    at the first frame) to its last frame's end."""
    n = len(kept)
    where = np.flatnonzero(kept)
    if len(where) == 0:
        return 0
    last = int(where[-1])
    gaps = np.flatnonzero(~kept[:last])
    first = int(gaps[-1]) + 1 if len(gaps) else 0
    start = 0 if first == 0 else length - FRAME - HOP * (n - 1 - first)
    return length - HOP * (n - 1 - last) - start


def _sounding(x: np.ndarray) -> int:
    """Where the sound of ``x`` (a word's audio) ends: the end of its last 10 ms within SOUNDING dB
    of its loudest (a recogniser's word end is often a few hundred ms late, in the silence after
    the word); all of ``x`` when it is shorter than 10 ms or silent."""
    n = len(x) // HOP
    if n == 0:
        return len(x)
    energy = np.square(np.asarray(x[: n * HOP], dtype=np.float64)).reshape(n, HOP).mean(axis=1)
    peak = float(energy.max())
    if peak <= 0.0:
        return len(x)
    return HOP * (int(np.flatnonzero(energy >= peak * 10 ** (-SOUNDING / 10))[-1]) + 1)


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64)))) if len(x) else 0.0


class Voice:
    """One stream's voice: the speaker's running pitch level, and the prosody at each word's end."""

    def __init__(self) -> None:
        self._levels: deque[float] = deque(maxlen=HISTORY)

    def at_word_end(
        self, audio: np.ndarray, offset: float, word: Word, after: Word | None
    ) -> tuple[float, ...] | None:
        """audio: the samples the recogniser holds, whose first sample is at stream time `offset` (s);
        word: a word with times on that clock; after: the next word if the recogniser has heard it (else None).
        None when `word` has no times or its last 200 ms are not inside `audio` (a lost chunk, a trimmed buffer).

        The features are the module's list, VOICE_FEATURES of them. A voiced word moves the running
        level after its own features are taken: call once per word, in order."""
        if word.start is None or word.end is None:
            return None
        start, end = _index(word.start, offset), _index(word.end, offset)
        if max(start, end - round(TAIL * SAMPLE_RATE)) < 0 or end > len(audio):
            return None
        drop = _drop(audio[max(start, 0) : end])
        end = max(start, 0) + _sounding(audio[max(start, 0) : end])  # a recogniser's end is often late
        tail = max(start, end - round(TAIL * SAMPLE_RATE), 0)
        head = _head(audio, offset, after)
        x_tail = np.asarray(audio[tail:end], dtype=np.float64)
        f_tail = _frames(x_tail, at_end=True)
        f_head = _frames(head, at_end=False) if head is not None else np.zeros((0, FRAME))
        f0 = _yin(np.concatenate([f_tail, f_head]) if len(f_head) else f_tail)
        f0_tail, f0_head = f0[: len(f_tail)], f0[len(f_tail) :]

        kept = _kept(f0_tail)
        if kept.sum() < MIN_VOICED:
            return _finite(0.0, 0.0, 0.0, 0.0, 0.0, drop, 0.0)
        n = len(f0_tail)
        centres = (end - FRAME / 2 - HOP * (n - 1 - np.arange(n))) / SAMPLE_RATE
        st = _semitones(f0_tail[kept])
        at_end = kept & (np.arange(n) >= n - END_FRAMES)
        end_st = _median(_semitones(f0_tail[at_end]) if at_end.any() else st)
        level = (end_st - _median(np.array(self._levels))) / 6.0 if self._levels else 0.0
        kept_head = _kept(f0_head)
        known = kept_head.sum() >= MIN_VOICED_HEAD
        reset = (_median(_semitones(f0_head[kept_head])) - end_st) / 6.0 if known else 0.0
        stretch = _last_stretch(kept, len(x_tail)) / (TAIL * SAMPLE_RATE)
        self._levels.append(_median(st))
        return _finite(1.0, _slope(st, centres[kept]), level, float(known), reset, drop, stretch)


def _index(t: float, offset: float) -> int:
    return round((t - offset) * SAMPLE_RATE)


def _head(audio: np.ndarray, offset: float, after: Word | None) -> np.ndarray | None:
    """The next word's first 150 ms, when it has times and they lie in ``audio``."""
    if after is None or after.start is None or after.end is None:
        return None
    start = _index(after.start, offset)
    end = _index(min(after.start + HEAD, after.end), offset)
    if start < 0 or end > len(audio):
        return None
    return np.asarray(audio[start:end], dtype=np.float64)


def _drop(word: np.ndarray) -> float:
    """The log-RMS energy of the word's last 100 ms minus the whole word's, dB / 10."""
    whole = _rms(word)
    if whole == 0.0:
        return 0.0
    last = _rms(word[-round(LAST * SAMPLE_RATE) :])
    return 2.0 * float(np.log10(max(last, FLOOR) / max(whole, FLOOR)))


def _finite(*features: float) -> tuple[float, ...]:
    """The features, each finite (0 for a NaN that odd audio could make) and within +-LIMIT."""
    return tuple(min(max(f, -LIMIT), LIMIT) if math.isfinite(f) else 0.0 for f in features)
