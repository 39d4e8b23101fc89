"""The recogniser's guards and its compute ratio: a pass that loops or runs away is cut and the
buffer restarts past it; the buffer cut where speech ends; recognition seconds per audio second,
and what a client says of it.

The recogniser runs on test_asr_lag's stand-in model (words read off a synthetic signal, on a
simulated clock), made to loop or run away where a test says; the guards' own rule is checked on
generated word sequences.
"""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streampunct import protocol as P
from streampunct.clients.common import Recognition
from streampunct.speech import SAMPLE_RATE, StreamingRecognizer
from streampunct.speech.guards import MAX_PHRASE_WORDS, MAX_REPEATS, MAX_WORDS_PER_S, WORDS_SLACK, loop_cut
from streampunct.speech.recognizer import COMPUTE_WINDOW_S, Pass
from tests.test_asr_lag import BARE, ReadsTheSignal, index, speech


@given(
    before=st.integers(0, 30),
    after=st.integers(0, 30),
    size=st.integers(1, MAX_PHRASE_WORDS),
    copies=st.integers(1, 3 * MAX_REPEATS),
    marked=st.booleans(),
)
def test_a_phrase_said_more_than_max_repeats_times_in_a_row_is_cut_after_the_last_allowed_copy(
    before, after, size, copies, marked
):
    phrase = [f"p{i}" for i in range(size)]
    if marked:  # Whisper's casing and marks do not hide a loop
        phrase = [w.capitalize() if i == 0 else w for i, w in enumerate(phrase)][:-1] + [phrase[-1] + ","]
    words = [f"a{i}" for i in range(before)] + phrase * copies + [f"b{i}" for i in range(after)]
    expected = before + MAX_REPEATS * size if copies > MAX_REPEATS else None
    assert loop_cut(words) == expected


@given(st.lists(st.sampled_from(["yes", "no", "I", "think", "so", "the", "uh"]), max_size=60))
def test_a_cut_leaves_no_loop_before_it(words):
    cut = loop_cut(words)
    kept = words if cut is None else words[:cut]
    assert loop_cut(kept) is None
    if cut is not None:  # the cut is where the first loop passes its bound
        assert loop_cut(words[: cut + 1]) == cut


class LoopsOnce(ReadsTheSignal):
    """As ReadsTheSignal, and the pass whose audio first reaches ``at`` (stream seconds, through
    the buffer's offset) hears "and so" over and over after its words, as tiny.en does over noise."""

    def __init__(self, recognizer_offset, at: float, phrase=("And", "so"), copies=20):
        self.offset, self.at, self.phrase, self.copies, self.looped = (
            recognizer_offset,
            at,
            phrase,
            copies,
            False,
        )

    def transcribe(self, audio, **options):
        segments, info = super().transcribe(audio, **options)
        end = self.offset() + len(audio) / SAMPLE_RATE
        if not self.looped and end >= self.at:
            self.looped = True
            t = len(audio) / SAMPLE_RATE
            loop = [
                SimpleNamespace(word=f" {w}", start=t, end=t, probability=0.5) for w in self.phrase
            ] * self.copies
            segments[0].words.extend(loop)
        return segments, info


def recognizer_with(model_factory, **options) -> StreamingRecognizer:
    rec = StreamingRecognizer(None, BARE, min_chunk_s=0.5, **options)
    rec.model = model_factory(lambda: rec.offset)
    return rec


def run(rec: StreamingRecognizer, seconds: float) -> list:
    out = []
    for step in range(int(seconds * 2)):
        rec.feed(speech(step / 2, step / 2 + 0.5))
        hyp = rec.process()
        out += hyp.committed + ([hyp.pass_] if hyp.pass_ and hyp.pass_.guard else [])
    return out + rec.finish()


def test_a_pass_that_loops_is_cut_committed_up_to_the_bound_and_the_buffer_restarts_past_it():
    rec = recognizer_with(lambda offset: LoopsOnce(offset, at=6.0))
    out = run(rec, 20)
    guard = [x for x in out if isinstance(x, Pass)]
    assert [g.guard for g in guard] == ["loop"] and rec.guarded == {"loop": 1}
    texts = [w.text for w in out if not isinstance(w, Pass)]
    loop_at = texts.index("And")
    assert texts[loop_at : loop_at + 2 * MAX_REPEATS] == ["And", "so"] * MAX_REPEATS
    assert "And" not in texts[loop_at + 2 * MAX_REPEATS :]  # not committed again, not transcribed again
    signal = [index(w) for w in out if not isinstance(w, Pass) and w.text.startswith("w")]
    # every word before the loop once, in order; after it, the words whose audio came after the restart
    assert signal == sorted(set(signal))
    assert signal[:loop_at] == list(range(loop_at))
    assert signal[-1] == 39  # the stream goes on to its end


