"""Seals on what crosstrain made for this user on this machine: a handle's result location, whose bytes
`JobHandle.result()` unpickles (which runs whatever code they hold).

Handles travel (a file, a notebook cell, an issue comment): one crafted to name a result an attacker wrote must
not run their code. crosstrain seals the result location of each handle it makes with an HMAC under a key only
this user can read (`$XDG_CONFIG_HOME/crosstrain/handle.key`, else `~/.config/...`, made on first use, mode
0600); a handle whose seal does not verify reads its result only when the caller says it trusts it. Where the key
cannot be kept, a key of this process's own seals what it makes.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import os
import secrets
from pathlib import Path

_KEY_BYTES = 32
_process_key = secrets.token_bytes(_KEY_BYTES)


def key_path() -> Path:
    from crosstrain.userconfig import user_dir

    return (user_dir() or Path(os.path.expanduser("~"), ".config", "crosstrain")) / "handle.key"


@functools.cache
def _load_key() -> bytes:
    """This user's key: read, or made (atomically, readable by the user alone); this process's where neither
    works (a read-only home)."""
    path = key_path()
    with contextlib.suppress(OSError):
        data = path.read_bytes()
        if len(data) == _KEY_BYTES:
            return data
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fresh = secrets.token_bytes(_KEY_BYTES)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            out.write(fresh)
        return fresh
    with contextlib.suppress(OSError):  # another process made it first
        data = path.read_bytes()
        if len(data) == _KEY_BYTES:
            return data
    return _process_key


def seal(*parts: str) -> str:
    """A seal over `parts` (each a whole field: no part can be moved into another)."""
    message = "\0".join(parts).encode()
    return hmac.new(_load_key(), message, hashlib.sha256).hexdigest()[:32]


def verifies(mark: str, *parts: str) -> bool:
    return bool(mark) and hmac.compare_digest(mark, seal(*parts))
