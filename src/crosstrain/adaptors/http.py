"""What every adaptor shares: HTTP statuses and connection failures as crosstrain's three kinds of failure."""

from __future__ import annotations

import time
from collections.abc import Iterator

from crosstrain.errors import SubmitError, TransientError

# Refused before anything was accepted (retry freely) / outcome unknown (the job may exist: look before retrying).
REFUSED_STATUSES = frozenset({429, 503})
UNKNOWN_OUTCOME_STATUSES = frozenset({408, 500, 502, 504})


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date), or None."""
    if not value:
        return None
    import email.utils  # only needed on this rare path

    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def error_for_status(code: int, message: str, retry_after: str | None = None) -> SubmitError | None:
    """A failed HTTP call as crosstrain's error, the same on every platform: 429 and 503 are refusals (retried,
    honouring Retry-After), 408 and 5xx gateway errors leave it open whether the call took effect, any other
    status from 400 up is final. None below 400."""
    if code in REFUSED_STATUSES:
        return TransientError(message, accepted=False, retry_after=parse_retry_after(retry_after))
    if code in UNKNOWN_OUTCOME_STATUSES:
        return TransientError(message, accepted=None, retry_after=parse_retry_after(retry_after))
    return SubmitError(message) if code >= 400 else None


def _chain(error: BaseException) -> Iterator[BaseException]:
    """The error, its causes and contexts, and the errors urllib3 and requests wrap in `.reason` or `.args`."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        current = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        todo += [e for e in linked if isinstance(e, BaseException)]


#: Errors that prove the request never left this machine: no connection, no name, no TLS session.
_NEVER_SENT = ("NewConnectionError", "NameResolutionError", "ConnectTimeoutError", "SSLError", "ProxyError")


def never_sent(error: BaseException) -> bool:
    """Whether a connection failure happened before the request was sent (so it cannot have taken effect)."""
    for link in _chain(error):
        if isinstance(link, ConnectionRefusedError) or any(cls.__name__ in _NEVER_SENT for cls in type(link).__mro__):
            return True
    return False


def connection_error(error: BaseException, what: str) -> TransientError:
    """A connection failure as a refusal where it happened before sending, else as an unknown outcome."""
    if never_sent(error):
        return TransientError(f"{what}: could not connect: {error}", accepted=False)
    return TransientError(f"{what}: no answer: {error}", accepted=None)


def unreadable_answer(error: BaseException, libraries: tuple[str, ...]) -> bool:
    """Whether `error` is a library failing to read an answer (empty, cut short, not the JSON it expects): a
    ValueError (bad JSON, a protobuf parse) or a KeyError (a field the answer lacks) raised inside one of
    `libraries` or the JSON decoder, not in crosstrain's own code."""
    if not isinstance(error, ValueError | KeyError) and type(error).__name__ != "ParseError":
        return False
    frames = []
    trace = error.__traceback__
    while trace is not None:
        frames.append(str(trace.tb_frame.f_globals.get("__name__", "")))
        trace = trace.tb_next
    return any(name.split(".")[0] in (*libraries, "json", "requests") for name in frames[1:])


def unreadable(error: BaseException, what: str) -> TransientError:
    """An answer that could not be read: whether the call took effect is unknown (a create: look first)."""
    detail = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    return TransientError(f"{what}: an answer that could not be read ({detail[:200]})", accepted=None)
