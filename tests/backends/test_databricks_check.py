"""`crosstrain check` on Databricks, through the real WorkspaceClient against the loopback workspace: the token,
the code's folder, the node type (offered, not in the region, not enabled on the subscription, unknown), the
instance pools and policies; AI Runtime's reservations. Every read is a GET: no create call is made."""

from __future__ import annotations

from typing import Any

import pytest

from crosstrain.loader import job_from_dict
from crosstrain.preflight import Outcome
from tests.backends.databricks_workspace import DatabricksAIRPlatform, DatabricksPlatform


def _job(machine: str = "g5.12xlarge", nodes: int = 2) -> Any:
    return job_from_dict(
        {
            "name": "checked",
            "code": ".",
            "command": "python train.py",
            "primary": {"machine": machine},
            **({"workers": {"replicas": nodes - 1}} if nodes > 1 else {}),
        }
    )


def _outcomes(report: Any) -> dict[str, Outcome]:
    return {check.name: check.outcome for check in report.checks}


@pytest.fixture
def platform(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    (tmp_path / "train.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)
    with DatabricksPlatform() as running:
        yield running


def test_a_workspace_that_can_run_it_passes_and_nothing_is_created(platform: Any) -> None:
    report = platform.backend().check(_job(), platform.settings)
    assert report.ok, report.to_dict()
    outcomes = _outcomes(report)
    assert outcomes["credentials"] is Outcome.OK
    assert outcomes["node type"] is Outcome.OK
    assert outcomes["staging"] is Outcome.OK
    assert outcomes["quota"] is Outcome.UNCHECKED
    assert "$" not in report.checks[0].message or "cost on databricks" in report.checks[0].message
    assert {call.method for call in platform.workspace.received} == {"GET"}


@pytest.mark.parametrize(
    ("status", "outcome", "fix"),
    [
        ("NotAvailableInRegion", Outcome.CAPACITY, "another region"),
        ("NotEnabledOnSubscription", Outcome.QUOTA, "quota"),
    ],
)
def test_a_node_type_the_region_or_subscription_refuses(platform: Any, status: str, outcome: Outcome, fix: str) -> None:
    platform.workspace.node_types[0]["node_info"] = {"status": [status]}
    report = platform.backend().check(_job(), platform.settings)
    assert not report.ok
    (failed,) = report.failed
    assert failed.name == "node type"
    assert failed.outcome is outcome
    assert fix in failed.fix


def test_a_node_type_the_workspace_does_not_offer_names_those_it_does(platform: Any) -> None:
    platform.workspace.node_types = platform.workspace.node_types[1:]
    (failed,) = platform.backend().check(_job(), platform.settings).failed
    assert failed.outcome is Outcome.NOT_FOUND
    assert "g5.xlarge" in failed.fix
    assert "m5d.large" not in failed.fix


def test_a_refused_token_is_a_permission_failure_with_the_fix(platform: Any) -> None:
    platform.workspace.token_refused = True
    report = platform.backend().check(_job(), platform.settings)
    (failed,) = report.failed
    assert failed.name == "credentials"
    assert failed.outcome is Outcome.PERMISSION
    assert "DATABRICKS_TOKEN" in failed.fix


def test_pools_and_policies_are_said(platform: Any) -> None:
    platform.workspace.pools = [
        {
            "instance_pool_id": "p1",
            "instance_pool_name": "gpus",
            "node_type_id": "g5.12xlarge",
            "max_capacity": 4,
            "stats": {"used_count": 3},
        }
    ]
    platform.workspace.policies = [
        {
            "policy_id": "x",
            "name": "cpu-only",
            "definition": '{"node_type_id": {"type": "fixed", "value": "m5d.large"}}',
        }
    ]
    report = platform.backend().check(_job(), platform.settings)
    said = {check.name: check.message for check in report.checks}
    assert "gpus: 1 of 4 left" in said["instance pools"]
    assert "cpu-only" in said["cluster policies"]


def test_a_job_the_target_refuses_is_invalid_and_reads_nothing(platform: Any) -> None:
    report = platform.backend().check(_job(machine="m5d.large"), platform.settings)
    assert not report.ok
    assert {c.outcome for c in report.checks} == {Outcome.INVALID}
    assert not [c for c in platform.workspace.received if c.path != "/.well-known/databricks-config"]


def test_ai_runtime_says_its_reservations_or_that_the_workspace_has_none(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    monkeypatch.chdir(tmp_path)
    job = _job(machine="H100:8", nodes=1)
    with DatabricksAIRPlatform() as air:
        report = air.backend().check(job, air.settings)
        assert report.ok
        assert _outcomes(report)["capacity"] is Outcome.UNCHECKED
        air.workspace.capacities = [{"id": "cap-1", "accelerator_type": "GPU_8xH100", "reserved_accelerators": 4}]
        report = air.backend().check(job, {**air.settings, "provisioned_capacity_id": "cap-1"})
        (failed,) = report.failed
        assert failed.outcome is Outcome.CAPACITY
        assert "reserves 4" in failed.message
        report = air.backend().check(job, {**air.settings, "provisioned_capacity_id": "cap-9"})
        assert report.failed[0].outcome is Outcome.NOT_FOUND


def _cli(*argv: str, env: dict[str, str], cwd: Any) -> Any:
    import os
    import subprocess
    import sys

    from tests.conftest import ROOT

    return subprocess.run(
        [sys.executable, "-m", "crosstrain.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", **env},
    )


def test_the_cli_exits_0_when_every_check_passes_and_7_when_one_fails_and_submit_check_sends_nothing(
    platform: Any, tmp_path: Any
) -> None:
    import json

    job = tmp_path / "job.yaml"
    job.write_text("name: checked\ncode: .\ncommand: python train.py\nprimary: {machine: g5.12xlarge}\n")
    env = {"DATABRICKS_HOST": platform.url, "DATABRICKS_TOKEN": "dapi-loopback", "DATABRICKS_CLOUD": "aws"}
    args = ("-t", "databricks", "--set", "cloud=aws")
    done = _cli("check", str(job), *args, "--json", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["targets"]["databricks"]["ok"] is True
    platform.workspace.node_types[0]["node_info"] = {"status": ["NotAvailableInRegion"]}
    done = _cli("check", str(job), *args, env=env, cwd=tmp_path)
    assert done.returncode == 7
    assert "[capacity] node type: g5.12xlarge is not available" in done.stderr
    assert "fix:" in done.stderr
    done = _cli("submit", str(job), *args, "--check", env=env, cwd=tmp_path)
    assert done.returncode == 7
    assert not platform.workspace.submits()
    assert not [c for c in platform.workspace.received if c.method != "GET"]
