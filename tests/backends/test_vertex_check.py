"""`crosstrain check` on Vertex AI: the project through the real JobServiceClient against the loopback job
service, and the custom-training quota of the job's GPUs and CPUs in its region from a loopback server that
answers as the Cloud Quotas API does (`quotaInfos`, paged, the limit per region in `dimensionsInfos`; spot
counting against the preemptible metrics). Reads only."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from crosstrain.backends.loopback import Call, LoopbackService, Reply, serving
from crosstrain.backends.vertex.backend import VertexBackend
from crosstrain.loader import job_from_dict
from crosstrain.preflight import Outcome
from tests.backends.test_google_code import emulator  # noqa: F401  # the fixture
from tests.backends.vertex_server import VertexPlatform


def _info(metric: str, limits: dict[str | None, int]) -> dict[str, Any]:
    """A QuotaInfo as Cloud Quotas lists it: one `dimensionsInfos` entry per region, one without for the rest."""
    return {
        "name": f"projects/123/locations/global/services/aiplatform.googleapis.com/quotaInfos/{metric}",
        "quotaId": metric.title().replace("_", ""),
        "metric": f"aiplatform.googleapis.com/{metric}",
        "service": "aiplatform.googleapis.com",
        "isPrecise": True,
        "containerType": "PROJECT",
        "dimensions": ["region"],
        "dimensionsInfos": [
            {
                "dimensions": {"region": region} if region else {},
                "details": {"value": str(value)},
                "applicableLocations": [region] if region else [],
            }
            for region, value in limits.items()
        ],
    }


class CloudQuotas(LoopbackService):
    """`GET /v1/projects/{p}/locations/global/services/aiplatform.googleapis.com/quotaInfos`, two per page."""

    def __init__(self, infos: list[dict[str, Any]]) -> None:
        super().__init__()
        self.infos = infos
        self.status = 200

    def operation(self, call: Call) -> str:
        return "quotaInfos"

    def answer(self, call: Call) -> Reply:
        if self.status != 200:
            return self.error(
                self.status, "Permission 'cloudquotas.quotas.get' denied on resource 'projects/my-project'."
            )
        if not call.path.endswith("/locations/global/services/aiplatform.googleapis.com/quotaInfos"):
            return self.error(404, "no such path")
        start = int(call.query.get("pageToken") or 0)
        page: dict[str, Any] = {"quotaInfos": self.infos[start : start + 2]}
        if start + 2 < len(self.infos):
            page["nextPageToken"] = str(start + 2)
        return Reply(200, page)


def _job(machine: str = "T4:4", *, spot: bool = False) -> Any:
    return job_from_dict(
        {
            "name": "checked",
            "image": "python:3.11",
            "command": "python train.py",
            "primary": {"machine": machine},
            "workers": {"replicas": 1},
            "scheduling": {"spot": spot},
        }
    )


@pytest.fixture
def setup() -> Any:
    quotas = CloudQuotas(
        [
            _info("custom_model_training_cpus", {None: 600}),
            _info("custom_model_training_nvidia_t4_gpus", {"us-central1": 16, None: 4}),
            _info("custom_model_training_preemptible_nvidia_t4_gpus", {None: 2}),
            _info("custom_model_training_nvidia_h100_gpus", {None: 8}),
        ]
    )
    with VertexPlatform() as platform, serving(quotas) as url:
        backend = VertexBackend(
            client_factory=platform.client,
            retry=platform.retry_policy(),
            environ={},
            quota_session=requests.Session,
            quota_url=url,
        )
        yield backend, platform, quotas


def _check(setup: Any, job: Any, **settings: Any) -> Any:
    backend, platform, quotas = setup
    report = backend.check(job, {**platform.settings, **settings})
    assert {call.method for call in [*platform.service.received, *quotas.received]} == {"GET"}
    return report


def test_a_job_within_the_regions_quota_passes(setup: Any) -> None:
    report = _check(setup, _job())
    assert report.ok, report.to_dict()
    said = [c.message for c in report.checks if c.name == "quota"]
    assert "custom_model_training_nvidia_t4_gpus in us-central1: the job asks 8, the quota is 16" in said
    assert any(c.outcome is Outcome.UNCHECKED and c.name == "capacity" for c in report.checks)
    assert len(setup[2].received) == 2  # two pages


def test_another_region_has_its_own_limit(setup: Any) -> None:
    (failed,) = _check(setup, _job(), region="us-east1").failed
    assert failed.outcome is Outcome.QUOTA
    assert "the quota is 4" in failed.message
    assert "custom_model_training_nvidia_t4_gpus" in failed.fix
    assert "us-east1" in failed.fix


def test_spot_counts_against_the_preemptible_metric(setup: Any) -> None:
    (failed,) = _check(setup, _job(spot=True)).failed
    assert failed.outcome is Outcome.QUOTA
    assert "custom_model_training_preemptible_nvidia_t4_gpus" in failed.message


def test_an_h100_quota_under_either_of_its_names(setup: Any) -> None:
    report = _check(setup, _job("H100:8"))
    assert not report.ok  # 2 nodes x 8 = 16 > 8
    assert "custom_model_training_nvidia_h100_gpus" in report.failed[0].message


def test_a_metric_cloud_quotas_does_not_list_is_said_not_failed(setup: Any) -> None:
    report = _check(setup, _job("V100:4"))
    assert report.ok
    assert any(c.outcome is Outcome.UNCHECKED and "nvidia_v100" in c.message for c in report.checks)


def test_a_refused_quota_read_and_a_refused_project_are_permission_failures(setup: Any) -> None:
    setup[2].status = 403
    (failed,) = _check(setup, _job()).failed
    assert failed.name == "quota"
    assert failed.outcome is Outcome.PERMISSION
    assert "cloudquotas" in failed.fix
    setup[1].service.denied = True
    (failed,) = _check(setup, _job()).failed
    assert failed.name == "project"
    assert failed.outcome is Outcome.PERMISSION
    assert "roles/aiplatform.user" in failed.fix


@pytest.mark.parametrize(
    ("status", "text", "outcome"),
    [
        (
            429,
            "The following quota metrics exceed quota limits: "
            "aiplatform.googleapis.com/custom_model_training_nvidia_l4_gpus",
            Outcome.QUOTA,
        ),
        (
            None,
            "Resources are insufficient in region: us-central1. It already tried all available zones",
            Outcome.CAPACITY,
        ),
        (
            400,
            "JobNodeCountExceedsCoreQuota: the subscription has a Standard DSv2 family vCPU quota of 2",
            Outcome.QUOTA,
        ),
        (
            None,
            "AllocationFailed: We do not have sufficient capacity for the requested VM size in this region",
            Outcome.CAPACITY,
        ),
        (403, "Permission 'cloudquotas.quotas.get' denied", Outcome.PERMISSION),
        (None, "AZURE_QUOTA_EXCEEDED_EXCEPTION(CLIENT_ERROR): azure_error_code:QuotaExceeded", Outcome.QUOTA),
        (None, "CLOUD_PROVIDER_RESOURCE_STOCKOUT", Outcome.CAPACITY),
        (503, "The service is unavailable", Outcome.UNREACHABLE),
    ],
)
def test_the_platforms_error_texts_are_classified(status: int | None, text: str, outcome: Outcome) -> None:
    from crosstrain.preflight import classify

    assert classify(status, text) is outcome


def test_ai_platform_reads_the_project_and_says_its_quota_is_not_read() -> None:
    from tests.backends.aiplatform_server import AIPlatformPlatform

    job = job_from_dict({"name": "checked", "image": "python:3.11", "command": "python train.py"})
    with AIPlatformPlatform() as platform:
        settings = {"project": "my-project", "region": "us-central1", "endpoint": platform.endpoint}
        report = platform.backend().check(job, settings)
        assert report.ok, report.to_dict()
        assert [c.outcome for c in report.checks[1:]] == [Outcome.OK, Outcome.OK, Outcome.UNCHECKED]
        platform.service.denied = True
        (failed,) = platform.backend().check(job, settings).failed
        assert failed.outcome is Outcome.PERMISSION
        assert "roles/ml.developer" in failed.fix
        assert {c.method for c in platform.service.received} == {"GET"}


def test_the_staging_bucket_is_read_not_written(setup: Any, emulator: str, tmp_path: Any, monkeypatch: Any) -> None:  # noqa: F811
    from tests.backends.test_google_code import BUCKET, RecordingSession, storage_factory

    (tmp_path / "train.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)
    backend, platform, _ = setup
    session = RecordingSession()
    backend.storage_client = storage_factory(emulator, session)
    job = job_from_dict(
        {
            "name": "checked",
            "code": ".",
            "environment": "pytorch",
            "command": "python train.py",
            "primary": {"machine": "T4:1"},
        }
    )
    report = backend.check(job, {**platform.settings, "staging_bucket": f"gs://{BUCKET}/code"})
    assert report.ok, report.to_dict()
    assert any(c.name == "staging" and f"gs://{BUCKET} exists" in c.message for c in report.checks)
    (failed,) = backend.check(job, {**platform.settings, "staging_bucket": "gs://no-such-bucket"}).failed
    assert failed.outcome is Outcome.NOT_FOUND
    assert "gcloud storage buckets create gs://no-such-bucket" in failed.fix
    assert {method for method, _ in session.sent} == {"GET"}
