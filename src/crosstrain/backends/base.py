"""The backend contract: `submit = send(render())`.

`render()` is pure: no cloud SDK, no network, same output for the same inputs. It returns a `Request` that
holds every HTTP call submit will make and the job's identity (the id, name or idempotency token that makes
a retried submit safe). `send()` makes those calls through the platform's official client and returns a
`JobHandle`, whose string form a CI step can save and a later step can load.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from crosstrain.errors import IdentityConflict, JobFailed, Problem, SpecError, Unsupported, WaitTimeout
from crosstrain.settings import TargetSettings, resolve_settings

if TYPE_CHECKING:
    from crosstrain.retry import RetryPolicy
    from crosstrain.spec import TrainingJob

# Headers that carry credentials never appear in a rendered request.
CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key", "cookie", "proxy-authorization"})


@dataclass(frozen=True)
class HttpCall:
    """One HTTP call that submit will make, as the platform receives it (credentials left out)."""

    method: str
    url: str
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    purpose: str = ""

    def __post_init__(self) -> None:
        leaked = CREDENTIAL_HEADERS & {h.lower() for h in self.headers}
        if leaked:
            raise ValueError(f"a rendered request must not carry credentials ({', '.join(sorted(leaked))})")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "url": self.url}
        if self.headers:
            out["headers"] = dict(self.headers)
        if self.body is not None:
            out["body"] = self.body
        if self.purpose:
            out["purpose"] = self.purpose
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HttpCall:
        return cls(data["method"], data["url"], data.get("body"), data.get("headers") or {}, data.get("purpose", ""))


@dataclass(frozen=True)
class Request:
    """Everything submit will send for one job on one target. The create call comes last."""

    target: str
    identity: str
    job_name: str
    calls: tuple[HttpCall, ...]
    settings: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    #: A digest of what this request asks the platform for, identity left out; recorded on the job, so a
    #: different request under the same identity is refused instead of silently adopting the old job.
    fingerprint: str = ""

    @property
    def create(self) -> HttpCall:
        return self.calls[-1]

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "identity": self.identity,
            "fingerprint": self.fingerprint,
            "job_name": self.job_name,
            "settings": dict(self.settings),
            "calls": [c.to_dict() for c in self.calls],
            "notes": list(self.notes),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Request:
        return cls(
            target=data["target"],
            identity=data["identity"],
            job_name=data["job_name"],
            calls=tuple(HttpCall.from_dict(c) for c in data["calls"]),
            settings=dict(data.get("settings") or {}),
            notes=tuple(data.get("notes") or ()),
            fingerprint=str(data.get("fingerprint") or ""),
        )

    def _repr_html_(self) -> str:
        from crosstrain.display import request_html

        return request_html(self)


class JobState(str, enum.Enum):
    """The common state of a job on any platform; `JobStatus.native_state` keeps the platform's own."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELLED = "CANCELLED"
    UNKNOWN = "UNKNOWN"

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


@dataclass(frozen=True)
class JobStatus:
    state: JobState
    native_state: str
    message: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"state": self.state.value, "native_state": self.native_state, "message": self.message}


