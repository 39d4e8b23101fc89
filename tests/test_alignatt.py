"""AlignAtt, the single-pass commit policy: Whisper's decoder in PyTorch from the CTranslate2
weights (the same logits as CTranslate2's), SimulStreaming's attended-frame rule, which words a
pass commits, and the recogniser streaming real speech with it (espeak-ng, Whisper tiny.en): every
word committed once, in order, never revised, and the decoder's prefix always the buffer's
committed words."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from streampunct.clients.file import load_audio
from streampunct.errors import StreamPunctError
from streampunct.options import RecognizerOptions
from streampunct.speech import SAMPLE_RATE, StreamingRecognizer, load_whisper, resolve_asr_model
from streampunct.speech.agreement import word_key
from streampunct.speech.alignatt import AlignAtt, _draft, attended_frames
from streampunct.speech.decoder import WhisperDecoder

SPEECH = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
TEXT = (
    "Good morning, and welcome back. Did you sleep well last night? I think the weather will "
    "change soon, so bring a coat. The train leaves at nine, and we should not be late."
)


@pytest.fixture(scope="module")
def whisper():
    return load_whisper("tiny.en", "cpu")


@pytest.fixture(scope="module")
def speech(tmp_path_factory) -> np.ndarray:
    """The text read by espeak-ng, a second of silence after each sentence."""
    wav = tmp_path_factory.mktemp("speech") / "speech.wav"
    parts = []
    for sentence in TEXT.replace("? ", ". ").split(". "):
        subprocess.run(["espeak-ng", "-v", "en-us", "-s", "160", "-w", str(wav), sentence], check=True)
        parts += [load_audio(str(wav)), np.zeros(SAMPLE_RATE, np.float32)]
    return np.concatenate(parts)


@SPEECH
def test_the_pytorch_decoder_gives_ctranslate2s_logits(whisper, speech):
    from faster_whisper import WhisperModel
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.tokenizer import Tokenizer

    path = resolve_asr_model("tiny.en")
    exact = WhisperModel(path, device="cpu", compute_type="float32")  # the weights as they are stored
    tokenizer = Tokenizer(exact.hf_tokenizer, False, task="transcribe", language="en")
    encoded = exact.encode(pad_or_trim(exact.feature_extractor(speech[: 12 * SAMPLE_RATE])))
    start = tokenizer.sot_sequence + [tokenizer.no_timestamps]
    result = exact.model.generate(encoded, [start], beam_size=1, return_logits_vocab=True)[0]
    written = result.sequences_ids[0]
    assert len(written) > 10
    logits, attention = WhisperDecoder.load(path)(
        torch.tensor([start + written]), torch.from_numpy(np.asarray(encoded))
    )
    ours = logits[0, len(start) - 1 : -1]
    theirs = torch.from_numpy(np.stack([np.asarray(step) for step in result.logits[0]]))
    theirs = theirs.reshape(-1, ours.shape[-1])[: len(written)]
    kept = theirs.abs() < 1e30  # CTranslate2 writes -max for the tokens it suppresses
    assert (ours[kept] - theirs[kept]).abs().max() < 1e-3
    assert ours.argmax(-1).tolist() == written
    heads = len(WhisperDecoder.load(path).alignment_heads)
    assert attention.shape == (1, heads, len(start) + len(written), encoded.shape[1])
    assert torch.allclose(attention.sum(-1), torch.ones(()), atol=1e-4)  # each row a distribution


def stepwise_frames(attention: torch.Tensor, frames: int, first: int) -> list[int]:
    """SimulStreaming's rule as it runs, a token at a time: the rows so far standardised per
    frame, each row median-filtered (whisper.timing: reflect padding), the heads averaged, the
    last row's argmax."""
    out = []
    for i in range(first, attention.shape[1]):
        rows = attention[:, : i + 1]
        std, mean = torch.std_mean(rows, dim=-2, keepdim=True, unbiased=False)
        last = ((rows - mean) / std)[:, -1]
        padded = torch.nn.functional.pad(last[None], (3, 3), mode="reflect")[0]
        filtered = padded.unfold(-1, 7, 1).sort(-1).values[..., 3].mean(0)
        out.append(int(filtered[:frames].argmax()))
    return out


@given(
    seed=st.integers(0, 2**31), heads=st.integers(1, 6), tokens=st.integers(3, 30), frames=st.integers(8, 80)
)
def test_the_attended_frames_are_simulstreamings_rule_run_a_token_at_a_time(seed, heads, tokens, frames):
    attention = torch.rand(heads, tokens, frames + 20, generator=torch.Generator().manual_seed(seed)).double()
    assert attended_frames(attention, frames)[2:].tolist() == stepwise_frames(attention, frames, 2)


