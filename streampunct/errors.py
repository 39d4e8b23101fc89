"""One exception hierarchy: every error streampunct raises on purpose is a ``StreamPunctError``."""

from __future__ import annotations

__all__ = [
    "StreamPunctError",
    "InputError",
    "EmptyInputError",
    "DataFormatError",
    "UnknownLabelError",
    "CheckpointError",
]


class StreamPunctError(Exception):
    """Base class of every error streampunct raises on purpose."""


class InputError(StreamPunctError, ValueError):
    """The caller gave input streampunct cannot use."""


class EmptyInputError(InputError):
    """There were no words to work on."""


class DataFormatError(InputError):
    """A data file is missing or malformed; ``path`` and ``line`` say where."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.line = line


class UnknownLabelError(DataFormatError):
    """A label outside O, COMMA, PERIOD, QUESTION."""


class CheckpointError(StreamPunctError):
    """A checkpoint is missing, incomplete or of another format."""
