"""The backend contract: `submit = send(render())`.

`render()` is pure: no cloud SDK, no network, same output for the same inputs. It returns a `Request` that
holds every HTTP call submit will make and the job's identity (the id, name or idempotency token that makes
a retried submit safe). `send()` makes those calls through the platform's official client and returns a
`JobHandle`, whose string form a CI step can save and a later step can load.

Credentials go only where this machine is configured to send them. A handle or a request that this backend
did not make itself (one read from a file, or edited) is checked against `Backend.configured()`, the settings
from the config file, the environment, overrides and the SDK's own profile, before any credential is loaded: its host,
endpoint, workspace or project must be the configured one (`check_handle`, `check_request`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from crosstrain.backends import memo
from crosstrain.backends.binding import Binding, Configured, Place, origin_of
from crosstrain.backends.memo import digest as _digest
from crosstrain.backends.memo import patched
from crosstrain.errors import (
    IdentityConflict,
    JobFailed,
    NotConfigured,
    Problem,
    SpecError,
    Unsupported,
    WaitTimeout,
)
from crosstrain.frozen import frozen
from crosstrain.pricing import Cost, Price, cost_problems
from crosstrain.records import HttpCall, JobHandle, JobState, JobStatus, JobSummary, Request
from crosstrain.settings import OVERRIDE, TargetSettings, configured_settings, env_vars, resolve_settings, sourced

if TYPE_CHECKING:
    from crosstrain.data import Placement
    from crosstrain.preflight import Check, Report
    from crosstrain.retry import RetryPolicy
    from crosstrain.spec import TrainingJob
    from crosstrain.sweep import SweepSupport
    from crosstrain.userconfig import Layer, UserConfig

#: Why a `targets.<target>.patch` may not change the fields that carry the identity and the fingerprint.
IDENTITY_WHY = (
    "it names the job, so a repeated submit finds it instead of making a second one (to name a new job, submit "
    "with --run-id)"
)
NODES_WHY = "the job's node count, which its ranks and rendezvous are planned for (set workers.replicas)"
FINGERPRINT_WHY = "it records the request's fingerprint, so a repeated submit adopts only a job made from this request"


@frozen
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
    #: Why a framework the target lacks cannot run there, where the platform has more to say than the default.
    framework_reasons: tuple[tuple[str, str], ...] = ()
    launch_modes: frozenset[str] = frozenset({"auto", "per-process", "per-node"})
    #: The secret stores whose references (`env: {NAME: {secret: REF}}`) reach the value on the node
    #: (`crosstrain.spec.SECRET_STORES`); a reference to another store is refused.
    secret_stores: frozenset[str] = frozenset()
    #: Ships a local folder (`code:`), installs `requirements:`, runs a platform-managed `environment:`.
    code: bool = False
    requirements: bool = False
    environments: bool = False
    #: The platform's hyperparameter tuning (`crosstrain.sweep`); None: a job with `sweep:` is refused.
    sweeps: SweepSupport | None = None


#: What a framework needs that a platform may not have, said when a target refuses it.
_FRAMEWORK_NEEDS = {
    "horovod": "Horovod's ranks are started together by mpirun or horovodrun across the nodes, and {target} "
    "starts each node's command itself, with no MPI between them",
    "mpi": "an MPI job's ranks are started together by mpirun across the nodes, and {target} starts each node's "
    "command itself, with no MPI between them",
}
#: Where a refused framework runs instead.
_FRAMEWORK_ELSEWHERE = {
    "horovod": "run it on azureml (an MPI job), or port it to torch.distributed (launch.framework: pytorch)",
    "mpi": "run it on azureml (an MPI job)",
}


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
        framework = job.launch.framework
        why = dict(caps.framework_reasons).get(framework) or _FRAMEWORK_NEEDS.get(framework)
        problems.append(
            Problem(
                "launch.framework",
                f"{target} cannot run {framework} jobs" + (f": {why.format(target=target)}" if why else ""),
                f"use one of {', '.join(sorted(caps.frameworks))}"
                + (f"; or {_FRAMEWORK_ELSEWHERE[framework]}" if framework in _FRAMEWORK_ELSEWHERE else ""),
            )
        )
    for attr, supported, what in (
        ("code", caps.code, "cannot ship a local folder yet"),
        ("requirements", caps.requirements, "cannot install requirements on its nodes"),
        ("environment", caps.environments, "has no platform-managed environments"),
    ):
        if getattr(job, attr) is not None and not supported:
            problems.append(
                Problem(attr, f"{target} {what}", f"remove `{attr}` and use an image that holds what the job needs")
            )
    from crosstrain import named_files, secrets, sweep

    if caps.code:
        problems += named_files.problems(job)
    problems += secrets.refusals(job, caps.secret_stores, target) + sweep.refusals(job, caps.sweeps, target)
    if job.launch.mode not in caps.launch_modes:
        problems.append(
            Problem(
                "launch.mode",
                f"{target} cannot launch {job.launch.mode}",
                f"use one of {', '.join(sorted(caps.launch_modes))}",
            )
        )
    return problems


@frozen
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
P = TypeVar("P")
T = TypeVar("T")


@frozen
class Checked(Generic[P]):
    """What the checks made of a job: the job as its nodes see it, every problem, the plan in a 1-tuple (None
    where the platform refused to plan; a backend that plans nothing has `(None,)`), and where a function job's
    result will be."""

    job: TrainingJob
    problems: list[Problem]
    planned: tuple[P] | None
    result_at: str
    cost: Cost | None = None


class Backend(ABC, Generic[S, P]):
    """One platform, generic over its settings model `S` and its plan `P` (what a job means there).

    Subclasses set the class attributes and implement `plan`, `_render`, `send` and `status`. Their constructors take
    the platform's client as a named, typed injection point (tests pass one pointed at a loopback server).
    """

    name: ClassVar[str]
    title: ClassVar[str]
    settings_model: type[S]
    capabilities: ClassVar[Capabilities]
    formats: ClassVar[tuple[str, ...]] = ("json",)
    extra: ClassVar[str | None] = None  # the pip extra submit needs, for install hints
    #: The keys a handle's `ref` needs and their types, checked by `JobHandle.loads`: a hand-edited or cut
    #: handle is refused naming the key (exit 2), instead of failing inside the backend.
    handle_ref: ClassVar[Mapping[str, type]] = {}
    identity_max_len: ClassVar[int] = 63  # the longest identity the platform's name or label takes
    #: How to free an identity whose job was made from another request, besides a new run id.
    conflict_fix: ClassVar[str] = "submit with --run-id new (or another run_id)"

    #: The package whose `schema.json` a `targets.<name>.patch` is checked against (its own); None: no patch.
    patch_schema: ClassVar[str | None] = None
    #: The module whose `EMULATION` says how `crosstrain run --local --emulate NAME` runs this platform's nodes
    #: here (its registry entry lists the names), imported when a local run starts, never by a render; None: not
    #: emulated.
    emulation_module: ClassVar[str | None] = None
    #: The package whose `prices.json` prices this target's jobs (`crosstrain prices`); None: it prices nothing.
    price_package: ClassVar[str | None] = None
    #: The fields of the create call's body that crosstrain owns (path -> why), which a patch may not change.
    #: "*" in a path stands for every element of the rendered list.
    owned_fields: ClassVar[Mapping[tuple[str | int, ...], str]] = {}
    #: The fields the render's plan puts in the body (path -> why), whose value a patch may change but which it
    #: may not remove: what the node-side emulation and the CLI formats read back.
    planned_fields: ClassVar[Mapping[tuple[str | int, ...], str]] = {}

    #: Where the platform's nodes reach data (`crosstrain.data.Placement`); None: it passes no data locations.
    data_placement: ClassVar[Placement | None] = None
    #: Where rank 0 of a function job leaves its result under the job's `output_dir`: the kinds of location
    #: (`crosstrain.locations.kind`) its nodes write as files (where `data_placement` mounts them) and
    #: `result_bytes` reads back, each with an example for messages.
    result_places: ClassVar[Mapping[str, str]] = {}
    #: Whether the platform keeps the files a job writes to `outputs/` (Azure ML uploads them with the run): a
    #: function job's result goes there when the job names no `output_dir` of `result_places`.
    keeps_outputs_folder: ClassVar[bool] = False

    #: The settings that say where credentials go (host, endpoint, workspace, project): what `configured()`
    #: reads from the environment and a handle or request from a file is checked against.
    binding_settings: ClassVar[tuple[str, ...]] = ()
    #: Where the platform's credential goes, checked before any is loaded (None: it loads none).
    binding: ClassVar[Binding | None] = None

    def __init__(
        self,
        *,
        retry: RetryPolicy | None = None,
        environ: Mapping[str, str] | None = None,
        settings: Mapping[str, Any] | None = None,
        config_profile: str | None = None,
    ) -> None:
        """`settings`: overrides, as `--set` gives them: under each render's own, and what handle verbs and
        requests from files are checked against (with the environment and the config file). `config_profile`:
        the config file's profile to use (`--profile`), else `$CROSSTRAIN_PROFILE`'s."""
        self._retry = retry
        self.environ = os.environ if environ is None else environ
        self.overrides: dict[str, Any] = dict(settings or {})
        self.config_profile = config_profile
        self._user_config: UserConfig | None = None
        self._configured: dict[str, Any] | None = None
        self._rendered: set[str] = set()  # digests of the requests this backend rendered
        self._issued: set[str] = set()  # the handles its `send` made, as text
        self._clients: dict[Hashable, Any] = {}
        self._clients_lock = threading.Lock()

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

    # -- this user's config file ---------------------------------------------------------------------------
    @property
    def user_config(self) -> UserConfig:
        """This user's config file (`crosstrain.userconfig`), read once, where settings are first resolved."""
        if self._user_config is None:
            from crosstrain.userconfig import load

            self._user_config = load(self.environ, self.config_profile)
        return self._user_config

    def config_layers(self) -> tuple[Layer, ...]:
        """This target's tables in the config file, lowest first: its defaults, then the profile's."""
        return self.user_config.layers(self.name)

    # -- where credentials may go -------------------------------------------------------------------------
    def configured(self) -> dict[str, Any]:
        """The `binding_settings` this machine configures without a job file: the config file, the environment
        and this backend's overrides, validated (unset ones left out). Backends add what their SDK configures
        itself."""
        if self._configured is None:
            self._configured = configured_settings(
                self.settings_model,
                self.name,
                names=self.binding_settings,
                overrides=self.overrides,
                environ=self.environ,
                config=self.config_layers(),
            )
        return self._configured

    def configured_source(self, key: str) -> str:
        """Where this machine's value of `key` comes from, for messages: `--set host`, `DATABRICKS_HOST`, `config
        (~/.config/crosstrain/config.toml)`."""
        given = sourced(
            self.settings_model, config=self.config_layers(), overrides=self.overrides, environ=self.environ
        )
        origin = given.get(key, (None, f"no {key}"))[1]
        return f"--set {key}" if origin == OVERRIDE else origin.removeprefix("env ")

    def issue(self, handle: JobHandle) -> JobHandle:
        """The handle `send` returns: this backend trusts it as made, and its verbs come back here."""
        self._issued.add(handle.dumps())
        return dataclasses.replace(handle, origin=self)

    def is_issued(self, handle: JobHandle) -> bool:
        """Whether this backend's `send` made the handle, unchanged."""
        return handle.dumps() in self._issued

    def is_rendered(self, request: Request) -> bool:
        """Whether this backend rendered the request, unchanged (from the job's own settings)."""
        return _digest(request) in self._rendered

    def check_handle(self, handle: JobHandle) -> None:
        """Refuse, before any credential is loaded, a handle this backend did not make whose host, endpoint,
        workspace or project is not the configured one (`handle_problems`)."""
        if self.is_issued(handle):
            return
        problems = self.handle_problems(handle)
        if problems:
            raise NotConfigured("handle", problems)

    def check_request(self, request: Request) -> None:
        """Refuse, before any credential is loaded, a request this backend did not render (read from a file,
        or edited) whose calls go anywhere but where this machine is configured to send them."""
        if self.is_rendered(request):
            return
        problems = self.request_problems(request)
        if problems:
            raise NotConfigured("request", problems)

    def handle_problems(self, handle: JobHandle) -> list[Problem]:
        """Where the handle points outside the configured host, endpoint, workspace or project."""
        return self._binding_problems(self.handle_places(handle.ref), handle.ref, "handle.ref", "handle")

    def request_problems(self, request: Request) -> list[Problem]:
        """Where the request's calls or settings point outside the configured ones, or its uploads are not
        of its own code."""
        places = [
            Place(f"request.calls[{i}].url", call.url)
            for i, call in enumerate(request.calls)
            if not self.credential_free(request, call)
        ]
        problems = self._binding_problems(places, request.settings, "request.settings", "request")
        return problems + self.upload_problems(request)

    def _binding_problems(self, places: list[Place], stated: Mapping[str, Any], at: str, what: str) -> list[Problem]:
        binding = self.binding
        if binding is None:
            return []
        keys = [*binding.keys, *([binding.origin_key] if binding.origin_key else [])]
        env = {key: next(iter(env_vars(self.settings_model, key)), f"--set {key}") for key in keys}
        mine = self.configured_origin(stated, env)
        problems = binding.problems(places, stated, at, what, self.configured(), mine, env)
        return problems or self.binding_extras(stated, at, what)

    def configured_origin(self, stated: Mapping[str, Any], env: Mapping[str, str]) -> Configured:
        """The origin this machine configures for the binding's `origin_key`, and where that comes from."""
        key = self.binding.origin_key if self.binding else None
        if key is None:
            return Configured(None, "")
        origin = origin_of(self.configured().get(key))
        if origin is None:
            return Configured(None, f"no {env[key]}, no --set {key}")
        return Configured(origin, self.configured_source(key))

    def handle_places(self, ref: Mapping[str, Any]) -> list[Place]:
        """Where a handle's reads go (beyond the origin it states), as `binding` checks them."""
        return []

    def credential_free(self, request: Request, call: HttpCall) -> bool:
        """Whether `call` is sent without this platform's credential (an upload on its own signed URL or the
        storage client's); `upload_problems` checks those."""
        return False

    def upload_problems(self, request: Request) -> list[Problem]:
        """Where a request's credential-free calls upload anything but its own code."""
        return []

    def binding_extras(self, stated: Mapping[str, Any], at: str, what: str) -> list[Problem]:
        """What the binding cannot say about where a handle or request goes (a credential profile's own host)."""
        return []

    # -- render (pure) -------------------------------------------------------------------------------------
    def settings(self, job: TrainingJob, overrides: Mapping[str, Any] | None = None) -> S:
        return resolve_settings(
            self.settings_model,
            self.name,
            section=job.targets.get(self.name),
            overrides={**self.overrides, **(overrides or {})},
            environ=self.environ,
            config=self.config_layers(),
        )

    def request_settings(self, request: Request) -> S:
        """The typed settings a rendered (possibly edited) request was made with."""
        return self.settings_model.model_validate(dict(request.settings))

    def refusals(self, job: TrainingJob, settings: S) -> list[Problem]:
        """Everything this target cannot express about `job`; empty when it can run it."""
        return self._checked(job, settings).problems

    def _checked(self, job: TrainingJob, settings: S) -> Checked[P]:
        """The job as its nodes see it (data locations placed, a function's result folder named), every problem,
        and the plan. The checks and the render share this one plan."""
        from crosstrain import data

        result_at = ""
        if job.function_payload is not None:
            job, result_at = self.function_result(job, settings)
        data_problems = self.data_refusals(job, settings) if job.inputs or job.outputs else []
        spec = job
        if not data_problems:
            job = data.placed(
                spec, lambda direction, name, place: self.node_path(spec, settings, direction, name, place)
            )
        if spec.sweep is not None:
            from crosstrain import sweep

            job = sweep.marked(job, self.sweep_reference)
        problems = capability_problems(spec, self.capabilities, self.name)
        try:
            planned: tuple[P] | None = (self.plan(job, settings),)
        except Unsupported as refused:
            planned, problems = None, problems + list(refused.problems)
        problems += self.platform_refusals(spec, settings) + data_problems
        cost = self.cost(job, settings, planned[0]) if planned is not None else None
        if cost is not None and spec.scheduling.max_cost is not None:
            problems += cost_problems(cost, spec.scheduling.max_cost)
        return Checked(job, problems, planned, result_at, cost)

    @classmethod
    def refresh_prices(cls, items: Iterable[str], api_url: str | None = None) -> tuple[list[Price], list[str]] | None:
        """`items`' prices reread from the platform's keyless price API (at `api_url` where given), and a line
        for each it could not read; None where it has no such API."""
        return None

    def check(self, job: TrainingJob, overrides: Mapping[str, Any] | None = None) -> Report:
        """`crosstrain check`, read-only: the render's refusals (then nothing is read), else `preflight`."""
        from crosstrain import preflight as preflight_checks  # here, as every backend's: a render reads nothing

        return preflight_checks.report(self, job, overrides)

    def preflight(self, job: TrainingJob, settings: S, plan: P) -> list[Check]:
        """What the platform reads before a submit (credentials, quota, capacity); never a create call."""
        from crosstrain import preflight as preflight_checks

        return [preflight_checks.unchecked("service", f"crosstrain reads nothing from {self.title} before a submit")]

    def cost(self, job: TrainingJob, settings: S, plan: P) -> Cost | None:
        """The planned job's price per hour and its bound for `scheduling.timeout`, from the price table the
        platform ships (pure: package data); None where it bills nothing (a local run)."""
        return None

    def plan(self, job: TrainingJob, settings: S) -> P:
        """What `job` means on this platform, everything `_render` needs (resolved machines, images, staged code,
        the launch), or `Unsupported` with every reason it cannot run here. Judged on the job as its nodes see
        it; a backend that needs no plan returns None."""
        return None  # type: ignore[return-value]  # P is None for a backend that plans nothing

    def data_refusals(self, job: TrainingJob, settings: S) -> list[Problem]:
        """The job's `inputs` and `outputs` this target's nodes cannot reach, or not in their mode, as its
        `data_placement` declares; every one where it declares none."""
        from crosstrain import data

        if self.data_placement is not None:
            return self.data_placement.refusals(job)
        return [
            data.refusal(direction, name, f"{self.name} passes no data locations to its nodes", "remove it")
            for direction, name, _ in data.locations(job)
        ]

    def node_path(self, job: TrainingJob, settings: S, direction: str, name: str, location: Any) -> str:
        """Where a node sees a data location `data_refusals` let through: what `${inputs.NAME}` becomes."""
        if self.data_placement is None:
            raise NotImplementedError(f"{self.name} renders no data locations")
        return self.data_placement.node_path(location)

    #: Whether a render depends on the job, its settings and the files it reads alone (`memo`); a local run's also
    #: reads this machine (its folder, its GPUs).
    pure_render: ClassVar[bool] = True

    #: How the service writes a sweep value into a command (Azure's `${{search_space.NAME}}`); None: the node side.
    sweep_reference: Callable[[str], str] | None = None

    def platform_refusals(self, job: TrainingJob, settings: S) -> list[Problem]:
        """Backend-specific refusals on top of the capability checks and the plan's."""
        return []

    def render(self, job: TrainingJob, overrides: Mapping[str, Any] | None = None) -> Request:
        """The request, named by an identity that depends on what this target sends and nothing else.

        A probe render with placeholder ids gives the fingerprint; without a `run_id` the identity is
        `<name>-<start of the fingerprint>`, so a change to another target's settings, or to anything this
        target does not send, never names a new job here.
        Remembered while the job, its settings and what it read hold (`memo`).
        """
        given = {**self.overrides, **(overrides or {})}
        section = job.targets.get(self.name)
        at = (
            memo.key(job, self.settings_model, section, given, self.environ, self.config_layers())
            if self.pure_render
            else None
        )
        return memo.remembered(self, at, lambda: self._fresh(job, overrides), self._rendered)

    def _fresh(self, job: TrainingJob, overrides: Mapping[str, Any] | None) -> Request:
        from crosstrain import packaging

        with packaging.rendering():  # the probe and the real render ship the same files, listed once
            settings = self.settings(job, overrides)
            checked = self._checked(job, settings)
            if checked.problems or checked.planned is None:
                raise Unsupported(self.name, checked.problems)
            job, (plan,), result_at = checked.job, checked.planned, checked.result_at
            probe = self._render(job, settings, plan, placeholder_ids(job, self.identity_max_len))
            if settings.patch is not None:
                self.check_patch(settings.patch, probe)
                probe = patched(probe, settings.patch, self.name)
            fingerprint = fingerprint_of(self.fingerprint_view(probe))
            run_id = job.run_id or fingerprint[:RUN_ID_LENGTH]
            ids = Ids(identity_for(job.name, run_id, max_len=self.identity_max_len), fingerprint)
            request = self._render(job, settings, plan, ids)
            if settings.patch is not None:
                request = patched(request, settings.patch, self.name)
            notes = request.notes
            if job.launch.framework_args():
                given = " ".join(job.launch.framework_args())
                notes += (f"every training rank is given `{given}` after its arguments (launch.framework: deepspeed)",)
            if job.function_note:
                notes += (job.function_note,)
            if job.function_payload is not None and not result_at:
                lost = self.lost_result()
                notes += (f"{lost.message}: {lost.fix}",)
            return dataclasses.replace(
                request, fingerprint=fingerprint, result_at=result_at, notes=notes, cost=checked.cost
            )

    def function_result(self, job: TrainingJob, settings: S) -> tuple[TrainingJob, str]:
        """Where rank 0 of a function job leaves what the function returned: the job, told the folder as its nodes
        see it (`CROSSTRAIN_RESULT_DIR`), and where the result is read back from. "" where it is kept nowhere."""
        from crosstrain import locations
        from crosstrain.function import RESULT

        named = job.env.get("CROSSTRAIN_RESULT_DIR")
        if isinstance(named, str):  # the job says where (a local run emulating this platform does)
            return job, f"{named.rstrip('/')}/{RESULT}"
        kind = locations.kind(job.output_dir) if job.output_dir else ""
        if job.output_dir and kind in self.result_places:
            stored = f"{job.output_dir.rstrip('/')}/{locations.RESULT_FOLDER}"
            reach = self.data_placement.reach.get(kind) if self.data_placement else None
            node = reach.mounted_at(stored) if reach and reach.mounted_at else stored
            return job.model_copy(update={"env": {**job.env, "CROSSTRAIN_RESULT_DIR": node}}), f"{stored}/{RESULT}"
        if self.keeps_outputs_folder:
            return job, f"outputs/{RESULT}"
        return job, ""  # kept nowhere: the render says so, and `submit_function` refuses it

    def lost_result(self) -> Problem:
        """Why a function job's result is kept nowhere on this platform, and where it would be: the output
        folders its nodes write and crosstrain reads back (`result_places`), or none."""
        from crosstrain import locations

        if not self.result_places:
            return Problem(
                "output_dir",
                f"rank 0's return value is kept nowhere: {self.name} nodes write no output folder that crosstrain "
                "reads back",
                "run the function on a target whose nodes do (`crosstrain targets`), or have it save what it "
                "makes itself",
            )
        kinds = " or ".join(locations.KIND_TITLES[kind] for kind in self.result_places)
        return Problem(
            "output_dir",
            f"rank 0's return value is kept nowhere: {self.name} nodes leave it under an output_dir in {kinds}, "
            "where crosstrain reads it back, and the job names none",
            f"set output_dir, e.g. {' or '.join(self.result_places.values())}",
        )

    @abstractmethod
    def _render(self, job: TrainingJob, settings: S, plan: P, ids: Ids) -> Request:
        """The request, built from `plan` (what the checks returned) and the job as its nodes see it."""

    def check_patch(self, patch: dict[str, Any], request: Request) -> None:
        """Refuse a `targets.<name>.patch` that the platform's schema does not take, or that changes what
        crosstrain owns (`owned_fields`), before anything is sent."""
        from crosstrain import patch as merge_patch

        where = f"targets.{self.name}.patch"
        if self.patch_schema is None:
            from crosstrain.registry import BUILTIN_BACKENDS, get_backend_class

            patched = [name for name in BUILTIN_BACKENDS if get_backend_class(name).patch_schema]
            raise Unsupported(
                self.name,
                [
                    Problem(
                        where,
                        f"{self.name} has no platform request body to patch (its requests are crosstrain's own)",
                        f"remove targets.{self.name}.patch; patches apply to {', '.join(patched)}",
                    )
                ],
            )
        problems = merge_patch.problems(
            self.patch_schema, patch, request.create.body, where, self.owned_fields, self.planned_fields
        )
        if problems:
            raise SpecError(problems, headline=f"invalid {where}")

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
                ],
                headline="unknown format",
            )
        return request.to_json()

    # -- submit (sends) ------------------------------------------------------------------------------------
    def submit(self, job: TrainingJob, overrides: Mapping[str, Any] | None = None) -> JobHandle:
        if job.fallback:  # alternatives tried one live attempt at a time: crosstrain.fallback's run, not one target's
            why = f"names alternatives, which {self.name}'s backend alone cannot try"
            raise SpecError([Problem("fallback", why, "submit it with crosstrain.submit(job, target)")])
        request = self.render(job, overrides)
        return self.send(request).of(request)

    @abstractmethod
    def send(self, request: Request) -> JobHandle: ...

    @abstractmethod
    def status(self, handle: JobHandle) -> JobStatus: ...

    def cached_client(self, key: Hashable, make: Callable[[], T]) -> T:
        """The platform client for `key` (a workspace, an endpoint, a project), made once per backend: making one
        may authenticate and probe the service."""
        with self._clients_lock:
            if key not in self._clients:
                self._clients[key] = make()
            made: T = self._clients[key]
            return made

    def list_settings(self, overrides: Mapping[str, Any] | None = None) -> S:
        """The settings `list_jobs` reads: `overrides` over this backend's, over the environment and the config
        file (no job file)."""
        return resolve_settings(
            self.settings_model,
            self.name,
            overrides={**self.overrides, **(overrides or {})},
            environ=self.environ,
            config=self.config_layers(),
        )

    def follow(
        self,
        read: Callable[[bool], Iterable[str]],
        ended: Callable[[], bool],
        *,
        follow: bool,
        interval: float,
        grace: float = 0.0,
    ) -> Iterator[str]:
        """The loop every `logs` shares: read what is new (all of it, half-written lines too, once `ended()`),
        and with `follow`, read again every `interval` seconds until the job has ended and `grace` seconds more
        have passed (a log service that takes in the last lines after the job's end)."""
        ended_at: float | None = None
        while True:
            done = ended()
            if done and ended_at is None:
                ended_at = time.monotonic()
            yield from read(done)
            if not follow or (ended_at is not None and time.monotonic() - ended_at >= grace):
                return
            self.retry.sleep(interval)

    def list_jobs(self, overrides: Mapping[str, Any] | None = None) -> Iterator[JobSummary]:
        """The jobs crosstrain made on this target (found by the identity label, tag or property each backend
        records), newest first, where `overrides` (and the environment) configure the target."""
        raise Unsupported(
            self.name,
            [Problem("list", f"{self.name} cannot list jobs from crosstrain yet", "use the platform's console")],
        )

    def cancel(self, handle: JobHandle) -> None:
        fix = f"cancel it in the console: {handle.console_url}"
        raise Unsupported(self.name, [Problem("cancel", f"{self.name} cannot cancel jobs from crosstrain", fix)])

    def logs(self, handle: JobHandle, *, follow: bool = False) -> Iterator[str]:
        """The job's log lines, each prefixed with node and rank where the platform says them; with `follow`,
        lines keep coming while the job runs, and the iterator ends when the job does."""
        fix = f"read them in the console: {handle.console_url}"
        raise Unsupported(self.name, [Problem("logs", f"{self.name} offers no logs through crosstrain", fix)])

    def wait(
        self,
        handle: JobHandle,
        *,
        timeout: float | None = None,
        poll_interval: float = 1.0,
        max_interval: float = 30.0,
        progress: Callable[[JobStatus], None] | None = None,
    ) -> JobStatus:
        """Poll until the job ends, fast at first and backing off to `max_interval`, so a short job is reported
        within seconds of its end. `progress` sees every status read. Raises `JobFailed` unless it succeeded,
        `WaitTimeout` after `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        interval = poll_interval

        def read() -> JobStatus:
            return self.retry.poll(lambda: self.status(handle))

        def unanswered() -> WaitTimeout:
            return WaitTimeout(
                f"job {handle.identity}: {self.name} gave no whole answer to a status read within the {timeout:g}s "
                "given, so its state is unknown"
            )

        from crosstrain.retry import by_deadline

        while True:
            status = by_deadline(read, deadline, unanswered)
            if progress is not None:
                progress(status)
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

    def read_result(self, handle: JobHandle, *, timeout: float | None = None) -> bytes:
        """The pickled result of a function job, once it has succeeded (`JobHandle.result`)."""
        self.wait(handle, timeout=timeout)
        return self.result_bytes(handle)

    def result_bytes(self, handle: JobHandle) -> bytes:
        """The result file's bytes, from where the job left it (`handle.result_at`); by default, where the
        platform keeps it and crosstrain cannot read it: said, with how to read it."""
        raise Unsupported(
            self.name,
            [
                Problem(
                    "result",
                    f"crosstrain does not read results back from {self.name}: rank 0 left it at {handle.result_at}",
                    f"copy it from there and load it with cloudpickle.load (the job's console: {handle.console_url})"
                    if handle.console_url
                    else "copy it from there and load it with cloudpickle.load",
                )
            ],
        )


#: The largest function result crosstrain reads back into memory.
MAX_RESULT_BYTES = 1024**3


def read_bounded(path: Path, what: str, limit: int = MAX_RESULT_BYTES) -> bytes:
    """A file's bytes, refused past `limit` (before it is read) with where it is."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise JobFailed(f"{what} is not at {path}: {exc.strerror or exc}") from None
    if size > limit:
        raise SpecError([Problem("result", f"{what} at {path} holds {size:,} bytes, over {limit:,}", "load it there")])
    return path.read_bytes()


