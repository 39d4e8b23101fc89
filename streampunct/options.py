"""Every default of the live path, in one place: a dataclass per part, each field documented in its
``HELP`` (faster-whisper's ``VadOptions`` is the model). The servers' flags that operators set are
generated from them (:func:`streampunct.flags.add_config_flags`), every other field is set from a
TOML file (``--config``: :func:`read_config`, :func:`options_from_config`), so a new option is one
field and its help line (docs/usage.md lists them with :func:`config_toml`). No torch.

- :class:`StreamOptions`: a punctuation stream's lookahead, time limit, engine and sentences (the protocol's
  ``config`` message and the clients' flags);
- :class:`RecognizerOptions`: the streaming recogniser's (:class:`streampunct.speech.StreamingRecognizer`);
- :class:`FrontEndOptions`: what the caption pipeline does between the recogniser and the
  punctuation stream (:class:`streampunct.pipeline.CaptionPipeline`);
- :class:`CueOptions`: the clients' subtitle files (:func:`streampunct.captions.subtitle_cues`);
- :class:`Limits`: a server connection's limits (:mod:`streampunct.server.guard`).

The values are the shipped front end's: docs/latency.md measures them.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import sys
import types
import typing
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from .errors import InputError, StreamPunctError

if sys.version_info >= (3, 11):
    import tomllib

__all__ = [
    "StreamOptions", "RecognizerOptions", "FrontEndOptions", "CueOptions", "Limits", "SentenceEnds",
    "TABLES",
    "read_config", "options_from_config", "config_toml",
]  # fmt: skip

SentenceEnds = Literal["whisper", "punctuator"]


@dataclass(frozen=True)
class StreamOptions:
    """A punctuation stream's settings, as a client asks for them."""

    lookahead: int = 2
    max_delay_ms: float | None = 1500.0
    engine: str = "auto"
    sentences: bool = False

    HELP: ClassVar[dict[str, str]] = {
        "lookahead": "words after a word that decide its mark",
        "max_delay_ms": "time limit (ms after the word ends) for a word's mark to become final, or off",
        "engine": "masked (cheapest per word) or window (more accurate); auto: the model's choice per lookahead",
        "sentences": "the server sends each sentence once its words are final",
    }


@dataclass(frozen=True)
class RecognizerOptions:
    """The streaming recogniser's settings (streampunct/speech/recognizer.py explains each policy)."""

    language: str | None = "en"
    min_chunk_s: float = 0.5
    max_buffer_s: float = 25.0
    trim_after_s: float | None = None
    max_lag_s: float | None = 8.0
    resume_s: float = 2.0
    beam_size: int = 1
    confident: float | None = None
    end_of_speech_s: float | None = 0.5
    cut_at_silence: bool = True
    prompt: bool = False
    settle_after_s: float | None = 1.0
    settle_unsure_after_s: float | None = 2.0
    encoder_pad_s: float | None = 12.0
    context_s: float | None = None
    agree_after_s: float | None = 0.3
    sentence_ends: SentenceEnds = "whisper"
    cues: bool = True

    HELP: ClassVar[dict[str, str]] = {
        "language": "the language Whisper transcribes",
        "min_chunk_s": "new audio (s) that starts a recognition pass, once the last one has ended",
        "max_buffer_s": "most audio (s) re-transcribed: past it, the buffer is trimmed at the last committed word",
        "trim_after_s": "buffer (s) past which it is trimmed at a committed sentence end (off: max_buffer_s / 2)",
        "max_lag_s": "due audio (s) waiting unrecognised that makes the recogniser skip to recent audio",
        "resume_s": "audio (s) before the due end that a skip resumes at",
        "beam_size": "beams each recognition pass decodes with (1: greedy)",
        "confident": "commit a word on first sight at this probability (0 to 1); off: when two passes agree",
        "end_of_speech_s": "silence (s) after the last word that commits the recogniser's whole guess",
        "cut_at_silence": "at the end of speech, the buffer is cut where its silence starts: later passes skip it",
        "prompt": "each pass sees the committed text before its audio as Whisper's prompt",
        "settle_after_s": "audio (s) heard after a word that commits it even where two passes disagree on it",
        "settle_unsure_after_s": "the same for a word under probability 0.5 (off: as settle_after_s)",
        "encoder_pad_s": "Whisper's encoder reads the buffer and this much silence (s), not 30 s (off: 30 s)",
        "context_s": "commit an agreed word once a pass heard this much (s) after it, as that pass wrote it",
        "agree_after_s": "audio (s) the earlier of two agreeing passes heard after a word, for them to commit it",
        "sentence_ends": "whose sentence ends trim the buffer: Whisper's marks, or streampunct's final periods",
        "cues": "give each word Whisper's probabilities of the marks after it (the punctuator's evidence)",
    }

    def __post_init__(self) -> None:
        ends = typing.get_args(SentenceEnds)
        if self.sentence_ends not in ends:
            raise StreamPunctError(f"sentence_ends must be one of {ends}, got {self.sentence_ends!r}")
        if self.max_lag_s is not None and not 0 <= self.resume_s < self.max_lag_s:
            raise StreamPunctError(
                f"resume_s must be from 0 to max_lag_s ({self.max_lag_s}), got {self.resume_s}"
            )
        if self.beam_size < 1:
            raise StreamPunctError(f"beam_size must be 1 or more, not {self.beam_size}")
        for name in ("min_chunk_s", "max_buffer_s"):
            if getattr(self, name) <= 0:
                raise StreamPunctError(f"{name} must be over 0, not {getattr(self, name)}")

    @property
    def trim_s(self) -> float:
        """Buffer length (s) past which the buffer is trimmed at a committed sentence end."""
        return self.max_buffer_s / 2 if self.trim_after_s is None else self.trim_after_s


