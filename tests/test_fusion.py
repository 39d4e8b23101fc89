"""POS fusion: tag embeddings and a fusion layer over words keep the lookahead bound.

A random deep model with small windows and a handful of tags stands in for a trained one: the
bound is a property of the wiring, whatever the weights.
"""

import random

import pytest
import torch

from streampunct import Punctuator
from streampunct.engines import MaskedEngine, token_logits, window_logits
from streampunct.errors import CheckpointError, InputError
from streampunct.model import ModelConfig, PunctModel
from streampunct.pieces import WordPieces
from streampunct.punctuator import DEFAULT_CHECKPOINT
from streampunct.scheduler import Job, run_batch
from streampunct.stream import Finish, Lookahead, PunctStream, Push, Word
from streampunct.text import normalize_text
from tests.test_stream import after_revision, check_events, run_stream, varied_words

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


def test_a_fused_model_without_tags_is_a_clear_error(fused, tagger_dir):  # the stream loads the real tagger
    with pytest.raises(InputError, match="fuses POS tags"):
        token_logits(fused.model, fused.pieces, ["hello", "there"], 2)
    with pytest.raises(InputError, match="fuses POS tags"):
        PunctStream(MaskedEngine(fused.model), fused.pieces, Lookahead(2), fused.decider)
    with pytest.raises(CheckpointError, match="6 POS tags"):
        fused.stream(lookahead=2)  # the tagger has 53 tags: this model cannot take them


@pytest.fixture(scope="module")
def tagged(tagger_dir) -> Punctuator:
    """A random fused model over the real tagger's 53 tags, its head biased so labels vary."""
    from streampunct.pos import Tagger

    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=2, n_head=2, n_embd=32, n_inner=64, block=16, context=8, dropout=0.0, n_tags=53)
    model = PunctModel(cfg).eval()
    model.init_pos_embedding(Tagger.load(tagger_dir).embedding)
    return Punctuator(model, WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces), tagger_dir)


def test_predict_tags_the_words_with_the_real_tagger(tagged):
    """predict() on a fused model tags the tokens itself, under the same lookahead."""
    words = "so what did you do today i went home".split()
    for k in (0, 2, None):
        labels = tagged.predict(words, lookahead=k)
        assert len(labels) == len(words) and set(labels) <= {"O", "COMMA", "PERIOD", "QUESTION"}
    assert tagged.tagger is not None and tagged.tagger.tag(words, 2)[:3] == ["RB", "WP", "VBD"]


@pytest.mark.parametrize("k", [0, 2])
def test_a_fused_stream_equals_predict(tagged, k):
    words = varied_words(80, seed=20 + k)  # five windows of 16 tokens: forgetting included
    expected = tagged.predict(words, lookahead=k)
    assert run_stream(tagged.stream(lookahead=k), words, seed=k) == expected
    assert len(set(expected)) >= 2  # the labels vary: the comparison means something


def test_a_fused_stream_keeps_fusion_rows_that_match_a_batch(tagged):
    words = varied_words(60, seed=5)
    s = tagged.stream(lookahead=2)
    s.push(words)
    tokens, _ = normalize_text(words)
    tags = tagged.tagger.tag_ids(tokens, 2)
    size = tagged.model.cfg.block
    engine, final_tokens = s._engine, s._final_tokens
    block = (final_tokens - 1) // size  # the block of the last final token
    start, window = engine.engine.window_start(block * size), engine.blocks[block]
    ids = tagged.pieces.encode(tokens)
    assert final_tokens - block * size >= 4
    for t in range(block * size, final_tokens):  # final decisions kept their fusion rows
        torch.testing.assert_close(
            window.logits(t - start, tags[start : t + 1]),
            window_logits(tagged.model, ids, t, 2, tags=tags),
            atol=1e-5,
            rtol=0,
        )
    assert window.fusion_keys.shape[2] == final_tokens - start


def test_a_fused_stream_takes_revisions_and_time_limits(tagged):
    s = tagged.stream(lookahead=2)
    finals: dict[int, str] = {}
    check_events(s.push(["we", "don't", "know"]), finals)  # "do" final, "don't" not
    assert s.n_final == 1
    check_events(s.revise(1, ["never", "know", "it", "so", "we", "left"]), finals)
    check_events(s.finish(), finals)
    words = ["we", "never", "know", "it", "so", "we", "left"]
    expected = after_revision(tagged, ["we", "don't", "know"], 1, words, "auto")  # masked: a fused model
    assert [finals[i] for i in range(len(words))] == expected

    timed = tagged.stream(lookahead=2, max_delay_ms=500)
    finals = {}
    check_events(timed.push([Word("so", 0.0, 1.0), Word("we", 1.0, 1.2)]), finals)
    check_events(timed.tick(1.6), finals)  # "so" is past its deadline: decided with "we" alone
    assert sorted(finals) == [0]
    check_events(timed.push([Word("left", 1.6, 2.0)]), finals)
    check_events(timed.finish(), finals)
    assert sorted(finals) == [0, 1, 2]


def test_fused_streams_batch_with_plain_ones(tagged, tiny):
    """The scheduler's batch over fused and plain streams (two models) gives each stream's events."""
    specs = [(tagged, 2), (tiny, 1), (tagged, 0)]
    texts = [varied_words(60, seed=30 + i) for i in range(len(specs))]
    alone = [p.stream(lookahead=k) for p, k in specs]
    batched = [p.stream(lookahead=k) for p, k in specs]
    for start in range(0, 60, 3):
        jobs = [Job(s, Push(tuple(t[start : start + 3]))) for s, t in zip(batched, texts)]
        assert run_batch(jobs) == [s.push(t[start : start + 3]) for s, t in zip(alone, texts)]
    assert run_batch([Job(s, Finish()) for s in batched]) == [s.finish() for s in alone]
