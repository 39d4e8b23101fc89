"""POS fusion: tag embeddings and a fusion layer over words keep the lookahead bound.

A random deep model with small windows and a handful of tags stands in for a trained one: the
bound is a property of the wiring, whatever the weights.
"""

import random

import pytest
import torch

from streampunct import Punctuator
from streampunct.errors import InputError
from streampunct.model import ModelConfig, PunctModel
from streampunct.pieces import WordPieces
from streampunct.punctuator import DEFAULT_CHECKPOINT, token_logits

WORDS = "so today i want to talk about a small village in kenya what would you do there every morning".split()


@pytest.fixture(scope="module")
def fused() -> Punctuator:
    torch.manual_seed(0)
    cfg = ModelConfig(
        n_layer=4, n_head=2, n_embd=32, n_inner=64, block=16, context=8, dropout=0.0, n_tags=6, pos_dim=16,
        fusion_heads=4,
    )  # fmt: skip
    return Punctuator(PunctModel(cfg).eval(), WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces))


def text(n: int, seed: int) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    return [rng.choice(WORDS) for _ in range(n)], [rng.randrange(6) for _ in range(n)]


def logits(p: Punctuator, words: list[str], tags: list[int], k: int | None) -> torch.Tensor:
    return token_logits(p.model, p.pieces, words, k, tags=tags)


@pytest.mark.parametrize("k", [0, 1, 2, 4])
def test_words_and_tags_after_t_plus_k_change_nothing(fused, k):
    words, tags = text(60, seed=k)
    ref = logits(fused, words, tags, k)
    for t in (0, 7, 15, 16, 30, 41):
        cut = t + k + 1
        other_words, other_tags = text(60 - cut, seed=100 + t)
        torch.testing.assert_close(
            logits(fused, words[:cut] + other_words, tags[:cut] + other_tags, k)[: t + 1],
            ref[: t + 1],
            atol=1e-5,
            rtol=0,
        )
        torch.testing.assert_close(
            logits(fused, words[:cut], tags[:cut], k)[: t + 1], ref[: t + 1], atol=1e-5, rtol=0
        )


def test_a_words_tag_counts_for_it_and_later_words_not_earlier(fused):
    words, tags = text(40, seed=1)
    ref = logits(fused, words, tags, 2)
    other = list(tags)
    other[20] = (tags[20] + 1) % 6
    moved = (logits(fused, words, other, 2) - ref).abs().amax(-1)
    assert moved[20] > 1e-4 and moved[21] > 1e-4  # the word itself, and a later word through fusion
    assert moved[:20].max() < 1e-6  # with a lookahead, fusion looks back only
    offline = (logits(fused, words, other, None) - logits(fused, words, tags, None)).abs().amax(-1)
    assert offline[19] > 1e-4  # offline it looks both ways


def test_a_fused_checkpoint_round_trips(fused, tmp_path):
    fused.model.save(tmp_path)
    again = PunctModel.load(tmp_path)
    assert again.cfg.n_tags == 6 and again.cfg.pos_dim == 16
    words, tags = text(30, seed=2)
    torch.testing.assert_close(
        token_logits(again, fused.pieces, words, 2, tags=tags),
        logits(fused, words, tags, 2),
        atol=2e-3,
        rtol=0,
    )


def test_pos_embeddings_start_from_tagger_weights(fused):
    model = PunctModel(fused.model.cfg)
    weight = torch.randn(6, 16)
    model.init_pos_embedding(weight)
    assert torch.equal(model.tag_emb.weight, weight)
    with pytest.raises(ValueError, match="do not fit"):
        model.init_pos_embedding(torch.randn(53, 512))


def test_a_fused_model_without_tags_is_a_clear_error(fused):
    with pytest.raises(InputError, match="fuses POS tags"):
        token_logits(fused.model, fused.pieces, ["hello", "there"], 2)
    with pytest.raises(InputError, match="fuses POS tags"):
        fused.stream(lookahead=2)


def test_predict_tags_the_words_with_the_real_tagger():
    """A fused model with the tagger's 53 tags: predict() tags the tokens itself, under the same lookahead."""
    from streampunct.pos import Tagger

    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=2, n_head=2, n_embd=32, n_inner=64, block=16, context=8, dropout=0.0, n_tags=53)
    model = PunctModel(cfg).eval()
    model.init_pos_embedding(Tagger.load().embedding)
    p = Punctuator(model, WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces))
    words = "so what did you do today i went home".split()
    for k in (0, 2, None):
        labels = p.predict(words, lookahead=k)
        assert len(labels) == len(words) and set(labels) <= {"O", "COMMA", "PERIOD", "QUESTION"}
    assert p._tagger is not None and p._tagger.tag(words, 2)[:3] == ["RB", "WP", "VBD"]
