"""PunctStream: one final decision per word, exactly predict()'s, with revisions and time limits."""

import copy
import random
import weakref

import pytest
import torch

from streampunct import InputError, Punctuator, engines, incremental
from streampunct.engines import MAX_PASSES, window_logits
from streampunct.model import int8_available
from streampunct.stream import Lookahead, PunctStream, Word
from streampunct.text import normalize_text

SENTENCES = [
    "So today, I want to talk about something that happened to me last year.",
    "Don't you think it's strange that nobody noticed?",
    "We'll see -- maybe the U.S. will change its mind, maybe not.",
    "The children walked three hours to school every morning, and 10,000 of them did it barefoot.",
    "What would you do? I'd call Mr. Smith, who's been there since 9:00.",
    "Electrification of the villages in Kenya's north took twenty years.",
    "Well, I can't say I wasn't surprised, but we won't stop here.",
]


def varied_words(n: int, seed: int) -> list[str]:
    """Recogniser-style words: casing, glued punctuation, clitics, and words that vanish."""
    rng = random.Random(seed)
    words: list[str] = []
    while len(words) < n:
        words.extend(rng.choice(SENTENCES).split())
    return words[:n]


def run_stream(stream: PunctStream, words, seed: int = 0) -> list[str]:
    """Push words in random chunks; check the event contract; return the final labels in order."""
    rng = random.Random(seed)
    finals: dict[int, str] = {}
    i = 0
    while i < len(words):
        n = rng.randint(1, 5)
        events = stream.push(words[i : i + n])
        i += n
        check_events(events, finals)
    check_events(stream.finish(), finals)
    assert sorted(finals) == list(range(len(words)))
    return [finals[i] for i in range(len(words))]


def check_events(events, finals: dict[int, str]) -> None:
    for e in events:
        if e.final:
            assert e.index not in finals, "a word was made final twice"
            assert e.index == len(finals), "final decisions come in word order"
            finals[e.index] = e.label
        else:
            assert e.index not in finals, "a provisional event for a final word"


def after_revision(
    p, before: list[str], n_final: int, after: list[str], engine: str, k: int = 2
) -> list[str]:
    """The final labels a revision must leave: words final before it keep the labels their
    lookahead gave them then (the old words); the rest are decided on the revised words."""
    old = p.predict(before, lookahead=k, engine=engine)
    return old[:n_final] + p.predict(after, lookahead=k, engine=engine)[n_final:]


ENGINES = pytest.mark.parametrize("engine", ["masked", "window"])


@pytest.mark.model  # 2,400 words per case: the contract, not a unit
@ENGINES
@pytest.mark.parametrize("k", [0, 1, 2, 4])
def test_stream_equals_predict_tiny(tiny, k, engine):
    words = varied_words(2400, seed=k)
    expected = tiny.predict(words, lookahead=k, engine=engine)
    assert run_stream(tiny.stream(lookahead=k, engine=engine), words, seed=k) == expected


@ENGINES
@pytest.mark.parametrize("k", [0, 2])
def test_stream_equals_predict_mpnet_attention(tiny_mpnet, k, engine):
    """The relative position bias is computed for the stream's new rows as for a whole window."""
    p = tiny_mpnet
    words = varied_words(600, seed=20 + k)
    expected = p.predict(words, lookahead=k, engine=engine)
    assert run_stream(p.stream(lookahead=k, engine=engine), words, seed=k) == expected


@pytest.mark.parametrize("k", [0, 2])  # k = 1 and 4: the tiny models above
def test_stream_equals_predict_shipped(shipped, k):
    """The default engine (auto: the window engine from the checkpoint's window_from on)."""
    words = varied_words(300, seed=10 + k)
    assert run_stream(shipped.stream(lookahead=k), words, seed=k) == shipped.predict(words, lookahead=k)


@pytest.mark.parametrize("k", [0, 2])
def test_stream_equals_predict_shipped_masked(shipped, k):
    words = varied_words(2000, seed=12 + k)
    expected = shipped.predict(words, lookahead=k, engine="masked")
    assert run_stream(shipped.stream(lookahead=k, engine="masked"), words, seed=2) == expected


