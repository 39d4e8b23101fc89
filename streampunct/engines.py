"""How a token's label is computed from the tokens before it and at most ``k`` after it.

Two engines bound the lookahead, from the same checkpoint, and a third puts a light first stage in
front of the window engine (:class:`~streampunct.cascade.CascadeEngine`, where the checkpoint has
one):

- :class:`MaskedEngine`: one pass over a block's window under the lookahead mask (CT-Transformer's
  delay split over the layers, see :mod:`streampunct.model`). A stream computes only each new
  token's rows (:mod:`streampunct.incremental`): the cheapest per word. It alone fuses POS tags
  (a fused model's stream: :mod:`streampunct.fused`).
- :class:`WindowEngine`: each token decided by the offline model over its own window, the
  ``context`` tokens before it and the ``k`` after it; every layer sees the whole window, so the
  tokens ahead are fully read. A stream runs one such window per token: more work per word, and
  a higher score (see docs/results.md).

An engine is chosen once (:func:`make_engine`; ``"auto"`` takes the checkpoint's ``window_from``)
and serves both ways a decision is asked for: :meth:`Engine.logits` labels a whole text at once
(``Punctuator.predict``), and :meth:`Engine.stream` opens an :class:`EngineStream`, the engine's
state for one :class:`~streampunct.stream.PunctStream`. Every decision of a stream, final or
provisional, full lookahead or cut short by a time limit, goes through its ``EngineStream``; the
stream keeps the commit policy and the words. A stream's tokens live in :class:`Tokens`, which
refuses to read a token it has forgotten instead of reading a wrong one.

Without time limits the two ways agree: a stream's final labels equal ``logits()``'s, the tests'
first property (``tests/test_stream.py``, ``tests/test_stream_states.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np
import torch

from .errors import InputError
from .incremental import WindowState
from .model import PunctModel
from .pieces import WordPieces, collate, collate_tags, plan_windows
from .types import ENGINES

if TYPE_CHECKING:
    from .cascade import FirstStage
    from .pos import Tagger

__all__ = [
    "Engine",
    "EngineStream",
    "Work",
    "compute_many",
    "MaskedEngine",
    "WindowEngine",
    "Tokens",
    "make_engine",
    "resolve_engine",
    "token_logits",
    "label_tokens",
    "window_logits",
]

Pieces = tuple[int, ...]


Logits = torch.Tensor | np.ndarray  # a decision's (n_labels,) logits: engines whose rows come
# from a batched pass hand NumPy rows (cheap to index and argmax), others a tensor


class Work(Protocol):
    """A stream's model work for one step, of one engine's kind: many streams' work of a kind is
    computed together by the kind's own :meth:`compute_all` (:func:`compute_many`)."""

    @classmethod
    def compute_all(cls, work: Sequence[Any]) -> None: ...


def compute_many(work: Sequence[Work]) -> None:
    """Many streams' work for a step: each kind's in one batched computation of its own."""
    kinds: dict[type[Work], list[Work]] = {}
    for w in work:
        kinds.setdefault(type(w), []).append(w)
    for kind, items in kinds.items():
        kind.compute_all(items)


class EngineStream(Protocol):
    """An engine's state for one stream. The stream calls, at each step: :meth:`work` (the model
    work this step's decisions read, which a batch computes for many streams at once), then
    :meth:`decide` for each token that becomes final, in order, then :meth:`provisional`, then
    :meth:`settle`. Between steps it adds tokens (:meth:`append`) and takes back a revised tail
    (:meth:`truncate`)."""

    @property
    def held(self) -> int:
        """Tokens held."""

    def append(self, token: str, pieces: Pieces) -> None: ...

    def truncate(self, n: int) -> None:
        """Forget tokens from ``n`` on (never one final before the stream's last step)."""

    def close(self) -> None:
        """No more tokens will come."""

    def work(self, first_open: int) -> Sequence[Work]:
        """The model work this step's decisions read; ``first_open`` is the first token not final."""

    def decide(self, t: int, ahead: int) -> Logits:
        """The (n_labels,) logits, decision offsets added, of token ``t``'s final decision from
        the tokens before it and ``ahead`` after it (the stream adds its pause evidence and takes
        the argmax)."""

    def provisional(self, tokens: Sequence[int], first_open: int) -> Sequence[Logits]:
        """Logits of tokens not final yet, as the tokens stand now, for display."""

    def settle(self, keep_from: int) -> None:
        """The step is over; no decision or revision will reach before token ``keep_from``."""

    def release(self) -> None:
        """The stream is finished: free everything."""


