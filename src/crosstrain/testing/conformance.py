"""The shared backend test suite, like fsspec's abstract tests: every backend runs it by subclassing.

    from crosstrain.testing.conformance import BackendConformance

    class TestVertexConformance(BackendConformance):
        target = "vertex"
        settings = {"project": "my-proj", "region": "us-central1"}
        refused = [({"reduction_server": {}, ...}, "reduction server")]   # (job changes, words of the reason)

It checks the contract every backend promises: render is pure (no cloud SDK, no network) and deterministic,
the identity is stable and carried by the request, nothing leaks credentials, and what the platform cannot
express is refused with a reason naming the field.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from typing import Any, ClassVar

import pytest

from crosstrain.backends import create_backend
from crosstrain.backends.base import Backend, Request
from crosstrain.errors import SpecError, Unsupported
from crosstrain.loader import job_from_dict
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

    def backend(self) -> Backend:
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
        from crosstrain.backends import create_backend
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