@pytest.mark.skipif(not int8_available(), reason="torch._int_mm does not run on this CPU")
def test_an_int8_stream_nearly_equals_predict():
    """The shipped default loaded with int8=True. Its streams give predict()'s labels up to the
    stated tolerance: at most 1 word in 200 (measured: 0 to 2 in 1,000 at k=0 and k=2). A stream
    computes a window's rows in other float steps than predict() does; fp32 absorbs the last-bit
    differences, but an input near a rounding boundary of int8 moves by a whole step. int8 changes
    few of fp32's labels (measured: 1 to 6 in 1,000)."""
    p = Punctuator.load(device="cpu", int8=True)
    words = varied_words(400, seed=14)
    for k, engine in ((2, "auto"), (0, "masked")):
        expected = p.predict(words, lookahead=k, engine=engine)
        got = run_stream(p.stream(lookahead=k, engine=engine), words, seed=k)
        assert sum(a != b for a, b in zip(got, expected)) <= len(words) // 200, (k, engine)
    fp32 = Punctuator.load(device="cpu").predict(words, lookahead=2)
    assert sum(a != b for a, b in zip(fp32, p.predict(words, lookahead=2))) <= 0.02 * len(words)


@ENGINES
def test_final_after_k_tokens(tiny, engine):
    s = tiny.stream(lookahead=2, engine=engine)
    assert [e for e in s.push(["one", "two"]) if e.final] == []
    events = s.push(["three"])
    assert [(e.index, e.word) for e in events if e.final] == [(0, "one")]
    assert {e.index for e in events if not e.final} <= {1, 2}
    events = s.push(["don't"])  # two tokens: "do n't"
    assert [e.index for e in events if e.final] == [1, 2]


@ENGINES
def test_tentative_words_are_lookahead_only(tiny, engine):
    """The recogniser's guess after the words: it lets the words before it be decided, with the
    label predict() gives on the text with the guess, but is never final, gets no events, and
    is replaced by the next push (a tick keeps it, a revision and the finish drop it)."""
    words, guess = varied_words(40, seed=5), varied_words(3, seed=6)
    s = tiny.stream(lookahead=2, engine=engine)
    events = s.push(words, tentative=guess)
    assert s.n_words == 40 and max(e.index for e in events) < 40
    final = {e.index: e.label for e in events if e.final}
    assert sorted(final) == list(range(40))  # three tentative words are lookahead enough
    expected = tiny.predict(words + guess, lookahead=2, engine=engine)
    assert [final[i] for i in range(40)] == expected[:40]
    assert [e for e in s.tick(1e6) if e.index >= 40] == []
    more, guess2 = varied_words(5, seed=7), ["well"]  # one token
    events = s.push(more, tentative=guess2)  # the first guess is gone: these words replace it
    assert s.n_words == 45 and {e.index for e in events} <= set(range(40, 45))
    with_second = tiny.predict(words + more + guess2, lookahead=2, engine=engine)
    assert [e.label for e in events if e.final] == with_second[40:44]  # word 44 waits for a second word
    events = s.finish()  # drops the guess: word 44 is decided with no word after it
    assert [(e.index, e.label) for e in events if e.final] == [
        (44, tiny.predict(words + more, 2, engine)[44])
    ]


@ENGINES
def test_a_guess_longer_than_the_window_is_lookahead_all_the_same(tiny, engine):
    """A recogniser whose decoding loops guesses a hundred words and more after the committed ones
    (seen in a stream of an earnings call: "see you next time," 25 times over). The guess is
    lookahead like any other, longer than the model's window or not: the words before it are
    decided as predict() decides them, no event names a guessed word, and the stream goes on."""
    words, loop = varied_words(10, seed=3), "see you next time,".split() * 60
    s = tiny.stream(lookahead=2, engine=engine)
    events = s.push(words, tentative=loop)
    assert {e.index for e in events} <= set(range(10))
    final = {e.index: e.label for e in events if e.final}
    assert [final.get(i) for i in range(10)] == tiny.predict(words + loop, lookahead=2, engine=engine)[:10]
    more = varied_words(4, seed=4)
    events = s.push(more, tentative=loop) + s.finish()
    assert [e.label for e in events if e.final] == tiny.predict(words + more + loop, 2, engine)[10:14]


