"""Why a job failed, in words a user can act on: the kind of failure, read from what the platform or the
failing rank said, and what to do next. Shared by every target (`JobStatus.message`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from crosstrain.frozen import frozen


@frozen
class Kind:
    name: str
    pattern: re.Pattern[str]
    advice: str


KINDS = (
    Kind(
        "quota or capacity",
        re.compile(
            r"quota|insufficient (capacity|resources)|resource(s)? (exhausted|unavailable)|stockout|"
            r"QuotaExceeded|ZONE_RESOURCE_POOL_EXHAUSTED|CLOUD_PROVIDER_LAUNCH_FAILURE",
            re.I,
        ),
        "ask for quota, or try another region, machine or spot setting",
    ),
    Kind(
        "preemption",
        re.compile(
            r"preempt|spot instance (was )?(reclaimed|terminated)|evicted|low.?priority.*(reclaimed|preempted)", re.I
        ),
        "resubmit (crosstrain submit --run-id new), raise scheduling.max_restarts, or leave spot capacity",
    ),
    Kind(
        "image pull",
        re.compile(r"(image|manifest).*(not found|pull|denied)|ErrImagePull|ImagePullBackOff|failed to pull", re.I),
        "check the image name and that the job's identity may read the registry",
    ),
    Kind(
        "env:// variables missing",
        re.compile(
            r"environment variable (RANK|WORLD_SIZE|MASTER_ADDR|MASTER_PORT|LOCAL_RANK) expected, but not set|"
            r"`MASTER_ADDR` env was not set",
        ),
        "the platform did not set the variables torch's env:// reads (Azure ML's MPI distribution sets only "
        "OMPI_* and AZ_BATCH_MASTER_NODE): run the command under `python -m crosstrain.launch --` (it sets them "
        "from the platform's), call crosstrain.runtime.init(), or use launch.framework: pytorch",
    ),
    Kind(
        "rendezvous timeout",
        re.compile(
            r"DistStoreError|timed out.*(rendezvous|initializ|waiting for)|Socket Timeout|"
            r"connect(ion)? to .*(refused|timed out)|RendezvousTimeoutError",
            re.I,
        ),
        "a node did not join in time: check that every node started and can reach the primary, or raise the timeout",
    ),
    Kind(
        "out of memory",
        re.compile(r"CUDA out of memory|OutOfMemoryError|Killed|exit(ed)? (code )?-?9\b|SIGKILL", re.I),
        "use a smaller batch or model shard, or a machine with more memory",
    ),
    Kind(
        "missing module",
        re.compile(r"ModuleNotFoundError|No module named", re.I),
        "add the package to `requirements`, or ship the module in `code`",
    ),
)
USER_CODE = "user code"


def classify(text: str) -> tuple[str, str]:
    """The failure's kind and the advice for it; user code when nothing else matches."""
    for kind in KINDS:
        if kind.pattern.search(text):
            return kind.name, kind.advice
    return USER_CODE, "read the failing rank's error above and fix the training code"


def last_lines(lines: list[str], count: int = 5) -> list[str]:
    """The last `count` lines that say something, the error's end (Python's last lines name the exception)."""
    return [line for line in lines if line.strip()][-count:]


def summary(
    what: str, recorded: str, tail: list[str], console_url: str = "", *, said: str = "", evidence: Sequence[str] = ()
) -> str:
    """A failure as `status` and `wait` say it: who failed, what the platform recorded, the kind with what to do
    (classified from all of it, and from more `evidence` than the lines shown), the console link and the failing
    process's last lines."""
    kind, advice = classify("\n".join([said, recorded, *tail, *evidence]))
    text = f"{what}: {said}" if said else what
    first = recorded.strip().splitlines()[0] if recorded.strip() else ""
    if first:
        text += f" ({first})"
    text += f". {kind}: {advice}" + (f"; see {console_url}" if console_url else "")
    if tail:
        text += "\nits last lines:\n" + "\n".join(f"  {line}" for line in tail)
    return text


#: Quota, capacity (stockout) and an expired wait for capacity told apart, for `crosstrain.fallback`: a rate limit
#: (Google's RESOURCE_EXHAUSTED 429 says that too) is none of them.
_QUOTA = re.compile(
    r"exceed\w* (the )?quota|quota (limit|exceeded|failure)|QuotaExceeded|OutOfQuota|QUOTA_EXCEEDED|CoreQuota", re.I
)
_CAPACITY = re.compile(
    r"insufficient (capacity|resources)|enough (resources|capacity)|stockout|AllocationFailed|SkuNotAvailable|"
    r"ZONE_RESOURCE_POOL_EXHAUSTED|resources? (are |is )?(exhausted|unavailable)|out of capacity|no capacity|"
    r"Resources are insufficient",
    re.I,
)
_EXPIRED = re.compile(
    r"max(imum)?[ _]?wait|maxWaitDuration|wait(ing)? for (capacity|resources)[^.]*(expired|timed out|exceeded)|"
    r"could not be scheduled within",
    re.I,
)


def passed_over_kind(text: str) -> str | None:
    """The reason in a platform's words that moves a run with `fallback:` on ("quota", "capacity",
    "wait-expired": a wait for capacity, `scheduling.max_wait`, that expired), or None (`crosstrain.fallback`)."""
    if _EXPIRED.search(text):
        return "wait-expired"
    if _QUOTA.search(text):
        return "quota"
    if _CAPACITY.search(text):
        return "capacity"
    return None
