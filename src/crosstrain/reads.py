"""What a render read from the file system, so that a render remembered (`crosstrain.backends.memo`) is given
again only while everything it read holds.

Each read made while `recording()` is noted as a check that says whether it still gives what it gave (a code
folder's listing, replayed while the stat of every path it read holds: `packaging.bundle`), or as None where
no such check exists (a requirements file, a data or build folder read as it is): a render with such a read is
not remembered. Outside `recording()` nothing is noted.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

#: A check that a read still gives what it gave; None for a read that has none.
Check = Callable[[], bool] | None

_READS: contextvars.ContextVar[list[Check] | None] = contextvars.ContextVar("reads", default=None)


def read(check: Check) -> None:
    """Note a read: `check` says whether it still gives what it gave (None: nothing can say)."""
    reads = _READS.get()
    if reads is not None:
        reads.append(check)


@contextlib.contextmanager
def recording() -> Iterator[list[Check]]:
    """The reads made inside, noted in the list it gives (and in any recording around it as well)."""
    outer = _READS.get()
    reads: list[Check] = []
    token = _READS.set(reads)
    try:
        yield reads
    finally:
        _READS.reset(token)
        if outer is not None:
            outer.extend(reads)


def hold(checks: list[Check]) -> bool:
    """Whether every read noted still gives what it gave (False where one has no check). The checks are made
    as at one instant: what two of them read alike (`once`) is read once."""
    token = _ONCE.set({})
    try:
        return all(check is not None and check() for check in checks)
    finally:
        _ONCE.reset(token)


_ONCE: contextvars.ContextVar[dict[tuple[Any, ...], Any] | None] = contextvars.ContextVar("once", default=None)


def once(read: Callable[..., T], *args: Any) -> T:
    """`read(*args)`, made once for all the checks of one `hold` (the stat of a path two listings read)."""
    seen = _ONCE.get()
    if seen is None:
        return read(*args)
    key = (read, *args)
    if key not in seen:
        seen[key] = read(*args)
    return seen[key]  # type: ignore[no-any-return]
