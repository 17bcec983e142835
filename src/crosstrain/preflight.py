"""`crosstrain check`: whether a job can start now on a target, and why not, read before anything is created.

Each platform reads what decides it (credentials and the project, workspace or compute; the quota for the job's
GPUs and machine family in its region against what the job asks; the platform's own limits on machines, pools
and policies; the staging place) and returns `Check`s, each classified with the fix in its message. A check is
read-only: no create call is made, ever. The records here are plain; each platform's reads live in its package
(`backends/<platform>/preflight.py`).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from crosstrain.errors import SpecError
from crosstrain.frozen import frozen
from crosstrain.safe import redact

if TYPE_CHECKING:
    from collections.abc import Mapping

    from crosstrain.backends.base import Backend
    from crosstrain.spec import TrainingJob


class Outcome(str, enum.Enum):
    """How a check ended. `ok` and `unchecked` pass; every other outcome fails the check."""

    OK = "ok"
    UNCHECKED = "unchecked"  # the service does not say (an endpoint this workspace lacks): said, not failed
    INVALID = "invalid"  # the job cannot run on this target at all (the render refuses it)
    PERMISSION = "permission"  # credentials missing or refused, or not allowed to read or use it
    NOT_FOUND = "not-found"  # the project, workspace, compute, node type or bucket does not exist
    QUOTA = "quota"  # the job asks for more than the quota leaves
    CAPACITY = "capacity"  # the quota allows it and the region, pool or cluster cannot give it now
    UNREACHABLE = "unreachable"  # the service did not answer (no connection, a timeout, a 5xx)

    @property
    def passed(self) -> bool:
        return self in (Outcome.OK, Outcome.UNCHECKED)


@frozen
class Check:
    """One thing a preflight read, what it found, and how to fix what is wrong."""

    name: str  # what was checked: "credentials", "workspace", "quota", "node type", "staging"...
    outcome: Outcome
    message: str
    fix: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "message", redact(self.message))
        object.__setattr__(self, "fix", redact(self.fix))

    @property
    def passed(self) -> bool:
        return self.outcome.passed

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "outcome": self.outcome.value,
            "passed": self.passed,
            "message": self.message,
            **({"fix": self.fix} if self.fix else {}),
        }

    def __str__(self) -> str:
        mark = "ok" if self.outcome is Outcome.OK else self.outcome.value
        return f"[{mark}] {self.name}: {self.message}" + (f"\n    fix: {self.fix}" if self.fix else "")


@frozen
class Report:
    """A target's preflight: every check, in the order read."""

    target: str
    checks: tuple[Check, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return all(check.passed for check in self.checks)

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(check for check in self.checks if not check.passed)

    def to_dict(self) -> dict[str, Any]:
        return {"target": self.target, "ok": self.ok, "checks": [check.to_dict() for check in self.checks]}


#: Words that mark a refusal for quota, and for capacity (stockout), in the platforms' error texts
#: (Vertex's 429 "exceed quota limits", Azure's OutOfQuota / JobNodeCountExceedsCoreQuota, Databricks'
#: *_QUOTA_EXCEEDED; "Resources are insufficient in region", AllocationFailed, *_STOCKOUT, ...).
_QUOTA = re.compile(
    r"exceed\w* (the )?quota|quota (limit|exceeded|failure)|QuotaExceeded|OutOfQuota|QUOTA_EXCEEDED|CoreQuota"
    r"|RESOURCE_EXHAUSTED|exceeds? (the )?(allowed|approved)",
    re.I,
)
_CAPACITY = re.compile(
    r"insufficient|enough resources|stockout|AllocationFailed|SkuNotAvailable|capacity|ZONE_RESOURCE_POOL_EXHAUSTED",
    re.I,
)


def classify(status: int | None, text: str) -> Outcome:
    """The outcome an error answer means: by the words first (a 429 may be quota or rate), then the status."""
    if _QUOTA.search(text) and status in (None, 400, 403, 409, 429):
        return Outcome.QUOTA
    if _CAPACITY.search(text) and status in (None, 400, 409, 429, 503):
        return Outcome.CAPACITY
    if status in (401, 403):
        return Outcome.PERMISSION
    if status == 404:
        return Outcome.NOT_FOUND
    return Outcome.UNREACHABLE


def enough(name: str, asked: int, limit: float | None, used: float | None, unit: str, fix: str) -> Check:
    """A quota check: `asked` against what `limit` less `used` leaves (a negative limit: none set)."""
    if limit is None:
        return Check(name, Outcome.UNCHECKED, f"the service lists no limit for {unit}; the job asks {asked}")
    if limit < 0:
        return Check(name, Outcome.OK, f"no limit on {unit}; the job asks {asked}")
    left = limit - (used or 0)
    said = f"{unit}: the job asks {asked}, the quota is {limit:g}" + (f" with {used:g} in use" if used else "")
    if asked > left:
        return Check(name, Outcome.QUOTA, said, fix)
    return Check(name, Outcome.OK, said)


def unchecked(name: str, why: str) -> Check:
    return Check(name, Outcome.UNCHECKED, why)


def first_failed(reports: Sequence[Report]) -> Check | None:
    return next((check for report in reports for check in report.failed), None)


def report(backend: Backend[Any, Any], job: TrainingJob, overrides: Mapping[str, Any] | None = None) -> Report:
    """`backend.check(job)`: the render's refusals as `invalid` checks (and nothing read), else the job's cost
    and what the platform's `preflight` read."""
    try:
        settings = backend.settings(job, overrides)
        checked = backend._checked(job, settings)
    except SpecError as refused:
        return Report(
            backend.name, tuple(Check(p.path or "job", Outcome.INVALID, p.message, p.fix) for p in refused.problems)
        )
    if checked.problems or checked.planned is None:
        return Report(
            backend.name, tuple(Check(p.path or "job", Outcome.INVALID, p.message, p.fix) for p in checked.problems)
        )
    said = checked.cost.notes()[0] if checked.cost is not None else f"{backend.title} runs it"
    head = Check("job", Outcome.OK, f"the job renders for {backend.name}; {said}")
    return Report(backend.name, (head, *backend.preflight(checked.job, settings, checked.planned[0])))
