"""Errors that say what was wrong, where, and how to fix it, each with the CLI exit code it maps to.

Every message is redacted as the error is made (`crosstrain.safe.redact`): a problem quoting a value, a server's
error body echoing a header, a URL with a password never carries the credential, however it is shown."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from crosstrain.safe import redact


class ExitCode(enum.IntEnum):
    """The CLI's documented exit codes."""

    OK = 0
    ERROR = 1  # a bug or an unexpected failure
    INVALID = 2  # invalid spec, usage, or a spec the platform cannot express
    SUBMIT_FAILED = 3  # nothing (or not everything) was accepted by the platform
    JOB_FAILED = 4  # the job ended FAILED or CANCELLED while waiting
    WAIT_TIMEOUT = 5  # --timeout expired while the job was still running
    MISSING_DEPENDENCY = 6  # an optional SDK (or torch, Spark) is not installed here: nothing was asked of anyone
    CHECK_FAILED = 7  # `crosstrain check` (or `submit --check`): a target cannot start the job now
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a spec: the field path, what is wrong, and how to fix it."""

    path: str
    message: str
    fix: str = ""

    def __post_init__(self) -> None:
        """A problem quotes what it was given (a setting's value, a line of a file): credentials in it are not."""
        for name in ("path", "message", "fix"):
            object.__setattr__(self, name, redact(getattr(self, name)))

    def __str__(self) -> str:
        text = f"{self.path or '<job>'}: {self.message}"
        return f"{text}\n    fix: {self.fix}" if self.fix else text

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message, "fix": self.fix}


def closest(word: str, known: Iterable[str], *, cutoff: float = 0.6) -> str | None:
    """The known word that `word` most likely misspells, for a "did you mean" (difflib's closest, at least
    `cutoff` alike), or None. A word of 100 characters or more is no misspelling, and difflib's time grows with
    its square."""
    if len(word) >= 100:
        return None
    import difflib  # only where something was misspelled

    close = difflib.get_close_matches(word, list(known), n=1, cutoff=cutoff)
    return close[0] if close else None


class CrosstrainError(Exception):
    """Base class of every error crosstrain raises on purpose."""

    exit_code: ExitCode = ExitCode.ERROR

    def __init__(self, *args: object) -> None:
        """The message may quote a platform's answer (an error body, a state message): credentials in it are not
        kept, so no way of showing the error can show them."""
        super().__init__(*(redact(arg) if isinstance(arg, str) else arg for arg in args))


class SpecError(CrosstrainError, ValueError):
    """The job spec (or a target's settings) is invalid. Raised before anything is sent."""

    exit_code = ExitCode.INVALID
    headline = "invalid job spec"

    def __init__(self, problems: Iterable[Problem], *, source: str | None = None, headline: str | None = None) -> None:
        self.problems = tuple(problems)
        self.source = source
        if headline:
            self.headline = headline
        elif self.headline == SpecError.headline and self.problems:
            self.headline = _headline_for(self.problems[0].path) or self.headline
        where = f" ({source})" if source else ""
        count = len(self.problems)
        lines = [f"{self.headline}{where}: {count} problem{'s' if count != 1 else ''}"]
        lines += ["  - " + str(p).replace("\n", "\n  ") for p in self.problems]
        super().__init__("\n".join(lines))

    def to_dict(self) -> dict[str, object]:
        return {
            "error": type(self).__name__,
            "source": self.source,
            "problems": [p.to_dict() for p in self.problems],
        }


def _headline_for(path: str) -> str | None:
    """What kind of input a problem's path names, when it is not the job file: a command-line option, a
    handle, a rendered request, a target's settings."""
    if path.startswith("-"):
        return "invalid option"
    if path == "handle" or path.startswith("handle."):
        return "invalid job handle"
    if path.split(".", 1)[0].split("[", 1)[0] in ("request", "calls", "fingerprint", "settings", "identity"):
        return "invalid request"
    if path.startswith("targets."):
        return "invalid target settings"
    return None


