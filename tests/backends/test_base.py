"""The contract's shared pieces: identity, capability refusals, requests and handles."""

from __future__ import annotations

import pytest

from crosstrain.backends.base import (
    Capabilities,
    HttpCall,
    JobHandle,
    JobState,
    Request,
    capability_problems,
    default_identity,
)
from crosstrain.backends.fake import FakeSettings
from crosstrain.errors import SpecError
from crosstrain.loader import job_from_dict
from crosstrain.testing.conformance import BASE_JOB, merge


def test_identity_is_name_plus_run_id_or_digest() -> None:
    settings = FakeSettings()
    job = job_from_dict(merge(BASE_JOB, {"name": "My_Job.v2"}))
    identity = default_identity(job, "fake", settings)
    assert identity.startswith("my-job-v2-")
    assert len(identity.rsplit("-", 1)[1]) == 10
    assert default_identity(job_from_dict(merge(BASE_JOB, {"run_id": "r1"})), "fake", settings).endswith("-r1")
    assert default_identity(job, "other", settings) != identity
    assert default_identity(job, "fake", FakeSettings(outcome="failed")) != identity


def test_identity_respects_a_length_limit() -> None:
    job = job_from_dict(merge(BASE_JOB, {"name": "n" * 60, "run_id": "abc"}))
    identity = default_identity(job, "fake", FakeSettings(), max_len=40)
    assert len(identity) == 40
    assert identity.endswith("-abc")


def test_capability_refusals_name_field_reason_and_fix() -> None:
    job = job_from_dict(
        merge(
            BASE_JOB,
            {
                "reduction_server": {},
                "workers": {
                    "image": "other:1",
                    "machine": "T4:1",
                    "env": {"ONLY_WORKERS": "1"},
                    "boot_disk": {"size_gb": 500},
                },
                "scheduling": {"spot": True},
                "launch": {"framework": "mpi", "mode": "per-node"},
            },
        )
    )
    caps = Capabilities(launch_modes=frozenset({"per-process"}))
    found = {p.path: p for p in capability_problems(job, caps, "acme")}
    assert set(found) == {
        "reduction_server",
        "workers.image",
        "workers.machine",
        "workers.env",
        "workers.boot_disk",
        "scheduling.spot",
        "launch.framework",
        "launch.mode",
    }
    assert found["reduction_server"].message == "acme has no reduction server (a Vertex AI feature)"
    assert "--target vertex" in found["reduction_server"].fix
    assert found["workers.image"].message == "acme runs one image on every node, but workers differs from primary"
    assert capability_problems(job_from_dict(BASE_JOB), Capabilities(), "acme") == []


def test_request_round_trip_and_create_call() -> None:
    calls = (
        HttpCall("POST", "https://x/upload", {"a": 1}, purpose="upload"),
        HttpCall("PUT", "https://x/jobs/j-1", {"b": [1, 2]}),
    )
    request = Request("acme", "j-1", "j", calls, {"k": "v"}, ("a note",))
    assert Request.from_dict(request.to_dict()) == request
    assert request.create is calls[1]


def test_handle_string_round_trips_and_rejects_garbage() -> None:
    handle = JobHandle("fake", "j-1", "id-1", "file:///x", {"url": "file:///x"})
    assert JobHandle.loads(str(handle)) == handle
    assert "\n" not in str(handle)
    with pytest.raises(SpecError, match="not a crosstrain job handle"):
        JobHandle.loads("{}")
    with pytest.raises(SpecError, match="handle"):
        JobHandle.loads("not json")


def test_terminal_states() -> None:
    assert {s for s in JobState if s.terminal} == {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
