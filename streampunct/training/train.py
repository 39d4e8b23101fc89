"""Training: one checkpoint for every lookahead and for the offline mode.

- Sequence boundary sampling (Shi et al. 2021, §2.2): windows of ``window`` words start anywhere
  in the corpus, uniformly, so no sentence boundary is privileged and every word meets every
  position.
- ASR-noise augmentation (Lai et al. 2023, §3.2): each word is duplicated, replaced by a random
  corpus word, or deleted, with probability ``noise`` each.
- The lookahead is drawn per batch from ``LOOKAHEAD_CHOICES`` (``None`` = offline), and the last
  words of a window, which lack the right context they will have at inference, carry no loss.
- A share ``window_share`` of the batches trains the window engine (see :mod:`streampunct.punctuator`):
  offline attention over windows of ``context + WINDOW_TAIL + 1`` words, with loss on the last
  ``WINDOW_TAIL + 1``, each seen with 0 to ``WINDOW_TAIL`` words ahead as that engine sees them.
- Distillation (``teacher``): the model also learns a trained checkpoint's word probabilities
  (a larger encoder's, any vocabulary) at the batch's lookahead, at ``temperature``, with weight
  ``distill`` against the labels' ``1 - distill``.
- Model selection on a dev set (mean of micro-F1 at k=2 and offline; k=2 under the window engine
  when it is trained), early stopping after
  ``patience`` evaluations without gain; ``last.pt`` in the output folder resumes a run exactly.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import ClassVar, Literal, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F

from ..decision import Decider
from ..engines import label_tokens
from ..errors import CheckpointError, DataFormatError, InputError
from ..metrics import score
from ..model import ModelConfig, PunctModel
from ..pieces import WordPieces, collate, collate_tags
from ..punctuator import resolve_device
from ..text import LABEL_ID, LABELS, normalize_labeled, read_iwslt
from .teacher import TeacherConfig, TwoStreamTeacher, load_model

__all__ = ["TrainConfig", "train"]

LOOKAHEAD_CHOICES: tuple[int | None, ...] = (None, None, None, 0, 1, 2, 2, 3, 4, 6, 8)
ENCODER = ("tok_emb.", "pos_emb.", "type_emb.", "ln_emb.", "rel_bias.", "layers.")  # parameter names
OFFLINE_LOSS_CUT = 16  # offline windows: the last words lack right context; no loss on them
WINDOW_TAIL = 4  # window-engine batches: loss on the words with 0 to 4 words after them


@dataclass(frozen=True)
class TrainConfig:
    train: str
    dev: str
    out: str
    encoder: str | None = None
    init: str | None = None
    window: int = 128
    batch: int = 16
    lr: float = 1.5e-4
    warmup: int = 200
    max_steps: int = 2800
    max_minutes: float = 0.0
    noise: float = 0.05
    eval_every: int = 350
    dev_words: int = 20000
    patience: int = 6
    seed: int = 1
    device: str = "auto"
    threads: int = 0
    workers: int = 0
    tags: str | None = None
    dev_tags: str | None = None
    pos_init: Literal["tagger", "random"] = "tagger"
    freeze_encoder: bool = False
    tagger: str | None = None
    teacher: str | None = None
    taught: str | None = None
    distill: float = 0.5
    temperature: float = 2.0
    window_share: float = 0.0
    interaction: bool = False
    masked_stream: bool = False
    stream_fusion: bool = True
    rdrop: float = 0.0

    HELP: ClassVar[dict[str, str]] = {  # what each field is (and the help of its CLI flag)
        "batch": "windows per training step",
        "lr": "peak learning rate (AdamW), after warmup",
        "warmup": "steps of linear warmup",
        "max_steps": "training steps; the learning rate decays linearly to zero over them",
        "seed": "random seed of batches, noise and initialisation",
        "train": "word<TAB>LABEL training file",
        "dev": "word<TAB>LABEL dev file, for model selection",
        "out": "run folder: best/ checkpoint, last.pt, history.jsonl",
        "encoder": "Hugging Face BERT or MPNet folder to start from (CLI: the installed MiniLM-L6)",
        "init": "or a streampunct checkpoint folder to continue from (fresh optimizer)",
        "window": "words per training window",
        "max_minutes": "also end after this many minutes of training steps; the learning rate decays "
        "to zero at whichever end comes first (0: no time limit)",
        "noise": "ASR-noise rate of each of dup/sub/del",
        "eval_every": "steps between dev evaluations",
        "dev_words": "dev words each evaluation scores",
        "patience": "evaluations without gain before training stops",
        "device": "cpu, cuda, cuda:1 ... (auto: cuda if present)",
        "threads": "torch CPU threads (0: torch's default)",
        "workers": "processes that make batches, for fast GPUs (0: in the training loop, exactly resumable)",
        "tags": "POS tag ids of the training tokens (.npy): train a POS-fused model",
        "dev_tags": "POS tag ids of the dev tokens (.npy), with tags",
        "pos_init": "POS embeddings from the tagger's softmax weights, or random (the ablation of "
        "Shi et al.'s Table 2)",
        "freeze_encoder": "train only the layers after the encoder (POS fusion and the classifier)",
        "tagger": "converted tagger folder (default: the one fetch-tagger installs), or its softmax "
        "weights alone (a .npy of Tagger.embedding), where the tagger is not at hand",
        "teacher": "distil a trained streampunct checkpoint folder (e.g. an MPNet model) into this one",
        "taught": "word<TAB>LABEL text the teacher teaches on, trained beside --train: then only its "
        "windows learn the teacher's probabilities (default: every window does)",
        "distill": "weight of the teacher's probabilities in the loss, 0 to 1 (the labels': the rest)",
        "temperature": "softening of the teacher's and the student's probabilities in distillation",
        "window_share": "share of batches that train the window engine, 0 to 1 (dev k=2 is then "
        "scored with it)",
        "interaction": "FFA's teacher: attention mixes its heads' scores (interaction self-attention)",
        "masked_stream": "FFA's teacher: a second encoder that sees no word ahead, beside the first",
        "stream_fusion": "FFA's teacher: one transformer layer fuses the two streams (off: the "
        "concatenation goes straight to the classifier)",
        "rdrop": "weight of R-Drop: the symmetric KL between two dropout passes of each batch (0: one pass)",
    }


class Corpus:
    """A labelled corpus as arrays of word-type ids and label ids (and POS tag ids, for training a
    POS-fused model), for fast window sampling."""

    def __init__(
        self,
        path: str,
        pieces: WordPieces,
        tags: str | None = None,
        teacher_pieces: WordPieces | None = None,
        taught: str | None = None,
    ):
        tokens, labels = normalize_labeled(*read_iwslt(path))
        # windows that start from here on learn the teacher's probabilities: the taught text's
        self.first_taught = len(tokens) if taught else 0
        if taught:
            if tags:
                raise InputError("taught text has no POS tags: train a POS-fused model without --taught")
            more = normalize_labeled(*read_iwslt(taught))
            tokens, labels = tokens + more[0], labels + more[1]
        types: dict[str, int] = {}
        self.words = np.array([types.setdefault(t, len(types)) for t in tokens], dtype=np.int32)
        self.labels = np.array([LABEL_ID[lab] for lab in labels], dtype=np.int64)
        self.type_pieces = pieces.encode(list(types))
        self.tags = load_tags(tags, len(tokens)) if tags else None
        # the teacher's word pieces, when it reads another vocabulary
        self.teacher_type_pieces = teacher_pieces.encode(list(types)) if teacher_pieces else None

    def __len__(self) -> int:
        return len(self.words)

    def sample(self, rng: np.random.Generator, length: int, noise: float) -> tuple[list[int], list[int]]:
        """One window at a uniformly random start, with ASR-like noise: the corpus position each
        word comes from (its word type and tag are there), and the labels."""
        start = int(rng.integers(0, len(self.words) - length))
        positions = list(range(start, start + length))
        labels = self.labels[start : start + length].tolist()
        if noise <= 0:
            return positions, labels
        out_p: list[int] = []
        out_l: list[int] = []
        draws = rng.random(length)
        for pos, lab, r in zip(positions, labels, draws):
            if r < noise:  # duplication: the recogniser repeats a word
                out_p += [pos, pos]
                out_l += [0, lab]
            elif r < 2 * noise:  # substitution by a word drawn from the corpus
                out_p.append(int(rng.integers(0, len(self.words))))
                out_l.append(lab)
            elif r < 3 * noise:  # deletion: its mark moves to the word before
                if lab and out_l and out_l[-1] == 0:
                    out_l[-1] = lab
            else:
                out_p.append(pos)
                out_l.append(lab)
        return out_p, out_l


def load_tags(path: str, n: int) -> np.ndarray:
    """POS tag ids of a corpus's tokens (a .npy made by ``Tagger``), checked against its length."""
    tags = np.load(path)
    if tags.ndim != 1 or len(tags) != n:
        raise DataFormatError(f"{tags.shape} tags for {n:,} tokens", path)
    return tags.astype(np.int64)