@ENGINES
def test_a_guess_costs_the_model_work_of_its_first_k_tokens(tiny, monkeypatch, engine):
    """Only the first k tokens of a guess can be anyone's lookahead, and the stream takes no more
    of it: words pushed two at a time, each push with a guess of 8 or of 30 words, make the same
    events for the same model work (word pieces appended to passes and blocks); the guessed words
    past those k tokens only move the clock. Computed in full, the default model's pushes with
    8-word guesses took 2.8 times as long as with none (10.1 s against 3.6 s for 300 words)."""
    pieces = []  # word pieces given to the model work: a window pass, or a masked engine's block
    append, made = incremental.WindowState.append, engines.WindowPass.__init__
    monkeypatch.setattr(
        incremental.WindowState, "append", lambda state, p: pieces.append(len(p)) or append(state, p)
    )
    monkeypatch.setattr(
        engines.WindowPass,
        "__init__",
        lambda work, engine, ps: pieces.extend(map(len, ps)) or made(work, engine, ps),
    )

    def run(guess: int) -> tuple[list, int]:
        pieces.clear()
        s = tiny.stream(lookahead=2, engine=engine, max_delay_ms=None)
        words = varied_words(80, seed=8)
        events = []
        for i in range(0, 60, 2):
            events += s.push(words[i : i + 2], tentative=words[i + 2 : i + 2 + guess])
        return events + s.finish(), sum(pieces)

    assert run(8) == run(30)


def test_empty_words_are_final_in_order(tiny):
    s = tiny.stream(lookahead=1)
    events = s.push(["hello", "--", "..."])
    assert [e for e in events if e.final] == []
    events = s.push(["world"])
    assert [(e.index, e.label) for e in events if e.final] == [(0, events[0].label), (1, "O"), (2, "O")]


@ENGINES
def test_revision_replaces_the_tail(tiny, engine):
    words = varied_words(300, seed=3)
    s = tiny.stream(lookahead=2, engine=engine)
    finals: dict[int, str] = {}
    check_events(s.push(words), finals)
    cut = s.n_final
    assert 290 <= cut < 300
    revised = words[:cut] + varied_words(60, seed=4)
    check_events(s.revise(cut, revised[cut:]), finals)
    check_events(s.finish(), finals)
    assert [finals[i] for i in range(len(revised))] == after_revision(tiny, words, cut, revised, engine)


@ENGINES
def test_revision_of_a_clitic_word_half_decided(tiny, engine):
    s = tiny.stream(lookahead=2, engine=engine)
    finals: dict[int, str] = {}
    check_events(s.push(["we", "don't", "know"]), finals)  # tokens: we do n't know
    # "do" is decided (two tokens follow) but "don't" is not final: "n't" has one token ahead.
    assert s.n_final == 1
    check_events(s.revise(1, ["never", "know", "it"]), finals)
    check_events(s.finish(), finals)
    words = ["we", "never", "know", "it"]
    assert [finals[i] for i in range(4)] == after_revision(tiny, ["we", "don't", "know"], 1, words, engine)


@ENGINES
def test_revision_of_a_word_split_across_blocks(tiny, engine):
    """Token 15 ("do") ends block 0 and is decided; "n't" (token 16) is not: the word is revisable."""
    block = tiny.model.cfg.block
    words = ("so we went home and then it rained all day long in the old town " * 4).split()[: block - 1]
    s = tiny.stream(lookahead=2, engine=engine)
    finals: dict[int, str] = {}
    check_events(s.push([*words, "don't", "x"]), finals)
    assert s.n_final == block - 1
    revised = [*words, "we", "go", "now", "then"]
    check_events(s.revise(block - 1, revised[block - 1 :]), finals)
    check_events(s.finish(), finals)
    expected = after_revision(tiny, [*words, "don't", "x"], block - 1, revised, engine)
    assert [finals[i] for i in range(len(revised))] == expected


