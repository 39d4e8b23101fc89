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
from .text import LABELS, normalize, read_iwslt, render

__all__ = [
    "Punctuator",
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
