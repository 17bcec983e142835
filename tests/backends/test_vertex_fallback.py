"""Fallback on Vertex AI, through the real `google-cloud-aiplatform` client against the loopback job service: a
region whose quota refuses the create is passed over for the next region, and a repeated submit finds the live
attempt there (by listing each alternative's region) instead of creating another."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crosstrain import fallback
from crosstrain.backends.loopback import Call, Reply
from crosstrain.loader import job_from_dict
from crosstrain.records import JobState
from tests.backends.vertex_server import VertexPlatform

QUOTA = (
    "The following quota metrics exceed quota limits: aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"
)


@pytest.fixture
def platform() -> Iterator[VertexPlatform]:
    with VertexPlatform(plan=("JOB_STATE_PENDING", "JOB_STATE_RUNNING")) as running:
        service, answer = running.service, running.service.answer

        def no_quota_in_us_central1(call: Call) -> Reply:
            if service.operation(call) == "create" and "/locations/us-central1/" in call.path:
                return service.error(429, QUOTA)
            return answer(call)

        service.answer = no_quota_in_us_central1  # type: ignore[method-assign]
        yield running


def spec() -> Any:
    return job_from_dict(
        {
            "name": "train",
            "image": "us-docker.pkg.dev/my-project/train:1",
            "command": "python train.py",
            "primary": {"machine": "A100:8"},
            "fallback": [{"region": "us-east1"}, {"region": "europe-west4", "machine": "H100:8"}],
            "targets": {"vertex": {"project": "my-project", "region": "us-central1"}},
        }
    )


def test_quota_in_one_region_moves_on_to_the_next(platform: VertexPlatform, tmp_path: Path) -> None:
    backend = platform.backend()
    environ = {"CROSSTRAIN_STATE_DIR": str(tmp_path)}
    run = fallback.Run(spec(), "vertex", backend=lambda _: backend, environ=environ)
    handle = run.submit()
    assert handle.ref["fallback"]["attempt"] == 1
    assert "/locations/us-east1/" in handle.ref["name"]
    assert [(p["attempt"], p["kind"]) for p in handle.ref["fallback"]["passed"]] == [(0, "quota")]
    jobs = list(platform.service.jobs.values())
    assert [job["labels"]["crosstrain-run"] for job in jobs] == [run.plan.key]
    assert jobs[0]["labels"]["crosstrain-attempt"] == "1"
    creates = [c for c in platform.service.received if c.method == "POST" and c.path.endswith("/customJobs")]
    assert len(creates) == 2  # one refused in us-central1 (a 429 for quota is not retried), one in us-east1
    assert run.status().state in (JobState.QUEUED, JobState.RUNNING)

    again = fallback.Run(spec(), "vertex", backend=lambda _: platform.backend(), environ=environ).submit()
    assert again.ref["name"] == handle.ref["name"]
    assert again.adopted
    assert len(platform.service.jobs) == 1
    assert fallback.history(again)[1].startswith("attempt 0 (vertex us-central1 A100:8) was passed over for quota")
