"""streampunct: streaming punctuation restoration for speech recognition.

``import streampunct`` loads no torch: the model stack (``Punctuator``, ``PunctStream``) is imported
when first used, so the clients and the protocol work where only ``websockets`` is installed.
"""

from typing import TYPE_CHECKING, Any

from .errors import (
    CheckpointError,
    DataFormatError,
    EmptyInputError,
    InputError,
    StreamPunctError,
    UnknownLabelError,
)
from .metrics import Report, score
from .text import LABELS, normalize, read_iwslt, render
from .types import Cues, PunctEvent, Word

if TYPE_CHECKING:
    from .punctuator import Punctuator
    from .stream import PunctStream

__all__ = [
    "Punctuator",
    "PunctStream",
    "Word",
    "Cues",
    "PunctEvent",
    "LABELS",
    "normalize",
    "render",
    "read_iwslt",
    "score",
    "Report",
    "StreamPunctError",
    "InputError",
    "EmptyInputError",
    "DataFormatError",
    "UnknownLabelError",
    "CheckpointError",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "Punctuator":
        from .punctuator import Punctuator

        return Punctuator
    if name == "PunctStream":
        from .stream import PunctStream

        return PunctStream
    raise AttributeError(f"module 'streampunct' has no attribute {name!r}")