@pytest.mark.parametrize("replacement", [[], ["--"], ["..."]])
def test_revision_that_only_deletes(tiny, replacement):
    s = tiny.stream(lookahead=2)  # auto: the window engine
    finals: dict[int, str] = {}
    before = "so we went to the market and".split()
    check_events(s.push(before), finals)
    assert s.n_final == 5
    check_events(s.revise(5, replacement), finals)
    check_events(s.finish(), finals)
    words = before[:5] + replacement
    assert [finals[i] for i in range(len(words))] == after_revision(tiny, before, 5, words, "auto")


@ENGINES
def test_time_limits_do_not_depend_on_when_ticks_come(tiny, engine):
    """A word past its deadline is decided with the words ended by then, ticked or not."""
    words = [Word("so", 0.0, 1.0), Word("we", 1.0, 1.2), Word("left", 1.6, 2.0), Word("then", 2.1, 2.3)]
    runs = []
    for ticks in ([], [1.5], [1.5, 1.9]):
        s = tiny.stream(lookahead=2, max_delay_ms=500, engine=engine)
        finals: dict[int, str] = {}
        check_events(s.push(words[:2]), finals)
        for t in ticks:
            check_events(s.tick(t), finals)
        check_events(s.push(words[2:]), finals)
        check_events(s.finish(), finals)
        runs.append(finals)
    assert runs[0] == runs[1] == runs[2]
    ids = tiny.pieces.encode(["so", "we", "left", "then"])
    # "so" (deadline 1.5 s): only "we" had ended by then: decided with a lookahead of 1
    decided = window_logits(tiny.model, ids, 0, 1, engine=engine).argmax()
    assert runs[0][0] == ["O", "COMMA", "PERIOD", "QUESTION"][int(decided)]


def test_final_words_cannot_be_revised(tiny):
    s = tiny.stream(lookahead=0)
    s.push(["a", "b", "c"])
    with pytest.raises(InputError, match="final"):
        s.revise(1, ["x"])
    with pytest.raises(InputError):
        s.revise(9, ["x"])


@ENGINES
def test_pause_forces_a_decision_with_the_words_present(tiny, engine):
    s = tiny.stream(lookahead=3, max_delay_ms=500, engine=engine)
    words = [Word("so", 0.0, 0.2), Word("we", 0.3, 0.4), Word("left", 0.5, 0.6)]
    assert [e for e in s.push(words) if e.final] == []  # clock 0.6 s: first deadline is 0.7 s
    # 1.7 s of silence: the next word shows the clock passed every deadline (end + 0.5 s).
    events = s.push([Word("then", 2.3, 2.5)])
    finals = [e for e in events if e.final]
    assert [e.index for e in finals] == [0, 1, 2]
    ids = tiny.pieces.encode(["so", "we", "left"])
    for t, e in enumerate(finals):
        # decided with the tokens that had ended by its deadline, never with "then"
        expected = int(window_logits(tiny.model, ids, t, 2 - t, engine=engine).argmax())
        assert e.label == ["O", "COMMA", "PERIOD", "QUESTION"][expected]


def test_tick_applies_time_limits(tiny):
    s = tiny.stream(lookahead=4, max_delay_ms=300)
    assert [e for e in s.push([Word("hello", 0.0, 0.4)]) if e.final] == []
    assert [e for e in s.tick(0.65) if e.final] == []
    assert [e.index for e in s.tick(0.75) if e.final] == [0]
    assert [e for e in s.push([Word("there", 1.0, 1.2)]) if e.final] == []
    assert [e.index for e in s.tick(1.6) if e.final] == [1]


def test_word_times_move_the_clock(tiny):
    s = tiny.stream(lookahead=4, max_delay_ms=300)
    events = s.push([Word("hello", 0.0, 0.4), Word("there", 0.5, 0.9)])
    assert [e.index for e in events if e.final] == [0]  # "there" ended at 0.9 > 0.4 + 0.3


def test_no_time_limit_without_times(tiny):
    s = tiny.stream(lookahead=2, max_delay_ms=100)
    s.push(["hello", "there"])
    assert [e for e in s.tick(1000.0) if e.final] == []


def test_finished_stream(tiny):
    s = tiny.stream(lookahead=1)
    s.push(["a"])
    s.finish()
    with pytest.raises(InputError, match="finished"):
        s.push(["b"])
    with pytest.raises(InputError, match="finished"):
        s.finish()


