"""Command-line flags generated from a config dataclass: one ``--name-with-dashes`` per field, so a
new option is a new field, its flag and help follow. Used by the training commands and by the
servers' limits that an operator sets (the others: ``--config``, streampunct/options.py). No torch."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Collection
from typing import Any, NoReturn

__all__ = [
    "Parser", "add_config_flags", "add_int8_flag", "config_from_flags", "flag_value", "flags_given", "flags_of",
    "number_or_off", "on_off", "port",
]  # fmt: skip


class Parser(argparse.ArgumentParser):
    """The commands' parser: a usage error is one line that says where to look, not the whole
    usage before it (exit status 2, as argparse's)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def number_or_off(value: str) -> float | None:
    """A flag's number, or ``off`` for None (no limit)."""
    if value == "off":
        return None
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number or off, not {value!r}") from None


def port(value: str) -> int:
    """A TCP port's flag: 0 (any free port) to 65535."""
    if not value.isdigit() or int(value) > 65535:
        raise argparse.ArgumentTypeError(f"a port from 0 to 65535, not {value!r}")
    return int(value)


def add_int8_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--int8``: the punctuation model's ``Punctuator.load(int8=True)``."""
    parser.add_argument(
        "--int8",
        action="store_true",
        help="punctuation on the CPU with the encoder's matrices in int8: about 1.4 times as fast a "
        "word, dev micro-F1 0.3 below fp32's, a stream's labels predict()'s up to 1 word in 200",
    )


def on_off(value: str) -> bool:
    """An on/off switch's value."""
    if value not in ("on", "off"):
        raise argparse.ArgumentTypeError(f"on or off, not {value!r}")
    return value == "on"


def flag_value(value: object) -> str:
    """A value as a flag takes it: on and off for a switch, off for None (no limit)."""
    return "on" if value is True else "off" if value is False or value is None else str(value)


def _dest(prefix: str, name: str) -> str:
    """The argparse destination of field ``name`` under ``prefix``; its flag is ``--`` and this
    with dashes."""
    return (prefix + name).replace("-", "_")


def add_config_flags(
    p: Any,
    cls: type,
    *,
    prefix: str = "",
    switches: bool = False,
    aliases: dict[str, str] | None = None,
    only: Collection[str] | None = None,
    defaults: bool = True,
    **cli: dict[str, Any] | None,
) -> None:
    """A flag per field of the config dataclass ``cls`` on ``p`` (a parser or an argument group):
    ``--{prefix}name-with-dashes``, of the field's type (``X | None``: ``X``, and ``off`` for None
    when the default is not None; bool as ``--flag/--no-flag``, or with ``switches`` as ``--flag
    on|off``; ``Literal`` as choices; a tuple as several values), its default and ``cls.HELP``.
    ``aliases[name]``: one more spelling of its flag (an older one). ``only``: the fields that get a
    flag (None: all). ``defaults=False``: a flag not given leaves ``args`` without it (its help still
    says the field's default), so that a value from elsewhere stands (:func:`flags_given`).
    ``cli[name]``: argparse keywords that replace those made here (a default from
    $STREAMPUNCT_DATA), or None: no flag."""
    hints = typing.get_type_hints(cls)
    kw: dict[str, Any]
    for f in dataclasses.fields(cls):
        if f.name in cli and cli[f.name] is None or only is not None and f.name not in only:
            continue
        dest = _dest(prefix, f.name)
        t, kw = hints[f.name], {"help": getattr(cls, "HELP", {}).get(f.name), "dest": dest}
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
        if t is bool and switches:
            kw["type"], kw["metavar"] = on_off, "{on,off}"
        elif t is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif optional and t in (int, float):
            kw["type"] = number_or_off
            if "off" not in (kw["help"] or ""):
                kw["help"] = f"{kw['help'] or ''}; a number or off".lstrip("; ")
        else:
            kw["type"] = t
        if f.default is dataclasses.MISSING:
            kw["required"] = True
        else:
            kw["default"] = f.default if defaults else argparse.SUPPRESS
            said = f.default is not None or kw.get("type") is number_or_off
            if said and (t is not bool or switches) and "(default:" not in (kw["help"] or ""):
                shown = flag_value(f.default).replace("%", "%%")  # (BooleanOptionalAction says its own)
                kw["help"] = f"{kw['help'] or ''} (default: {shown})".lstrip()
        if f.name.endswith("_s") and t in (int, float):
            kw["metavar"] = "S"
        kw.update(cli.get(f.name) or {})
        names = ["--" + dest.replace("_", "-")] + ([aliases[f.name]] if aliases and f.name in aliases else [])
        p.add_argument(*names, **kw)


def flags_given(args: argparse.Namespace, cls: type, *, prefix: str = "") -> dict[str, Any]:
    """The fields of the config dataclass ``cls`` that ``args`` has a value for, from the flags
    :func:`add_config_flags` made with ``prefix`` (lists as tuples)."""
    dest = {f.name: _dest(prefix, f.name) for f in dataclasses.fields(cls)}
    flags = {name: getattr(args, d) for name, d in dest.items() if hasattr(args, d)}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in flags.items()}


def config_from_flags(args: argparse.Namespace, cls: type, *, prefix: str = "", **given: object) -> Any:
    """The config dataclass ``cls`` from the flags :func:`add_config_flags` made with ``prefix``
    (lists as tuples), and ``given``."""
    return cls(**{**flags_given(args, cls, prefix=prefix), **given})


def flags_of(config: Any, *, prefix: str = "", switches: bool = False) -> list[str]:
    """The flags that give every field of the config dataclass ``config`` its value, as
    :func:`add_config_flags` made them (with the same ``prefix`` and ``switches``): a front end
    written out in full stays what it was when the defaults change."""
    out: list[str] = []
    for f in dataclasses.fields(config):
        value, flag = getattr(config, f.name), "--" + _dest(prefix, f.name).replace("_", "-")
        if isinstance(value, bool) and not switches:
            out.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, tuple):
            out += [flag, *map(str, value)]
        else:
            out += [flag, flag_value(value)]
    return out