def aligned(*words: tuple[str, int]) -> list[dict]:
    """faster-whisper's alignment of a pass: (text, number of tokens) a word, a second each."""
    out, token = [], 0
    for i, (text, n) in enumerate(words):
        out.append(
            dict(
                word=text, tokens=list(range(token, token + n)), start=float(i), end=i + 1.0, probability=0.9
            )
        )
        token += n
    return out


def test_a_pass_commits_the_words_before_the_token_read_at_the_end_and_never_one_it_cuts():
    pass_ = (" We", 1), (" left", 1), (" at", 1), (" nine", 2), (".", 1), (" Then", 1)
    # the prefix is "We" (1 token); the token read at the end is the 5th (" nine"'s second)
    draft = _draft(aligned(*pass_), offset=10.0, prefix=1, cut=4, ended=False)
    assert [w.text for w in draft.words] == ["left", "at", "nine.", "Then"]
    assert draft.ready == 2  # "left" and "at"; "nine." holds the token read at the end
    assert draft.words[0].start == 11.0 and draft.tokens[2] == [3, 4, 5]  # the mark joins its word
    # the mark read at the end: the word before it waits with it
    assert _draft(aligned(*pass_), 0.0, prefix=1, cut=5, ended=False).ready == 2
    assert _draft(aligned(*pass_), 0.0, prefix=1, cut=6, ended=False).ready == 3
    # the pass ended before the end of the audio: all but its last word
    assert _draft(aligned(*pass_), 0.0, prefix=1, cut=7, ended=True).ready == 3


def test_the_commit_option_is_checked():
    with pytest.raises(StreamPunctError, match="commit must be one of"):
        RecognizerOptions(commit="majority")  # type: ignore[arg-type]
    with pytest.raises(StreamPunctError, match="transcribes English"):
        RecognizerOptions(commit="alignatt", language="de")
    with pytest.raises(StreamPunctError, match="frame_threshold_s"):
        RecognizerOptions(commit="alignatt", frame_threshold_s=-1)
    assert isinstance(StreamingRecognizer(object(), commit="alignatt").policy, AlignAtt)


@SPEECH
@pytest.mark.parametrize("prompt", [False, True])
def test_alignatt_streams_every_word_once_in_order_with_its_prefix_the_buffers_commits(
    whisper, speech, prompt
):
    """With ``prompt`` each pass also reads the text committed before its buffer (cut at each
    sentence's silence) as Whisper's previous text."""
    recognizer = StreamingRecognizer(whisper, commit="alignatt", prompt=prompt)
    committed, revisions = [], 0
    for i in range(0, len(speech), SAMPLE_RATE // 4):
        recognizer.feed(speech[i : i + SAMPLE_RATE // 4])
        if recognizer.ready():
            hypothesis = recognizer.process()
            committed += hypothesis.committed
            policy = recognizer.policy
            assert isinstance(policy, AlignAtt)
            assert len(policy.tokens) == len(policy.committed)  # the decoder's prefix: these words
            assert all((w.end or 0) > recognizer.offset for w in policy.committed)
            revisions += bool(hypothesis.committed and hypothesis.provisional)
    committed += recognizer.finish()
    assert recognizer.history  # words left the buffer: the passes after read them as the prompt (when on)
    said = [word_key(w) for w in TEXT.split()]
    heard = [word_key(w.text) for w in committed]
    distance = _edit_distance(said, heard)
    assert distance / len(said) <= 0.2, " ".join(heard)
    starts = [w.start for w in committed]
    assert starts == sorted(starts) and starts[-1] < len(speech) / SAMPLE_RATE
    assert sum(1 for w in committed if w.text.endswith((".", "?"))) >= 3  # Whisper's marks travel
    assert revisions > 0  # words were committed while others still waited


def _edit_distance(a: list[str], b: list[str]) -> int:
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
    return row[-1]


def test_a_server_set_to_alignatt_has_the_decoder_ready_with_the_model():
    """The decoder is read from the weights when the server loads Whisper, not in a live pass."""
    import asyncio

    from streampunct.server.host import Recognition

    recognition = Recognition(device="cpu", options=RecognizerOptions(commit="alignatt"))
    try:
        model = asyncio.run(recognition.model())
    finally:
        recognition.stop()
    decoder, tokenizer, suppressed = model._streampunct_alignatt
    assert isinstance(decoder, WhisperDecoder) and tokenizer.eot > 50000
    assert tokenizer.no_speech in suppressed
