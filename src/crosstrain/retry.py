"""One retry policy for every backend, built on tenacity.

Creates and polls are retried differently:

* a **create** is retried only when that cannot make a second job: the error proves the request was not
  accepted (`TransientError.accepted is False`), or the platform dedupes by the render-time identity
  (idempotency token, client-chosen name). Where the platform does not dedupe (Vertex), an `adopt` callback
  looks for a job carrying the identity before each retry and returns it if found.
* a **poll** is always safe to retry, with capped exponential backoff and jitter, and never sooner than the
  server's `Retry-After`. Each poll gets a fresh error budget, so one success resets it (skypilot#10155).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import tenacity

from crosstrain.errors import SubmitError, TransientError

T = TypeVar("T")


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


# Refused before anything was accepted (retry freely) / outcome unknown (the job may exist: look before retrying).
REFUSED_STATUSES = frozenset({429, 503})
UNKNOWN_OUTCOME_STATUSES = frozenset({408, 500, 502, 504})


def error_for_status(code: int, message: str, retry_after: str | None = None) -> SubmitError | TransientError | None:
    """A failed HTTP call as crosstrain's error, the same on every platform: 429 and 503 are retried at once
    (honouring Retry-After), 408 and 5xx gateway errors leave it open whether the call was accepted, any other
    status from 400 up is final. None below 400."""
    if code in REFUSED_STATUSES:
        return TransientError(message, accepted=False, retry_after=parse_retry_after(retry_after))
    if code in UNKNOWN_OUTCOME_STATUSES:
        return TransientError(message, accepted=None, retry_after=parse_retry_after(retry_after))
    return SubmitError(message) if code >= 400 else None


class _WaitHonouringRetryAfter(tenacity.wait.wait_base):
    """Exponential backoff with jitter, capped, but never shorter than the server's Retry-After."""

    def __init__(self, backoff: tenacity.wait.wait_base, cap: float) -> None:
        self.backoff, self.cap = backoff, cap

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        wait = float(self.backoff(retry_state))
        outcome = retry_state.outcome
        error = outcome.exception() if outcome is not None else None
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            wait = max(wait, min(float(retry_after), self.cap * 10))
        return wait


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry. `sleep` is injectable so tests run without waiting."""

    attempts: int = 6
    initial: float = 1.0
    maximum: float = 30.0
    jitter: float = 1.0
    sleep: Callable[[float], None] = field(default=time.sleep, compare=False)

    def _retrying(self, retry: tenacity.retry_base) -> tenacity.Retrying:
        return tenacity.Retrying(
            retry=retry,
            stop=tenacity.stop_after_attempt(self.attempts),
            wait=_WaitHonouringRetryAfter(
                tenacity.wait_exponential_jitter(initial=self.initial, max=self.maximum, jitter=self.jitter),
                self.maximum,
            ),
            sleep=self.sleep,
            reraise=True,
        )

    def poll(self, fn: Callable[[], T]) -> T:
        """Call a read-only `fn`, retrying any `TransientError`."""
        return self._retrying(tenacity.retry_if_exception_type(TransientError))(fn)

    def create(
        self,
        send: Callable[[], T],
        *,
        dedupes: bool,
        adopt: Callable[[], T | None] | None = None,
    ) -> T:
        """Send a create, retrying only where a retry cannot make a second job."""

        def safe_to_retry(error: BaseException) -> bool:
            if not isinstance(error, TransientError):
                return False
            return error.accepted is False or dedupes or adopt is not None

        failures: list[BaseException] = []

        def attempt() -> T:
            # After a failure whose outcome is unknown, a job may exist already: adopt it instead of re-sending.
            if adopt is not None and failures and getattr(failures[-1], "accepted", None) is not False:
                found = adopt()
                if found is not None:
                    return found
            try:
                return send()
            except BaseException as error:
                failures.append(error)
                raise

        retrying = self._retrying(tenacity.retry_if_exception(safe_to_retry))
        try:
            return retrying(attempt)
        except TransientError as error:
            if error.accepted is None and not dedupes and adopt is None:
                raise SubmitError(
                    f"{error} - the platform may or may not have accepted the job, and it cannot dedupe a "
                    "retry, so crosstrain did not retry; check the platform before submitting again"
                ) from error
            raise