@dataclass(frozen=True)
class FrontEndOptions:
    """What the caption pipeline does between the recogniser and the punctuation stream."""

    provisional_lookahead: bool = True
    pause_clock: bool = True

    HELP: ClassVar[dict[str, str]] = {
        "provisional_lookahead": "the recogniser's provisional words are lookahead for the committed ones (never final)",
        "pause_clock": "in a pause with every word committed, each silent chunk moves the punctuation clock",
    }


@dataclass(frozen=True)
class CueOptions:
    """The cues of the subtitle files that ``streampunct file`` and ``mic`` write (SRT, WebVTT), by
    broadcast practice (:func:`streampunct.captions.subtitle_cues`)."""

    max_line_chars: int = 42
    max_lines: int = 2
    min_cue_s: float = 1.0
    max_chars_per_s: float = 20.0

    HELP: ClassVar[dict[str, str]] = {
        "max_line_chars": "characters a subtitle line holds at most",
        "max_lines": "lines a subtitle cue holds at most",
        "min_cue_s": "seconds a subtitle cue stays on screen at least",
        "max_chars_per_s": "reading rate: a cue stays until read at this many characters a second, if the next allows",
    }

    def __post_init__(self) -> None:
        for name in ("max_line_chars", "max_lines", "min_cue_s", "max_chars_per_s"):
            if getattr(self, name) <= 0:
                raise StreamPunctError(f"{name} must be over 0, not {getattr(self, name)}")


STREAMS_PER_CLIENT = 8  # Limits.max_streams_per_client bound beyond loopback, unless given


@dataclass(frozen=True)
class Limits:
    """A server connection's limits (None: no limit). Rates are sustained rates with a burst
    allowance: a client ahead of its rate is slowed; one more than ``max_wait_s`` ahead is refused.
    docs/protocol.md ("Security") says what a client gets at each."""

    max_streams: int = 64
    max_streams_per_client: int | None = None  # STREAMS_PER_CLIENT bound beyond loopback
    config_timeout_s: float | None = 10.0
    words_timeout_s: float | None = 60.0
    idle_timeout_s: float | None = 600.0
    max_session_s: float | None = 12 * 3600.0
    words_per_s: float | None = 200.0
    words_burst: float = 2000.0
    audio_speed: float | None = 10.0
    audio_burst_s: float = 60.0
    max_wait_s: float = 5.0
    max_waiting_words: int = 2000
    max_load: float | None = 0.9
    shutdown_grace_s: float = 10.0

    HELP: ClassVar[dict[str, str]] = {
        "max_streams": "streams open at once, all clients together; HTTP 503 beyond",
        "max_streams_per_client": "streams at once from one client address; HTTP 429 beyond "
        f"(default: {STREAMS_PER_CLIENT}, off on loopback)",
        "config_timeout_s": "seconds from connecting to the config message",
        "words_timeout_s": "seconds from the config to the first words (/v1/asr: audio)",
        "idle_timeout_s": "seconds without words (/v1/asr: audio), ticks and refused messages aside",
        "max_session_s": "seconds a stream may last, from its config",
        "words_per_s": "words a second per /v1/punct stream, sustained; a client ahead is slowed",
        "words_burst": "words a /v1/punct stream may send at once beyond its rate",
        "audio_speed": "audio seconds a second per /v1/asr stream (1: real time), sustained",
        "audio_burst_s": "audio seconds a /v1/asr stream may send at once beyond its rate",
        "max_wait_s": "seconds a client may be slowed for one message; further ahead it is refused",
        "max_waiting_words": "words of a /v1/punct stream waiting for compute; a message past it gets busy",
        "max_load": "share of the last 5 s a worker computed past which new streams get HTTP 503 busy",
        "shutdown_grace_s": "on SIGTERM, seconds the open streams go on; then as long again to finish them",
    }


