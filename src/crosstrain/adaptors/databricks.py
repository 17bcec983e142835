"""databricks-sdk: the lazy import, the install hint, the client crosstrain uses, and its errors as crosstrain's.

**One retry policy.** The SDK retries every request by itself, POSTs included, for up to
`retry_timeout_seconds` (300 s by default): on connection errors, timeouts, 429, 503 and a few error messages.
Left on, it would hide a failure from crosstrain's `RetryPolicy` (which needs to know whether a create's outcome
is unknown) and multiply the attempts. `workspace_client` gives the SDK a clock whose `sleep` refuses: the first
time the SDK would sleep before a retry, `_SdkWouldRetry` stops it, and `call` maps the error the SDK was about
to retry (kept as the marker's `__context__`). So every HTTP request is made exactly once per attempt of
`RetryPolicy`, and each has the client timeout `http_timeout_seconds` (the policy's `call_timeout`).

**An unreachable host.** The SDK has one timeout for connecting and answering, and probes the host's
`/.well-known/databricks-config` while the client is made, with its own retries (measured: 460 s before
`crosstrain status` failed against a workspace address that drops connections). `workspace_client` bounds
the probe and every connection by `connect_timeout`, so an unreachable workspace is a refusal within seconds
per attempt while a slow answer still gets the full `timeout`.

**Errors.** A `DatabricksError` does not keep its HTTP status, but its class says it: the SDK maps each status
to one class (`STATUS_CODE_MAPPING`; an `error_code` may pick a subclass, e.g. `RequestLimitExceeded` is a
`TooManyRequests`), so the status is that of the nearest mapped class in the error's MRO, and
`crosstrain.adaptors.http.error_for_status` maps it like every other platform's. An error of no mapped class
(a status the SDK has no class for, such as 502 or 408) with a `retry_after_secs` was a 429 or 503 (the SDK
sets it only on those); without one, its status is unknown and so is the outcome (retried, looked at first).
Connection failures and timeouts (requests' errors) go through `connection_error`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from crosstrain.adaptors import require
from crosstrain.adaptors.http import connection_error, error_for_status, unreadable, unreadable_answer
from crosstrain.errors import SubmitError, TransientError

if TYPE_CHECKING:
    from databricks.sdk import WorkspaceClient

T = TypeVar("T")

EXTRA = "databricks"


def sdk() -> Any:
    """`databricks.sdk`, or a `MissingDependency` that says `pip install 'crosstrain[databricks]'`."""
    return require("databricks.sdk", EXTRA)


def jobs() -> Any:
    """`databricks.sdk.service.jobs` (request classes and the run state enums)."""
    return require("databricks.sdk.service.jobs", EXTRA)


def workspace() -> Any:
    """`databricks.sdk.service.workspace` (`ImportFormat`)."""
    return require("databricks.sdk.service.workspace", EXTRA)


class _SdkWouldRetry(Exception):
    """Raised from the SDK's retry loop instead of its sleep; `__context__` is the error it would have retried."""


def workspace_client(
    host: str | None,
    *,
    timeout: float,
    connect_timeout: float | None = None,
    profile: str | None = None,
    token: str | None = None,
) -> WorkspaceClient:
    """A `WorkspaceClient` whose own retries are off and whose every request times out after `timeout` seconds,
    and after `connect_timeout` (at most `timeout`) where it cannot connect.

    Authentication is Databricks unified auth (environment, `~/.databrickscfg` `profile`, OAuth); `token` is
    for tests and benchmarks that talk to a loopback workspace.
    """
    sdk()
    from databricks.sdk import WorkspaceClient
    from databricks.sdk.clock import Clock, RealClock
    from databricks.sdk.config import Config

    from crosstrain import __version__

    connect = min(connect_timeout or timeout, timeout)

    class NoRetries(Clock):
        """The SDK's clock, except that it never sleeps before a retry: it stops the retry instead."""

        def __init__(self) -> None:
            self.real = RealClock()

        def time(self) -> float:
            return self.real.time()

        def sleep(self, seconds: float) -> None:
            raise _SdkWouldRetry()

    try:
        config = Config(
            host=host,
            profile=profile,
            token=token,
            product="crosstrain",
            product_version=__version__,
            clock=NoRetries(),
            # The host-metadata probe at construction builds its own retrying client from these two: one attempt
            # of at most `connect` seconds, then the SDK carries on without it (it is best-effort). Calls are
            # not retried by the SDK whatever this says (see NoRetries).
            retry_timeout_seconds=1,
            http_timeout_seconds=connect,
        )
    except ValueError as exc:  # no credentials, an unknown profile, a bad host
        raise SubmitError(
            f"databricks: cannot set up a client for {host or 'the default workspace'}: {exc}. Set DATABRICKS_HOST "
            "and DATABRICKS_TOKEN (or another unified-auth method), or a `profile` from ~/.databrickscfg"
        ) from exc
    client = WorkspaceClient(config=config)
    # Each API request: `connect` seconds to connect, `timeout` to answer (requests takes the pair). The SDK
    # (pinned, 0.156) passes its client's `_http_timeout_seconds` to every request and has no public setting.
    base = getattr(client.api_client, "_api_client", None)
    if base is not None and hasattr(base, "_http_timeout_seconds"):
        base._http_timeout_seconds = (connect, timeout)
    return client


def status_of(error: BaseException) -> int | None:
    """The HTTP status a `DatabricksError` stands for, from the SDK's own status -> class mapping."""
    from databricks.sdk.errors.platform import STATUS_CODE_MAPPING

    by_class = {cls: status for status, cls in STATUS_CODE_MAPPING.items()}
    for cls in type(error).__mro__:
        if cls in by_class:
            return by_class[cls]
    return None


