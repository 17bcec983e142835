"""`crosstrain render/submit/status/wait` of a job with `fallback:`, each its own process, against the fake cloud
in a folder: an attempt the cloud failed for capacity is passed over, and every verb says so."""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.test_cli import run, write

JOB = """\
name: fb-job
image: img:1
command: python train.py
primary: {machine: "H100:8"}
fallback:
  - machine: A100:8
  - machine: L4:1
targets:
  fake: {run_seconds: 3600}
"""


def test_render_says_the_alternatives_and_a_bad_one_fails_first(tmp_path: Path) -> None:
    path = write(tmp_path, JOB)
    done = run("render", path, "--json", env={"CROSSTRAIN_FAKE_ROOT": str(tmp_path / "cloud")})
    assert done.returncode == 0, done.stderr
    request = json.loads(done.stdout)
    assert request["identity"].startswith("fb-job-")
    assert request["identity"].endswith("-0")
    assert "note: fallback: attempt 1 (fake A100:8)" in done.stderr
    bad = write(tmp_path, JOB.replace("  - machine: L4:1", "  - {region: us-east1}"), "bad.yaml")
    refused = run("submit", bad, env={"CROSSTRAIN_FAKE_ROOT": str(tmp_path / "cloud")})
    assert refused.returncode == 2
    assert "fallback[1].region: fake has no region setting" in refused.stderr
    assert not (tmp_path / "cloud" / "jobs").exists()


def test_submit_passes_over_an_attempt_failed_for_capacity_and_status_says_why(tmp_path: Path) -> None:
    env = {"CROSSTRAIN_FAKE_ROOT": str(tmp_path / "cloud"), "CROSSTRAIN_STATE_DIR": str(tmp_path / "state")}
    path = write(tmp_path, JOB)
    request = json.loads(run("render", path, "--json", env=env).stdout)
    # Attempt 0 exists already, failed by the cloud for capacity before it ran (as another submit left it).
    jobs = tmp_path / "cloud" / "jobs"
    jobs.mkdir(parents=True)
    body = request["calls"][-1]["body"]
    record = {
        **body,
        "plan": {**body["plan"], "outcome": "failed", "queueSeconds": 0, "runSeconds": 0},
        "createTime": time.time() - 60,
        "cancelTime": None,
        "error": "ZONE_RESOURCE_POOL_EXHAUSTED: The zone does not have enough resources available",
    }
    (jobs / f"{request['identity']}.json").write_text(json.dumps(record))
    done = run("submit", path, "--json", env=env)
    assert done.returncode == 0, done.stderr
    handle = json.loads(done.stdout)["handle"]
    assert json.loads(done.stdout)["identity"].endswith("-1")
    assert "following attempt 1 of 3 (fake A100:8)" in done.stderr
    assert "attempt 0 (fake H100:8) was passed over for capacity: ZONE_RESOURCE_POOL_EXHAUSTED" in done.stderr
    status = run("status", handle, "--json", env=env)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["state"] == "RUNNING"
    assert "was passed over for capacity" in status.stderr
    logs = run("logs", handle, env=env)
    assert logs.returncode == 0, logs.stderr
    assert f"{json.loads(done.stdout)['identity']} created" in logs.stdout  # the attempt that runs
    assert "was passed over for capacity" in logs.stderr
    again = run("submit", path, "--json", env=env)
    assert json.loads(again.stdout)["identity"] == json.loads(done.stdout)["identity"]
    assert json.loads(again.stdout)["adopted"] is True
    assert sorted(p.name for p in jobs.glob("*.json")) == sorted(f"{request['identity'][:-2]}-{i}.json" for i in (0, 1))
    # Attempt 1 stocks out too; a repeated submit moves on to attempt 2, and the first handle follows it there.
    first = jobs / f"{json.loads(done.stdout)['identity']}.json"
    ended = {**json.loads(first.read_text()), "createTime": time.time() - 60, "error": record["error"]}
    first.write_text(json.dumps({**ended, "plan": record["plan"]}))
    third = run("submit", path, "--json", env=env)
    assert json.loads(third.stdout)["identity"].endswith("-2"), third.stderr
    followed = run("status", handle, "--json", env=env)
    assert followed.returncode == 0, followed.stderr
    assert json.loads(followed.stdout)["identity"] == json.loads(third.stdout)["identity"]
    assert "following attempt 2 of 3 (fake L4:1)" in followed.stderr
    assert "attempt 1 (fake A100:8) was passed over for quota, capacity or an expired wait" in followed.stderr
