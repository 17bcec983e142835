"""The shared backend test suites, like fsspec's abstract tests: every backend runs them by subclassing.

    from crosstrain.testing.conformance import BackendConformance

    class TestVertexConformance(BackendConformance):
        target = "vertex"
        settings = {"project": "my-proj", "region": "us-central1"}
        refused = [({"reduction_server": {}, ...}, "reduction server")]   # (job changes, words of the reason)

`BackendConformance` checks the render side of the contract every backend promises: render is pure (no
cloud SDK, no network) and deterministic, the identity is stable, carried by the request and changed only by
what this target sends, nothing leaks credentials, and what the platform cannot express is refused with a
reason naming the field.

`SendConformance` checks the send side against a running fake of the platform (a `LoopbackPlatform` that the
subclass provides by overriding the `platform` fixture): exactly one job under every fault, adopt on an
identical re-submit, refuse a conflicting one, handles that work in another process, cancel, and the mapping
of every native state.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import pytest

from crosstrain.backends.base import Backend
from crosstrain.backends.loopback import LoopbackPlatform
from crosstrain.errors import IdentityConflict, JobFailed, SpecError, SubmitError, Unsupported, WaitTimeout
from crosstrain.loader import job_from_dict
from crosstrain.records import JobHandle, JobState, Request
from crosstrain.registry import create_backend
from crosstrain.secrets import EXAMPLE_REFERENCES
from crosstrain.spec import TrainingJob

#: Modules that must never load on the render path.
HEAVY_MODULES = ("google.cloud.aiplatform", "azure.ai.ml", "databricks.sdk", "torch", "pyspark")

BASE_JOB: dict[str, Any] = {
    "name": "conformance-job",
    "image": "registry.example/train:1.0",
    "command": ["python", "-m", "train"],
    "args": ["--epochs", "2"],
    "env": {"NCCL_DEBUG": "INFO"},
    "primary": {"machine": "V100:4"},
    "workers": {"replicas": 2},
    "scheduling": {"timeout": "2h"},
    "labels": {"team": "ml"},
}


def merge(base: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge `changes` into a copy of `base` (a None value deletes the key)."""
    out = dict(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


class BackendConformance:
    """Subclass with `target`, `settings`, optionally `job_changes` and `refused`."""

    target: ClassVar[str]
    settings: ClassVar[dict[str, Any]] = {}
    job_changes: ClassVar[dict[str, Any]] = {}
    #: (changes to the base job, words the refusal must contain)
    refused: ClassVar[list[tuple[dict[str, Any], str]]] = []
    #: The verbs a request may hold: HTTP, or `RUN` for the local target, whose "calls" start processes.
    methods: ClassVar[tuple[str, ...]] = ("GET", "POST", "PUT", "PATCH", "DELETE")

    # -- helpers -------------------------------------------------------------------------------------------
    def job(self, **changes: Any) -> TrainingJob:
        return job_from_dict(merge(merge(BASE_JOB, self.job_changes), changes))

    #: Settings of this target whose change must not change the identity (it does not reach the request).
    unsent_settings: ClassVar[dict[str, Any]] = {}
    #: Other targets whose settings this backend renders with (an emulation renders the emulated target's job).
    reads_targets: ClassVar[tuple[str, ...]] = ()

    def backend(self) -> Backend[Any, Any]:
        return create_backend(self.target, environ={})

    def render(self, job: TrainingJob | None = None) -> Request:
        return self.backend().render(job or self.job(), self.settings)

    # -- the contract --------------------------------------------------------------------------------------
    def test_render_is_deterministic(self) -> None:
        assert self.render().to_dict() == self.render().to_dict()

    def test_render_is_deterministic_across_processes(self) -> None:
        outputs = {_render_in_subprocess(self.target, self.job(), self.settings, seed) for seed in ("1", "2")}
        assert len(outputs) == 1
        assert json.loads(outputs.pop()) == json.loads(self.render().to_json())

    def test_render_imports_no_cloud_sdk_and_opens_no_socket(self) -> None:
        out = _render_in_subprocess(self.target, self.job(), self.settings, "0", guard=True)
        assert json.loads(out)["identity"] == self.render().identity

    def test_one_plan_serves_the_checks_and_both_renders(self) -> None:
        """The probe render (which names the job) and the real one build from the plan the checks returned:
        `plan` runs once per render, and the render is the one the plan gives."""
        backend = self.backend()
        plans: list[Any] = []
        original = backend.plan

        def counted(job: TrainingJob, settings: Any) -> Any:
            plans.append(original(job, settings))
            return plans[-1]

        backend.plan = counted  # type: ignore[method-assign]
        request = backend.render(self.job(), self.settings)
        assert len(plans) == 1
        assert request.to_dict() == self.render().to_dict()

    def test_identity_is_stable_and_carried_by_the_request(self) -> None:
        request = self.render()
        assert request.identity == self.render().identity
        assert request.identity in json.dumps(request.create.to_dict())

    def test_run_id_makes_a_new_identity(self) -> None:
        first = self.render(self.job(run_id="run-1")).identity
        second = self.render(self.job(run_id="run-2")).identity
        assert first != second
        assert first == self.render(self.job(run_id="run-1")).identity

    def test_changed_spec_changes_identity(self) -> None:
        assert self.render().identity != self.render(self.job(args=["--epochs", "3"])).identity

    def test_identity_ignores_other_targets_settings(self) -> None:
        job = self.job()
        from crosstrain.registry import entries

        other = {name: {"anything": "x"} for name in entries()}
        for name in (self.target, *self.reads_targets):
            other.pop(name, None)
        elsewhere = job.model_copy(update={"targets": {**job.targets, **other}})
        assert self.render(elsewhere).identity == self.render(job).identity

    def test_identity_ignores_what_is_not_sent(self) -> None:
        if self.unsent_settings:
            changed = self.backend().render(self.job(), {**self.settings, **self.unsent_settings})
            assert changed.identity == self.render().identity

    def test_fingerprint_is_carried_by_the_request_and_names_the_identity(self) -> None:
        request = self.render()
        assert request.fingerprint
        assert request.fingerprint in json.dumps(request.create.to_dict())
        assert request.identity.endswith("-" + request.fingerprint[:10])
        fixed = self.render(self.job(run_id="fixed"))
        assert fixed.fingerprint == request.fingerprint
        assert self.render(self.job(run_id="fixed", args=["--epochs", "40"])).fingerprint != request.fingerprint

    def test_version_of_crosstrain_is_not_part_of_the_identity(self) -> None:
        from crosstrain import __version__

        request = self.render()
        assert __version__ not in json.dumps(self.backend().fingerprint_view(request))

    def test_request_round_trips_through_json(self) -> None:
        request = self.render()
        assert Request.from_dict(json.loads(request.to_json())) == request

    def test_request_carries_no_credentials(self) -> None:
        for call in self.render().calls:
            assert not {h.lower() for h in call.headers} & {"authorization", "x-api-key", "cookie"}
            assert call.method in self.methods

    def test_refusals_carry_reasons(self) -> None:
        for changes, words in self.refused:
            with pytest.raises(Unsupported) as refused:
                self.render(self.job(**changes))
            assert refused.value.problems, "a refusal without reasons"
            assert words.lower() in str(refused.value).lower()
            assert all(p.path and p.fix for p in refused.value.problems), refused.value.problems

    def test_capabilities_are_enforced(self) -> None:
        caps = self.backend().capabilities
        needs: dict[str, dict[str, Any]] = {
            "reduction_server": {"reduction_server": {"replicas": 2}},
            "parameter_servers": {"parameter_servers": {"replicas": 1}},
            "evaluators": {"evaluators": {"replicas": 1}},
            "per_pool_images": {"workers": {"image": "registry.example/other:2.0"}},
            "spot": {"scheduling": {"spot": True}},
        }
        for capability, changes in needs.items():
            if getattr(caps, capability):
                continue
            with pytest.raises(Unsupported) as refused:
                self.render(self.job(**changes))
            assert refused.value.target == self.target
            assert refused.value.problems

    def test_a_sweep_renders_or_is_refused_at_its_fields(self) -> None:
        """A job with `sweep:` renders for a target whose `Capabilities.sweeps` declares tuning (or the trials run
        by crosstrain), deterministically; an algorithm, a policy or a limit its service lacks is refused at
        `sweep.*` with a fix; a target with no tuning refuses `sweep`."""
        caps = self.backend().capabilities
        sweep = {
            "parameters": {"lr": [0.001, 0.01], "optimizer": ["adam", "sgd"]},
            "metric": "val_loss",
            "goal": "minimize",
            "algorithm": "grid",
        }
        for algorithm in ("grid", "random", "bayesian"):
            job = self.job(sweep={**sweep, "algorithm": algorithm, "max_trials": 4})
            supported = caps.sweeps is not None and algorithm in caps.sweeps.algorithms
            if not supported:
                with pytest.raises(Unsupported) as refused:
                    self.render(job)
                paths = [p.path for p in refused.value.problems]
                assert all(p.fix for p in refused.value.problems), refused.value.problems
                assert ("sweep" if caps.sweeps is None else "sweep.algorithm") in paths, paths
                continue
            assert self.render(job).to_json() == self.render(job).to_json()

    def test_secrets_stay_references_or_are_refused_with_the_field(self) -> None:
        """A secret in a store this target resolves renders as its reference (never a value); any other store's
        is refused at the variable's field path, with a fix."""
        stores = self.backend().capabilities.secret_stores
        for store, reference in EXAMPLE_REFERENCES.items():
            job = self.job(env={"HF_TOKEN": {"secret": reference}})
            outcome: Request | Unsupported
            try:
                outcome = self.render(job)
            except Unsupported as refused:
                outcome = refused
            if isinstance(outcome, Unsupported):
                problems = [p for p in outcome.problems if p.path == "env.HF_TOKEN"]
                assert problems, f"{store}: refused, but not at env.HF_TOKEN: {outcome.problems}"
                assert all(p.fix for p in problems)
                if store in stores:  # a store it resolves may still need something (a command, a variable)
                    assert "secret" in problems[0].message
            else:
                assert store in stores, f"{self.target} rendered a {store} secret it does not declare"
                assert reference in outcome.to_json(), f"{store}: the render does not show the reference"

    def test_unknown_setting_is_refused_with_its_path(self) -> None:
        with pytest.raises(SpecError) as refused:
            self.backend().render(self.job(), {**self.settings, "no_such_setting": "x"})
        assert f"targets.{self.target}.no_such_setting" in [p.path for p in refused.value.problems]


_GUARD = textwrap.dedent(
    """
    import importlib.abc, socket, sys
    HEAVY = {heavy!r}
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == h or name.startswith(h + ".") for h in HEAVY):
                raise ImportError(f"render imported {{name}}")
            return None
    sys.meta_path.insert(0, Block())
    def no_network(*args, **kwargs):
        raise OSError("render opened a network connection")
    socket.socket.connect = no_network
    socket.create_connection = no_network
    socket.getaddrinfo = no_network
    """
)


def _render_in_subprocess(
    target: str, job: TrainingJob, settings: Mapping[str, Any], seed: str, *, guard: bool = False
) -> str:
    """Render in a fresh interpreter (another hash seed; optionally with SDK imports and sockets blocked)."""
    code = (_GUARD.format(heavy=HEAVY_MODULES) if guard else "") + textwrap.dedent(
        f"""
        import json, sys
        from crosstrain.registry import create_backend
        from crosstrain.loader import job_from_dict
        job = job_from_dict(json.loads({json.dumps(job.model_dump(mode="json"))!r}))
        request = create_backend({target!r}, environ={{}}).render(job, json.loads({json.dumps(settings)!r}))
        leaked = [m for m in sys.modules if m.split(".")[0] in ("torch", "pyspark")
                  or m.startswith(("google.cloud.aiplatform", "azure.ai.ml", "databricks.sdk"))]
        assert not leaked, leaked
        sys.stdout.write(request.to_json())
        """
    )
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


class SendConformance:
    """The send side of the contract. Subclass with `target` and override the `platform` fixture to yield a
    running `LoopbackPlatform`; narrow `create_faults` to the faults the platform's fake can play on a create.
    """

    target: ClassVar[str]
    job_changes: ClassVar[dict[str, Any]] = {}
    create_faults: ClassVar[tuple[str, ...]] = ("refuse", "rate-limit", "error", "drop", "slow")
    #: Whether submit reads from the platform (a lookup or a status read) that a fault can hit.
    reads_in_submit: ClassVar[bool] = True
    #: Whether a re-submit finds the platform's job (False for the local target, which runs again).
    adopts: ClassVar[bool] = True
    #: Whether a job can be cancelled while it is going (a local run ends before its handle exists).
    cancels: ClassVar[bool] = True
    #: Whether the platform tells an adopted job from a new one (Databricks answers a known idempotency token
    #: exactly as a new one, so its handles never claim `adopted`).
    reports_adoption: ClassVar[bool] = True

    @pytest.fixture
    def platform(self) -> Iterator[LoopbackPlatform]:
        raise NotImplementedError("override the `platform` fixture to yield a running LoopbackPlatform")

    def job(self, **changes: Any) -> TrainingJob:
        return job_from_dict(merge(merge(BASE_JOB, self.job_changes), changes))

    def submit(self, platform: LoopbackPlatform, job: TrainingJob | None = None) -> tuple[Request, JobHandle]:
        backend = platform.backend()
        request = backend.render(job or self.job(), dict(platform.settings))
        return request, backend.send(request)

    def assert_one_job(self, platform: LoopbackPlatform, request: Request, handle: JobHandle) -> None:
        platform.settle()
        assert platform.live_jobs(request.identity) == [handle.job_id]

    # -- exactly one job -----------------------------------------------------------------------------------
    def test_submit_makes_one_job_that_runs_to_the_end(self, platform: LoopbackPlatform) -> None:
        request, handle = self.submit(platform)
        assert handle.identity == request.identity
        self.assert_one_job(platform, request, handle)
        assert platform.backend().wait(handle, poll_interval=0.01).state is JobState.SUCCEEDED

    @pytest.mark.parametrize("fault", ["refuse", "rate-limit", "error", "drop", "slow"])
    def test_a_fault_on_create_still_makes_exactly_one_job(self, platform: LoopbackPlatform, fault: str) -> None:
        if fault not in self.create_faults:
            pytest.skip(f"the {self.target} platform cannot play {fault!r} on a create")
        platform.inject("create", fault)
        request, handle = self.submit(platform)
        self.assert_one_job(platform, request, handle)

    def test_a_fault_on_the_read_inside_submit_is_retried(self, platform: LoopbackPlatform) -> None:
        if not self.reads_in_submit:
            pytest.skip(f"{self.target}'s submit reads nothing from the platform")
        platform.inject("submit-read", "error")
        request, handle = self.submit(platform)
        platform.inject("submit-read", "error")  # a re-submit reads the job it finds
        _, again = self.submit(platform)
        assert again.job_id == handle.job_id
        self.assert_one_job(platform, request, handle)

    def test_a_500_on_a_poll_is_retried(self, platform: LoopbackPlatform) -> None:
        if "error" not in self.create_faults:
            pytest.skip(f"the {self.target} platform has no server to fail")
        _, handle = self.submit(platform)
        platform.inject("poll", "error")
        assert platform.backend().wait(handle, poll_interval=0.01).state is JobState.SUCCEEDED

    @pytest.mark.parametrize("fault", ["empty", "garbled"])
    def test_a_malformed_answer_to_create_is_an_unknown_outcome(self, platform: LoopbackPlatform, fault: str) -> None:
        """The create took effect and its answer cannot be read: the job is adopted, or the error says it may
        exist and submitting again adopts it; never a crash, never a second job."""
        if not self.create_faults:
            pytest.skip(f"the {self.target} platform has no server to answer")
        platform.inject("create", fault)
        backend = platform.backend()
        request = backend.render(self.job(), dict(platform.settings))
        failed: SubmitError | None = None
        try:
            handle = backend.send(request)
        except SubmitError as error:
            failed = error
        if failed is not None:
            assert failed.job_may_exist, failed
            platform.settle()
            handle = backend.send(request)
        self.assert_one_job(platform, request, handle)

    @pytest.mark.parametrize("fault", ["empty", "garbled"])
    def test_a_malformed_answer_to_a_poll_is_retried(self, platform: LoopbackPlatform, fault: str) -> None:
        if not self.create_faults:
            pytest.skip(f"the {self.target} platform has no server to answer")
        _, handle = self.submit(platform)
        platform.inject("poll", fault)
        assert platform.backend().wait(handle, poll_interval=0.01).state is JobState.SUCCEEDED

    def test_wait_keeps_its_deadline_against_a_server_that_trickles(self, platform: LoopbackPlatform) -> None:
        """A server that answers a byte at a time defeats every socket timeout; `wait --timeout` still holds."""
        if not self.create_faults:
            pytest.skip(f"the {self.target} platform has no server to answer")
        _, handle = self.submit(platform)
        for _ in range(3):
            platform.inject("poll", "trickle")
        started = time.monotonic()
        with pytest.raises(WaitTimeout):
            platform.backend().wait(handle, timeout=2.0, poll_interval=0.01)
        assert time.monotonic() - started < 4.0

    def test_two_concurrent_submits_of_one_spec_converge_to_one_job(self, platform: LoopbackPlatform) -> None:
        if not self.adopts:
            pytest.skip(f"{self.target} runs every submit")
        request = platform.backend().render(self.job(), dict(platform.settings))
        handles: list[JobHandle] = []
        threads = [threading.Thread(target=lambda: handles.append(platform.backend().send(request))) for _ in "ab"]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(handles) == 2
        assert handles[0].job_id == handles[1].job_id
        self.assert_one_job(platform, request, handles[0])

    # -- identity ------------------------------------------------------------------------------------------
    def test_an_identical_resubmit_adopts_the_job(self, platform: LoopbackPlatform) -> None:
        request, first = self.submit(platform)
        _, second = self.submit(platform)
        if not self.adopts:
            assert first.job_id != second.job_id
            return
        assert second.job_id == first.job_id
        assert not first.adopted
        assert second.adopted is self.reports_adoption
        self.assert_one_job(platform, request, first)

    def test_a_different_request_under_a_taken_identity_is_refused(self, platform: LoopbackPlatform) -> None:
        if not self.adopts:
            pytest.skip(f"{self.target} runs every submit")
        request, first = self.submit(platform, self.job(run_id="fixed"))
        with pytest.raises(IdentityConflict) as refused:
            self.submit(platform, self.job(run_id="fixed", args=["--epochs", "40"]))
        assert refused.value.found == request.fingerprint
        assert "--run-id new" in str(refused.value)
        self.assert_one_job(platform, request, first)

    # -- following the job ---------------------------------------------------------------------------------
    def test_the_handle_works_in_another_process(self, platform: LoopbackPlatform) -> None:
        _, handle = self.submit(platform)
        platform.set_state(handle, platform.native_states[-1] if platform.native_states else "")
        code = platform.child_backend() + textwrap.dedent(
            """
            import sys
            from crosstrain.records import JobHandle
            print(backend.status(JobHandle.loads(sys.argv[1])).native_state)
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", code, str(handle)], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == platform.backend().status(JobHandle.loads(str(handle))).native_state

    def test_cancel_then_wait_ends_cancelled(self, platform: LoopbackPlatform) -> None:
        if not self.cancels:
            pytest.skip(f"a {self.target} job has ended when its handle exists")
        _, handle = self.submit(platform)
        backend = platform.backend()
        backend.cancel(handle)
        with pytest.raises(JobFailed, match="CANCELLED"):
            backend.wait(handle, poll_interval=0.01)
        assert backend.status(handle).state is JobState.CANCELLED

    def test_every_native_state_maps_to_a_common_state(self, platform: LoopbackPlatform) -> None:
        assert platform.native_states, "the platform fake lists no native states"
        _, handle = self.submit(platform)
        backend = platform.backend()
        unmapped = []
        for native in platform.native_states:
            platform.set_state(handle, native)
            status = backend.status(handle)
            unspecified = "UNSPECIFIED" in native or native in platform.unspecified_states
            if status.state is JobState.UNKNOWN and not unspecified:
                unmapped.append(native)
        assert not unmapped, f"native states with no common state: {unmapped}"
