"""How `eqxrl` reads its command lines: an argparse parser without abbreviated
flags and with suggestions for mistyped ones, and an algorithm's typed fields
(`ConfigField`) as flags."""

import argparse
import difflib
from collections.abc import Sequence
from typing import Any

from ._config import ConfigField


class CommandError(Exception):
    """An error to report in one line (no traceback), exit status 1."""


class Parser(argparse.ArgumentParser):
    """argparse with suggestions for mistyped flags, and no abbreviated flags (a
    typo such as `--total-timestep` is an error, not a silent prefix match)."""

    def __init__(self, *args, known_flags: Sequence[str] = (), **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.known_flags = list(known_flags)

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            messages = []
            for index, extra in enumerate(extras):
                if (
                    not extra.startswith("-")
                    and index
                    and extras[index - 1].startswith("--")
                ):
                    continue  # the value of an unknown flag: reported with the flag
                message = f"unknown argument {extra!r}"
                if extra.startswith("--"):
                    flags = [
                        a for action in self._actions for a in action.option_strings
                    ]
                    close = difflib.get_close_matches(extra.split("=")[0], flags, n=3)
                    if close:
                        message += f" (did you mean {', '.join(close)}?)"
                messages.append(message)
            self.error("; ".join(messages) + f". See `{self.prog} --help`.")
        return namespace


def argument_type(field: ConfigField, allow_auto: bool = False):
    def parse(text: str) -> Any:
        if allow_auto and text.strip().lower() == "auto":
            return "auto"
        try:
            return field.parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error).split(": ", 1)[-1]) from None

    parse.__name__ = field.kind
    return parse


def field_metavar(field: ConfigField) -> str:
    if field.choices is not None:
        return "{" + ",".join(map(str, field.choices)) + "}"
    return {
        "bool": "{true,false}",
        "int": "N",
        "float": "X",
        "str": "TEXT",
        "int_tuple": "N,N,...",
        "str_tuple": "KEY,KEY,...",
        "float_tuple": "X,X,...",
    }.get(field.kind, "VALUE")


def field_help(field: ConfigField, extra: str = "") -> str:
    default = field.default
    if isinstance(default, tuple):
        default = ",".join(map(str, default))
    elif default is None:
        default = "none"
    elif isinstance(default, bool):
        default = str(default).lower()
    text = (field.help or field.name.replace("_", " ")).replace("`", "").rstrip(". ")
    text = f"{text}{extra} (default: {default})"
    return text.replace("%", "%%")


def settable(fields: Sequence[ConfigField]) -> list[ConfigField]:
    return [f for f in fields if f.kind not in ("other", "environment")]