class ConfigError(SpecError):
    """This user's config file (`crosstrain.userconfig`) is wrong, or names no such profile: this machine's
    configuration, not the job, so it stops every verb that reads it rather than counting against a target."""

    headline = "invalid config file"


class Unsupported(SpecError):
    """A valid spec that the chosen platform cannot express; refused rather than silently dropped."""

    def __init__(self, target: str, problems: Iterable[Problem], *, source: str | None = None) -> None:
        self.target = target
        self.headline = f"the {target} target cannot run this job"
        super().__init__(problems, source=source)


class UsageError(CrosstrainError):
    """The command line itself is wrong (an unknown verb or option, a missing argument)."""

    exit_code = ExitCode.INVALID


class NotConfigured(SpecError):
    """A handle or a rendered request points at a host, endpoint, workspace or project this machine is not
    configured for. Refused before any credential is loaded: handles and request files travel between CI steps
    and machines, so where credentials go is what the user configured, never what a file says."""

    def __init__(self, what: str, problems: Iterable[Problem]) -> None:
        self.headline = f"the {what} points where this machine is not configured to send credentials; nothing was sent"
        super().__init__(problems)


class UnknownBackend(CrosstrainError, LookupError):
    exit_code = ExitCode.INVALID


class MissingDependency(CrosstrainError, ImportError):
    """An optional SDK is not installed; the message carries the pip command that installs it. Its own exit code:
    `status` or `logs` without the SDK failed here, not at the platform ("submission failed" would mislead)."""

    exit_code = ExitCode.MISSING_DEPENDENCY


class SubmitError(CrosstrainError):
    """The platform refused or failed the request: final, not retried.

    `job_may_exist` is True when an earlier attempt may have been accepted, so the job may exist although
    this call failed; the message then says how to find or adopt it.
    """

    exit_code = ExitCode.SUBMIT_FAILED

    def __init__(self, message: str, *, job_may_exist: bool = False) -> None:
        super().__init__(message)
        self.job_may_exist = job_may_exist


class TransientError(SubmitError):
    """A failure worth retrying, in one of two kinds that every platform's adaptor maps its errors to.

    `accepted` says what the error proves about the request: False when it cannot have been accepted
    ("refused, retry": connection refused, 429, 503), None when the outcome is unknown ("look first":
    timeout after sending, dropped connection, 408, 500, 502, 504). A `SubmitError` that is not transient is
    "final". `retry_after` is the server's Retry-After in seconds, if it sent one.
    """

    def __init__(self, message: str, *, accepted: bool | None = None, retry_after: float | None = None) -> None:
        super().__init__(message, job_may_exist=accepted is None)
        self.accepted = accepted
        self.retry_after = retry_after


class IdentityConflict(SubmitError):
    """A job with this identity exists, made from a different request: adopting it would run the wrong job."""

    def __init__(self, identity: str, wanted: str, found: str | None, where: str, fix: str) -> None:
        super().__init__(
            f"a job with identity {identity} exists ({where}), made from a different request: its fingerprint "
            f"is {found or 'missing (not made by this version of crosstrain)'}, this request's is {wanted}. "
            f"This request does not run. To run it, {fix}"
        )
        self.identity, self.wanted, self.found = identity, wanted, found


class JobFailed(CrosstrainError):
    exit_code = ExitCode.JOB_FAILED


class FunctionFailed(JobFailed):
    """A shipped function raised on a rank: which rank (the first to fail), and its traceback."""

    def __init__(self, rank: int, traceback: str, failed_ranks: int = 1) -> None:
        others = f" ({failed_ranks - 1} other rank(s) failed too)" if failed_ranks > 1 else ""
        super().__init__(f"the function raised on rank {rank}{others}:\n{traceback.rstrip()}")
        self.rank = rank
        self.traceback = traceback


class WaitTimeout(CrosstrainError, TimeoutError):
    exit_code = ExitCode.WAIT_TIMEOUT


class Stopped(KeyboardInterrupt):
    """A terminating signal (SIGTERM: a CI cancel or `timeout`; SIGHUP: a closed terminal) stopped a local run,
    as Ctrl-C would: every process it started was stopped first. The CLI exits 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
