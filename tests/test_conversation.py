"""Conversational training text: chat turns to labels, careful writers kept, TED made speech-like."""

import json

import numpy as np

from streampunct.training.conversation import (
    BACKCHANNELS,
    careful_conversations,
    chat_conversations,
    labeled_words,
    speechlike,
    turn_text,
)


def test_marks_become_labels_and_chat_noise_goes():
    words, labels = labeled_words("Hi! How are you doing today? I'm good, thanks lol :)")
    assert words == ["Hi", "How", "are", "you", "doing", "today", "I'm", "good", "thanks"]
    assert labels == ["PERIOD", "O", "O", "O", "O", "QUESTION", "O", "COMMA", "PERIOD"]  # turn end


def test_a_mark_on_a_dropped_word_moves_to_the_word_before():
    assert labeled_words("that is great haha.", turn_end=False) == (
        ["that", "is", "great"],
        ["O", "O", "PERIOD"],
    )
    assert labeled_words("so, um", turn_end=False)[1] == ["COMMA", "O"]


def test_a_sentence_typed_in_two_messages_stays_one():
    assert turn_text(["Depression seems more", "prevalent, even now", "Okay"]) == (
        "Depression seems more prevalent, even now. Okay."
    )


def test_only_writers_who_punctuate_are_kept(tmp_path):
    data = {
        "careful": {
            "messages": [[{"text": "Hello there."}, {"text": "How are you?"}], [{"text": "Fine, thanks."}]]
        },
        "sloppy": {"messages": [[{"text": "hello there"}, {"text": "how r u"}], [{"text": "fine thanks"}]]},
    }
    path = tmp_path / "dataset.json"
    path.write_text(json.dumps(data))
    convos = list(chat_conversations(path))
    assert [key for key, _ in convos] == ["careful", "sloppy"]
    assert [key for key, _ in careful_conversations(convos)] == ["careful"]


def test_speechlike_text_keeps_every_word_and_mark_and_adds_turns():
    rng = np.random.default_rng(0)
    words = "we went home . then we slept , and it rained .".split()
    src_w = [w for w in words if w not in ".,"]
    src_l = []
    for w in words:
        if w == ".":
            src_l[-1] = "PERIOD"
        elif w == ",":
            src_l[-1] = "COMMA"
        else:
            src_l.append("O")
    out_w, out_l = [], []
    for _ in range(200):
        w, lab = speechlike(src_w, src_l, rng, backchannel=0.5, opener=0.3, filler=0.05, restart=0.05)
        out_w += w
        out_l += lab
        # the source words appear in order, with their own labels
        it = iter(zip(w, lab))
        assert all(any(pair == (sw, sl) for pair in it) for sw, sl in zip(src_w, src_l))
    backchannels = {text.split()[-1] for text, _, _ in BACKCHANNELS}
    assert any(w in backchannels and lab in ("PERIOD", "QUESTION") for w, lab in zip(out_w, out_l))
    assert "um" in out_w or "uh" in out_w
    assert len(out_w) > 200 * len(src_w)
