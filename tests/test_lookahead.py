"""The lookahead bound: word t's logits are a function of words up to t + k alone."""

import random

import pytest
import torch

from streampunct.punctuator import token_logits

WORDS = (
    "so today i want to talk about something that happened to me last year when i was working "
    "in a small village in kenya and we did n't have any electricity what would you do there "
    "the children walked three hours to school every morning and nobody thought that was strange"
).split()


def _text(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(WORDS) for _ in range(n)]


def _logits(p, tokens, k):
    return token_logits(p.model, p.pieces, tokens, k)


def _check_bound(p, k: int, n: int, positions: list[int]) -> None:
    base = _text(n, seed=k)
    ref = _logits(p, base, k)
    rng = random.Random(100 + k)
    for t in positions:
        # Every word after t + k replaced (with words of other piece counts too) ...
        changed = base[: t + k + 1] + [
            rng.choice(["electrification", "a", "kenya's", "9:00"]) for _ in base[t + k + 1 :]
        ]
        torch.testing.assert_close(_logits(p, changed, k)[: t + 1], ref[: t + 1], atol=1e-5, rtol=0)
        # ... or removed altogether: how many words follow t + k cannot matter.
        torch.testing.assert_close(_logits(p, base[: t + k + 1], k)[: t + 1], ref[: t + 1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("model", ["tiny", "tiny_mpnet"])
@pytest.mark.parametrize("k", [0, 1, 2, 3, 4, 7])
def test_bound_tiny_deep_model(request, model, k):
    # 80 words = 5 blocks of 16: positions inside blocks, at block edges and in later windows.
    _check_bound(request.getfixturevalue(model), k, n=80, positions=[0, 5, 15, 16, 31, 40, 62])


@pytest.mark.parametrize("k", [0, 1, 2, 4])
def test_bound_shipped_model(shipped, k):
    cfg = shipped.model.cfg
    _check_bound(shipped, k, n=2 * cfg.block + 10, positions=[3, cfg.block - 1, cfg.block + 7])


@pytest.mark.parametrize("k", [1, 2, 4])
def test_word_t_plus_k_does_matter(tiny, k):
    """The bound is tight: word t + k itself reaches word t through the stacked layers (weakly, in
    a random model: each hop of one word costs a layer), while word t + k + 1 never does."""
    base = _text(40, seed=7)
    t = 20
    other = list(base)
    other[t + k] = "electrification" if base[t + k] != "electrification" else "a"
    diff = (_logits(tiny, other, k)[t] - _logits(tiny, base, k)[t]).abs().max()
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
