"""The lookahead bound: word t's logits are a function of words up to t + k alone, under both
engines (the masked one bounds it through the layers, the window one by its window's end)."""

import random

import pytest
import torch

from streampunct import InputError
from streampunct.engines import token_logits

WORDS = (
    "so today i want to talk about something that happened to me last year when i was working "
    "in a small village in kenya and we did n't have any electricity what would you do there "
    "the children walked three hours to school every morning and nobody thought that was strange"
).split()


def _text(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(WORDS) for _ in range(n)]


def _logits(p, tokens, k, engine="masked"):
    return token_logits(p.model, p.pieces, tokens, k, engine=engine)


def _check_bound(p, k: int, n: int, positions: list[int], engine: str) -> None:
    base = _text(n, seed=k)
    ref = _logits(p, base, k, engine)
    rng = random.Random(100 + k)
    for t in positions:
        # Every word after t + k replaced (with words of other piece counts too) ...
        changed = base[: t + k + 1] + [
            rng.choice(["electrification", "a", "kenya's", "9:00"]) for _ in base[t + k + 1 :]
        ]
        torch.testing.assert_close(_logits(p, changed, k, engine)[: t + 1], ref[: t + 1], atol=1e-5, rtol=0)
        # ... or removed altogether: how many words follow t + k cannot matter.
        cut = _logits(p, base[: t + k + 1], k, engine)
        torch.testing.assert_close(cut[: t + 1], ref[: t + 1], atol=1e-5, rtol=0)


ENGINES = pytest.mark.parametrize("engine", ["masked", "window"])


@ENGINES
@pytest.mark.parametrize("model", ["tiny", "tiny_mpnet", "tiny_teacher"])
@pytest.mark.parametrize("k", [0, 1, 2, 3, 4, 7])
def test_bound_tiny_deep_model(request, model, k, engine):
    # 80 words = 5 blocks of 16: positions inside blocks, at block edges and in later windows.
    _check_bound(request.getfixturevalue(model), k, n=80, positions=[0, 5, 15, 16, 31, 40, 62], engine=engine)


def test_the_teacher_is_not_streamed(tiny_teacher):
    """A two-stream teacher labels whole windows; a stream of it is refused with a clear error."""
    with pytest.raises(InputError, match="two-stream teacher"):
        tiny_teacher.stream(lookahead=2).push(WORDS[:10])


@pytest.mark.parametrize("k", [0, 1, 2, 4])
def test_bound_shipped_model(shipped, k):
    cfg = shipped.model.cfg
    _check_bound(
        shipped, k, n=2 * cfg.block + 10, positions=[3, cfg.block - 1, cfg.block + 7], engine="masked"
    )


@pytest.mark.parametrize("k", [1, 2])
def test_bound_shipped_model_window_engine(shipped, k):
    _check_bound(shipped, k, n=60, positions=[3, 30, 50], engine="window")


@pytest.mark.parametrize("k", [0, 1, 4])
def test_window_engine_reads_its_window_whole(tiny, k):
    """Word t's window is words t - context .. t + k, each read by every layer: a change at either
    end of it reaches word t, a change just before it never does."""
    C = tiny.model.cfg.context
    base = _text(40, seed=8)
    t = 25
    ref = _logits(tiny, base, k, "window")[t]
    for i, inside in ((t - C - 1, False), (t - C, True), (t + k, True)):
        other = list(base)
        other[i] = "electrification" if base[i] != "electrification" else "a"
        diff = (_logits(tiny, other, k, "window")[t] - ref).abs().max()
        assert (diff > 1e-4) == inside, (i, float(diff))


@ENGINES
@pytest.mark.parametrize("k", [1, 2, 4])
def test_word_t_plus_k_does_matter(tiny, k, engine):
    """The bound is tight: word t + k itself reaches word t through the stacked layers (weakly, in
    a random model: each hop of one word costs a layer), while word t + k + 1 never does."""
    base = _text(40, seed=7)
    t = 20
    other = list(base)
    other[t + k] = "electrification" if base[t + k] != "electrification" else "a"
    diff = (_logits(tiny, other, k, engine)[t] - _logits(tiny, base, k, engine)[t]).abs().max()
    assert diff > 0


def test_offline_sees_both_sides_within_its_window(tiny):
    cfg = tiny.model.cfg
    base = _text(80, seed=3)
    ref = _logits(tiny, base, None)
    t = 20  # in block 1 (16..31); its window ends at 32 + context
    end = (t // cfg.block + 1) * cfg.block + cfg.context
    changed = base[:end] + ["kenya"] * (len(base) - end)
    torch.testing.assert_close(_logits(tiny, changed, None)[t], ref[t], atol=1e-5, rtol=0)
    nearer = list(base)
    nearer[t + 3] = "electrification"
    assert (_logits(tiny, nearer, None)[t] - ref[t]).abs().max() > 1e-4


def test_long_text_any_length(tiny):
    tokens = _text(2500, seed=1)
    for k in (None, 0, 3):
        assert _logits(tiny, tokens, k).shape == (2500, 4)
    assert _logits(tiny, tokens, 3, "window").shape == (2500, 4)
