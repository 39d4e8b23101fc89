"""Training runs end to end on a small corpus made here: plain, with POS fusion, and distilled
from a teacher with another encoder and vocabulary."""

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from streampunct import CheckpointError, Punctuator
from streampunct.model import ModelConfig, PunctModel
from streampunct.pos import Tagger
from streampunct.punctuator import DEFAULT_CHECKPOINT
from streampunct.text import LABEL_ID
from streampunct.training.teacher import MixedAttention, TwoStreamTeacher, load_model, punctuator
from streampunct.training.train import TrainConfig, distill_loss, label_loss, rdrop_loss, taught_loss, train

from .conftest import hf_encoder

SENTENCES = [
    ("so what did you do today", "QUESTION"),
    ("i went to the market and bought some bread", "PERIOD"),
    ("well if you ask me it was a good day", "PERIOD"),
    ("can you tell me more about it", "QUESTION"),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, tagger_dir):
    d = tmp_path_factory.mktemp("corpus")
    lines = []
    for i in range(120):
        words, mark = SENTENCES[i % len(SENTENCES)]
        words = words.split()
        lines += [f"{w}\tO" for w in words[:-1]] + [f"{words[-1]}\t{mark}"]
    (d / "train.tsv").write_text("\n".join(lines) + "\n")
    tokens = [line.split("\t")[0] for line in lines]
    tagger = Tagger.load(tagger_dir)
    np.save(d / "tags.npy", np.array(tagger.tag_ids(tokens), dtype=np.uint8))
    return d


def config(corpus, out, **kw) -> TrainConfig:
    base = dict(
        train=str(corpus / "train.tsv"),
        dev=str(corpus / "train.tsv"),
        out=str(out),
        init=str(DEFAULT_CHECKPOINT),
        window=32,
        batch=2,
        max_steps=2,
        warmup=1,
        eval_every=2,
        dev_words=200,
        threads=1,
    )
    return TrainConfig(**{**base, **kw})


def test_train_continues_a_checkpoint(corpus, tmp_path):
    best = train(config(corpus, tmp_path))
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in history] == [2] and (best / "model.safetensors").is_file()
    labels = Punctuator.load(best, device="cpu").predict(["so", "what"])
    assert len(labels) == 2 and set(labels) <= {"O", "COMMA", "PERIOD", "QUESTION"}
    # the checkpoint's pause fusion goes on beside the text model it was trained over
    assert (best / "pauses.safetensors").read_bytes() == (
        DEFAULT_CHECKPOINT / "pauses.safetensors"
    ).read_bytes()


def test_a_run_resumes_from_its_last_state(corpus, tmp_path, capsys):
    """last.pt holds tensors and plain values only: it loads with weights_only=True and resumes."""
    train(config(corpus, tmp_path, max_steps=2, eval_every=1))
    assert torch.load(tmp_path / "last.pt", weights_only=True)["step"] == 2
    capsys.readouterr()
    train(config(corpus, tmp_path, max_steps=3, eval_every=1))
    assert "resumed at step 2" in capsys.readouterr().out
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in history] == [1, 2, 3]


def test_the_best_checkpoint_records_the_whole_dev_curve(corpus, tmp_path):
    # lr 0: the first evaluation is the best, the later ones only tie it
    best = train(config(corpus, tmp_path, max_steps=3, eval_every=1, lr=0.0))
    summary = json.loads((best / "training.json").read_text())
    assert summary["steps"] == 1 and [r["step"] for r in summary["curve"]] == [1, 2, 3]
    assert summary["config"]["lr"] == 0.0 and summary["start"] == str(DEFAULT_CHECKPOINT)
    # every stage of the checkpoint it continued, then this one: how a shipped model was made
    shipped = json.loads((DEFAULT_CHECKPOINT / "training.json").read_text())["stages"]
    assert summary["stages"][:-1] == shipped and summary["stages"][-1]["curve"] == summary["curve"]
    assert "stages" not in summary["stages"][-1]


