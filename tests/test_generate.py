"""streampunct.training.generate: a generated transcript read as punctuated words, and the reward
(gradient alignment with a dev set) ranking text like the dev set above text unlike it."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from streampunct.text import labeled_words, read_iwslt
from streampunct.training.generate import prompts, score, transcript_words


@pytest.mark.unit
def test_a_transcript_loses_its_speakers_and_stage_directions_and_each_turn_ends_a_sentence():
    text = (
        'Doctor: Okay, so what brings you in today?\nPatient (coughing): "I have a cough"\n\n[laughs] Yeah.'
    )
    words, labels = transcript_words(text)
    assert words == ["Okay", "so", "what", "brings", "you", "in", "today", "I", "have", "a", "cough", "Yeah"]
    assert labels == ["COMMA", "O", "O", "O", "O", "O", "QUESTION", "O", "O", "O", "PERIOD", "PERIOD"]


@pytest.mark.unit
def test_prompts_are_drawn_from_the_seed():
    a, b = prompts(4, np.random.default_rng(1)), prompts(4, np.random.default_rng(1))
    assert a == b and all(p.startswith("Write the transcript of a spoken conversation between") for p in a)


def test_the_reward_ranks_text_like_the_dev_set_first(tmp_path):
    text = "Okay, so how long have you had the cough? About a week now. Okay, and is it worse at night? "
    text += "Yeah, it is. Do you smoke? No, I do not. Okay."
    words, labels = labeled_words(text)
    dev = tmp_path / "dev.tsv"
    dev.write_text("".join(f"{w}\t{lab}\n" for w, lab in zip(words, labels)) * 3)
    run = tmp_path / "run"
    run.mkdir()
    wrong = ["PERIOD" if lab == "O" else "O" for lab in labels]  # every mark where none belongs
    samples = [{"words": words, "labels": wrong}, {"words": words, "labels": labels}]
    (run / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    score(argparse.Namespace(model="default", dev=str(dev), score=str(run), keep=0.5))
    rewards = json.loads((run / "rewards.json").read_text())["rewards"]
    assert rewards[1] > 0.5 > rewards[0]
    assert read_iwslt(run / "chosen.tsv") == (words, labels)
    assert len(read_iwslt(run / "all.tsv")[0]) == 2 * len(words)