# The tables of a --config file: each sets the fields of its options class (docs/usage.md).
TABLES: dict[str, type] = {"recognizer": RecognizerOptions, "front_end": FrontEndOptions, "limits": Limits}
OFF = "off"  # a --config value for None (no limit, no value), as the flags take it
KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def read_config(path: str | None) -> dict[str, Any]:
    """A TOML config file as a dict (None: no file, no settings); a file that is missing or not
    TOML is an :class:`InputError` naming it."""
    if path is None:
        return {}
    if sys.version_info < (3, 11):
        raise InputError("--config needs Python 3.11 or later (tomllib)")
    else:
        try:
            return tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as e:
            raise InputError(f"{path}: {(e.strerror or str(e)).lower()}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise InputError(f"{path}: not TOML: {e}") from None


def _setting(t: Any, value: object) -> object:
    """``value`` as a field of type ``t`` takes it (``"off"``: None, where the field allows it; an
    integer for a float); a ValueError says what it should be."""
    optional = typing.get_origin(t) in (typing.Union, types.UnionType)
    if optional:  # X | None
        if value == OFF:
            return None
        t = next(a for a in typing.get_args(t) if a is not type(None))
    if typing.get_origin(t) is Literal:
        kind, ok = "one of " + ", ".join(map(json.dumps, typing.get_args(t))), value in typing.get_args(t)
    else:
        kind = KINDS[t]
        ok = (isinstance(value, t) or t is float and isinstance(value, int)) and (
            t is bool or not isinstance(value, bool)
        )
    if not ok:
        shown = (
            json.dumps(value) if isinstance(value, str | int | float) else f"a TOML {type(value).__name__}"
        )
        raise ValueError(f"{kind}{' or ' + json.dumps(OFF) if optional else ''}, not {shown}")
    return float(value) if t is float else value  # type: ignore[arg-type]


def options_from_config(
    config: Mapping[str, Any],
    tables: Collection[str] = tuple(TABLES),
    where: str = "config",
    **given: Mapping[str, Any],
) -> dict[str, Any]:
    """The options objects of ``tables`` (names in :data:`TABLES`) that a parsed TOML config sets,
    by table name: each of its tables one of ``tables``, each key a field of that table's class,
    each value of the field's type. ``given[table]``: values over the file's (the command line's).
    A setting that is none of these is an :class:`InputError` naming ``where``, table and key."""
    settings: dict[str, dict[str, Any]] = {name: {} for name in tables}
    known = ", ".join(f"[{t}]" for t in tables)
    for name, table in config.items():
        if not isinstance(table, dict):
            raise InputError(f"{where}: {name}: a setting outside a table (the tables here: {known})")
        if name not in tables:
            raise InputError(f"{where}: [{name}]: no such table here (the tables here: {known})")
        fields = {f.name: f for f in dataclasses.fields(TABLES[name])}
        hints = typing.get_type_hints(TABLES[name])
        for key, value in table.items():
            if key not in fields:
                near = difflib.get_close_matches(key, list(fields), 1)
                hint = f" (did you mean {near[0]}?)" if near else ""
                raise InputError(f"{where}: [{name}] {key}: no such setting{hint}")
            try:
                settings[name][key] = _setting(hints[key], value)
            except ValueError as e:
                raise InputError(f"{where}: [{name}] {key}: {e}") from None
    options = {}
    for name in tables:
        try:
            options[name] = TABLES[name](**{**settings[name], **given.get(name, {})})
        except StreamPunctError as e:
            raise InputError(f"{where}: [{name}] {e}") from None
    return options


def _toml(value: object) -> str:
    """A field's value as TOML writes it."""
    if value is None:
        return json.dumps(OFF)
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value)


def config_toml(*options: Any, comments: bool = False) -> str:
    """The text of a --config file that sets every field of ``options`` (objects of the classes of
    :data:`TABLES`) to its value there; ``comments``: each with its help."""
    out = []
    for obj in options:
        name = next(n for n, cls in TABLES.items() if isinstance(obj, cls))
        lines = [f"{f.name} = {_toml(getattr(obj, f.name))}" for f in dataclasses.fields(obj)]
        if comments:
            width = max(map(len, lines)) + 2
            lines = [f"{line:{width}}# {obj.HELP[f.name]}" for line, f in zip(lines, dataclasses.fields(obj))]
        out.append("\n".join([f"[{name}]", *lines]))
    return "\n\n".join(out) + "\n"