@pytest.mark.parametrize("pos_init, weights_alone", [("tagger", False), ("random", False), ("tagger", True)])
def test_train_adds_pos_fusion(corpus, tmp_path, pos_init, weights_alone, tagger_dir):
    tags = str(corpus / "tags.npy")
    embedding = Tagger.load(tagger_dir).embedding
    tagger = None
    if weights_alone:  # the tagger's softmax weights alone, as on a machine without the tagger
        tagger = str(tmp_path / "pos_embedding.npy")
        np.save(tagger, embedding.float().numpy())
    best = train(config(corpus, tmp_path / "run", tags=tags, dev_tags=tags, pos_init=pos_init, tagger=tagger))
    p = Punctuator.load(best, device="cpu")
    assert p.model.cfg.n_tags == 53 and p.model.cfg.pos_dim == 512
    started_from_tagger = torch.allclose(p.model.tag_emb.weight, embedding, atol=0.05)
    assert started_from_tagger == (pos_init == "tagger")  # two small steps move it little
    assert len(p.predict("so what did you do today".split(), lookahead=2)) == 6
    assert not (best / "tagger").exists()  # flair's tagger: installed in the cache, not copied


def test_a_fused_checkpoint_keeps_the_tagger_it_trained_with(corpus, tmp_path, tagger_dir):
    """A tagger other than flair's (here one biased to say UH) travels with the checkpoint, so the
    model streams with the tags it learnt; ``tagger=`` still chooses another."""
    own = tmp_path / "own-tagger"
    shutil.copytree(tagger_dir, own)
    weights = load_file(str(own / "tagger.safetensors"))
    tags = json.loads((own / "tagger.json").read_text())["tags"]
    weights["linear.bias"][tags.index("UH")] += 100
    save_file(weights, str(own / "tagger.safetensors"))
    data = str(corpus / "tags.npy")
    best = train(config(corpus, tmp_path / "run", tags=data, dev_tags=data, tagger=str(own)))
    assert (best / "tagger" / "tagger.json").is_file()

    words = "so what did you do today".split()
    p = Punctuator.load(best, device="cpu")
    assert p.tagger.tag(words) == ["UH"] * 6
    flair = Punctuator.load(best, device="cpu", tagger=tagger_dir)
    assert flair.tagger.tag(words)[:3] == ["RB", "WP", "VBD"]
    with pytest.raises(CheckpointError, match="not a converted tagger"):
        Punctuator.load(best, device="cpu", tagger=tmp_path / "nowhere")


def test_tags_must_fit_the_corpus(corpus, tmp_path):
    np.save(tmp_path / "short.npy", np.zeros(5, dtype=np.uint8))
    with pytest.raises(ValueError, match="tags for"):
        train(
            config(
                corpus,
                tmp_path / "run",
                tags=str(tmp_path / "short.npy"),
                dev_tags=str(tmp_path / "short.npy"),
            )
        )


def test_distillation_follows_the_teacher(corpus, tmp_path):
    """A teacher with another encoder (MPNet's attention) and its own small vocabulary, made to say
    QUESTION after every word: learning from its probabilities alone (``distill=1``), the student
    comes to say QUESTION far more often than the labels, or its start, would have it."""
    words = sorted({w for sentence, _ in SENTENCES for w in sentence.split()})
    hf_encoder("mpnet", tmp_path / "encoder", words)
    teacher = PunctModel.from_encoder(tmp_path / "encoder")
    with torch.no_grad():
        teacher.head.bias[LABEL_ID["QUESTION"]] = 50.0
    teacher.save(tmp_path / "teacher")
    shutil.copy(tmp_path / "encoder" / "vocab.txt", tmp_path / "teacher" / "vocab.txt")

    lines = [line.split("\t") for line in (corpus / "train.tsv").read_text().splitlines()[:200]]
    tokens = [w for w, _ in lines]
    questions = sum(label == "QUESTION" for _, label in lines)
    before = Punctuator.load(DEFAULT_CHECKPOINT, device="cpu").predict(tokens).count("QUESTION")
    run = config(
        corpus, tmp_path / "run", teacher=str(tmp_path / "teacher"), distill=1.0, max_steps=12,
        eval_every=12, lr=1e-3,
    )  # fmt: skip
    after = Punctuator.load(train(run), device="cpu").predict(tokens).count("QUESTION")
    assert after > max(before, questions) + 50


