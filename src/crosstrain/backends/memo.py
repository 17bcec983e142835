"""Renders remembered, per backend, while everything they depend on holds.

A cloud target's render is pure: the request depends on the job (its fields, the folder it was loaded from, the
job file, a shipped function), on what its settings are resolved from, and on what it reads from the file
system. The first two are the key; the reads are noted as they are made (`crosstrain.reads`) and checked again
before a remembered request is given: a code folder's listing, replayed while the stat of every path it read
holds, and crosstrain's own files. A render that reads anything else as it is (a requirements file, a data or
build folder) is not remembered, nor one that fails. A remembered request is given only while what it says
(`to_dict`) is what it said (a caller that edits the request it was given in place gets a fresh one next time).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import marshal
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from crosstrain import reads
from crosstrain.records import Request

if TYPE_CHECKING:
    from crosstrain.settings import TargetSettings
    from crosstrain.spec import TrainingJob
    from crosstrain.userconfig import Layer

#: The most renders remembered per backend; past it they are all forgotten (a program rendering many jobs once
#: each gains nothing from them).
LIMIT = 32

_Remembered = tuple[Request, bytes, list[reads.Check]]
_MEMO: weakref.WeakKeyDictionary[object, dict[tuple[Any, ...], _Remembered]] = weakref.WeakKeyDictionary()


def digest(request: Request) -> str:
    """What `is_rendered` knows a request by: its compact JSON's digest (the C encoder; `to_json` is pure Python)."""
    return _digest(request.to_dict())


def _digest(shown: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(shown, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()


def _kept(shown: dict[str, Any]) -> bytes:
    """A request's `to_dict`, as bytes that are the same for the same values (marshal's version 2 marks no
    object as shared, as later versions do by reference count): kept to tell whether it was edited in place."""
    return marshal.dumps(shown, 2)


def patched(request: Request, patch: dict[str, Any], target: str) -> Request:
    """`request` with `patch` merged (RFC 7396) into the body of its create call, a note saying so, and one
    for every value of the plan the patch overrides."""
    from crosstrain.patch import merge, overrides

    create = dataclasses.replace(request.create, body=merge(request.create.body, patch))
    where = f"targets.{target}.patch"
    notes = [f"{where} is merged into the create call's body (RFC 7396)", *overrides(request.create.body, patch, where)]
    return dataclasses.replace(request, calls=(*request.calls[:-1], create), notes=(*request.notes, *notes))


def key(
    job: TrainingJob,
    model: type[TargetSettings],
    section: Any,
    overrides: Mapping[str, Any],
    environ: Mapping[str, str],
    config: tuple[Layer, ...],
) -> tuple[Any, ...]:
    """Everything but the file system that a render of `job` depends on: the job, and what the target's settings
    are resolved from (`resolve_settings`): the job's `section` for the target, the overrides, the environment
    variables the settings read, the config file's tables. Values of any type are known by their repr (their
    type, value and order, where JSON would write NaN as null; an object that shows its id is never met again)."""
    return (
        job.model_dump_json(),
        repr(section),
        str(job.base_dir),
        str(job.job_file),
        job.function_payload,
        job.function_note,
        model,
        repr(overrides),
        tuple(environ.get(var) for var in _variables(model)),
        repr(config),
    )


@functools.cache
def _variables(model: type[TargetSettings]) -> tuple[str, ...]:
    """The environment variables `model`'s settings are read from."""
    from crosstrain.settings import env_vars

    return tuple(var for name in model.model_fields for var in env_vars(model, name))


def remembered(
    backend: object, at: tuple[Any, ...] | None, render: Callable[[], Request], rendered: set[str]
) -> Request:
    """The request `render()` gives, remembered for `backend` under the key `at` (None: not remembered, the
    render depends on more than `key` and its reads) while what it read holds; its digest is added to `rendered`
    (`Backend.is_rendered`). A request given again is the one given before, while its `to_dict` is what it was."""
    memo = _MEMO.get(backend)
    if memo is None:
        memo = _MEMO[backend] = {}
    held = memo.get(at) if at is not None else None
    if at is not None and held is not None:
        request, kept, checks = held
        if reads.hold(checks) and _kept(request.to_dict()) == kept:
            return request
        memo.pop(at, None)  # another thread may have dropped it too
    with reads.recording() as checks:
        request = render()
    shown = request.to_dict()
    rendered.add(_digest(shown))
    if at is not None and all(check is not None for check in checks):
        if len(memo) >= LIMIT:
            memo.clear()
        memo[at] = (request, _kept(shown), checks)
    return request
