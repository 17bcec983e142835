"""The contract's shared pieces: identity, capability refusals, requests and handles."""

from __future__ import annotations

import json
from typing import Any

import pytest

from crosstrain.backends.base import Capabilities, capability_problems, identity_for
from crosstrain.errors import SpecError
from crosstrain.loader import job_from_dict
from crosstrain.records import HttpCall, JobHandle, JobState, Request
from crosstrain.registry import create_backend
from crosstrain.testing.conformance import BASE_JOB, merge


def render(changes: dict[str, Any] | None = None, **settings: Any) -> Request:
    return create_backend("fake", environ={}).render(job_from_dict(merge(BASE_JOB, changes or {})), settings)


def test_identity_is_name_plus_run_id_or_the_start_of_the_fingerprint() -> None:
    request = render({"name": "My_Job.v2"})
    assert request.identity == f"my-job-v2-{request.fingerprint[:10]}"
    assert len(request.fingerprint) == 16
    assert render({"name": "My_Job.v2", "run_id": "r1"}).identity == "my-job-v2-r1"


def test_only_what_the_target_sends_changes_the_identity() -> None:
    first = render()
    assert render({"targets": {"vertex": {"project": "elsewhere"}}}).identity == first.identity
    assert render({"args": ["--epochs", "9"]}).identity != first.identity
    assert render(outcome="failed").identity != first.identity  # the fake cloud's body carries its plan


def test_identity_respects_a_length_limit() -> None:
    identity = identity_for("n" * 60, "abc", max_len=40)
    assert len(identity) == 40
    assert identity.endswith("-abc")
    assert identity_for("???", "r1") == "job-r1"


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
    with pytest.raises(SpecError, match=r"handle\.target: missing"):
        JobHandle.loads("{}")
    with pytest.raises(SpecError, match="handle: not JSON"):
        JobHandle.loads("not json")
    with pytest.raises(SpecError, match=r"handle\.ref\.url: fake needs url: a string, missing"):
        JobHandle.loads(handle.dumps().replace('"url"', '"uri"'))
    # what `crosstrain submit --json` prints holds the handle
    assert JobHandle.loads(json.dumps({"handle": handle.dumps(), "target": "fake"})) == handle


def test_terminal_states() -> None:
    assert {s for s in JobState if s.terminal} == {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED}