def test_distillation_checks_its_weights(corpus, tmp_path):
    with pytest.raises(ValueError, match="distill"):
        train(config(corpus, tmp_path / "run", teacher=str(DEFAULT_CHECKPOINT), distill=0.0))


def test_taught_windows_learn_the_teacher_and_the_rest_their_labels():
    """Distillation on the windows taught alone: none taught adds nothing; all taught is the loss of
    every window distilled, ``(1 - d) * labels + d * teacher``; some taught, their words alone change."""
    torch.manual_seed(0)
    logits, teacher = torch.randn(3, 6, 4), torch.randn(3, 6, 4)
    target = torch.randint(0, 4, (3, 6))
    target[:, -2:] = -100
    cfg = TrainConfig(train="", dev="", out="", distill=0.3)
    keep = target != -100
    none, every = torch.zeros(3, dtype=torch.bool), torch.ones(3, dtype=torch.bool)
    assert taught_loss(logits, teacher, target, none, cfg) == 0
    labels = label_loss(logits, target)
    whole = labels + 0.3 * taught_loss(logits, teacher, target, every, cfg)
    expected = 0.7 * labels + 0.3 * distill_loss(logits, teacher, keep, cfg.temperature)
    assert torch.allclose(whole, expected)
    some = torch.tensor([True, False, False])  # one window in three: its words, a third of the batch's
    words = keep & some[:, None]
    part = (
        distill_loss(logits, teacher, words, 2.0) - label_loss(logits, target.masked_fill(~words, -100))
    ) / 3
    assert torch.allclose(taught_loss(logits, teacher, target, some, cfg), part)


def test_only_the_taught_texts_windows_are_taught(corpus, tmp_path):
    """``--taught`` text is trained beside ``--train``: a window is taught where it starts in it."""
    from streampunct.pieces import WordPieces
    from streampunct.training.train import Corpus, make_batches

    (tmp_path / "taught.tsv").write_text("\n".join(f"ted{i % 7}\tO" for i in range(2000)) + "\n")
    data = Corpus(
        str(corpus / "train.tsv"),
        WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", 3),
        taught=str(tmp_path / "taught.tsv"),
    )
    assert len(data) == data.first_taught + 2000
    cfg = config(corpus, "unused", window=40, batch=8, noise=0.0, teacher=str(DEFAULT_CHECKPOINT))
    model_cfg = PunctModel.load(DEFAULT_CHECKPOINT).cfg
    batches = make_batches(data, cfg, model_cfg, np.random.default_rng(0), model_cfg)
    seen = set()
    for _ in range(10):
        b = next(batches)
        for taught, target in zip(b.taught.tolist(), b.target):
            marked = bool((target > 0).any())  # the taught text has no marks, every sentence here one
            assert marked != taught
            seen.add(taught)
    assert seen == {True, False}
    with pytest.raises(ValueError, match="teacher"):
        train(config(corpus, tmp_path / "run", taught=str(tmp_path / "taught.tsv")))


