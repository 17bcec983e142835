"""Forming the group in the open: every member checks in with the primary before training starts.

Replicas start minutes apart on real clusters (Vertex AI's up to ~11 minutes), and a member that waits silently
looks like a hang. Here the primary (member 0) says every few seconds which members it still waits for and until
when; a late member joins as long as the deadline allows; at the deadline every member that is there exits with
a message naming the missing ones. The check-in uses a TCPStore on the rendezvous port, closed again before the
training processes (torchrun, `init_process_group`) bind it.

`CROSSTRAIN_JOIN_TIMEOUT` (seconds, or `90s`, `20m`, `1h`) sets the deadline; the default covers replicas that
start far apart. Standard library and torch only: this travels with shipped code (`crosstrain.packaging`).
"""

from __future__ import annotations

import re
import socket
import sys
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch._C._distributed_c10d import TCPStore

JOIN_TIMEOUT_VARIABLE = "CROSSTRAIN_JOIN_TIMEOUT"
# Vertex AI starts replicas up to ~11 minutes apart; GiGL waits 45 minutes for them.
DEFAULT_JOIN_TIMEOUT = timedelta(minutes=45)
REPORT_EVERY_S = 5.0
_POLL_S = 0.25
_KEY = "crosstrain/join"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smh]?)")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600}


class JoinTimeout(RuntimeError):
    """The group did not form before the deadline; the message names the missing members."""


def join_timeout(environ: Mapping[str, str], default: timedelta = DEFAULT_JOIN_TIMEOUT) -> timedelta:
    """The deadline `CROSSTRAIN_JOIN_TIMEOUT` gives (seconds or 90s / 20m / 1h), else `default`."""
    raw = environ.get(JOIN_TIMEOUT_VARIABLE, "").strip()
    if not raw:
        return default
    matched = _DURATION.fullmatch(raw)
    if not matched or float(matched[1]) <= 0:
        raise ValueError(
            f"{JOIN_TIMEOUT_VARIABLE} is {raw!r}: use a positive number of seconds, or a duration like 90s, 20m, 1h"
        )
    return timedelta(seconds=float(matched[1]) * _UNIT_SECONDS[matched[2]])


def _clock(at: float) -> str:
    """A monotonic instant as the UTC wall-clock time a log reader can compare with."""
    wall = datetime.now(timezone.utc) + timedelta(seconds=at - time.monotonic())
    return wall.strftime("%H:%M:%S UTC")


def _listed(members: list[int], what: str) -> str:
    return f"{what}{'s' if len(members) > 1 else ''} {', '.join(map(str, members))}"


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def check_in(
    members: int,
    me: int,
    host: str,
    port: int,
    *,
    timeout: timedelta,
    what: str = "node",
    say: Callable[[str], None] | None = None,
    keep_for: timedelta | None = None,
) -> TCPStore | None:
    """Wait until all `members` (0 is the primary, which hosts the store at host:port) have checked in.

    Raises `JoinTimeout` naming the missing members at the deadline, on every member that is there. With
    `keep_for`, returns the store (its operations time out after `keep_for`) for `init_process_group(store=)`;
    without, returns None once the primary's store is closed, so that the port is free again for torchrun.
    """
    if members <= 1:
        return None
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    deadline = time.monotonic() + timeout.total_seconds()
    if me == 0:
        return _host_check_in(members, host, port, deadline, what, say, keep_for)
    return _join_primary(me, host, port, deadline, what, say, keep_for)


def _host_check_in(
    members: int,
    host: str,
    port: int,
    deadline: float,
    what: str,
    say: Callable[[str], None],
    keep_for: timedelta | None,
) -> TCPStore | None:
    from torch._C._distributed_c10d import TCPStore  # torch.distributed's own, typed where it is defined

    store = TCPStore(host, port, is_master=True, wait_for_workers=False, timeout=keep_for or timedelta(seconds=60))
    next_report = time.monotonic()
    while True:
        missing = [m for m in range(1, members) if not store.check([f"{_KEY}/{m}"])]
        if not missing:
            break
        now = time.monotonic()
        if now >= deadline:
            message = (
                f"{_listed(missing, what)} of {members} did not join by {_clock(deadline)} "
                f"({JOIN_TIMEOUT_VARIABLE}): check that {'they' if len(missing) > 1 else 'it'} started and "
                f"can reach the primary at port {port}, or raise {JOIN_TIMEOUT_VARIABLE}"
            )
            store.set(f"{_KEY}/abort", message)
            _await_acks(store, members, f"{_KEY}/seen-abort", missing)
            raise JoinTimeout(message)
        if now >= next_report:
            say(
                f"waiting for {_listed(missing, what)} of {members} to join (until {_clock(deadline)}, "
                f"{JOIN_TIMEOUT_VARIABLE})"
            )
            next_report = now + REPORT_EVERY_S
        time.sleep(_POLL_S)
    store.set(f"{_KEY}/go", "")
    say(f"all {members} {what}s joined")
    if keep_for is not None:
        return store
    _await_acks(store, members, f"{_KEY}/ack", [])
    return None  # the store closes here: torchrun binds this port next


def _await_acks(store: TCPStore, members: int, prefix: str, absent: list[int]) -> None:
    """Keep the store up until every present member has read the outcome (bounded: a member may vanish)."""
    until = time.monotonic() + 30
    expected = [m for m in range(1, members) if m not in absent]
    while time.monotonic() < until and not all(store.check([f"{prefix}/{m}"]) for m in expected):
        time.sleep(_POLL_S)


def _join_primary(
    me: int,
    host: str,
    port: int,
    deadline: float,
    what: str,
    say: Callable[[str], None],
    keep_for: timedelta | None,
) -> TCPStore | None:
    from torch._C._distributed_c10d import TCPStore

    next_report = time.monotonic()
    while not _reachable(host, port):
        now = time.monotonic()
        if now >= deadline:
            raise JoinTimeout(
                f"the primary ({what} 0 at {host}:{port}) did not come up by {_clock(deadline)} "
                f"({JOIN_TIMEOUT_VARIABLE}): check that it started and is reachable, or raise {JOIN_TIMEOUT_VARIABLE}"
            )
        if now >= next_report:
            say(f"{what} {me}: waiting for the primary ({what} 0) at {host}:{port} (until {_clock(deadline)})")
            next_report = now + REPORT_EVERY_S
        time.sleep(_POLL_S * 2)
    try:
        store = TCPStore(host, port, is_master=False, timeout=keep_for or timedelta(seconds=60))
        store.set(f"{_KEY}/{me}", "")
        say(f"{what} {me}: checked in with the primary at {host}:{port}; waiting for the others")
        while not store.check([f"{_KEY}/go"]):
            if store.check([f"{_KEY}/abort"]):
                message = store.get(f"{_KEY}/abort").decode()
                store.set(f"{_KEY}/seen-abort/{me}", "")
                raise JoinTimeout(message)
            time.sleep(_POLL_S)
        if keep_for is not None:
            return store
        store.set(f"{_KEY}/ack/{me}", "")
    except (RuntimeError, OSError) as exc:  # the primary went away before it said
        if isinstance(exc, JoinTimeout):
            raise
        raise JoinTimeout(f"lost the primary ({what} 0 at {host}:{port}) while the group formed: {exc}") from None
    del store
    _await_closed(host, port)
    return None


def _await_closed(host: str, port: int) -> None:
    """Until the primary has closed the check-in store (bounded): torchrun must reach the primary's next store on
    this port, not the one closing."""
    until = time.monotonic() + 10
    while time.monotonic() < until and _reachable(host, port):
        time.sleep(0.05)