def translate(error: BaseException, what: str) -> SubmitError | None:
    """An error from an SDK call as crosstrain's: refused (retry), outcome unknown (look first) or final; None
    for an error that is not the SDK's or the network's (a bug, which is raised as it is)."""
    from databricks.sdk.errors.base import DatabricksError

    if isinstance(error, _SdkWouldRetry) and error.__context__ is not None:
        error = error.__context__
    if isinstance(error, TimeoutError) and isinstance(error.__cause__, Exception):
        error = error.__cause__  # an injected client's own retries gave up: the last error says what happened
    if isinstance(error, SubmitError):
        return error
    if isinstance(error, DatabricksError):
        code = f" [{error.error_code}]" if error.error_code else ""
        message = f"databricks: {what}: {error}{code}"
        status = status_of(error)
        retry_after = str(error.retry_after_secs) if error.retry_after_secs is not None else None
        if status is not None:
            mapped = error_for_status(status, f"{message} (HTTP {status})", retry_after)
            return mapped if mapped is not None else SubmitError(message)
        if error.retry_after_secs is not None:  # the SDK sets it on 429 and 503 only
            return TransientError(message, accepted=False, retry_after=float(error.retry_after_secs))
        return TransientError(f"{message} (an HTTP status the SDK has no class for)", accepted=None)
    if isinstance(error, OSError):  # requests' ConnectionError and Timeout (DatabricksError is an OSError too)
        return connection_error(error, f"databricks: {what}")
    if isinstance(error, TimeoutError):
        return TransientError(f"databricks: {what}: {error}", accepted=None)
    if unreadable_answer(error, ("databricks",)):
        return unreadable(error, f"databricks: {what}")
    return None


def exists(fn: Callable[[], object]) -> bool:
    """Whether a read (`workspace.get_status`, `files.get_metadata`) finds its object: False on a 404
    (`RESOURCE_DOES_NOT_EXIST`, `NOT_FOUND`); any other error is raised, for `call` to map."""
    from databricks.sdk.errors import NotFound

    try:
        fn()
    except NotFound:
        return False
    return True


def found_or_none(fn: Callable[[], T]) -> T | None:
    """A read's answer, or None where it finds nothing (a 404); any other error is raised, for `call` to map."""
    from databricks.sdk.errors import NotFound

    try:
        return fn()
    except NotFound:
        return None


#: What a workspace answers for an endpoint it does not serve: turned off (a preview), or not there at all.
_NOT_SERVED = ("FEATURE_DISABLED", "ENDPOINT_NOT_FOUND")


def served_or_none(fn: Callable[[], T]) -> T | None:
    """An answer of an endpoint a workspace may not serve, or None where it does not (`FEATURE_DISABLED`,
    `ENDPOINT_NOT_FOUND`, a 404); any other error is raised, for `call` to map."""
    from databricks.sdk.errors import NotFound
    from databricks.sdk.errors.base import DatabricksError

    try:
        return fn()
    except NotFound:
        return None
    except DatabricksError as error:
        if getattr(error, "error_code", None) in _NOT_SERVED:
            return None
        raise


def call(fn: Callable[[], T], what: str) -> T:
    """Make one SDK call; its failure as crosstrain's error (`what` names the call in the message)."""
    try:
        return fn()
    except Exception as error:
        mapped = translate(error, what)
        if mapped is None or mapped is error:
            raise
        raise mapped from error


def submit_arguments(body: dict[str, Any]) -> dict[str, Any]:
    """`JobsAPI.submit`'s keyword arguments for a `runs/submit` body, in the installed SDK's classes; refused
    where they would not send the body: the SDK builds the request from its dataclasses, which leave out a field
    or an enum value they do not model (releases differ: 0.162.0 dropped `priority_class: CRITICAL`) without a
    word, so the run would start without it."""
    jobs_module = jobs()
    classes: dict[str, Any] = {
        "tasks": jobs_module.SubmitTask,
        "environments": jobs_module.JobEnvironment,
        "run_as": jobs_module.JobRunAs,
    }
    arguments: dict[str, Any] = {}
    for key, value in body.items():
        kind = classes.get(key)
        if kind is None:
            arguments[key] = value
            continue
        items = value if isinstance(value, list) else [value]
        parsed = [kind.from_dict(item) for item in items]
        for index, (item, back) in enumerate(zip(items, parsed, strict=True)):
            lost = _first_difference(item, back.as_dict(), f"{key}[{index}]" if isinstance(value, list) else key)
            if lost:
                raise SubmitError(
                    f"databricks-sdk {_version()} cannot send {lost}: its classes do not model it, so the run "
                    "would start without it. Install a databricks-sdk release that has it, or leave it out of "
                    "the job; nothing was sent"
                )
        arguments[key] = parsed if isinstance(value, list) else parsed[0]
    return arguments


def _first_difference(sent: Any, kept: Any, path: str) -> str:
    if isinstance(sent, dict) and isinstance(kept, dict):
        for key in sent:
            found = _first_difference(sent[key], kept.get(key), f"{path}.{key}")
            if found:
                return found
        return ""
    if isinstance(sent, list) and isinstance(kept, list) and len(sent) == len(kept):
        for index, (one, other) in enumerate(zip(sent, kept, strict=True)):
            found = _first_difference(one, other, f"{path}[{index}]")
            if found:
                return found
        return ""
    if sent == kept or (kept is None and sent in ([], {})):  # the SDK leaves empty lists and maps out
        return ""
    return f"{path} = {json.dumps(sent)}"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("databricks-sdk")
    except PackageNotFoundError:  # a copy not installed by pip (on the path by hand)
        return "(unknown release)"
