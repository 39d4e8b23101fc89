"""AlignAtt, a single-pass commit policy for the streaming recogniser (Papi et al. 2023, as
SimulStreaming runs it on Whisper, Macháček et al. 2025).

A pass decodes the buffer once (greedily, as the recogniser's ``beam_size`` is 1) after the words
it has committed so far: they are the decoder's forced prefix, so that a pass goes on from them
instead of transcribing them again (with ``prompt``, the text committed before the buffer is
Whisper's previous text, as faster-whisper's offline transcription conditions on it).
The decoder's alignment heads say where in the audio each new token was read: a token read within
``frame_threshold_s`` of the end of the audio heard is where the pass stops committing, as what
follows it is still being said. A pass commits every new word before that token (a word that
contains it waits, so that a mark Whisper writes at the end of what it heard is decided by a pass
that heard more); the rest of the pass is the provisional guess, committed as it stands at the
end of speech, at a guard's cut or at the end of the stream (:meth:`AlignAtt.settle`).

Where a token was read is SimulStreaming's rule: each alignment head's cross-attention is
standardised per frame over the tokens so far, median-filtered over 7 frames, averaged over the
heads, and the token's most attended frame is the argmax within the audio heard. CTranslate2
decodes (faster-whisper's int8 model, as the other policy does); the attention comes from the same
weights in PyTorch (:mod:`.decoder`), read teacher-forced after decoding: a token's attention
depends only on the tokens before it, so it is the attention the decoder had when it wrote the
token. Word times are faster-whisper's (its alignment of the tokens, with marks merged into their
words), so that both policies give the punctuation model the same kind of pauses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from ..errors import StreamPunctError
from ..types import Word
from .decoder import WhisperDecoder
from .whisper import APPEND, PREPEND, is_silence, tokenizer_of

__all__ = ["AlignAtt", "alignatt_decoder", "attended_frames"]

# The encoder's frames a second (Whisper: 100 mel frames, halved by the encoder's stride).
ENCODER_FRAMES_PER_S = 50
# A pass whose probability of no speech passes this, while its tokens average a log probability
# under NO_SPEECH_LOGPROB, writes nothing (faster-whisper's defaults).
NO_SPEECH_PROB = 0.6
NO_SPEECH_LOGPROB = -1.0


def attended_frames(attention: torch.Tensor, frames: int) -> torch.Tensor:
    """The most attended frame of each row of ``attention`` (heads, tokens, all frames), within
    the first ``frames``; each row is standardised per frame over itself and the rows before it
    (as a decoder that writes the tokens one by one sees them), median-filtered over 7 frames and
    averaged over the heads."""
    rows = torch.arange(1, attention.shape[1] + 1, dtype=attention.dtype, device=attention.device)
    rows = rows.view(1, -1, 1)
    mean = attention.cumsum(1) / rows
    variance = ((attention**2).cumsum(1) / rows - mean**2).clamp_min(0.0)
    standard = (attention - mean) / variance.sqrt().clamp_min(1e-6)
    padded = F.pad(standard, (3, 3), mode="reflect")
    filtered = padded.unfold(-1, 7, 1).median(-1).values.mean(0)
    return filtered[:, :frames].argmax(-1)


@dataclass
class _Draft:
    """A pass's words after the committed prefix: the tokens of each, and how many lead words it
    may commit."""

    words: list[Word]
    tokens: list[list[int]]
    probabilities: list[float]
    ready: int


def _draft(aligned: list[dict], offset: float, prefix: int, cut: int, ended: bool) -> _Draft:
    """A pass's words after its ``prefix`` tokens, from faster-whisper's alignment of all its
    tokens (marks merged into their words); the lead words that end before the ``cut`` token may
    commit, all but the last where the pass ``ended`` before the end of the audio (a mark may
    follow it)."""
    from faster_whisper.transcribe import merge_punctuations

    merge_punctuations(aligned, PREPEND, APPEND)
    draft, at, ready = _Draft([], [], [], 0), 0, True
    for a in aligned:
        at += len(a["tokens"])
        if at - len(a["tokens"]) < prefix or not a["word"].strip():
            continue
        draft.words.append(Word(a["word"].strip(), offset + a["start"], offset + a["end"]))
        draft.tokens.append(a["tokens"])
        draft.probabilities.append(float(a["probability"]))
        ready = ready and at <= cut
        draft.ready += ready
    if ended:
        draft.ready = max(0, min(draft.ready, len(draft.words) - 1))
    return draft


@dataclass
class AlignAtt:
    """The recogniser's commit policy by AlignAtt (module docstring); the same methods as
    :class:`~.agreement.LocalAgreement`, and :meth:`transcribe` makes the passes it judges."""

    last_end: float = 0.0  # end of the last committed word
    frame_threshold_s: float = 0.5
    committed: list[Word] = field(default_factory=list)  # committed words still in the buffer
    tokens: list[list[int]] = field(default_factory=list)  # each committed word's tokens: the prefix
    previous: list[Word] = field(default_factory=list)  # the last pass's words beyond the commits
    previous_tokens: list[list[int]] = field(default_factory=list)
    draft: _Draft | None = None

    def transcribe(
        self,
        model: Any,
        audio: np.ndarray,
        offset: float,
        window_s: float | None,
        max_tokens: int,
        prompt: str | None = None,
        beam_size: int = 1,
    ) -> tuple[list[Word], list[float]]:
        """Decode ``audio`` (the buffer, from stream time ``offset``) once after the committed
        words; its new words and their probabilities. ``window_s``: the encoder reads this much
        (the audio and silence after it; None: 30 s); ``prompt``: text before the buffer, as
        Whisper's previous text (faster-whisper's ``initial_prompt``)."""
        self.draft = None
        if is_silence(audio):
            return [], []
        decoder, tokenizer, suppressed = alignatt_decoder(model)
        features = model.feature_extractor(audio)
        content = features.shape[-1]
        width = 3000 if window_s is None else min(3000, math.ceil(window_s * 100))
        if content > width:
            raise StreamPunctError(
                f"AlignAtt reads at most {width / 100:.0f} s of audio a pass, not {content / 100:.1f}"
            )
        features = np.pad(features, ((0, 0), (0, width - content)))
        encoded = model.model.encode(_storage(features[None]), to_cpu=True)
        prefix = [t for word in self.tokens for t in word]
        before = [tokenizer.sot_prev, *tokenizer.encode(" " + prompt.strip())[-223:]] if prompt else []
        start = before + tokenizer.sot_sequence + [tokenizer.no_timestamps]
        result = model.model.generate(
            encoded,
            [start + prefix],
            beam_size=beam_size,
            max_length=min(448, len(start) + len(prefix) + max_tokens),  # the decoder's positions
            suppress_blank=not prefix,  # after committed words, the audio may hold no more
            suppress_tokens=suppressed,
            return_scores=True,
            return_no_speech_prob=True,
        )[0]
        written = result.sequences_ids[0]  # the prefix, then the new tokens
        new = [t for t in written[len(prefix) :] if t < tokenizer.eot]
        # the score is CTranslate2's log probability per token (length penalty 1)
        if not new or (result.no_speech_prob > NO_SPEECH_PROB and result.scores[0] < NO_SPEECH_LOGPROB):
            return [], []
        # Where each new token was read: the attention of the position before it.
        device = decoder.positions.device
        audio_out = torch.from_numpy(np.asarray(encoded, dtype=np.float32)).to(device)
        _, attention = decoder(torch.tensor([start + prefix + new], device=device), audio_out)
        frames = attended_frames(attention[0], content // 2)[len(start) + len(prefix) - 1 : -1]
        end = content // 2 - self.frame_threshold_s * ENCODER_FRAMES_PER_S
        reached = [i for i, frame in enumerate(frames.tolist()) if frame >= end]
        cut = len(prefix) + (reached[0] if reached else len(new))
        aligned = model.find_alignment(tokenizer, [prefix + new], encoded, content)[0]
        self.draft = _draft(aligned, offset, len(prefix), cut, ended=not reached)
        return self.draft.words, self.draft.probabilities

    def update(
        self,
        hypothesis: list[Word],
        probabilities: list[float] | None = None,
        heard_until: float | None = None,
    ) -> list[Word]:
        """Commit the words of the last pass that its attention allows (``hypothesis`` is its
        words, or the first of them, where a guard cut the pass)."""
        tokens = self.draft.tokens[: len(hypothesis)] if self.draft else []
        ready = min(self.draft.ready, len(hypothesis)) if self.draft else 0
        self.previous, self.previous_tokens = hypothesis[ready:], tokens[ready:]
        return self._commit(hypothesis[:ready], tokens[:ready])

    def settle(self) -> list[Word]:
        """Commit the last pass's provisional words as they stand."""
        words, tokens = self.previous, self.previous_tokens
        self.previous, self.previous_tokens = [], []
        return self._commit(words, tokens)

    def _commit(self, words: list[Word], tokens: list[list[int]]) -> list[Word]:
        if words:
            self.committed.extend(words)
            self.tokens.extend(tokens)
            self.last_end = words[-1].end or self.last_end
        return words

    def forget_before(self, time: float) -> None:
        """Committed words that end by ``time`` leave the buffer, and the decoder's prefix."""
        keep = [i for i, w in enumerate(self.committed) if (w.end or 0) > time]
        self.committed = [self.committed[i] for i in keep]
        self.tokens = [self.tokens[i] for i in keep]

    def pending(self) -> list[Word]:
        return list(self.previous)


def alignatt_decoder(model: Any) -> tuple[WhisperDecoder, Any, list[int]]:
    """The PyTorch decoder of a model that :func:`~.whisper.load_whisper` loaded (on the model's
    device), its tokenizer and the tokens a pass never writes (faster-whisper's): made once per
    model."""
    cached = getattr(model, "_streampunct_alignatt", None)
    if cached is None:
        from faster_whisper.transcribe import get_suppressed_tokens

        path = getattr(model, "streampunct_path", None)
        if path is None:
            raise StreamPunctError("AlignAtt needs a model loaded by streampunct.speech.load_whisper")
        tokenizer = tokenizer_of(model)
        decoder = WhisperDecoder.load(path).to("cuda" if model.model.device == "cuda" else "cpu")
        suppressed = list(get_suppressed_tokens(tokenizer, [-1]))
        cached = model._streampunct_alignatt = (decoder, tokenizer, suppressed)
    return cached


def _storage(features: np.ndarray) -> Any:
    from faster_whisper.transcribe import get_ctranslate2_storage

    return get_ctranslate2_storage(np.ascontiguousarray(features, dtype=np.float32))
