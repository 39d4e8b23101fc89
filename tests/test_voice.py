"""The voice at a word's end (streampunct.speech.voice) on synthetic speech: tones, glides, a reset,
a fade, silence and noise, on a buffer that starts anywhere on the stream's clock."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streampunct.speech.voice import VOICE_FEATURES, Voice, pitch
from streampunct.types import SAMPLE_RATE, Word

VOICED, SLOPE, LEVEL, RESET_KNOWN, RESET, DROP, LENGTHENING = range(VOICE_FEATURES)


def tone(f0: float | tuple[float, float], seconds: float, harmonics: int = 1, amp: float = 0.3) -> np.ndarray:
    """A tone of ``f0`` Hz, or a glide from ``f0[0]`` to ``f0[1]``, with ``harmonics`` partials."""
    n = round(seconds * SAMPLE_RATE)
    lo, hi = (f0, f0) if isinstance(f0, float | int) else f0
    phase = 2 * np.pi * np.cumsum(np.geomspace(lo, hi, n)) / SAMPLE_RATE
    x = sum(np.sin(k * phase + k) / k for k in range(1, harmonics + 1))
    return (amp * x / np.max(np.abs(x))).astype(np.float32)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(round(seconds * SAMPLE_RATE), dtype=np.float32)


def noise(seconds: float, amp: float = 0.1, seed: int = 0) -> np.ndarray:
    return (amp * np.random.default_rng(seed).standard_normal(round(seconds * SAMPLE_RATE))).astype(
        np.float32
    )


def features(*parts: np.ndarray, word: tuple[float, float] = (0.2, 0.7), after=None, offset=0.0, voice=None):
    """The features of ``word`` (times from the audio's start) in the audio ``parts``, with the
    buffer placed at ``offset`` on the stream's clock."""
    audio = np.concatenate(parts)
    nxt = Word("b", after[0] + offset, after[1] + offset) if after else None
    out = (voice or Voice()).at_word_end(audio, offset, Word("a", word[0] + offset, word[1] + offset), nxt)
    assert out is not None and len(out) == VOICE_FEATURES
    assert all(math.isfinite(v) and -5 <= v <= 5 for v in out)
    return out


@pytest.mark.parametrize("f0", [150.0, 220.0, 80.0, 380.0])
@pytest.mark.parametrize("harmonics", [1, 6])
def test_yin_recovers_a_tone_within_2_percent(f0, harmonics):
    found = pitch(tone(f0, 0.3, harmonics))
    assert len(found) == 28 and np.all(np.abs(found / f0 - 1) < 0.02)


def test_a_hard_clipped_tone_is_still_voiced_at_its_pitch():
    clipped = np.clip(tone(150.0, 0.5, amp=1.0) * 8, -0.5, 0.5)
    assert np.all(np.abs(pitch(clipped) / 150 - 1) < 0.02)
    out = features(silence(0.2), clipped, silence(0.3))
    assert out[VOICED] == 1 and abs(out[SLOPE]) < 0.05 and out[LENGTHENING] == 1


def test_silence_and_noise_are_unvoiced():
    assert not pitch(silence(0.3)).any() and not pitch(noise(0.3)).any()
    assert not pitch(tone(150.0, 0.3, amp=1e-3)).any()  # -63 dBFS: under the gate
    for audio in (silence(1.0), noise(1.0)):
        out = features(audio, after=(0.8, 1.0))
        assert out[VOICED] == out[SLOPE] == out[LEVEL] == out[RESET_KNOWN] == out[RESET] == 0
        assert out[LENGTHENING] == 0
    assert features(silence(1.0))[DROP] == 0  # digital silence
    assert abs(features(noise(1.0))[DROP]) < 0.1  # steady noise: no fade


@pytest.mark.parametrize("glide,sign", [((200.0, 120.0), -1), ((120.0, 200.0), 1)])
def test_a_falling_glide_has_a_negative_slope_and_a_rising_one_a_positive(glide, sign):
    out = features(silence(0.2), tone(glide, 0.5, harmonics=3), silence(0.3))
    # 8.8 semitones over 0.5 s: 1.8 a 100 ms
    assert out[VOICED] == 1 and 1.5 < sign * out[SLOPE] < 2.1
    flat = features(silence(0.2), tone(150.0, 0.5, harmonics=3), silence(0.3))
    assert abs(flat[SLOPE]) < 0.05


@pytest.mark.parametrize("offset", [0.0, 37.25])
def test_a_next_word_that_starts_higher_is_a_positive_reset(offset):
    audio = (silence(0.2), tone(150.0, 0.5, 3), silence(0.2), tone(200.0, 0.4, 3), silence(0.2))
    out = features(*audio, after=(0.9, 1.3), offset=offset)
    assert out[RESET_KNOWN] == 1 and out[RESET] == pytest.approx(12 * math.log2(200 / 150) / 6, abs=0.02)
    lower = (silence(0.2), tone(200.0, 0.5, 3), silence(0.2), tone(150.0, 0.4, 3), silence(0.2))
    assert features(*lower, after=(0.9, 1.3), offset=offset)[RESET] < -0.8


def test_the_reset_is_unknown_without_a_voiced_next_word_in_the_audio():
    audio = (silence(0.2), tone(150.0, 0.5, 3), silence(0.2), tone(200.0, 0.4, 3))
    for after in (None, (1.2, 1.5), (-0.4, -0.1), (0.7, 0.9)):  # none, past the audio, before it, silent
        out = features(*audio, after=after)
        assert out[VOICED] == 1 and out[RESET_KNOWN] == out[RESET] == 0
    unvoiced = features(silence(0.2), noise(0.5), tone(200.0, 0.5, 3), after=(0.7, 1.2))
    assert unvoiced[VOICED] == unvoiced[RESET_KNOWN] == unvoiced[RESET] == 0
    no_times = Voice().at_word_end(np.concatenate(audio), 0.0, Word("a", 0.2, 0.7), Word("b"))
    assert no_times is not None and no_times[RESET_KNOWN] == 0


def test_the_end_is_read_against_the_speakers_running_level():
    voice = Voice()
    first = features(silence(0.2), tone(150.0, 0.5, 3), voice=voice)
    assert first[VOICED] == 1 and first[LEVEL] == 0  # no history yet
    for f0 in (140.0, 160.0, 150.0):
        features(silence(0.2), tone(f0, 0.5, 3), voice=voice)
    assert features(silence(0.2), tone(300.0, 0.5, 3), voice=voice)[LEVEL] == pytest.approx(2.0, abs=0.02)
    assert features(silence(0.2), tone(75.0, 0.5, 3), voice=voice)[LEVEL] == pytest.approx(-2.0, abs=0.02)
    features(silence(1.0), voice=voice)  # an unvoiced word leaves the level as it was
    assert features(silence(0.2), tone(150.0, 0.5, 3), voice=voice)[LEVEL] == pytest.approx(0.0, abs=0.02)


def test_a_fading_end_is_an_energy_drop_voiced_or_not():
    fade = np.concatenate([np.ones(6400), np.geomspace(1, 0.1, 1600)]).astype(np.float32)
    for word in (tone(150.0, 0.5, 3), noise(0.5)):
        out = features(silence(0.2), word * fade, silence(0.3))
        assert -2.0 < out[DROP] < -0.5  # the last 100 ms are 10 to 20 dB under the word
        assert abs(features(silence(0.2), word, silence(0.3))[DROP]) < 0.05
    cut = features(silence(0.2), tone(150.0, 0.4, 3), silence(0.4), word=(0.2, 0.7))
    assert cut[DROP] == -5  # a silent last 100 ms: the floor, clipped


def test_lengthening_is_the_last_voiced_stretch_of_the_last_200_ms():
    drawn = features(silence(0.2), tone(150.0, 0.5, 3), silence(0.3))
    assert drawn[LENGTHENING] == 1
    consonant = features(silence(0.2), tone(150.0, 0.4, 3), noise(0.1), silence(0.3))
    assert consonant[VOICED] == 1 and consonant[LENGTHENING] == pytest.approx(0.5, abs=0.1)  # 100 ms of 200
    short = features(silence(0.2), tone(150.0, 0.1, 3), silence(0.3), word=(0.2, 0.3))
    assert short[VOICED] == 1 and short[LENGTHENING] == pytest.approx(0.5)  # a 100 ms word, all voiced


@pytest.mark.parametrize(
    "word",
    [
        Word("a"),
        Word("a", 0.2),
        Word("a", None, 0.7),
        Word("a", 0.2, 1.01),
        Word("a", -0.5, -0.1),
        Word("a", -0.1, 0.1),
    ],
)
def test_a_word_without_times_or_whose_end_is_not_in_the_audio_is_none(word):
    audio = tone(150.0, 1.0, 3)
    assert Voice().at_word_end(audio, 0.0, word, None) is None
    shifted = Word(word.text, *(None if t is None else t + 5.0 for t in (word.start, word.end)))
    assert Voice().at_word_end(audio, 5.0, shifted, None) is None


def test_a_word_of_no_duration_or_longer_than_its_200_ms_in_the_audio_has_features():
    audio = tone(150.0, 1.0, 3)
    assert Voice().at_word_end(audio, 0.0, Word("a", 0.5, 0.5), None) == (0.0,) * VOICE_FEATURES
    assert Voice().at_word_end(audio, 10.0, Word("a", 9.0, 10.3), None) is not None  # began before the buffer


@given(
    seed=st.integers(0, 2**32 - 1),
    seconds=st.floats(0.0, 3.0),
    offset=st.floats(-100.0, 100.0),
    start=st.floats(-0.5, 3.5),
    length=st.floats(0.0, 1.5),
    gap=st.one_of(st.none(), st.floats(-0.3, 1.0)),
    kind=st.sampled_from(["noise", "tone", "loud", "mixed"]),
)
def test_every_feature_is_finite_and_bounded(seed, seconds, offset, start, length, gap, kind):
    rng = np.random.default_rng(seed)
    n = round(seconds * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    audio = {
        "noise": rng.standard_normal(n) * rng.choice([0.0, 1e-4, 0.1]),
        "tone": np.sin(2 * np.pi * np.cumsum(np.geomspace(*rng.uniform(70, 350, 2), n)) / SAMPLE_RATE),
        "loud": np.clip(rng.standard_normal(n) * 100, -1e3, 1e3),
        # a tone in 50 ms bursts (on or off at random), over noise
        "mixed": np.sin(2 * np.pi * rng.uniform(50, 500) * t)
        * np.repeat(rng.random(n // 800 + 1) > 0.4, 800)[:n]
        + rng.standard_normal(n) * 0.01,
    }[kind].astype(np.float32)
    voice = Voice()
    after = (
        None if gap is None else Word("b", offset + start + length + gap, offset + start + length + gap + 0.3)
    )
    for _ in range(2):  # the second with a running level
        out = voice.at_word_end(audio, offset, Word("a", offset + start, offset + start + length), after)
        if out is not None:
            assert len(out) == VOICE_FEATURES and all(math.isfinite(v) and -5 <= v <= 5 for v in out)


def test_a_word_costs_well_under_a_millisecond():
    rng = np.random.default_rng(0)
    parts, words, clock = [], [], 0.0
    while clock < 10.0:
        dur, gap = rng.uniform(0.15, 0.6), rng.uniform(0.0, 0.2)
        parts += [tone((rng.uniform(100, 250), rng.uniform(100, 250)), dur, 4), noise(gap, 0.01)]
        words.append(Word("w", clock, clock + dur))
        clock += dur + gap
    audio, voice = np.concatenate(parts), Voice()
    calls = [(words[i % len(words)], words[(i + 1) % len(words)]) for i in range(200)]
    began = time.perf_counter()
    for word, after in calls:
        assert voice.at_word_end(audio, 0.0, word, after) is not None
    assert time.perf_counter() - began < 0.5
