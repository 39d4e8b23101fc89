"""The protocol module (streampunct.protocol): every example in docs/schema/ read and written back,
every message class documented by a schema, and the module usable without the model stack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streampunct import protocol as P
from streampunct.types import Word

SCHEMAS = Path(__file__).parent.parent / "docs" / "schema"
EXAMPLES = [
    pytest.param(side, path.stem, example, id=f"{side}/{path.stem}/{i}")
    for side in ("client", "server")
    for path in sorted((SCHEMAS / side).glob("*.json"))
    for i, example in enumerate(json.loads(path.read_text())["examples"])
]


def schema(side: str, kind: str) -> jsonschema.protocols.Validator:
    doc = json.loads((SCHEMAS / side / f"{kind}.json").read_text())
    return jsonschema.validators.validator_for(doc)(doc)


def read(side: str, text: str) -> P.Message:
    """A message as its receiver reads it: the server reads a config before anything else."""
    if side == "server":
        return P.read_server(text)
    msg = P.parse(text)
    if msg["type"] == "config":
        return P.Config.from_dict(msg, audio="sample_rate" in msg)
    return P.read_client(text)


@pytest.mark.parametrize("side, kind, example", EXAMPLES)
def test_every_schema_example_round_trips(side, kind, example):
    validator = schema(side, kind)
    validator.validate(example)
    msg = read(side, json.dumps(example))
    assert msg.type == example["type"]
    validator.validate(msg.to_dict())  # what is written back fits the schema
    assert read(side, msg.to_json()) == msg
    if side == "server":  # the server writes one way only: its examples are what it writes
        assert msg.to_dict() == example


@pytest.mark.parametrize("side, kind, example", EXAMPLES)
def test_every_message_ignores_keys_it_does_not_know(side, kind, example):
    """One rule for every message, both ways: a key the reader does not know is ignored."""
    known = read(side, json.dumps(example))
    assert read(side, json.dumps({**example, "note": "bye", "x-later": [1, {"a": None}]})) == known
    if kind == "end" and side == "client":
        assert P.read_client('{"type": "end", "reason": "bye"}') == P.End()  # the server's end has one


def test_every_message_has_a_schema_with_examples():
    server = (P.Ready, P.Events, P.Recognised, P.Captioned, P.SentenceClosed, P.Finished, P.Error, P.Lag)
    for side, classes in (
        ("client", (P.Config, P.Words, P.Revise, P.Tick, P.Sync, P.End)),
        ("server", (*server, P.Synced)),
    ):
        documented = {p.stem for p in (SCHEMAS / side).glob("*.json")}
        assert {c.type for c in classes} == documented
        assert all(json.loads((SCHEMAS / side / f"{k}.json").read_text())["examples"] for k in documented)


def test_error_codes_in_the_schema_are_the_ones_the_client_knows_close_a_session():
    codes = json.loads((SCHEMAS / "server" / "error.json").read_text())["properties"]["code"]["enum"]
    assert P.CLOSING_ERRORS <= set(codes)


times = st.none() | st.floats(0, 1e6, allow_nan=False)
words = st.lists(
    st.builds(
        lambda text, a, b: Word(text, *sorted((a, b))) if a is not None and b is not None else Word(text, a),
        st.text(max_size=8),
        times,
        times,
    ),
    max_size=5,
).map(tuple)


@given(
    st.one_of(
        st.builds(P.Words, words, times),
        st.builds(P.Revise, st.integers(0, 10**6), words, times),
        st.builds(P.Tick, st.floats(0, 1e6, allow_nan=False)),
        st.builds(P.Sync, st.none() | st.integers()),
        st.just(P.End()),
    )
)
def test_any_client_message_survives_the_wire(msg):
    assert P.read_client(msg.to_json()) == msg


@pytest.mark.parametrize(
    "text, code",
    [
        ('{"type": "words", "words": "so"}', "bad_message"),
        ('{"type": "words", "words": [{"text": "so", "start": 2, "end": 1}]}', "bad_message"),
        ('{"type": "revise", "index": -1, "words": []}', "bad_message"),
        ('{"type": "tick"}', "bad_message"),
        ('{"type": "sync", "id": "7"}', "bad_message"),
        ('{"type": "sync", "id": 7.5}', "bad_message"),
        ('{"type": "sync", "id": true}', "bad_message"),
        ('{"type": "config"}', "bad_state"),
        ('{"type": "hello"}', "unknown_type"),
        ("[1]", "bad_message"),
        ("{", "bad_json"),
        ('{"type": "words", "words": ["\\ud800"]}', "bad_message"),
    ],
)
def test_bad_client_messages_raise_protocol_errors(text, code):
    with pytest.raises(P.ProtocolError) as e:
        P.read_client(text)
    assert e.value.code == code


def test_a_sync_is_answered_with_its_id_or_null():
    assert P.read_client('{"type": "sync", "id": 7}') == P.Sync(7)
    assert P.read_client('{"type": "sync"}') == P.read_client('{"type": "sync", "id": null}') == P.Sync()
    assert P.Sync().to_json() == '{"type":"sync"}'
    synced = P.Synced(None, 12, 10)
    assert synced.to_json() == '{"type":"synced","id":null,"words":12,"final":10}'
    assert P.read_server(synced.to_json()) == synced
    with pytest.raises(P.ProtocolError):
        P.read_server('{"type": "synced", "id": 7}')


def test_audio_streams_take_only_end_after_the_config():
    assert P.read_client('{"type": "end"}', audio=True) == P.End()
    with pytest.raises(P.ProtocolError, match="binary audio"):
        P.read_client('{"type": "words", "words": []}', audio=True)
    with pytest.raises(P.ProtocolError) as e:
        P.Config.from_dict({"type": "config", "sample_rate": 8000}, audio=True)
    assert e.value.code == "bad_message"


@pytest.mark.parametrize("k", [-1, 65, 2.0, True, None, "2", 10**400])
def test_a_config_refuses_lookaheads_out_of_range(k):
    with pytest.raises(P.ProtocolError) as e:
        P.Config.from_dict({"type": "config", "lookahead": k})
    assert e.value.code == "bad_message" and len(str(e.value)) < 200


def test_sentences_are_asked_for_in_the_config_and_said_in_ready():
    """Off by default, and then in neither message: a client that does not ask gets what it got
    before; one that asks learns from ``ready`` whether the server sends them (an older one does not)."""
    assert "sentences" not in P.Config().to_json() and not P.Config.from_dict({"type": "config"}).sentences
    asked = P.Config.from_dict({"type": "config", "sentences": True})
    assert asked.sentences and P.Ready.of("1", asked, "window").to_dict()["sentences"] is True
    assert "sentences" not in P.Ready.of("1", P.Config(), "window").to_dict()
    with pytest.raises(P.ProtocolError) as e:
        P.Config.from_dict({"type": "config", "sentences": "yes"})
    assert e.value.code == "bad_message" and "sentences" in str(e.value)
    from streampunct.stream import PunctStream  # (torch)

    closed = json.loads((SCHEMAS / "server" / "sentence.json").read_text())["properties"]["closed"]
    assert f"{PunctStream.SENTENCE_WORDS} words" in closed["description"]


def test_a_message_the_client_cannot_read_is_a_protocol_error():
    with pytest.raises(P.ProtocolError):
        P.read_server('{"type": "events", "events": [{"index": 0}]}')
    with pytest.raises(P.ProtocolError):
        P.read_server('{"type": "surprise"}')


def test_the_protocol_and_the_words_client_load_no_model_stack():
    code = (
        "import sys, streampunct, streampunct.protocol, streampunct.clients.words; "
        "heavy = {'torch', 'numpy', 'tokenizers', 'faster_whisper'} & set(sys.modules); "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)


def test_commands_that_need_the_models_say_how_to_install_them():
    code = (
        "import sys; sys.modules.update(dict.fromkeys(['torch', 'numpy'])); "
        "from streampunct.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    for command in (["punctuate"], ["serve"], ["train", "--help"]):
        out = subprocess.run(
            [sys.executable, "-c", code, *command], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.count("\n") == 1 and "pip install 'streampunct[model,asr]'" in out.stderr
