"""The model's building blocks: the fast few-row product, the encoders it starts from, and
checkpoints from before QKV fusion."""

import copy

import pytest
import torch

from streampunct.model import FEW_ROWS, Linear, ModelConfig, PunctModel, int8_available

from .conftest import hf_encoder


def test_few_rows_give_the_plain_product_and_follow_weight_changes():
    torch.manual_seed(0)
    layer = Linear(96, 160).eval()
    x = torch.randn(FEW_ROWS + 8, 96)
    with torch.no_grad():
        full = layer(x)  # more than FEW_ROWS rows: the plain product
        torch.testing.assert_close(full, torch.nn.functional.linear(x, layer.weight, layer.bias))
        few = torch.cat([layer(x[i : i + 3]) for i in range(0, 9, 3)])  # the prepacked product
        torch.testing.assert_close(few, full[:9], atol=1e-5, rtol=0)
        assert torch.equal(layer(x[:1]), layer(x[:5])[:1])  # a row's result ignores its neighbours
        layer.weight.mul_(2)  # changed in place (as load_state_dict does): packed again
        torch.testing.assert_close(layer(x[:3]), 2 * full[:3] - layer.bias, atol=1e-4, rtol=0)
    twin = copy.deepcopy(layer)  # a packed weight is not copied, it is made again
    with torch.no_grad():
        assert torch.equal(twin(x[:3]), layer(x[:3]))
    x.requires_grad_(True)
    layer.train()(x[:3]).sum().backward()  # training takes the plain product, with gradients
    assert x.grad is not None and layer.weight.grad is not None


@pytest.mark.skipif(not int8_available(), reason="torch._int_mm does not run on this CPU")
def test_int8_rows_ignore_their_neighbours_and_stay_near_fp32():
    """int8 inference: a row's result is the same alone or among others (a stream's labels do not
    depend on its batch-mates), within about 1 % of fp32, and follows weight changes; training
    takes the fp32 product."""
    torch.manual_seed(0)
    layer = Linear(96, 160).eval()
    x = torch.randn(FEW_ROWS + 8, 96)
    with torch.no_grad():
        exact = layer(x)
        layer.int8 = True
        q = layer(x)
        assert (q - exact).abs().max() < 0.02 * exact.abs().max()
        assert all(torch.equal(layer(x[i : i + 1]), q[i : i + 1]) for i in (0, 5, FEW_ROWS + 7))
        assert torch.equal(layer(x[None, 3:9]), q[None, 3:9])  # any leading shape
        layer.weight.mul_(2)
        assert (layer(x) - 2 * exact + layer.bias).abs().max() < 0.04 * exact.abs().max()
    layer.train()
    torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight, layer.bias))


def test_checkpoints_with_separate_query_key_value_load(tmp_path, shipped):
    model = shipped.model
    model.save(tmp_path)
    from safetensors.torch import load_file, save_file

    state = load_file(str(tmp_path / "model.safetensors"))
    for name in [k for k in state if k.endswith("attn.qkv.weight") or k.endswith("attn.qkv.bias")]:
        prefix, p = name.rsplit("qkv.", 1)
        for part, chunk in zip(("query", "key", "value"), state.pop(name).chunk(3)):
            state[f"{prefix}{part}.{p}"] = chunk.contiguous()
    save_file(state, str(tmp_path / "model.safetensors"))
    old = PunctModel.load(tmp_path)
    for (name, a), b in zip(model.state_dict().items(), old.state_dict().values()):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3, msg=name)  # the fp16 round trip


@pytest.mark.parametrize("kind", ["bert", "mpnet"])
def test_encoders_read_as_transformers_runs_them(tmp_path, kind):
    hf = hf_encoder(kind, tmp_path)
    model = PunctModel.from_encoder(tmp_path).eval()
    ids = torch.randint(5, model.cfg.vocab_size, (2, 30))
    ids[:, 0] = model.cfg.cls_id
    word_pos = torch.arange(30).expand(2, -1) - 1
    with torch.no_grad():
        torch.testing.assert_close(
            model.encode(ids, word_pos, None), hf(ids).last_hidden_state, atol=1e-5, rtol=0
        )
    model.train()  # every encoder parameter learns, the relative position bias too
    model(ids, word_pos, torch.arange(1, 30).expand(2, -1), lookahead=2).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    if kind == "mpnet":
        assert model.cfg.rel_buckets == 32 and model.cfg.pos_offset == 2 and model.cfg.n_types == 0


def test_an_mpnet_checkpoint_rebuilds_itself(tmp_path):
    hf_encoder("mpnet", tmp_path / "encoder")
    model = PunctModel.from_encoder(tmp_path / "encoder").eval()
    model.save(tmp_path / "punct")
    again = PunctModel.load(tmp_path / "punct")
    assert again.cfg == model.cfg and again.rel_bias is not None and again.type_emb is None
    ids = torch.randint(5, model.cfg.vocab_size, (1, 20))
    ids[:, 0] = model.cfg.cls_id
    word_pos, word_ends = torch.arange(20)[None] - 1, torch.arange(1, 20)[None]
    with torch.no_grad():
        torch.testing.assert_close(
            again(ids, word_pos, word_ends, 1), model(ids, word_pos, word_ends, 1), atol=2e-3, rtol=0
        )


def test_int8_checkpoint(tmp_path):
    """save(int8=True): the word embeddings (30,522 x 32) in int8 with a scale per 32 weights, the
    small matrices fp16; loading restores every weight to within half a step of its group."""
    from safetensors.torch import load_file

    torch.manual_seed(0)
    model = PunctModel(ModelConfig(n_layer=2, n_head=2, n_embd=32, n_inner=64, dropout=0.0)).eval()
    model.save(tmp_path, int8=True)
    stored = load_file(str(tmp_path / "model.safetensors"))
    assert stored["tok_emb.weight.q8"].dtype == torch.int8 and "tok_emb.weight" not in stored
    assert stored["layers.0.attn.qkv.weight"].dtype == torch.float16
    again = PunctModel.load(tmp_path)
    step = stored["tok_emb.weight.scale"].float().repeat_interleave(32, dim=1)  # (30522, 1) -> (30522, 32)
    assert ((again.tok_emb.weight - model.tok_emb.weight).abs() <= step / 2 + 1e-6).all()
    ids = torch.randint(5, 30522, (1, 20))
    word_pos, word_ends = torch.arange(20)[None] - 1, torch.arange(1, 20)[None]
    with torch.no_grad():
        torch.testing.assert_close(
            again(ids, word_pos, word_ends, 1), model(ids, word_pos, word_ends, 1), atol=2e-2, rtol=0
        )


def test_unknown_encoder_is_refused(tmp_path):
    from streampunct import CheckpointError

    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    (tmp_path / "vocab.txt").write_text("[PAD]\n")
    with pytest.raises(CheckpointError, match="gpt2"):
        PunctModel.from_encoder(tmp_path)