def test_sentences_are_taken_once_each_and_a_run_without_a_mark_closes_at_its_length(tiny):
    """A model that marks nothing: its sentences close at SENTENCE_WORDS words ("length"), the
    last at the finish ("end", no period added); each is taken once; a stream opened without
    ``sentences`` closes none."""
    never = copy.deepcopy(tiny)
    with torch.no_grad():
        never.model.head.bias.copy_(torch.tensor([20.0, -20.0, -20.0, -20.0]))
    n = 2 * PunctStream.SENTENCE_WORDS + 10
    s, plain = never.stream(lookahead=1, sentences=True), never.stream(lookahead=1)
    words = [Word("so", 0.5 * i, 0.5 * i + 0.25) for i in range(n)]
    s.push(words[:-5])
    plain.push(words)
    first, again = s.take_sentences(), s.take_sentences()
    s.push(words[-5:])
    s.finish()
    plain.finish()
    assert [(x.first, x.last, x.closed) for x in first + s.take_sentences()] == [
        (0, 99, "length"), (100, 199, "length"), (200, n - 1, "end")
    ]  # fmt: skip
    assert again == [] and plain.take_sentences() == [] and PunctStream.SENTENCE_WORDS == 100
    assert first[0].text == "So " + "so " * 98 + "so" and first[1].text[:3] == "so "  # it goes on
    assert (first[1].start, first[1].end) == (50.0, 99.75)


