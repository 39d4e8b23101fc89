"""The front ends ``python -m benchmarks.caption_latency`` measures: each a named ``--config`` file of
the server's recogniser and pipeline settings (FRONTENDS), every setting given, so that it stays what
it was measured as."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from streampunct.options import FrontEndOptions, RecognizerOptions, config_toml

# The front end before each setting came (``today`` and the first ones were measured so): a named
# front end gives every setting, so that it stays what it was measured as when the server's
# defaults change. ``encoder_pad_s`` and ``settle_after_s`` came on 2026-11-25 (None: a 30 s encoder
# window and no settling), ``settle_unsure_after_s`` the same evening, ``context_s`` and
# ``beam_size`` on 2026-11-26, ``agree_after_s`` that night, ``sentence_ends="whisper"`` and the
# pause clock's independence of the end-of-speech commit on 2026-11-27.
BEFORE: dict[str, Any] = dict(
    min_chunk_s=0.5, max_buffer_s=25.0, end_of_speech_s=0.5, prompt=True, encoder_pad_s=None,
    settle_after_s=None, settle_unsure_after_s=None, agree_after_s=None, sentence_ends="punctuator",
)  # fmt: skip


def front_end(**changes: Any) -> tuple[RecognizerOptions, FrontEndOptions]:
    """A front end: BEFORE with ``changes`` (recogniser and pipeline fields alike)."""
    given = {**BEFORE, **changes}
    split = {
        cls: {k: v for k, v in given.items() if k in {f.name for f in dataclasses.fields(cls)}}
        for cls in (RecognizerOptions, FrontEndOptions)
    }
    return RecognizerOptions(**split[RecognizerOptions]), FrontEndOptions(**split[FrontEndOptions])


def _config(**changes: Any) -> str:
    """A front end's ``--config`` file ([recognizer], [front_end]), every setting given (see BEFORE)."""
    return config_toml(*front_end(**changes))


def server_args(name: str, folder: Path) -> list[str]:
    """What ``serve`` is given for front end ``name``: ``--config`` with its file, written in ``folder``
    (none for ``default``)."""
    if not FRONTENDS[name]:
        return []
    path = folder / f"{name}.toml"
    path.write_text(FRONTENDS[name], encoding="utf-8")
    return ["--config", str(path)]


def settings(name: str) -> list[str]:
    """Front end ``name``'s settings, each ``key=value`` as its file writes it (none: the defaults)."""
    return [line.replace(" = ", "=", 1) for line in FRONTENDS[name].splitlines() if " = " in line]


# Front-end settings: the server's --config files. "today" is the front end before issue 19; "today",
# "fast", "next" and "live" were measured with the recogniser's prompt on (the server's default then), and
# keep it. "no-prompt" was the shipped default from 2026-11-24, "short-next" from 2026-11-25,
# "unsure2" from that evening, "agree03" from the night of 2026-11-26, and "whisper-ends" (the
# buffer trimmed at Whisper's sentence ends) since 2026-11-27; "held" and "beam5" (options, measured
# 2026-11-26), "no-eos" and "settle-pauses" (2026-11-27) are not (docs/latency.md).
SHORT = dict(prompt=False, encoder_pad_s=4.0, settle_after_s=1.0)
UNSURE2 = dict(prompt=False, encoder_pad_s=12.0, settle_after_s=1.0, settle_unsure_after_s=2.0)
WHISPER_ENDS = dict(**UNSURE2, agree_after_s=0.3, sentence_ends="whisper")
FRONTENDS: dict[str, str] = {
    "today": _config(min_chunk_s=1.0, end_of_speech_s=None, provisional_lookahead=False, pause_clock=False),
    "default": "",  # no file: the server's defaults (streampunct.options), whatever they are
    "fast": _config(confident=0.7, provisional_lookahead=False),  # provisional lookahead came after it
    "next": _config(),
    "no-prompt": _config(provisional_lookahead=False, prompt=False),
    "short": _config(**SHORT, provisional_lookahead=False),
    "short-next": _config(**SHORT),
    "short-next-0.3": _config(**SHORT, min_chunk_s=0.3),
    "pad12": _config(prompt=False, encoder_pad_s=12.0, settle_after_s=1.0),
    "pad12-settle2": _config(prompt=False, encoder_pad_s=12.0, settle_after_s=2.0),
    "pad12-no-settle": _config(prompt=False, encoder_pad_s=12.0),
    "unsure2": _config(**UNSURE2),
    "held": _config(**UNSURE2, context_s=0.5),
    "beam5": _config(**UNSURE2, beam_size=5),
    "agree03": _config(**UNSURE2, agree_after_s=0.3),
    "whisper-ends": _config(**WHISPER_ENDS),
    # options, 2026-11-27: without the commit at the end of speech; the pause clock off, then kept
    "no-eos": _config(**WHISPER_ENDS, end_of_speech_s=None, pause_clock=False),
    "settle-pauses": _config(**WHISPER_ENDS, end_of_speech_s=None),
    "live": _config(max_buffer_s=6.0, confident=0.7),
    "live-agree": _config(max_buffer_s=6.0),
}
