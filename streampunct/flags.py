"""Command-line flags generated from a config dataclass: one ``--name-with-dashes`` per field, so a
new option is a new field, its flag and help follow. Used by the training commands and by
``streampunct serve``'s limits. No torch."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any

__all__ = ["add_config_flags", "config_from_flags", "number_or_off"]


def number_or_off(value: str) -> float | None:
    """A flag's number, or ``off`` for None (no limit)."""
    if value == "off":
        return None
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number or off, not {value!r}") from None


def add_config_flags(p: Any, cls: type, **cli: dict[str, Any] | None) -> None:
    """A flag per field of the config dataclass ``cls`` on ``p`` (a parser or an argument group):
    ``--name-with-dashes``, of the field's type (``X | None``: ``X``, and ``off`` for None when the
    default is not None; bool as ``--flag/--no-flag``; ``Literal`` as choices; a tuple as several
    values), its default and ``cls.HELP``. ``cli[name]``: argparse keywords that replace those made
    here (a default from $STREAMPUNCT_DATA), or None: no flag."""
    hints = typing.get_type_hints(cls)
    kw: dict[str, Any]
    for f in dataclasses.fields(cls):
        if f.name in cli and cli[f.name] is None:
            continue
        t, kw = hints[f.name], {"help": getattr(cls, "HELP", {}).get(f.name)}
        optional = typing.get_origin(t) in (typing.Union, types.UnionType)
        if optional:  # X | None
            t = next(a for a in typing.get_args(t) if a is not type(None))
        if typing.get_origin(t) is typing.Literal:
            kw["choices"] = typing.get_args(t)
            t = type(kw["choices"][0])
        elif typing.get_origin(t) is tuple:
            items = typing.get_args(t)
            kw["nargs"] = "+" if items[-1] is Ellipsis else len(items)
            t = items[0]
        if t is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif optional and f.default is not None and t in (int, float):
            kw["type"], kw["help"] = number_or_off, f"{kw['help'] or ''}; a number or off".lstrip("; ")
        else:
            kw["type"] = t
        if f.default is dataclasses.MISSING:
            kw["required"] = True
        else:
            kw["default"] = f.default
            if f.default is not None and t is not bool:  # BooleanOptionalAction says its own
                kw["help"] = f"{kw['help'] or ''} (default: %(default)s)".lstrip()
        kw.update(cli.get(f.name) or {})
        p.add_argument("--" + f.name.replace("_", "-"), **kw)


def config_from_flags(args: argparse.Namespace, cls: type, **given: object) -> Any:
    """The config dataclass ``cls`` from the flags :func:`add_config_flags` made (lists as
    tuples), and ``given``."""
    flags = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
    flags = {k: tuple(v) if isinstance(v, list) else v for k, v in flags.items()}
    return cls(**{**flags, **given})