class Engine(Protocol):
    name: str
    model: PunctModel

    def logits(
        self, ids: Sequence[Pieces], lookahead: int | None, tags: Sequence[int] | None = None
    ) -> torch.Tensor:
        """(N, n_labels) logits of every token of a text, with the decision offsets; the last
        ``k`` tokens are decided with the lookahead they have."""

    def window_logits(
        self, ids: Sequence[Pieces], t: int, ahead: int, base: int = 0, tags: Sequence[int] | None = None
    ) -> torch.Tensor:
        """(n_labels,) logits of token ``t`` from its own window, seeing ``ahead`` tokens ahead;
        ``ids[i]`` (and ``tags[i]``) belong to token ``base + i``."""

    def stream(self, lookahead: int, tagger: Tagger | None = None) -> EngineStream: ...


class Tokens:
    """A stream's tokens (their word pieces) from ``base`` on.

    Reading a token that was forgotten, or one not there yet, raises: a window is never cut from
    the wrong place. Forgetting happens in steps of at least ``slack`` tokens.
    """

    def __init__(self, slack: int):
        self.pieces: list[Pieces] = []
        self.base = 0
        self.slack = slack

    @property
    def end(self) -> int:
        return self.base + len(self.pieces)

    def check(self, start: int, end: int) -> None:
        """Raise unless tokens ``start`` to ``end`` (excluded) are held."""
        if not self.base <= start <= end <= self.end:
            raise IndexError(f"tokens {start}..{end} asked for; this stream holds {self.base}..{self.end}")

    def span(self, start: int, end: int) -> list[Pieces]:
        self.check(start, end)
        return self.pieces[start - self.base : end - self.base]

    def truncate(self, n: int) -> None:
        self.check(n, self.end)
        del self.pieces[n - self.base :]

    def forget(self, before: int) -> None:
        if before - self.base >= self.slack:
            drop = min(before, self.end) - self.base
            del self.pieces[:drop]
            self.base += drop


def _tag_rows(
    model: PunctModel, tags: Sequence[int] | None, n: int, spans: Sequence[tuple[int, int]]
) -> list[Sequence[int]] | None:
    """The tag ids of each span (start, end) of a text of ``n`` tokens for a model that fuses POS
    tags, which needs one per token (``tags``); None for a model that does not."""
    if not model.cfg.n_tags:
        return None
    if tags is None or len(tags) != n:
        got = "none" if tags is None else len(tags)
        raise InputError(
            f"this checkpoint fuses POS tags: give one tag id per token ({n} tokens, {got} tags)"
        )
    return [tags[start:end] for start, end in spans]


@torch.no_grad()
def _forward(
    model: PunctModel,
    windows: Sequence[Sequence[Pieces]],
    mask: int | None,
    tags: Sequence[Sequence[int]] | None = None,
) -> torch.Tensor:
    """(B, T, n_labels) CPU logits of windows of tokens, without decision offsets; ``mask``: the
    lookahead mask, None: every token sees every token of its window."""
    device = next(model.parameters()).device
    input_ids, word_pos, word_ends = (x.to(device) for x in collate(windows, model.cfg))
    fused = collate_tags(tags).to(device) if tags is not None else None
    return model(input_ids, word_pos, word_ends, mask, fused).float().cpu()


