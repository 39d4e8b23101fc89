"""The light model (streampunct.light): its streams are exact, revisable and bounded like the
encoder engines' (the stateful machine in test_stream_states.py runs it too), its checkpoints load
by path or name, and its ONNX graph gives the same labels."""

import asyncio

import pytest
import torch

from streampunct import InputError, Punctuator
from streampunct.light import LightConfig, LightEngine, LightModel, is_light, piece_tensor
from streampunct.pieces import WordPieces
from streampunct.punctuator import DEFAULT_CHECKPOINT
from streampunct.scheduler import Batcher

from .test_stream import after_revision, check_events, run_stream, varied_words


@pytest.fixture(scope="module")
def light() -> Punctuator:
    torch.manual_seed(0)
    cfg = LightConfig(n_embd=16, n_input=32, n_hidden=32, n_head=2, context=6, offline_ahead=8, dropout=0.0)
    model = LightModel(cfg).eval()
    with torch.no_grad():  # labels that vary, so that a wrong decision shows
        model.out[-1].weight.normal_(0, 1.0)
        model.out[-1].bias.copy_(torch.tensor([0.5, 0.0, -0.1, -0.3]))
    model.set_label_bias([[0.0, 0.1 * j, -0.1 * j, 0.05 * j] for j in range(5)] + [[0.0, 0.2, 0.1, 0.0]])
    return Punctuator(model, WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", cfg.max_pieces))


@pytest.mark.parametrize("k", [0, 1, 2, 4])
def test_stream_equals_predict(light, k):
    words = varied_words(1200, seed=30 + k)
    labels = light.predict(words, lookahead=k)
    assert len(set(labels)) > 1
    assert run_stream(light.stream(lookahead=k), words, seed=k) == labels


def test_offline_reads_further_than_any_lookahead(light):
    words = varied_words(300, seed=7)
    e = LightEngine(light.model)
    ids = light.pieces.encode(words)
    assert not torch.equal(e.logits(ids, None), e.logits(ids, 2))


def test_revision_replaces_the_tail(light):
    words = varied_words(300, seed=3)
    s = light.stream(lookahead=2)
    finals: dict[int, str] = {}
    check_events(s.push(words), finals)
    cut = s.n_final
    revised = words[:cut] + varied_words(60, seed=4)
    check_events(s.revise(cut, revised[cut:]), finals)
    check_events(s.finish(), finals)
    assert [finals[i] for i in range(len(revised))] == after_revision(light, words, cut, revised, "auto")


def test_memory_is_flat(light):
    s = light.stream(lookahead=2)
    words = varied_words(4000, seed=9)
    held = []
    for i in range(0, len(words), 10):
        s.push(words[i : i + 10])
        held.append(s.held())
    late = held[len(held) // 2 :]
    assert max(h.tokens for h in late) <= light.model.cfg.context + 2 * s.FORGET_EVERY + 20


def test_many_streams_through_the_batcher_equal_each_alone(light):
    texts = [varied_words(120, seed=40 + i) for i in range(6)]

    async def main() -> list[list[str]]:
        batcher = Batcher(max_batch=8)
        streams = [light.stream(lookahead=2) for _ in texts]
        finals: list[dict[int, str]] = [{} for _ in texts]

        async def speak(i: int) -> None:
            for j in range(0, len(texts[i]), 7):
                check_events(await batcher.push(streams[i], texts[i][j : j + 7]), finals[i])
            check_events(await batcher.finish(streams[i]), finals[i])

        await asyncio.gather(*(speak(i) for i in range(len(texts))))
        await batcher.close()
        return [[f[j] for j in range(len(f))] for f in finals]

    assert asyncio.run(main()) == [light.predict(t, lookahead=2) for t in texts]


def test_checkpoint_round_trip(light, tmp_path):
    light.model.save(tmp_path)
    (tmp_path / "vocab.txt").write_text((DEFAULT_CHECKPOINT / "vocab.txt").read_text())
    assert is_light(tmp_path) and not is_light(DEFAULT_CHECKPOINT)
    loaded = Punctuator.load(tmp_path, device="cpu")
    assert isinstance(loaded.model, LightModel)
    words = varied_words(200, seed=11)
    for k in (0, 2, None):  # fp16 on disk: labels, not logits, are kept
        assert loaded.predict(words, lookahead=k) == light.predict(words, lookahead=k)
    assert loaded.punctuate("so what do you think i think it works") != ""
    with pytest.raises(InputError, match="int8 is for the transformer models"):
        Punctuator.load(tmp_path, device="cpu", int8=True)


@pytest.mark.parametrize("engine", ["masked", "window"])
def test_the_encoder_engines_are_refused(light, engine):
    with pytest.raises(InputError, match="light model"):
        light.stream(lookahead=2, engine=engine)


def test_onnx_graph_gives_the_same_labels(light, tmp_path):
    pytest.importorskip("onnx")
    from streampunct.light_onnx import OnnxLight, export_onnx

    graph = OnnxLight(export_onnx(light.model, tmp_path / "light.onnx"))
    e = LightEngine(light.model)
    for n in (1, 40, 400):
        ids = light.pieces.encode(varied_words(n, seed=n))
        for k in (0, 2, None):
            want = e.logits(ids, k)
            got = torch.from_numpy(graph.logits(piece_tensor(ids, light.model.cfg), k))
            assert torch.allclose(got, want, atol=1e-4)
            assert got.argmax(-1).tolist() == want.argmax(-1).tolist()


def test_export_onnx_command(light, tmp_path, capsys):
    pytest.importorskip("onnx")
    from streampunct.cli import main

    light.model.save(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "vocab.txt").write_text((DEFAULT_CHECKPOINT / "vocab.txt").read_text())
    assert main(["export-onnx", str(tmp_path / "light.onnx"), "--model", str(tmp_path / "ckpt")]) == 0
    assert (tmp_path / "light.onnx").stat().st_size > 10_000
    assert "lookahead" in capsys.readouterr().out


@pytest.mark.model  # loads the shipped default
def test_export_onnx_refuses_an_encoder_model(capsys):
    from streampunct.cli import main

    assert main(["export-onnx", "/tmp/never.onnx", "--model", "default"]) == 2
    assert "light model" in capsys.readouterr().err