def bundle_command(command: list[str], *, install: bool = False) -> list[str]:
    """`command` run through a shipped bundle's bootstrap: from the code folder, with crosstrain importable,
    after installing the job's requirements where `install` (`crosstrain.bootstrap`)."""
    from crosstrain.packaging import PACKAGE

    return ["python", "-m", PACKAGE, *(["--install"] if install else []), "--", *command]


# The per-node launcher of `crosstrain.runtime`: where a platform starts one process per node, it starts one
# process per GPU under torch.distributed.run. The container image must have crosstrain installed.
LAUNCHER_MODULE = "crosstrain.launch"


def launcher_command(command: list[str], *, nproc_per_node: int | str = "auto", nnodes: int | None = None) -> list[str]:
    """`command` wrapped in crosstrain's per-node launcher, as a backend renders it into a container command.

    Pass `nnodes` where the platform's variables cannot tell one process per node from one per GPU (Azure ML)."""
    nodes = ["--nnodes", str(nnodes)] if nnodes is not None else []
    return ["python", "-m", LAUNCHER_MODULE, "--nproc-per-node", str(nproc_per_node), *nodes, "--", *command]


@functools.cache
def archive_bootstrap() -> str:
    """A Python program that unpacks a code bundle's archive (argv[1]) into a fresh folder, with crosstrain's one
    safe extraction (`databricks_task.extract`, its source inline: nothing of crosstrain is there yet), and starts
    the bundle's bootstrap there with the rest of argv. Standard library only: it runs before anything is installed,
    on a node that reads the archive as a file (a FUSE mount of Cloud Storage, workspace files or a volume). Made
    on first use: reading the source costs a cold render that does not ship an archive 8 ms."""
    import inspect

    from crosstrain.databricks_task import UnsafeArchive, checked, extract

    return (
        "from __future__ import annotations\n"
        "import os, sys, tarfile, tempfile\n"
        + "".join(inspect.getsource(part) for part in (UnsafeArchive, checked, extract))
        + "d = tempfile.mkdtemp(prefix='crosstrain-code-')\n"
        "extract(sys.argv[1], d)\n"
        "os.chdir(os.path.join(d, 'crosstrain_code-1.0'))\n"
        "os.execv(sys.executable, [sys.executable, '-m', 'crosstrain_code', *sys.argv[2:]])\n"
    )
