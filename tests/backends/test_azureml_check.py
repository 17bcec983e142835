"""`crosstrain check` on Azure ML, through the real MLClient against the loopback control plane: the workspace
and its region, the compute cluster (missing, another VM size, too few nodes), the VM family's vCPU quota and
the region's (dedicated, and low priority for spot), and a refused credential. Reads only: every call a GET."""

from __future__ import annotations

from typing import Any

import pytest

from crosstrain.loader import job_from_dict
from crosstrain.preflight import Outcome
from tests.backends.azureml_cloud import AzureMLPlatform, _usage


def _job(nodes: int = 2, *, spot: bool = False) -> Any:
    return job_from_dict(
        {
            "name": "checked",
            "image": "python:3.11",
            "command": "python train.py",
            "primary": {"machine": "Standard_NC24rs_v3"},
            **({"workers": {"replicas": nodes - 1}} if nodes > 1 else {}),
            "scheduling": {"spot": spot},
        }
    )


@pytest.fixture
def platform() -> Any:
    with AzureMLPlatform() as running:
        yield running


def _failed(platform: Any, job: Any) -> Any:
    report = platform.backend().check(job, platform.settings)
    assert not report.ok
    assert {call.method for call in platform.service.received} == {"GET"}
    return report.failed


def test_a_workspace_that_can_run_it_passes_with_each_quota_said(platform: Any) -> None:
    report = platform.backend().check(_job(), platform.settings)
    assert report.ok, report.to_dict()
    said = [(c.name, c.outcome, c.message) for c in report.checks]
    assert ("workspace", Outcome.OK, "my-ws (resource group my-rg) exists, in eastus") in said
    assert any(
        m.startswith("standardNCSv3Family vCPUs for 2 x Standard_NC24rs_v3: the job asks 48, the quota is 96")
        for _, _, m in said
    )
    assert {call.method for call in platform.service.received} == {"GET"}


def test_the_family_quota_is_read_against_what_is_in_use(platform: Any) -> None:
    platform.service.usages[0] = _usage("vmFamily", "Standard NCSv3 Family Cluster Dedicated vCPUs", 72, 96)
    (failed,) = _failed(platform, _job())
    assert failed.outcome is Outcome.QUOTA
    assert "with 72 in use" in failed.message
    assert "standardNCSv3Family vCPUs in eastus" in failed.fix


def test_spot_reads_the_low_priority_quota(platform: Any) -> None:
    platform.service.usages[2] = _usage("lowPriorityCores", "Total Cluster LowPriority Regional vCPUs", 0, 24)
    (failed,) = _failed(platform, _job(spot=True))
    assert failed.outcome is Outcome.QUOTA
    assert "low-priority vCPUs" in failed.message


@pytest.mark.parametrize(
    ("compute", "outcome", "fix"),
    [
        (None, Outcome.NOT_FOUND, "az ml compute create"),
        (
            {"vmSize": "Standard_NC6s_v3", "maxNodeCount": 4},
            Outcome.INVALID,
            "give the job the machine Standard_NC6s_v3",
        ),
        ({"vmSize": "Standard_NC24rs_v3", "maxNodeCount": 1}, Outcome.CAPACITY, "--max-instances 2"),
    ],
)
def test_the_compute_cluster(platform: Any, compute: Any, outcome: Outcome, fix: str) -> None:
    if compute is None:
        platform.service.computes.clear()
    else:
        platform.service.computes["gpu-cluster"] = compute
    (failed,) = _failed(platform, _job())
    assert failed.name == "compute"
    assert failed.outcome is outcome
    assert fix in failed.fix


def test_a_size_the_region_does_not_offer_is_capacity(platform: Any) -> None:
    platform.service.vm_sizes = platform.service.vm_sizes[1:]
    (failed,) = _failed(platform, _job())
    assert failed.outcome is Outcome.CAPACITY
    assert "eastus offers no Standard_NC24rs_v3" in failed.message


def test_a_refused_credential_is_a_permission_failure(platform: Any) -> None:
    platform.service.auth_refused = True
    (failed,) = _failed(platform, _job())
    assert failed.name == "workspace"
    assert failed.outcome is Outcome.PERMISSION
    assert "az login" in failed.fix