class _Engine:
    """What both engines share: deciding one token from its own window."""

    name: str
    model: PunctModel

    def window_start(self, t: int) -> int:
        raise NotImplementedError

    def offsets(self, logits: torch.Tensor, ahead: int | None) -> torch.Tensor:
        """CPU logits plus this engine's decision offsets for a decision seeing ``ahead`` tokens
        ahead (calibrated per engine: ``streampunct calibrate``)."""
        raise NotImplementedError

    def mask(self, ahead: int) -> int | None:
        """The lookahead mask of a window seeing ``ahead`` tokens ahead (None: all see all)."""
        raise NotImplementedError

    def window_logits(
        self, ids: Sequence[Pieces], t: int, ahead: int, base: int = 0, tags: Sequence[int] | None = None
    ) -> torch.Tensor:
        start, end = self.window_start(t), t + ahead + 1
        if not (base <= start and end <= base + len(ids)):
            raise IndexError(f"tokens {start}..{end} asked for; given {base}..{base + len(ids)}")
        tag_rows = _tag_rows(self.model, tags, len(ids), [(start - base, end - base)])
        logits = _forward(self.model, [ids[start - base : end - base]], self.mask(ahead), tag_rows)[
            0, t - start
        ]
        return self.offsets(logits, ahead)


# --- the masked engine ----------------------------------------------------------------------


