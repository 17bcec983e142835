"""One retry policy for every backend, built on tenacity.

Creates and polls are retried differently:

* a **create** is retried only when that cannot make a second job: the error proves the request was not
  accepted (`TransientError.accepted is False`), or the platform dedupes by the render-time identity
  (idempotency token, client-chosen name). After an unknown outcome a `find` callback looks for a job carrying
  the identity (for a settling window where the platform does not dedupe) and returns it if found, and
  looks once more before a final error, which then says whether a job may exist.
* a **poll** is always safe to retry, with capped exponential backoff and jitter, and never sooner than the
  server's `Retry-After`. Each poll gets a fresh error budget, so one success resets it (skypilot#10155).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import threading
import time
from collections.abc import Callable
from dataclasses import field
from typing import Any, TypeVar, cast

import tenacity

from crosstrain.errors import IdentityConflict, SubmitError, TransientError
from crosstrain.failures import passed_over_kind
from crosstrain.frozen import frozen

T = TypeVar("T")


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


@frozen
class RetryPolicy:
    """How often and how patiently to retry. `sleep` is injectable so tests run without waiting.

    `call_timeout` bounds every call an adaptor makes (a stalled server is an unknown outcome, not a hang);
    `connect_timeout` bounds connecting, where the client can tell it apart (an unreachable host is a refusal
    in seconds, not a wait of `call_timeout` per attempt; a platform's API accepts a connection in
    milliseconds); `settle` is how long to keep looking for a job after an unknown outcome on a platform that
    cannot dedupe a create, before creating again (a service may create the job seconds after it answered 504).
    """

    attempts: int = 6
    initial: float = 1.0
    maximum: float = 30.0
    jitter: float = 1.0
    call_timeout: float = 60.0
    connect_timeout: float = 5.0
    settle: float = 15.0
    look_interval: float = 2.0
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

    def look(self, find: Callable[[], T | None], *, window: float = 0.0) -> T | None:
        """`find()` (retried as a poll), again every `look_interval` for `window` seconds while it finds nothing."""
        found = self.poll(find)
        looks = math.ceil(window / self.look_interval) if window > 0 else 0
        for _ in range(looks):
            if found is not None:
                break
            self.sleep(self.look_interval)
            found = self.poll(find)
        return found

    def create(
        self,
        send: Callable[[], T],
        *,
        dedupes: bool,
        find: Callable[[], T | None] | None = None,
        identity: str = "",
    ) -> T:
        """Send a create, retrying only where a retry cannot make a second job.

        `dedupes`: the platform returns the existing job for a repeated create (idempotency token, fixed name).
        `find`: looks for the job by its identity. After an unknown outcome it is asked first (for `settle`
        seconds where the platform cannot dedupe), and once more before giving up, so a job that was created
        is never hidden behind the last error.
        """

        def safe_to_retry(error: BaseException) -> bool:
            if not isinstance(error, TransientError):
                return False
            if error.accepted is False and passed_over_kind(str(error)) == "quota":
                return False  # a 429 for quota is final: waiting makes no quota (a rate limit's 429 is retried)
            return error.accepted is False or dedupes or find is not None

        failures: list[BaseException] = []
        window = 0.0 if dedupes else self.settle

        def outcome_unknown() -> bool:
            return any(getattr(f, "accepted", False) is None for f in failures)

        def look() -> T | None:
            """`find`, where a final error of the lookup itself (a 403 on the read) means "not found"."""
            assert find is not None
            try:
                return self.look(find, window=window)
            except IdentityConflict:
                raise
            except SubmitError as error:
                if isinstance(error, TransientError):
                    raise
                failures.append(error)
                return None

        def attempt() -> T:
            if find is not None and failures and getattr(failures[-1], "accepted", False) is None:
                found = look()
                if found is not None:
                    return found
            try:
                return send()
            except BaseException as error:
                failures.append(error)
                raise

        try:
            return self._retrying(tenacity.retry_if_exception(safe_to_retry))(attempt)
        except SubmitError as error:
            if not outcome_unknown():
                raise
            if find is not None:
                with contextlib.suppress(TransientError):
                    found = look()
                    if found is not None:
                        return found
            where = f"with identity {identity} " if identity else ""
            raise SubmitError(
                f"{error}. An earlier attempt's outcome is unknown, so a job {where}may exist"
                + (" although crosstrain did not find it" if find is not None else "")
                + ": submit the same job again to adopt it (crosstrain looks for its identity first), or look for "
                "it on the platform before submitting with a new run id",
                job_may_exist=True,
            ) from error


def within(fn: Callable[[], T], seconds: float, expired: Callable[[], BaseException]) -> T:
    """`fn()`, or `expired()` raised once `seconds` have passed. A socket timeout bounds each read, not an
    answer that comes a byte at a time; a caller's deadline must hold anyway. The call goes on in a daemon
    thread and its answer is dropped."""
    outcome: list[tuple[bool, Any]] = []
    done = threading.Event()
    context = contextvars.copy_context()

    def run() -> None:
        try:
            outcome.append((True, context.run(fn)))
        except BaseException as error:
            outcome.append((False, error))
        finally:
            done.set()

    threading.Thread(target=run, name="crosstrain-call", daemon=True).start()
    if not done.wait(max(seconds, 0.0)):
        raise expired()
    answered, value = outcome[0]
    if answered:
        return cast(T, value)
    raise value


#: How long a read may take once a caller's deadline has passed: `wait(timeout=0)` reads the state once.
LAST_READ_S = 1.0


def by_deadline(fn: Callable[[], T], deadline: float | None, expired: Callable[[], BaseException]) -> T:
    """`fn()`, bounded by `deadline` (a `time.monotonic()` instant) where there is one, `LAST_READ_S` at the least:
    what every wait's status read goes through, so that its timeout holds against a server that answers a byte
    at a time."""
    if deadline is None:
        return fn()
    return within(fn, max(deadline - time.monotonic(), LAST_READ_S), expired)
