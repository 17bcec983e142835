"""Colour for a person at a terminal, and never for a pipe, a file or someone who asked for none.

Plain ANSI SGR codes rather than a library: the CLI colours four things (a job's state, a table's header, an
error's headline, a note's prefix), and `crosstrain` starts without importing more than it must. Colour is on
where the stream is a terminal, `TERM` is not `dumb` and `NO_COLOR` is unset or empty (https://no-color.org);
`FORCE_COLOR` (non-empty) turns it on anywhere, as in most command-line tools.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TextIO

RESET = "\033[0m"
BOLD = "\033[1m"
RED = "\033[31m"
GREEN = "\033[32m"
YELLOW = "\033[33m"
CYAN = "\033[36m"
DIM = "\033[2m"

#: A job state's colour: ended well, ended badly, still going.
STATES = {
    "SUCCEEDED": GREEN,
    "FAILED": RED,
    "CANCELLED": RED,
    "RUNNING": CYAN,
    "PENDING": YELLOW,
    "CANCELLING": YELLOW,
}


def enabled(stream: TextIO | None, environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    if env.get("NO_COLOR"):
        return False
    if env.get("FORCE_COLOR"):
        return True
    try:
        return stream is not None and stream.isatty() and env.get("TERM") != "dumb"
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


def paint(text: str, code: str, on: bool) -> str:
    return f"{code}{text}{RESET}" if on and code and text else text


def state(text: str, on: bool) -> str:
    """A state's name (or a cell that starts with it), in its colour."""
    return paint(text, STATES.get(text.split()[0] if text.split() else "", ""), on)