def test_a_pass_that_runs_away_is_cut_at_the_words_its_audio_can_hold():
    class RunsAway(LoopsOnce):  # forty different words at the end of one pass
        def __init__(self, offset):
            super().__init__(offset, at=3.0, phrase=[f"x{i}" for i in range(40)], copies=1)

    rec = recognizer_with(RunsAway)
    out = run(rec, 10)
    assert rec.guarded == {"runaway": 1}
    guard = next(x for x in out if isinstance(x, Pass))
    words = [w for w in out if not isinstance(w, Pass)]
    runaway = [w for w in words if w.text.startswith("x")]
    most = int(MAX_WORDS_PER_S * guard.buffer_s) + WORDS_SLACK
    signal_in_pass = sum(1 for w in words if w.text.startswith("w") and w.end <= guard.buffer_s + 1e-6)
    assert len(runaway) == most - signal_in_pass
    assert [index(w) for w in words if w.text.startswith("w")][-1] == 19


@pytest.mark.parametrize("cut", [True, False])
def test_at_the_end_of_speech_the_buffer_is_cut_where_the_silence_starts(cut):
    """Speech, 3 s of silence, speech: the end of speech commits every word, and with
    ``cut_at_silence`` the buffer then starts in the silence (end_of_speech_s before the audio
    heard), so the next passes transcribe only what follows; nothing is lost or repeated."""
    rec = StreamingRecognizer(
        ReadsTheSignal(), BARE, min_chunk_s=0.5, end_of_speech_s=0.5, agree_after_s=0.3, cut_at_silence=cut
    )
    audio = np.concatenate([speech(0, 4.0), np.zeros(3 * SAMPLE_RATE, np.float32), speech(4.0, 8.0)])
    words, offsets = [], []
    for i in range(0, len(audio), SAMPLE_RATE // 2):
        rec.feed(audio[i : i + SAMPLE_RATE // 2])
        hyp = rec.process()
        words += hyp.committed
        offsets.append((rec.processed_until, rec.offset, hyp.pass_.end_of_speech))
    words += rec.finish()
    assert [index(w) for w in words] == list(range(16))
    ends = [(heard, offset) for heard, offset, end in offsets if end]
    assert ends  # the pause was heard as the end of speech
    heard, offset = ends[0]
    assert offset == (pytest.approx(heard - 0.5) if cut else 0.0)


def test_the_compute_ratio_is_recognition_seconds_per_audio_second_over_the_latest_window():
    rec = StreamingRecognizer(ReadsTheSignal(), BARE)
    assert rec.compute_ratio is None
    for _ in range(100):  # 50 s of audio at 0.4
        rec._count(Pass(0.2, 10.0, 0.5, False))
    assert rec.compute_ratio == pytest.approx(0.4)
    for _ in range(int(COMPUTE_WINDOW_S / 0.5)):  # a window's worth at 2.0 replaces it
        rec._count(Pass(1.0, 10.0, 0.5, False))
    assert rec.compute_ratio == pytest.approx(2.0)
    rec._count(Pass(0.5, 10.0, 0.0, False))  # a pass on no new audio counts its time
    assert rec.compute_ratio > 2.0


def test_a_client_warns_once_the_compute_ratio_passes_its_bound_and_reports_each_skip():
    out = io.StringIO()
    recognition = Recognition(out=out)
    words = [P.Recognised(0, (), (), r) for r in (None, 0.5, 0.85, 0.95, 0.75, 0.7, 0.81)]
    said = []
    for msg in words:
        recognition.see(msg)
        said.append(out.getvalue().count("\n"))
    # warned at 0.85; not again at 0.95 or at 0.75 (under 0.8, not a tenth under); again after 0.7
    assert said == [0, 0, 1, 1, 1, 1, 2], out.getvalue()
    assert "0.85 s per second" in out.getvalue() and "0.81 s per second" in out.getvalue()
    recognition.see(P.Lag.over(30.0, 39.5, 1.31))
    assert "skipped 9.5 s of audio (30.0 to 39.5 s)" in out.getvalue()
    assert out.getvalue().count("\n") == 3  # the skip; still warned about the ratio


def test_a_file_sent_faster_than_real_time_is_told_when_recognition_cannot_keep_its_speed():
    """Issue 77: `file --speed 4` went at real time and said nothing of why. A pass takes at least
    min_chunk_s of the audio sent ahead, so recognition goes at about 1 / compute ratio times real
    time: said once that is slower than --speed (a ratio of 0.2 keeps up with 5 times)."""
    out = io.StringIO()
    recognition = Recognition(out=out, speed=4)
    for r in (None, 0.2, 0.24, 0.5, 0.6):
        recognition.see(P.Recognised(0, (), (), r))
    assert out.getvalue().count("\n") == 1, out.getvalue()
    assert out.getvalue() == (
        "server: recognition takes 0.50 s per second of this audio, more than the 0.25 that --speed 4 needs: "
        "the captions come as it recognises\n"
    )
