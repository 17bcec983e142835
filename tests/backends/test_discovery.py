"""The strict discovery checker the Google backends' tests rely on: it must catch each kind of mistake."""

from __future__ import annotations

import copy

import pytest

from tests.backends.discovery import violations

GOOD = {
    "displayName": "j",
    "labels": {"team": "ml"},
    "jobSpec": {
        "workerPoolSpecs": [
            {
                "replicaCount": "1",
                "machineSpec": {
                    "machineType": "a2-highgpu-8g",
                    "acceleratorType": "NVIDIA_TESLA_A100",
                    "acceleratorCount": 8,
                },
                "containerSpec": {"imageUri": "img", "command": ["python"], "env": [{"name": "A", "value": "1"}]},
            },
            {},
        ],
        "scheduling": {"timeout": "86400s"},
    },
}


def test_a_conforming_custom_job_passes() -> None:
    assert violations("aiplatform.v1", "GoogleCloudAiplatformV1CustomJob", GOOD) == []


@pytest.mark.parametrize(
    ("path", "value", "complaint"),
    [
        (("jobSpec", "workerPoolSpecs", 0, "replicaCount"), 1, "expected a string (int64)"),
        (("jobSpec", "workerPoolSpecs", 0, "replicaCount"), "one", "not an int64"),
        (("jobSpec", "scheduling", "timeout"), 86400, "expected a string"),
        (("jobSpec", "scheduling", "timeout"), "1d", "duration"),
        (("jobSpec", "workerPoolSpecs", 0, "machineSpec", "acceleratorType"), "A100", "is not one of"),
        (("jobSpec", "workerPoolSpecs", 0, "machineSpec", "acceleratorCount"), "8", "expected an integer"),
        (("jobSpec", "state"), "JOB_STATE_QUEUED", "unknown field"),
        (("state",), "JOB_STATE_QUEUED", "output-only"),
        (("jobSpec", "worker_pool_specs"), [], "unknown field"),
        (("labels",), ["a"], "expected an object"),
    ],
)
def test_each_mistake_is_reported(path: tuple[object, ...], value: object, complaint: str) -> None:
    body = copy.deepcopy(GOOD)
    node: object = body
    for key in path[:-1]:
        node = node[key]  # type: ignore[index]
    node[path[-1]] = value  # type: ignore[index]
    found = violations("aiplatform.v1", "GoogleCloudAiplatformV1CustomJob", body)
    assert len(found) == 1, found
    assert complaint in found[0]


def test_ml_v1_job_schema_is_available() -> None:
    body = {"jobId": "a_1", "trainingInput": {"scaleTier": "CUSTOM", "region": "us-central1", "workerCount": "2"}}
    assert violations("ml.v1", "GoogleCloudMlV1__Job", body) == []
    assert violations("ml.v1", "GoogleCloudMlV1__Job", {"trainingInput": {"scaleTier": "HUGE"}})