class MaskedEngine(_Engine):
    """Blocks of tokens under the lookahead mask: token ``t`` is decided in its block's window,
    from ``context`` tokens before the block to ``k`` after ``t``."""

    name = "masked"

    def __init__(self, model: PunctModel):
        self.model = model

    def window_start(self, t: int) -> int:
        cfg = self.model.cfg
        return max(0, (t // cfg.block) * cfg.block - cfg.context)

    def offsets(self, logits: torch.Tensor, ahead: int | None) -> torch.Tensor:
        return self.model.masked_offsets(logits, ahead)

    def mask(self, ahead: int) -> int | None:
        return ahead

    def logits(
        self,
        ids: Sequence[Pieces],
        lookahead: int | None,
        tags: Sequence[int] | None = None,
        batch_size: int = 32,
    ) -> torch.Tensor:
        cfg, n = self.model.cfg, len(ids)
        if not n:
            return torch.zeros(0, cfg.n_labels)
        windows = plan_windows(n, cfg, lookahead)
        out: list[torch.Tensor] = []
        for i in range(0, len(windows), batch_size):
            chunk = windows[i : i + batch_size]
            tag_rows = _tag_rows(self.model, tags, n, [(w.start, w.end) for w in chunk])
            logits = self.offsets(
                _forward(self.model, [ids[w.start : w.end] for w in chunk], lookahead, tag_rows), lookahead
            )
            out.extend(logits[b, w.first - w.start : w.stop - w.start] for b, w in enumerate(chunk))
        result = torch.cat(out)
        for t in range(max(0, n - (lookahead or 0)), n):  # fewer than k tokens after them
            result[t] = self.window_logits(ids, t, n - 1 - t, tags=tags)
        return result

    def stream(self, lookahead: int, tagger: Tagger | None = None) -> EngineStream:
        if not self.model.cfg.n_tags:
            return MaskedStream(self, lookahead, WindowState)
        if tagger is None:
            raise InputError("this checkpoint fuses POS tags: stream it with a tagger (Punctuator.stream())")
        from .fused import FusedStream  # it builds on MaskedStream

        return FusedStream(self, lookahead, tagger)


W = TypeVar("W", bound=WindowState)


class MaskedStream(Generic[W]):
    """The masked engine's state for one stream: an incremental window per block, each a ``window``
    (:class:`~streampunct.incremental.WindowState`; a POS-fused model's stream,
    :class:`~streampunct.fused.FusedStream`, makes its own kind)."""

    def __init__(self, engine: MaskedEngine, lookahead: int, window: type[W]):
        self.engine, self.model, self.k, self.window = engine, engine.model, lookahead, window
        self.tokens = Tokens(slack=4 * self.model.cfg.block)
        self.blocks: dict[int, W] = {}

    @property
    def held(self) -> int:
        return len(self.tokens.pieces)

    def append(self, token: str, pieces: Pieces) -> None:
        t = self.tokens.end
        self.tokens.pieces.append(pieces)
        cfg = self.model.cfg
        # The block windows the token belongs to: blocks b with start(b) <= t <= b's last + k
        first = max(0, -((t - cfg.block - self.k + 1) // -cfg.block))  # ceil
        for b in range(first, (t + cfg.context) // cfg.block + 1):
            if b not in self.blocks:
                if self.engine.window_start(b * cfg.block) != t:
                    continue  # that window was closed, or opens with a later token
                self.blocks[b] = self.window(self.model, self.k, self.engine.offsets)
            self.blocks[b].append(pieces)

    def truncate(self, n: int) -> None:
        self.tokens.truncate(n)
        for b in list(self.blocks):
            start = self.engine.window_start(b * self.model.cfg.block)
            if start >= n:
                del self.blocks[b]
            else:
                self.blocks[b].truncate(n - start)

    def close(self) -> None:
        pass

    def work(self, first_open: int) -> list[W]:
        return list(self.blocks.values())

    def decide(self, t: int, ahead: int) -> torch.Tensor:
        start = self.engine.window_start(t)
        if ahead == self.k:  # the full lookahead: the block's incremental window has it
            return self.blocks[t // self.model.cfg.block].logits(t - start)
        ids = self.tokens.span(start, t + ahead + 1)
        return self.engine.window_logits(ids, t, ahead, base=start)

    def provisional(self, tokens: Sequence[int], first_open: int) -> list[torch.Tensor]:
        block = self.model.cfg.block
        return [self.blocks[t // block].logits(t - self.engine.window_start(t)) for t in tokens]

    def settle(self, keep_from: int) -> None:
        block = keep_from // self.model.cfg.block
        for b in [b for b in self.blocks if b < block]:
            del self.blocks[b]
        self.tokens.forget(self.engine.window_start(keep_from))

    def release(self) -> None:
        self.blocks.clear()


# --- the window engine ----------------------------------------------------------------------


class WindowEngine(_Engine):
    """The offline model over each token's own window: tokens ``t - context`` to ``t + k``."""

    name = "window"

    def __init__(self, model: PunctModel):
        if model.cfg.n_tags:
            raise InputError(
                "the window engine does not fuse POS tags: use engine='masked' with this checkpoint"
            )
        self.model = model

    def window_start(self, t: int) -> int:
        return max(0, t - self.model.cfg.context)

    def offsets(self, logits: torch.Tensor, ahead: int | None) -> torch.Tensor:
        return self.model.window_offsets(logits, self.bounded(ahead))

    def mask(self, ahead: int) -> int | None:
        return None

    def logits(
        self,
        ids: Sequence[Pieces],
        lookahead: int | None,
        tags: Sequence[int] | None = None,
        batch_size: int = 64,
    ) -> torch.Tensor:
        return self.rows(ids, range(len(ids)), self.bounded(lookahead), batch_size)

    @staticmethod
    def bounded(lookahead: int | None) -> int:
        if lookahead is None:
            raise InputError("the window engine bounds a lookahead; offline is the masked engine's")
        return lookahead

    def rows(
        self, ids: Sequence[Pieces], ts: Sequence[int], lookahead: int, batch_size: int = 64
    ) -> torch.Tensor:
        """(len(ts), n_labels) logits of tokens ``ts`` of a text, each from its own window (the
        last ``lookahead`` tokens with the lookahead they have)."""
        n = len(ids)
        out = []
        for i in range(0, len(ts), batch_size):
            chunk = ts[i : i + batch_size]
            spans = [(self.window_start(t), min(n, t + lookahead + 1)) for t in chunk]
            logits = _forward(self.model, [ids[s:e] for s, e in spans], None)
            rows = logits[torch.arange(len(spans)), torch.tensor([t - s for t, (s, _) in zip(chunk, spans)])]
            ahead = torch.tensor([e - 1 - t for t, (_, e) in zip(chunk, spans)])  # fewer at the end
            for j in ahead.unique().tolist():
                rows[ahead == j] = self.offsets(rows[ahead == j], j)
            out.append(rows)
        return torch.cat(out) if out else torch.zeros(0, self.model.cfg.n_labels)

    def stream(self, lookahead: int, tagger: Tagger | None = None) -> WindowStream:
        return WindowStream(self, lookahead)


MAX_PASSES = 32  # window passes one stream computes at once: what a long push holds in memory
PASS_BATCH = 64  # window passes in one padded forward


class WindowPass:
    """One pass of the window engine: a token's window, every word seeing every word. It holds its
    word pieces, then its words' logits; many streams' passes are computed together, padded, by
    the model's own forward (:meth:`compute_all`), as :meth:`WindowEngine.logits` computes a text."""

    def __init__(self, engine: WindowEngine, pieces: list[Pieces]):
        self.engine, self.pieces = engine, pieces
        self.rows: np.ndarray | None = None  # (words, n_labels) logits, offsets added

    def logits(self, word: int) -> np.ndarray:
        """A word's logits, decided with the words after it in the pass as its lookahead (NumPy:
        a row and its argmax cost a tenth of a tensor's)."""
        if self.rows is None:
            self.compute_all([self])
        assert self.rows is not None
        return self.rows[word]

    @classmethod
    def compute_all(cls, passes: Sequence[WindowPass]) -> None:
        todo = [p for p in passes if p.rows is None]
        for model in {id(p.engine.model): p.engine.model for p in todo}.values():
            mine = [p for p in todo if p.engine.model is model]
            for i in range(0, len(mine), PASS_BATCH):
                batch = mine[i : i + PASS_BATCH]
                logits = _forward(model, [p.pieces for p in batch], None)  # (B, W, n_labels)
                n = torch.tensor([len(p.pieces) for p in batch])
                ahead = n[:, None] - 1 - torch.arange(logits.shape[1])  # the words after each in its pass
                rows = model.window_offsets(logits, ahead.clamp(min=0)).float().cpu().numpy()
                for p, p_rows in zip(batch, rows):
                    p.rows = p_rows[: len(p.pieces)]


class WindowStream:
    """The window engine's state for one stream: each step, one pass per token that has its
    full lookahead, and one over the newest tokens whose rows give the provisional labels. A long
    push is decided MAX_PASSES passes at a time, each dropped once its token is decided."""

    def __init__(self, engine: WindowEngine, lookahead: int):
        self.engine, self.model, self.k = engine, engine.model, lookahead
        self.tokens = Tokens(slack=4 * self.model.cfg.block)
        self.passes: dict[tuple[int, int], WindowPass] = {}  # this step's, by tokens (start, end)

    @property
    def held(self) -> int:
        return len(self.tokens.pieces)

    def append(self, token: str, pieces: Pieces) -> None:
        self.tokens.pieces.append(pieces)

    def truncate(self, n: int) -> None:
        self.tokens.truncate(n)
        self.passes.clear()

    def close(self) -> None:
        pass

    def _pass(self, t: int, end: int) -> tuple[WindowPass, int]:
        """The pass that decides token ``t`` from the tokens before ``end``, and its first token."""
        start = self.engine.window_start(t)
        state = self.passes.get((start, end))
        if state is None:
            state = self.passes[start, end] = WindowPass(self.engine, self.tokens.span(start, end))
        return state, start

    def _tail(self, first_open: int) -> int:
        """The token whose pass gives the provisional labels: the newest one with its full
        lookahead (decided this step, so the pass is shared), or the last final one."""
        return max(0, first_open - 1, self.tokens.end - 1 - self.k)

    def _decidable(self, first: int) -> range:
        """Tokens from ``first`` on with their full lookahead, at most MAX_PASSES of them."""
        return range(first, min(self.tokens.end - self.k, first + MAX_PASSES))

    def _full(self, first: int) -> list[WindowPass]:
        """The passes of the tokens :meth:`_decidable` from ``first``."""
        return [self._pass(t, t + self.k + 1)[0] for t in self._decidable(first)]

    def work(self, first_open: int) -> Sequence[Work]:
        self._full(first_open)
        if self.tokens.end:
            self._pass(self._tail(first_open), self.tokens.end)
        return list(self.passes.values())

    def decide(self, t: int, ahead: int) -> np.ndarray:
        end = t + ahead + 1
        if ahead == self.k and (self.engine.window_start(t), end) not in self.passes:
            WindowPass.compute_all(self._full(t))  # a long push: its next passes, together
        state, start = self._pass(t, end)
        logits = state.logits(t - start)
        if end < self.tokens.end:  # only a pass to the newest token serves again (provisional)
            del self.passes[start, end]
        return logits

    def provisional(self, tokens: Sequence[int], first_open: int) -> list[np.ndarray]:
        if not tokens:
            return []
        state, start = self._pass(self._tail(first_open), self.tokens.end)
        return [state.logits(t - start) for t in tokens]

    def settle(self, keep_from: int) -> None:
        self.passes.clear()
        self.tokens.forget(max(0, keep_from - 1 - self.model.cfg.context))

    def release(self) -> None:
        self.passes.clear()


# --- choosing an engine, and the functions of a whole text -----------------------------------

_ENGINES: dict[str, type[MaskedEngine] | type[WindowEngine]] = {
    "masked": MaskedEngine,
    "window": WindowEngine,
}


def resolve_engine(model: PunctModel, engine: str, lookahead: int | None, cascade: bool = False) -> str:
    """``"masked"``, ``"window"`` or ``"cascade"``: the engine that decides at ``lookahead``
    (offline: masked, whose offline mode is the same whole-context model; ``"auto"``: from the
    checkpoint's ``window_from`` on the cascade where the checkpoint has a first stage
    (``cascade``), else the window engine, except for a POS-fused checkpoint)."""
    if engine not in ENGINES:
        raise InputError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine in ("window", "cascade") and model.cfg.n_tags:
        raise InputError(
            f"the {engine} engine does not fuse POS tags: use engine='masked' with this checkpoint"
        )
    if engine == "cascade" and not cascade:
        raise InputError("this checkpoint has no first stage for the cascade (streampunct train-first-stage)")
    if lookahead is None or engine == "masked":
        return "masked"
    if engine == "auto" and (lookahead < model.cfg.window_from or model.cfg.n_tags):
        return "masked"
    return "cascade" if cascade and engine != "window" else "window"


def make_engine(
    model: PunctModel, engine: str = "auto", lookahead: int | None = None, first: FirstStage | None = None
) -> Engine:
    """The engine named (``"auto"``, ``"masked"``, ``"window"`` or ``"cascade"``, which needs the
    checkpoint's ``first`` stage) for decisions at ``lookahead``."""
    name = resolve_engine(model, engine, lookahead, first is not None)
    if name == "cascade":
        from .cascade import CascadeEngine

        assert first is not None
        return CascadeEngine(model, first)
    return _ENGINES[name](model)


def token_logits(
    model: PunctModel,
    pieces: WordPieces,
    tokens: Sequence[str],
    lookahead: int | None,
    tags: Sequence[int] | None = None,
    engine: str = "masked",
) -> torch.Tensor:
    """(N, n_labels) logits of normalised tokens under ``engine`` (with the decision offsets)."""
    if not tokens:
        return torch.zeros(0, model.cfg.n_labels)
    return make_engine(model, engine, lookahead).logits(pieces.encode(tokens), lookahead, tags)


def label_tokens(
    model: PunctModel,
    pieces: WordPieces,
    tokens: Sequence[str],
    lookahead: int | None,
    tags: Sequence[int] | None = None,
    engine: str = "masked",
) -> list[int]:
    """The best label id for each normalised token."""
    return token_logits(model, pieces, tokens, lookahead, tags, engine).argmax(-1).tolist()


def window_logits(
    model: PunctModel,
    ids: Sequence[Pieces],
    t: int,
    lookahead: int,
    base: int = 0,
    tags: Sequence[int] | None = None,
    engine: str = "masked",
) -> torch.Tensor:
    """(n_labels,) logits of token ``t`` from its own window under ``engine``, seeing
    ``lookahead`` tokens ahead: what a stream decides for it."""
    return make_engine(model, engine, lookahead).window_logits(ids, t, lookahead, base, tags)
