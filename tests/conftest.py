import pytest
import torch

from streampunct import Punctuator
from streampunct.model import ModelConfig, PunctModel
from streampunct.pieces import WordPieces
from streampunct.punctuator import DEFAULT_CHECKPOINT


@pytest.fixture(scope="session")
def shipped() -> Punctuator:
    """The default checkpoint committed in the package."""
    return Punctuator.load(device="cpu")


@pytest.fixture(scope="session")
def tiny() -> Punctuator:
    """A random 6-layer model with small windows: cheap, and deep enough to expose any growth of
    the receptive field from layer to layer."""
    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=6, n_head=2, n_embd=32, n_inner=64, block=16, context=8, dropout=0.0)
    model = PunctModel(cfg).eval()
    return Punctuator(model, WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces))
