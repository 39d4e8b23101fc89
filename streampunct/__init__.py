"""streampunct: streaming punctuation restoration for speech recognition."""

from .errors import (
    CheckpointError,
    DataFormatError,
    EmptyInputError,
    InputError,
    StreamPunctError,
    UnknownLabelError,
)
from .metrics import Report, score
from .punctuator import Punctuator
from .stream import PunctStream
from .text import LABELS, normalize, read_iwslt, render
from .types import PunctEvent, Word

__all__ = [
    "Punctuator",
    "PunctStream",
    "Word",
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