class Batch(NamedTuple):
    lookahead: int | None
    inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # input_ids, word_pos, word_ends
    target: torch.Tensor  # (B, W) label ids, -100 where no loss
    tags: torch.Tensor | None  # (B, W) POS tag ids, for a POS-fused model
    teacher_inputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None  # in the teacher's pieces
    taught: torch.Tensor  # (B,) whether each window learns the teacher's probabilities


def make_batches(
    corpus: Corpus,
    cfg: TrainConfig,
    model_cfg: ModelConfig,
    rng: np.random.Generator,
    teacher_cfg: ModelConfig | None = None,
) -> Iterator[Batch]:
    """Endless training batches."""
    while True:
        k = LOOKAHEAD_CHOICES[int(rng.integers(len(LOOKAHEAD_CHOICES)))]
        length, n_windows = cfg.window, cfg.batch
        window_batch = cfg.window_share > 0 and rng.random() < cfg.window_share
        if window_batch:  # the window engine's windows, as many words in all as a batch of the others
            k, length = None, model_cfg.context + WINDOW_TAIL + 1
            n_windows = max(1, cfg.batch * cfg.window // length)
        windows = [corpus.sample(rng, length, cfg.noise) for _ in range(n_windows)]
        words = [corpus.words[ps].tolist() for ps, _ in windows]
        input_ids, word_pos, word_ends = collate(
            [[corpus.type_pieces[w] for w in ws] for ws in words], model_cfg
        )
        tags = (
            collate_tags([corpus.tags[ps].tolist() for ps, _ in windows]) if corpus.tags is not None else None
        )
        teacher_inputs = None
        if teacher_cfg is not None:
            table = corpus.teacher_type_pieces or corpus.type_pieces
            teacher_inputs = collate([[table[w] for w in ws] for ws in words], teacher_cfg)
        target = torch.full((n_windows, word_ends.shape[1]), -100, dtype=torch.long)
        cut = OFFLINE_LOSS_CUT if k is None else k
        for b, (_, labs) in enumerate(windows):
            if window_batch:
                first = max(0, len(labs) - WINDOW_TAIL - 1)
                target[b, first : len(labs)] = torch.tensor(labs[first:])
            else:
                n = len(labs) - cut
                target[b, :n] = torch.tensor(labs[:n])
        taught = torch.tensor([ps[0] >= corpus.first_taught for ps, _ in windows])
        yield Batch(k, (input_ids, word_pos, word_ends), target, tags, teacher_inputs, taught)


class Batches(torch.utils.data.IterableDataset):
    """:func:`make_batches` in DataLoader workers, each with its own seed (for GPU training)."""

    def __init__(
        self,
        corpus: Corpus,
        cfg: TrainConfig,
        model_cfg: ModelConfig,
        seed: tuple[int, ...],
        teacher_cfg: ModelConfig | None = None,
    ):
        self.corpus, self.cfg, self.model_cfg, self.seed = corpus, cfg, model_cfg, seed
        self.teacher_cfg = teacher_cfg

    def __iter__(self) -> Iterator[Batch]:
        info = torch.utils.data.get_worker_info()
        rng = np.random.default_rng((*self.seed, info.id if info else 0))
        return make_batches(self.corpus, self.cfg, self.model_cfg, rng, self.teacher_cfg)


def distill_loss(
    student: torch.Tensor, teacher: torch.Tensor, keep: torch.Tensor, temperature: float
) -> torch.Tensor:
    """KL(teacher || student) of the words kept, both softened by ``temperature`` (times its square,
    so that the gradient's scale does not depend on it; Hinton et al. 2015)."""
    s = F.log_softmax(student[keep].float() / temperature, dim=-1)
    t = F.log_softmax(teacher[keep].float() / temperature, dim=-1)
    return F.kl_div(s, t, log_target=True, reduction="batchmean") * temperature**2


def taught_loss(
    logits: torch.Tensor, teacher: torch.Tensor, target: torch.Tensor, taught: torch.Tensor, cfg: TrainConfig
) -> torch.Tensor:
    """What distillation adds to the label loss, per ``distill``: on the words of the windows taught,
    the teacher's KL in place of their labels' cross-entropy, at the share of the batch's words
    they are (every window taught: the loss is ``(1 - distill) * labels + distill * teacher``)."""
    keep = target != -100
    words = keep & taught[:, None]
    if not words.any():
        return logits.new_zeros(())
    share = words.sum() / keep.sum()
    own = label_loss(logits, target.masked_fill(~words, -100))
    return share * (distill_loss(logits, teacher, words, cfg.temperature) - own)


def evaluate_tokens(
    model: PunctModel,
    pieces: WordPieces,
    tokens: list[str],
    labels: list[str],
    k: int | None,
    tags: list[int] | None = None,
    engine: str = "masked",
) -> float:
    model.eval()
    pred = label_tokens(model, pieces, tokens, k, tags, engine)
    return score(labels, [LABELS[i] for i in pred]).micro_f1


def pos_embedding(tagger: str | None) -> torch.Tensor:
    """The tagger's softmax weights (n_tags, pos_dim): from a converted tagger folder (default: the
    cache), or from a ``.npy`` of them alone, for training where the tagger is not at hand."""
    if tagger and tagger.endswith(".npy"):
        return torch.from_numpy(np.load(tagger)).float()
    from ..pos import Tagger

    return Tagger.load(tagger).embedding.float().cpu()


def trained_tagger(cfg: TrainConfig) -> Path | None:
    """The tagger a fused model trains with, when it is not flair's: a tagger folder given as
    ``--tagger``, or the one the continued checkpoint keeps. The best checkpoint keeps a copy
    (``best/tagger/``), so that it streams with the tagger whose tags it learnt."""
    from ..pos import cache_dir, is_tagger

    for d in (cfg.tagger, cfg.init and Path(cfg.init) / "tagger"):
        if d and is_tagger(Path(d)) and Path(d).resolve() != cache_dir().resolve():
            return Path(d)
    return None


def with_pos_fusion(model: PunctModel, cfg: TrainConfig) -> PunctModel:
    """The model with POS fusion added (``--tags``), starting where the plain model is.

    The encoder is kept, the rest starts as :func:`starts_as` says. The tag embeddings start from the tagger's softmax weights (``pos_init="tagger"``) or at
    random with the same spread (``"random"``, the ablation).
    """
    if cfg.pos_init not in ("tagger", "random"):
        raise InputError(f"pos_init is 'tagger' or 'random', not {cfg.pos_init!r}")
    embedding = pos_embedding(cfg.tagger)
    fused = PunctModel(replace(model.cfg, n_tags=embedding.shape[0], pos_dim=embedding.shape[1]))
    encoder = {k: v for k, v in model.state_dict().items() if not k.startswith("head.")}
    missing, unexpected = fused.load_state_dict(encoder, strict=False)
    if unexpected or not all(k.startswith(("tag_emb.", "fusion.", "head.")) for k in missing):
        raise CheckpointError(f"cannot add POS fusion to this model: {unexpected or missing}")
    if cfg.pos_init == "random":
        embedding = torch.randn_like(embedding) * embedding.std()
    fused.init_pos_embedding(embedding)
    return starts_as(fused, model)


@torch.no_grad()
def starts_as(wider: PunctModel, plain: PunctModel) -> PunctModel:
    """A model whose words' features grew beside the plain model's hidden state (POS fusion, the
    masked stream) made to start as close to it as it can: its fusion layer's output projections
    at zero, so that the layer begins as a LayerNorm of the features, and its classifier with the
    plain model's weights on the hidden state's part and zeros on the rest."""
    if wider.fusion is not None:
        for linear in (wider.fusion.attn.out, wider.fusion.fc_out):
            linear.weight.zero_()
            linear.bias.zero_()
    wider.head.weight.zero_()
    wider.head.weight[:, : plain.cfg.n_embd] = plain.head.weight
    wider.head.bias.copy_(plain.head.bias)
    return wider


def with_two_streams(model: PunctModel, cfg: TrainConfig) -> PunctModel:
    """FFA's teacher (``--interaction``, ``--masked-stream``, ``--stream-fusion``; see
    :mod:`.teacher`) made from a plain model, starting where it is (:func:`starts_as`): the masked
    stream starts as a copy of its encoder, the heads' mixes small (FFA's initialisation). A pause
    fusion is left out: the teacher reads text."""
    if model.cfg.n_tags:
        raise InputError("the two-stream teacher is made from a model without POS fusion")
    plain = replace(model.cfg, pause_hidden=0, pause_marks=False, pause_continued=False)
    two = TwoStreamTeacher(
        TeacherConfig(
            **asdict(plain),
            interaction=cfg.interaction,
            masked_stream=cfg.masked_stream,
            stream_fusion=cfg.stream_fusion,
        )
    )
    encoder = {k: v for k, v in model.state_dict().items() if k.startswith(ENCODER)}
    if cfg.masked_stream:
        encoder.update({f"masked.{k}": v for k, v in encoder.items()})
    missing, unexpected = two.load_state_dict(encoder, strict=False)
    if unexpected or not all(k.startswith(("fusion.", "head.")) or k.endswith(".mix") for k in missing):
        raise CheckpointError(f"cannot make a two-stream teacher of this model: {unexpected or missing}")
    return starts_as(two, model)


def label_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of (B, W, n_labels) logits against (B, W) label ids, -100: no loss."""
    return F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), target.reshape(-1), ignore_index=-100
    )


def rdrop_loss(a: torch.Tensor, b: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """R-Drop (Liang et al. 2021): the symmetric KL between two dropout passes' word
    probabilities, over the words kept."""
    p, q = F.log_softmax(a[keep].float(), dim=-1), F.log_softmax(b[keep].float(), dim=-1)
    both = F.kl_div(p, q, log_target=True, reduction="batchmean") + F.kl_div(
        q, p, log_target=True, reduction="batchmean"
    )
    return both / 2


def progress(step: int, train_seconds: float, cfg: TrainConfig) -> float:
    """How far the run is towards its end, 0 to 1: steps or minutes, whichever ends it first."""
    done = step / cfg.max_steps
    if cfg.max_minutes > 0:
        done = max(done, train_seconds / (60 * cfg.max_minutes))
    return min(1.0, done)


def lr_factor(step: int, done: float, cfg: TrainConfig) -> float:
    """Linear warm-up over ``warmup`` steps, then linear decay to zero at the end of the run."""
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    return max(0.0, 1.0 - done)


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import os
    import platform

    return f"{platform.processor() or platform.machine()} CPU, {os.cpu_count()} cores, {torch.get_num_threads()} threads"


def earlier_stages(init: object) -> list[dict]:
    """The stages a continued checkpoint (``init``) went through: its ``training.json``'s own
    ``stages``, or the summary itself for a checkpoint of one stage; none without one."""
    path = Path(str(init)) / "training.json" if init else None
    if path is None or not path.is_file():
        return []
    summary = json.loads(path.read_text())
    return summary.pop("stages", None) or [summary]


def write_summary(run: str | Path, machine: str, run_cfg: dict[str, object]) -> dict[str, object]:
    """``<run>/best/training.json``: how the best checkpoint of a run was trained (``run_cfg``:
    the run's TrainConfig as a dict), with the dev curve of the whole run so far, and under
    ``stages`` every stage of the checkpoint it continued, this one last."""
    run = Path(run)
    records = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines() if line.strip()]
    best = [r for r in records if r["best"]][-1]
    summary = {
        "steps": best["step"],
        "seen_tokens": best["seen_tokens"],
        "train_seconds": best["train_seconds"],
        "dev_f1_k2": best["dev_f1_k2"],
        "dev_f1_offline": best["dev_f1_offline"],
        "dev_words": run_cfg["dev_words"],
        "machine": machine,
        "start": run_cfg.get("init") or run_cfg.get("encoder") or "the encoder",
        "data": {"train": Path(str(run_cfg["train"])).name, "dev": Path(str(run_cfg["dev"])).name},
        "config": {k: v for k, v in run_cfg.items() if k not in ("train", "dev", "out", "encoder", "init")},
        "curve": records,
    }
    stages = earlier_stages(run_cfg.get("init"))
    if stages:
        summary["stages"] = [*stages, dict(summary)]
    (run / "best" / "training.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def train(cfg: TrainConfig) -> Path:
    """Train; returns the folder of the best checkpoint (``<out>/best``)."""
    from tqdm import tqdm

    if cfg.teacher and not (0.0 < cfg.distill <= 1.0 and cfg.temperature > 0):
        raise InputError("distillation needs 0 < distill <= 1 and temperature > 0")
    if cfg.taught and not cfg.teacher:
        raise InputError("--taught is text a teacher teaches on: give --teacher too")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)

    if cfg.init:
        model = load_model(cfg.init)  # a teacher's checkpoint goes on as a teacher
        model.set_label_bias(())  # offsets fit the weights they were tuned on: calibrate again after
        vocab = Path(cfg.init) / "vocab.txt"
    elif cfg.encoder:
        model = PunctModel.from_encoder(cfg.encoder)
        vocab = Path(cfg.encoder) / "vocab.txt"
    else:
        raise InputError("give an encoder folder (--encoder) or a checkpoint to continue (--init)")
    if cfg.tags and not model.cfg.n_tags:
        model = with_pos_fusion(model, cfg)
    if (cfg.interaction or cfg.masked_stream) and not isinstance(model, TwoStreamTeacher):
        model = with_two_streams(model, cfg)
    if model.cfg.n_tags and not (cfg.tags and cfg.dev_tags):
        raise InputError("a POS-fused model trains on tagged text: give --tags and --dev-tags")
    tagger_dir = trained_tagger(cfg) if model.cfg.n_tags else None
    # a continued checkpoint's pause fusion goes on beside the text model it was trained over
    evidence = Decider.load(cfg.init, model.cfg) if cfg.init else Decider.of(model.cfg)
    model.to(device)
    pieces = WordPieces(vocab, model.cfg.max_pieces)
    teacher, teacher_pieces = None, None
    if cfg.teacher:
        teacher = load_model(cfg.teacher, device)  # eval mode: no dropout in its targets
        teacher.requires_grad_(False)
        teacher_vocab = Path(cfg.teacher) / "vocab.txt"
        if teacher_vocab.read_bytes() != vocab.read_bytes():
            teacher_pieces = WordPieces(teacher_vocab, teacher.cfg.max_pieces)
        print(f"distilling from {cfg.teacher} ({teacher.n_params() / 1e6:.1f} M parameters)")
    teacher_cfg = teacher.cfg if teacher else None
    t0 = time.time()
    corpus = Corpus(cfg.train, pieces, cfg.tags, teacher_pieces, cfg.taught)
    dev_tokens, dev_labels = normalize_labeled(*read_iwslt(cfg.dev))
    dev_tags = load_tags(cfg.dev_tags, len(dev_tokens))[: cfg.dev_words].tolist() if cfg.dev_tags else None
    dev_tokens, dev_labels = dev_tokens[: cfg.dev_words], dev_labels[: cfg.dev_words]
    print(f"corpus {len(corpus):,} words, dev {len(dev_tokens):,} words, prepared in {time.time() - t0:.0f}s")

    if cfg.freeze_encoder:  # no gradient reaches the encoder: a step costs about a forward pass
        for name, p in model.named_parameters():
            p.requires_grad_(not name.startswith(ENCODER))
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    decay = [p for n, p in trainable if p.ndim >= 2 and "emb" not in n]
    no_decay = [p for n, p in trainable if p.ndim < 2 or "emb" in n]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr
    )
    # bf16 autocast on CUDA: master weights and optimizer stay fp32; the CPU path is plain fp32
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")

    step, best, bad_evals, seen_tokens, train_seconds = 0, -1.0, 0, 0, 0.0
    state_path = out / "last.pt"
    if state_path.is_file():
        # what save_state() writes is tensors and plain Python values: no pickled objects to admit
        state = torch.load(state_path, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        step, best, bad_evals = state["step"], state["best"], state["bad_evals"]
        seen_tokens, train_seconds = state["seen_tokens"], state["train_seconds"]
        print(f"resumed at step {step} (best dev {best:.2f})")

    def save_state() -> None:
        tmp = state_path.with_suffix(".tmp")
        torch.save(
            {
                "model": model.state_dict(),
                "opt": opt.state_dict(),
                "rng": rng.bit_generator.state,
                "torch_rng": torch.get_rng_state(),
                "step": step,
                "best": best,
                "bad_evals": bad_evals,
                "seen_tokens": seen_tokens,
                "train_seconds": train_seconds,
                "config": asdict(cfg),
            },
            tmp,
        )
        tmp.replace(state_path)

    batches: Iterator[Batch]
    if cfg.workers:  # worker processes make batches; a resumed run re-seeds them from its step
        loader = torch.utils.data.DataLoader(
            Batches(corpus, cfg, model.cfg, seed=(cfg.seed, step), teacher_cfg=teacher_cfg),
            batch_size=None,
            num_workers=cfg.workers,
            prefetch_factor=8,
            persistent_workers=True,
        )
        batches = iter(loader)
    else:  # made here from the run's own generator: a resumed run continues exactly
        batches = make_batches(corpus, cfg, model.cfg, rng, teacher_cfg)
    dev_engine = "window" if cfg.window_share else "masked"  # the engine k=2 is scored with
    history = (out / "history.jsonl").open("a")
    bar = tqdm(total=cfg.max_steps, initial=step, dynamic_ncols=True, mininterval=5)
    loss_avg = None
    while progress(step, train_seconds, cfg) < 1.0:
        model.train()
        t_step = time.time()
        lr = cfg.lr * lr_factor(step, progress(step, train_seconds, cfg), cfg)
        for group in opt.param_groups:
            group["lr"] = lr
        batch = next(batches)
        k, target = batch.lookahead, batch.target.to(device)
        tags = None if batch.tags is None else batch.tags.to(device)
        inputs = [t.to(device) for t in batch.inputs]
        with autocast:
            logits = model(*inputs, k, tags)
        loss = label_loss(logits, target)
        if cfg.rdrop:  # a second pass under other dropout: both passes' losses, and their distance
            with autocast:
                again = model(*inputs, k, tags)
            loss = (loss + label_loss(again, target)) / 2 + cfg.rdrop * rdrop_loss(
                logits, again, target != -100
            )
        if teacher is not None:
            assert batch.teacher_inputs is not None  # batches are made with the teacher's config
            with torch.no_grad(), autocast:
                taught = teacher(
                    *(t.to(device) for t in batch.teacher_inputs), k, tags if teacher.cfg.n_tags else None
                )
            loss = loss + cfg.distill * taught_loss(logits, taught, target, batch.taught.to(device), cfg)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        n_tok = int((batch.inputs[0] != model.cfg.pad_id).sum())
        seen_tokens += n_tok
        loss_value = loss.item()  # waits for the step: dt is the step's real time
        dt = time.time() - t_step
        train_seconds += dt
        loss_avg = loss_value if loss_avg is None else 0.98 * loss_avg + 0.02 * loss_value
        bar.update(1)
        bar.set_postfix(loss=f"{loss_avg:.3f}", tok_s=f"{n_tok / dt:.0f}", lr=f"{lr:.1e}")

        if step % cfg.eval_every == 0 or progress(step, train_seconds, cfg) >= 1.0:
            f_k2 = evaluate_tokens(model, pieces, dev_tokens, dev_labels, 2, dev_tags, dev_engine)
            f_off = evaluate_tokens(model, pieces, dev_tokens, dev_labels, None, dev_tags)
            metric = (f_k2 + f_off) / 2
            improved = metric > best
            if improved:
                best, bad_evals = metric, 0
                model.save(out / "best")
                evidence.save_pauses(out / "best")
                shutil.copy(vocab, out / "best" / "vocab.txt")
                if tagger_dir is not None and not (out / "best" / "tagger").exists():
                    shutil.copytree(tagger_dir, out / "best" / "tagger")
            else:
                bad_evals += 1
            record = {
                "step": step,
                "seen_tokens": seen_tokens,
                "train_seconds": round(train_seconds),
                "loss": round(loss_avg, 4),
                "dev_f1_k2": round(f_k2, 2),
                "dev_f1_offline": round(f_off, 2),
                "best": improved,
            }
            history.write(json.dumps(record) + "\n")
            history.flush()
            bar.write(json.dumps(record))
            save_state()
            write_summary(out, describe_device(device), asdict(cfg))  # the curve goes on past the best
            if bad_evals >= cfg.patience:
                bar.write(f"no dev gain in {cfg.patience} evaluations: stopping early")
                break
    bar.close()
    save_state()
    return out / "best"