def test_window_engine_batches(corpus):
    """A window-engine batch: offline attention over windows of context + 5 words, loss on the last
    5 (0 to 4 words ahead); the other batches keep their lookahead and their loss."""
    from streampunct.pieces import WordPieces
    from streampunct.training.train import WINDOW_TAIL, Corpus, make_batches

    model_cfg = PunctModel.load(DEFAULT_CHECKPOINT).cfg
    data = Corpus(str(corpus / "train.tsv"), WordPieces(DEFAULT_CHECKPOINT / "vocab.txt", 3))
    cfg = config(corpus, "unused", window=64, batch=4, window_share=0.5, noise=0.0)
    batches = make_batches(data, cfg, model_cfg, np.random.default_rng(0))
    kinds = set()
    for _ in range(20):
        b = next(batches)
        kept = (b.target != -100).sum(1)
        if b.inputs[2].shape[1] == model_cfg.context + WINDOW_TAIL + 1:  # a window-engine batch
            kinds.add("window")
            assert b.lookahead is None and len(b.target) == 4 * 64 // (model_cfg.context + WINDOW_TAIL + 1)
            assert kept.tolist() == [WINDOW_TAIL + 1] * len(b.target)
            assert (b.target[:, -WINDOW_TAIL - 1 :] != -100).all()
        else:
            kinds.add("other")
            assert len(b.target) == 4 and (kept > WINDOW_TAIL + 1).all()
    assert kinds == {"window", "other"}


@pytest.mark.parametrize(
    "parts",
    [
        dict(interaction=True, masked_stream=True, rdrop=1.0),  # FFA
        dict(interaction=False, masked_stream=True, stream_fusion=False),  # its ablation's last row
    ],
)
def test_train_makes_the_two_stream_teacher(corpus, tmp_path, parts):
    """FFA's teacher grows from the plain checkpoint it continues (its encoder in both streams), is
    trained with R-Drop's two passes where asked, and its checkpoint comes back as it was made: it
    labels text and teaches a student through the training tools; the product refuses it."""
    best = train(config(corpus, tmp_path, **parts))
    model = load_model(best)
    plain = PunctModel.load(DEFAULT_CHECKPOINT)
    assert isinstance(model, TwoStreamTeacher)
    cfg = model.cfg
    assert (cfg.interaction, cfg.masked_stream) == (
        parts.get("interaction", False),
        parts.get("masked_stream", False),
    )
    assert (model.masked is not None) == cfg.masked_stream and (model.fusion is not None) == (
        cfg.masked_stream and cfg.stream_fusion
    )
    assert isinstance(model.layers[0].attn, MixedAttention) == cfg.interaction and not model.cfg.pause_hidden
    assert model.n_params() > (1.9 if cfg.masked_stream else 1.0) * (plain.n_params() - 1000)
    labels = punctuator(best, device="cpu").predict(["so", "what", "did", "you", "do"], lookahead=2)
    assert len(labels) == 5 and set(labels) <= {"O", "COMMA", "PERIOD", "QUESTION"}
    with pytest.raises(CheckpointError, match="two-stream teacher, a training tool"):
        Punctuator.load(best, device="cpu")  # the product loads what ships
    if cfg.interaction:  # a student learns from it
        student = train(config(corpus, tmp_path / "student", teacher=str(best)))
        assert (student / "model.safetensors").is_file()


def test_configs_with_the_teachers_keys_off_load_as_before(tmp_path):
    """config.json files written before the teacher moved out of the model carry its keys, off: the
    product's model reads them as it did."""
    model = PunctModel(ModelConfig(n_layer=2, n_head=2, n_embd=32, n_inner=64, dropout=0.0)).eval()
    model.save(tmp_path)
    raw = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(
        json.dumps({**raw, "interaction": False, "masked_stream": False, "stream_fusion": True})
    )
    again = PunctModel.load(tmp_path)
    assert type(again) is PunctModel and again.cfg == model.cfg and type(load_model(tmp_path)) is PunctModel


def test_rdrop_loss_is_the_distance_between_two_passes():
    a = torch.randn(2, 5, 4)
    keep = torch.ones(2, 5, dtype=torch.bool)
    assert rdrop_loss(a, a, keep).item() == pytest.approx(0.0, abs=1e-6)
    b = a + torch.randn(2, 5, 4)
    assert rdrop_loss(a, b, keep).item() > 0
    assert rdrop_loss(a, b, keep).item() == pytest.approx(rdrop_loss(b, a, keep).item())