@pytest.mark.model
@ENGINES
def test_memory_is_flat(tiny, engine):
    s = tiny.stream(lookahead=2, engine=engine)
    words = varied_words(5000, seed=9)
    held = []
    for i in range(0, len(words), 10):
        s.push(words[i : i + 10])
        held.append(s.held())
    late = held[len(held) // 2 :]
    assert max(h.tokens for h in late) <= 6 * tiny.model.cfg.block
    assert max(h.words for h in late) <= 2 * s.FORGET_EVERY + 10


@pytest.mark.parametrize(
    "bad",
    [
        lambda: Word("x", 2.0, 1.0),
        lambda: Word("x", float("nan"), None),
        lambda: Word(3),  # type: ignore[arg-type]
        lambda: Lookahead(-1),
        lambda: Lookahead(2, max_delay_ms=-5),
    ],
)
def test_bad_input(bad):
    with pytest.raises(InputError):
        bad()


def test_bad_word_type(tiny):
    s = tiny.stream(lookahead=1)
    with pytest.raises(InputError):
        s.push([3])  # type: ignore[list-item]
    events = s.push(["still", "usable"]) + s.finish()
    assert [e.index for e in events if e.final] == [0, 1]


@pytest.mark.parametrize("model", ["tiny", "tiny_mpnet"])
def test_stream_logits_match_batch(request, model):
    """Not only the argmax: the incremental rows equal a fresh forward pass."""
    tiny = request.getfixturevalue(model)
    words = [w.lower().strip(",.?") for w in varied_words(90, seed=5)]
    s = tiny.stream(lookahead=2, engine="masked")
    s.push(words)
    blocks = s._engine.blocks
    block = max(blocks)
    st = blocks[block]
    start = s._engine.engine.window_start(block * tiny.model.cfg.block)
    ids = tiny.pieces.encode(words)
    for t in range(start, min(len(ids) - 2, start + 20)):
        torch.testing.assert_close(
            st.logits(t - start), window_logits(tiny.model, ids, t, 2), atol=1e-5, rtol=0
        )


@pytest.mark.parametrize("model", ["tiny", "tiny_mpnet"])
def test_window_engine_passes_match_batch(request, model):
    """A stream's window-engine pass (computed like the masked windows, unpadded) equals a fresh
    forward pass over the same window."""
    p = request.getfixturevalue(model)
    words = varied_words(40, seed=6)
    ids = p.pieces.encode(normalize_text(words)[0])  # tokens: clitics split, punctuation gone
    s = p.stream(lookahead=2, engine="window")
    s.push(words)
    for t in (0, 5, 20, len(ids) - 3):
        state, start = s._engine._pass(t, t + 3)
        assert start == max(0, t - p.model.cfg.context)
        torch.testing.assert_close(
            torch.from_numpy(state.logits(t - start)),
            window_logits(p.model, ids, t, 2, engine="window"),
            atol=1e-5,
            rtol=0,
        )


@pytest.mark.parametrize("tentative", [0, 3])
def test_a_long_push_holds_a_bounded_number_of_window_passes(tiny, monkeypatch, tentative):
    """A push of many words (a library user's whole transcript; the server cuts its messages into
    jobs of 32 words) is decided a bounded number of window passes at a time: a pass per word at
    once, each holding every layer's rows, keys and values, took 3 GB for 1,000 words with the
    default model (base was killed at 14 GB on 2,345). The labels are predict()'s, as for any other
    pace."""
    alive: weakref.WeakSet = weakref.WeakSet()
    most = 0

    def counted(self, *args, **kwargs):
        nonlocal most
        created(self, *args, **kwargs)
        alive.add(self)
        most = max(most, len(alive))

    created = engines.WindowPass.__init__
    monkeypatch.setattr(engines.WindowPass, "__init__", counted)
    words = varied_words(1000, seed=11)
    s = tiny.stream(lookahead=2, engine="window")
    finals = {
        e.index: e.label
        for e in s.push(words[: len(words) - tentative], tentative=words[len(words) - tentative :])
        if e.final
    }
    finals.update({e.index: e.label for e in s.push(words[len(words) - tentative :]) if e.final})
    finals.update({e.index: e.label for e in s.finish() if e.final})
    assert [finals[i] for i in range(len(words))] == tiny.predict(words, lookahead=2, engine="window")
    assert most <= 2 * MAX_PASSES


def test_window_engine_is_refused_for_a_pos_fused_checkpoint(tiny):
    from dataclasses import replace

    from streampunct import Punctuator
    from streampunct.model import PunctModel

    fused = Punctuator(
        PunctModel(replace(tiny.model.cfg, n_tags=5, pos_dim=8, fusion_heads=2)).eval(), tiny.pieces
    )
    with pytest.raises(InputError, match="window engine does not fuse POS tags"):
        fused.predict(["so", "we"], lookahead=2, engine="window")
    with pytest.raises(InputError, match="engine must be one of"):
        tiny.predict(["so", "we"], lookahead=2, engine="fast")


@pytest.mark.parametrize("engine", ["auto", "masked"])
def test_a_revision_after_old_words_are_forgotten(shipped, engine):
    """Issue 1 of 5: words one at a time, each followed by a revision of the newest word (the
    server died on a revision of word 289 after 291 words of test2011: the stream had forgotten
    the tokens its next window starts from, an IndexError on the window engine)."""
    words = varied_words(300, seed=3)
    s = shipped.stream(lookahead=2, max_delay_ms=1500, engine=engine)
    finals: dict[int, str] = {}
    for i, w in enumerate(words):
        check_events(s.push([w]), finals)
        check_events(s.revise(i, ["hello"] if i % 2 else [w]), finals)
    check_events(s.finish(), finals)
    assert sorted(finals) == list(range(len(words)))


@pytest.mark.parametrize("seed", [0, 2])  # the two patterns of three that failed
def test_a_recogniser_pattern_of_bursts_and_pauses(shipped, seed):
    """Issue 1 of 5: words in batches of 0 to 8, 0.3 s apart, now and then a pause of 0.5 to 3 s,
    the clock a little past the last word: the default engine failed within 600 words."""
    rng = random.Random(seed)
    words = varied_words(600, seed=seed)
    s = shipped.stream(lookahead=2, max_delay_ms=1500)
    finals: dict[int, str] = {}
    clock, i = 0.0, 0
    while i < len(words):
        n = rng.randint(0, 8)
        batch = []
        for w in words[i : i + n]:
            clock += 0.3 + (rng.uniform(0.5, 3.0) if rng.random() < 0.05 else 0.0)
            batch.append(Word(w, clock - 0.25, clock))
        i += n
        check_events(s.push(batch, now=clock + rng.uniform(0.0, 0.2)), finals)
    check_events(s.finish(), finals)
    assert sorted(finals) == list(range(len(words)))