@dataclass(frozen=True)
class JobHandle:
    """A submitted job. `str(handle)` is a one-line JSON that `JobHandle.loads` reads back in a later process."""

    target: str
    identity: str
    job_id: str
    console_url: str = ""
    ref: Mapping[str, Any] = field(default_factory=dict)
    adopted: bool = field(default=False, compare=False)

    def dumps(self) -> str:
        data = {
            "target": self.target,
            "identity": self.identity,
            "job_id": self.job_id,
            "console_url": self.console_url,
            "ref": dict(self.ref),
        }
        return json.dumps(data, separators=(",", ":"), sort_keys=True)

    __str__ = dumps

    @classmethod
    def loads(cls, text: str) -> JobHandle:
        try:
            data = json.loads(text)
            return cls(
                data["target"],
                data["identity"],
                data["job_id"],
                data.get("console_url", ""),
                data.get("ref") or {},
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise SpecError(
                [
                    Problem(
                        "handle",
                        f"not a crosstrain job handle: {exc}",
                        "pass the line `crosstrain submit` printed, or the file it was saved to",
                    )
                ]
            ) from None

    def _backend(self) -> Backend[Any]:
        from crosstrain.backends import create_backend

        return create_backend(self.target)

    def status(self) -> JobStatus:
        return self._backend().status(self)

    def wait(self, timeout: float | None = None, *, poll_interval: float = 10.0) -> JobStatus:
        return self._backend().wait(self, timeout=timeout, poll_interval=poll_interval)

    def cancel(self) -> None:
        self._backend().cancel(self)

    def logs(self) -> Iterator[str]:
        return self._backend().logs(self)

    def _repr_html_(self) -> str:
        from crosstrain.display import handle_html

        return handle_html(self)


@dataclass(frozen=True)
class Capabilities:
    """What a platform can express. A job that needs more is refused with the reason, never trimmed."""

    reduction_server: bool = False
    parameter_servers: bool = False
    evaluators: bool = False
    per_pool_images: bool = False
    per_pool_machines: bool = False
    per_pool_commands: bool = False
    spot: bool = False
    cancel: bool = True
    logs: bool = False
    dedupes_create: bool = False  # the platform dedupes a retried create by the identity
    frameworks: frozenset[str] = frozenset({"pytorch"})
    launch_modes: frozenset[str] = frozenset({"auto", "per-process", "per-node"})
    #: The secret stores whose references (`env: {NAME: {secret: REF}}`) reach the value on the node
    #: (`crosstrain.spec.SECRET_STORES`); a reference to another store is refused.
    secret_stores: frozenset[str] = frozenset()


def capability_problems(job: TrainingJob, caps: Capabilities, target: str) -> list[Problem]:
    """The generic refusals: features of the job that `caps` says the target cannot express."""
    problems: list[Problem] = []
    if job.reduction_server and not caps.reduction_server:
        problems.append(
            Problem(
                "reduction_server",
                f"{target} has no reduction server (a Vertex AI feature)",
                "remove `reduction_server`, or use --target vertex",
            )
        )
    for pool_name, supported in (("parameter_servers", caps.parameter_servers), ("evaluators", caps.evaluators)):
        if getattr(job, pool_name) and not supported:
            problems.append(
                Problem(
                    pool_name,
                    f"{target} has no {pool_name.replace('_', ' ')} pool",
                    f"remove `{pool_name}`, or choose a target that has one",
                )
            )
    pools = job.pools()
    for attr, supported, what in (
        ("image", caps.per_pool_images, "image"),
        ("machine", caps.per_pool_machines, "machine"),
        ("boot_disk", caps.per_pool_machines, "boot disk"),
        ("command", caps.per_pool_commands, "command"),
        ("args", caps.per_pool_commands, "args"),
        ("env", caps.per_pool_commands, "environment"),
    ):
        if supported:
            continue
        for pool in pools[1:]:
            if getattr(pool, attr) != getattr(pools[0], attr):
                problems.append(
                    Problem(
                        f"{pool.role}.{attr}",
                        f"{target} runs one {what} on every node, but {pool.role} differs from primary",
                        f"use the same {what} for every pool",
                    )
                )
    if job.scheduling.spot and not caps.spot:
        problems.append(
            Problem("scheduling.spot", f"{target} has no spot capacity for jobs", "remove `scheduling.spot`")
        )
    if job.launch.framework not in caps.frameworks:
        problems.append(
            Problem(
                "launch.framework",
                f"{target} cannot run {job.launch.framework} jobs",
                f"use one of {', '.join(sorted(caps.frameworks))}",
            )
        )
    from crosstrain import secrets

    problems += secrets.refusals(job, caps.secret_stores, target)
    if job.launch.mode not in caps.launch_modes:
        problems.append(
            Problem(
                "launch.mode",
                f"{target} cannot launch {job.launch.mode}",
                f"use one of {', '.join(sorted(caps.launch_modes))}",
            )
        )
    return problems


@dataclass(frozen=True)
class Ids:
    """What a render writes into the request to name the job: its identity and its request's fingerprint."""

    identity: str
    fingerprint: str


#: Length of a fingerprint (hex): short enough for a label value, long enough never to collide by chance.
FINGERPRINT_LENGTH = 16
#: Length of the run id that defaults to the start of the fingerprint.
RUN_ID_LENGTH = 10


def identity_for(name: str, run_id: str, *, max_len: int = 63) -> str:
    """`<name as a slug>-<run id>`, cut to `max_len`."""
    slug = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-") or "job"
    return f"{slug[: max_len - len(run_id) - 1].rstrip('-')}-{run_id}"


def placeholder_ids(job: TrainingJob, max_len: int) -> Ids:
    """The ids a probe render uses, so that what it renders depends on the request only."""
    return Ids(identity_for(job.name, "0" * RUN_ID_LENGTH, max_len=max_len), "0" * FINGERPRINT_LENGTH)


def fingerprint_of(view: Any) -> str:
    """A stable digest of a JSON-able view of a request."""
    canonical = json.dumps(view, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()[:FINGERPRINT_LENGTH]


S = TypeVar("S", bound=TargetSettings)


class Backend(ABC, Generic[S]):
    """One platform, generic over its settings model `S`.

    Subclasses set the class attributes and implement `_render`, `send` and `status`. Their constructors take
    the platform's client as a named, typed injection point (tests pass one pointed at a loopback server).
    """

    name: ClassVar[str]
    title: ClassVar[str]
    settings_model: type[S]
    capabilities: ClassVar[Capabilities]
    formats: ClassVar[tuple[str, ...]] = ("json",)
    extra: ClassVar[str | None] = None  # the pip extra submit needs, for install hints
    identity_max_len: ClassVar[int] = 63  # the longest identity the platform's name or label takes
    #: How to free an identity whose job was made from another request, besides a new run id.
    conflict_fix: ClassVar[str] = "submit with --run-id new (or another run_id)"

    def __init__(self, *, retry: RetryPolicy | None = None, environ: Mapping[str, str] | None = None) -> None:
        self._retry = retry
        self.environ = os.environ if environ is None else environ

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy; tenacity is imported only when something is sent."""
        if self._retry is None:
            from crosstrain.retry import RetryPolicy

            self._retry = RetryPolicy()
        return self._retry

    @retry.setter
    def retry(self, policy: RetryPolicy) -> None:
        self._retry = policy

    # -- render (pure) -------------------------------------------------------------------------------------
    def settings(self, job: TrainingJob, overrides: Mapping[str, Any] | None = None) -> S:
        return resolve_settings(
            self.settings_model,
            self.name,
            section=job.targets.get(self.name),
            overrides=overrides,
            environ=self.environ,
        )

    def request_settings(self, request: Request) -> S:
        """The typed settings a rendered (possibly edited) request was made with."""
        return self.settings_model.model_validate(dict(request.settings))

    def refusals(self, job: TrainingJob, settings: S) -> list[Problem]:
        """Everything this target cannot express about `job`; empty when it can run it."""
        return capability_problems(job, self.capabilities, self.name) + self.platform_refusals(job, settings)

    def platform_refusals(self, job: TrainingJob, settings: S) -> list[Problem]:
        """Backend-specific refusals on top of the capability checks."""
        return []

    def render(self, job: TrainingJob, overrides: Mapping[str, Any] | None = None) -> Request:
        """The request, named by an identity that depends on what this target sends and nothing else.

        A probe render with placeholder ids gives the fingerprint; without a `run_id` the identity is
        `<name>-<start of the fingerprint>`, so a change to another target's settings, or to anything this
        target does not send, never names a new job here.
        """
        settings = self.settings(job, overrides)
        problems = self.refusals(job, settings)
        if problems:
            raise Unsupported(self.name, problems)
        probe = self._render(job, settings, placeholder_ids(job, self.identity_max_len))
        fingerprint = fingerprint_of(self.fingerprint_view(probe))
        run_id = job.run_id or fingerprint[:RUN_ID_LENGTH]
        ids = Ids(identity_for(job.name, run_id, max_len=self.identity_max_len), fingerprint)
        return dataclasses.replace(self._render(job, settings, ids), fingerprint=fingerprint)

    @abstractmethod
    def _render(self, job: TrainingJob, settings: S, ids: Ids) -> Request: ...

    def fingerprint_view(self, request: Request) -> Any:
        """What the fingerprint digests: every call as the platform receives it (crosstrain's own words, the
        purposes and notes, left out). Backends drop what they add that says nothing about the job."""
        return [{k: v for k, v in call.to_dict().items() if k != "purpose"} for call in request.calls]

    def check_same_request(self, request: Request, found: str | None, where: str) -> None:
        """Refuse to adopt a job with this identity that was made from a different request."""
        if found != request.fingerprint:
            raise IdentityConflict(request.identity, request.fingerprint, found, where, self.conflict_fix)

    def format(self, request: Request, fmt: str) -> str:
        """The request in one of `formats` (a native CLI or YAML form where the platform has one)."""
        if fmt != "json":
            raise SpecError(
                [
                    Problem(
                        "--format",
                        f"{self.name} has no {fmt!r} format",
                        f"use one of {', '.join(self.formats)}",
                    )
                ]
            )
        return request.to_json()

    # -- submit (sends) ------------------------------------------------------------------------------------
    def submit(self, job: TrainingJob, overrides: Mapping[str, Any] | None = None) -> JobHandle:
        return self.send(self.render(job, overrides))

    @abstractmethod
    def send(self, request: Request) -> JobHandle: ...

    @abstractmethod
    def status(self, handle: JobHandle) -> JobStatus: ...

    def cancel(self, handle: JobHandle) -> None:
        raise Unsupported(
            self.name,
            [
                Problem(
                    "cancel",
                    f"{self.name} cannot cancel jobs from crosstrain",
                    f"cancel it in the console: {handle.console_url}",
                )
            ],
        )

    def logs(self, handle: JobHandle) -> Iterator[str]:
        raise Unsupported(
            self.name,
            [
                Problem(
                    "logs",
                    f"{self.name} offers no logs through crosstrain",
                    f"read them in the console: {handle.console_url}",
                )
            ],
        )

    def wait(
        self,
        handle: JobHandle,
        *,
        timeout: float | None = None,
        poll_interval: float = 10.0,
        max_interval: float = 60.0,
    ) -> JobStatus:
        """Poll until the job ends. Raises `JobFailed` unless it succeeded, `WaitTimeout` after `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = poll_interval
        while True:
            status = self.retry.poll(lambda: self.status(handle))
            if status.state.terminal:
                if status.state is not JobState.SUCCEEDED:
                    detail = f": {status.message}" if status.message else ""
                    raise JobFailed(f"job {handle.identity} ended {status.state.value} ({status.native_state}){detail}")
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"job {handle.identity} is still {status.state.value} after {timeout:g}s")
            pause = interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic()))
            self.retry.sleep(pause)
            interval = min(interval * 1.5, max_interval)


# The per-node launcher of `crosstrain.runtime`: where a platform starts one process per node, it starts one
# process per GPU under torch.distributed.run. The container image must have crosstrain installed.
LAUNCHER_MODULE = "crosstrain.launch"


def launcher_command(command: list[str], *, nproc_per_node: int | str = "auto", nnodes: int | None = None) -> list[str]:
    """`command` wrapped in crosstrain's per-node launcher, as a backend renders it into a container command.

    Pass `nnodes` where the platform's variables cannot tell one process per node from one per GPU (Azure ML)."""
    nodes = ["--nnodes", str(nnodes)] if nnodes is not None else []
    return ["python", "-m", LAUNCHER_MODULE, "--nproc-per-node", str(nproc_per_node), *nodes, "--", *command]
