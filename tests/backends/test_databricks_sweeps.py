"""Sweeps on both Databricks targets: one idempotent runs/submit per trial under one sweep identity (grid or random,
the trials the local target chooses), through the real databricks-sdk WorkspaceClient against the loopback
workspace; status reads each trial's state and reported metric and names the best so far."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from crosstrain.backends._databricks_sweep import trial_token
from crosstrain.errors import SpecError, Unsupported
from crosstrain.loader import job_from_dict
from crosstrain.records import JobHandle, JobState, Request
from crosstrain.registry import create_backend
from crosstrain.sweep import trials
from tests.backends.databricks_workspace import DatabricksAIRPlatform, DatabricksPlatform
from tests.backends.test_databricks_air import _stable

HOST = {"host": "https://dbc-1234abcd-5678.cloud.databricks.com"}
MACHINES = {"databricks": "T4:1", "databricks-air": "H100:8"}
TARGETS = tuple(MACHINES)


def job(target: str, **changes: Any) -> dict[str, Any]:
    return {
        "name": "tune",
        "command": "python /Workspace/Shared/train.py",
        "args": ["--lr", "${sweep.lr}", "--optimizer", "${sweep.optimizer}"],
        "primary": {"machine": MACHINES[target]},
        "output_dir": "/Volumes/main/ml/runs/tune",
        "sweep": {
            "parameters": {"lr": [0.1, 0.01], "optimizer": ["adam", "sgd"]},
            "metric": "val_loss",
            "goal": "minimize",
            "algorithm": "grid",
        },
        **changes,
    }


def all_at_once(target: str) -> dict[str, Any]:
    """The grid with every trial sent at once (parallel_trials 4)."""
    spec = job(target)
    spec["sweep"] = {**spec["sweep"], "parallel_trials": 4}
    return spec


def render(target: str, spec: dict[str, Any]) -> Request:
    return create_backend(target, environ={}).render(job_from_dict(spec), HOST)


def submits(request: Request) -> list[dict[str, Any]]:
    return [c.body for c in request.calls if c.url.endswith("/api/2.2/jobs/runs/submit")]


def what_runs(request: Request, body: dict[str, Any]) -> str:
    """What a trial's run is given: its body, and (AI Runtime) the command script it runs."""
    text = json.dumps(body)
    for deployment in body["tasks"][0].get("ai_runtime_task", {}).get("deployments", []):
        call = next(
            c for c in request.calls if c.url.endswith("/import") and c.body["path"] == deployment["command_path"]
        )
        text += base64.b64decode(call.body["content"]).decode()
    return text


@pytest.mark.parametrize("target", TARGETS)
def test_a_grid_is_one_run_per_trial_each_with_its_values_and_its_own_token(target: str) -> None:
    request = render(target, job(target))
    bodies = submits(request)
    assert len(bodies) == 4
    assert request.calls[-4:] == tuple(c for c in request.calls if c.url.endswith("runs/submit"))  # uploads first
    tokens = [b["idempotency_token"] for b in bodies]
    assert tokens == [f"{request.identity}-t{n}" for n in range(1, 5)]
    chosen = trials(job_from_dict(job(target)).sweep)  # type: ignore[arg-type]
    for index, (body, values) in enumerate(zip(bodies, chosen, strict=True), 1):
        said = f"lr={values['lr']}, optimizer={values['optimizer']}"
        assert body["run_name"] == f"tune trial {index}: {said}"
        given = what_runs(request, body)
        assert "CROSSTRAIN_SWEEP_lr" in given
        assert str(values["lr"]) in given
        assert values["optimizer"] in given
        assert "${sweep." not in given
        assert f"crosstrain-sweep/{request.identity}/trial-{index}.jsonl" in given
    archives = [c for c in request.calls if c.body and "crosstrain_code" in str(c.body.get("path", ""))]
    assert len(archives) == 1  # the shared code archive is uploaded once
    assert request.sweep is not None
    assert [t["token"] for t in request.sweep["trials"]] == tokens
    assert Request.from_dict(json.loads(request.to_json())) == request
    assert "4 trials (grid" in request.notes[0]


def test_a_long_identity_keeps_each_token_within_64_characters_and_apart() -> None:
    identity = "x" * 60 + "-abcdef1234"
    tokens = [trial_token(identity, n) for n in (1, 2, 1000)]
    assert all(len(t) <= 64 for t in tokens)
    assert len(set(tokens)) == 3
    assert trial_token("y" * 60 + "-abcdef1234", 1) != tokens[0]


@pytest.mark.parametrize("target", TARGETS)
def test_what_databricks_has_no_service_for_is_refused_with_the_reason(target: str) -> None:
    spec = job(target)
    spec["sweep"] = {**spec["sweep"], "algorithm": "bayesian", "max_trials": 4, "early_stopping": "median"}
    with pytest.raises(Unsupported) as refused:
        render(target, spec)
    found = {p.path: p for p in refused.value.problems}
    assert "runs/submit has no tuning service" in found["sweep.algorithm"].message
    assert found["sweep.algorithm"].fix == "use algorithm: grid or random"
    assert "no median early stopping" in found["sweep.early_stopping.policy"].message
    patched = job(target, targets={target: {"patch": {"queue": {"enabled": True}}}})
    with pytest.raises(Unsupported, match="one per trial"):
        render(target, patched)


def test_random_trials_are_the_local_targets() -> None:
    spec = job("databricks")
    spec["sweep"] = {**spec["sweep"], "algorithm": "random", "max_trials": 3, "seed": 7}
    spec["sweep"]["parameters"] = {"lr": {"min": 0.001, "max": 0.1, "scale": "log"}, "optimizer": ["adam", "sgd"]}
    request = render("databricks", spec)
    local = create_backend("local", environ={}).render(job_from_dict({**spec, "output_dir": None}), {})
    assert request.sweep is not None
    assert [t["params"] for t in request.sweep["trials"]] == [t["params"] for t in local.create.body["sweep"]["trials"]]


@pytest.fixture
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("DATABRICKS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path))


def platform_for(target: str) -> DatabricksPlatform:
    return DatabricksAIRPlatform() if target == "databricks-air" else DatabricksPlatform()


def set_run(platform: DatabricksPlatform, run_id: int, native: str) -> None:
    life, _, result = native.partition("/")
    with platform.workspace.lock:
        platform.workspace.runs[run_id]["state"] = (life, result or None)


@pytest.mark.parametrize("target", TARGETS)
def test_submit_sends_each_trial_once_and_a_re_submit_starts_none_again(clean_env: None, target: str) -> None:
    with platform_for(target) as platform:
        backend = platform.backend()
        request = backend.render(job_from_dict(all_at_once(target)), dict(platform.settings))
        handle = backend.send(request)
        assert len(platform.workspace.runs) == 4
        trials_ = handle.ref["sweep"]["trials"]
        assert sorted(t["run_id"] for t in trials_) == sorted(platform.workspace.runs)
        again = platform.backend().send(request)
        assert len(platform.workspace.runs) == 4  # every token returned its run
        assert [t["run_id"] for t in again.ref["sweep"]["trials"]] == [t["run_id"] for t in trials_]
        loaded = JobHandle.loads(str(handle))
        assert loaded.ref["sweep"] == handle.ref["sweep"]
        assert platform.backend().status(loaded).native_state == "4 trials"  # a handle read back from its text
        assert len(loaded.ref["outcome"]["sweep"]["trials"]) == 4


@pytest.mark.parametrize("target", TARGETS)
def test_status_shows_each_trial_and_the_best_so_far(clean_env: None, target: str) -> None:
    with platform_for(target) as platform:
        backend = platform.backend()
        handle = backend.submit(job_from_dict(all_at_once(target)), dict(platform.settings))
        runs = [t["run_id"] for t in handle.ref["sweep"]["trials"]]
        results = [t["results"] for t in handle.ref["sweep"]["trials"]]
        for run_id in runs[:3]:
            set_run(platform, run_id, "TERMINATED/SUCCESS")
        set_run(platform, runs[3], "RUNNING")
        for path, loss in zip(results[:3], (0.5, 0.2, 0.9), strict=True):
            line = {"trial": "x", "step": 2, "metrics": {"val_loss": loss}}
            platform.workspace.files[path] = (json.dumps({**line, "step": 1}) + "\n" + json.dumps(line) + "\n").encode()
        status = backend.status(handle)
        assert status.state is JobState.RUNNING
        assert "1 running, 3 succeeded" in status.message
        assert "best so far: trial 2 (lr=0.01, optimizer=sgd), val_loss 0.2" in status.message
        outcome = handle.ref["outcome"]["sweep"]
        assert [t["state"] for t in outcome["trials"]] == ["SUCCEEDED"] * 3 + ["RUNNING"]
        assert [t.get("value") for t in outcome["trials"]] == [0.5, 0.2, 0.9, None]
        assert outcome["best"]["trial"] == 2
        assert outcome["trials"][1]["params"] == {"lr": 0.01, "optimizer": "sgd"}
        set_run(platform, runs[3], "TERMINATED/FAILED")
        assert backend.status(handle).state is JobState.SUCCEEDED  # a best trial: the sweep found its answer
        backend.cancel(handle)  # every trial's run is cancelled (ended ones stay as they are)
        assert {platform.workspace.runs[r]["cancelled"] for r in runs} == {True}


def test_a_sweep_where_no_trial_reported_failed_with_the_reason(clean_env: None) -> None:
    with DatabricksPlatform() as platform:
        backend = platform.backend()
        handle = backend.submit(job_from_dict(all_at_once("databricks")), dict(platform.settings))
        for trial in handle.ref["sweep"]["trials"]:
            set_run(platform, trial["run_id"], "TERMINATED/SUCCESS")
        status = backend.status(handle)
        assert status.state is JobState.FAILED
        assert "no trial reported val_loss" in status.message


def test_a_sweep_request_whose_runs_were_edited_is_refused_before_anything_is_sent(clean_env: None) -> None:
    with DatabricksPlatform() as platform:
        backend = platform.backend()
        request = backend.render(job_from_dict(job("databricks")), dict(platform.settings))
        edited = Request.from_dict({**request.to_dict(), "calls": [c.to_dict() for c in request.calls[:-1]]})
        with pytest.raises(SpecError, match="render the sweep again"):
            platform.backend().send(edited)
        assert platform.workspace.runs == {}
        assert platform.workspace.files == {}  # nothing uploaded either


def test_golden_file_of_a_grid_sweep() -> None:
    """Every call a 4-trial grid sweep sends on databricks: the shared uploads once, then one runs/submit per
    trial. Regenerate with `CROSSTRAIN_UPDATE_GOLDEN=1`."""
    text = _stable(render("databricks", job("databricks")))
    path = Path(__file__).parent / "golden" / "databricks" / "sweep-grid.json"
    if os.environ.get("CROSSTRAIN_UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.read_text() == text, f"{path.name} differs; regenerate with CROSSTRAIN_UPDATE_GOLDEN=1"


def test_wait_follows_the_trials_to_the_end_and_names_the_best(clean_env: None) -> None:
    with DatabricksAIRPlatform() as platform:
        backend = platform.backend()
        handle = backend.submit(job_from_dict(all_at_once("databricks-air")), dict(platform.settings))
        for trial, loss in zip(handle.ref["sweep"]["trials"], (0.4, 0.3, 0.2, 0.1), strict=True):
            set_run(platform, trial["run_id"], "TERMINATED/SUCCESS")
            platform.workspace.files[trial["results"]] = json.dumps({"step": 3, "metrics": {"val_loss": loss}}).encode()
        seen: list[str] = []
        status = backend.wait(handle, poll_interval=0.01, progress=lambda s: seen.append(s.message))
        assert status.state is JobState.SUCCEEDED
        assert status.message.endswith("best: trial 4 (lr=0.1, optimizer=sgd), val_loss 0.1")
        assert seen
        assert handle.ref["outcome"]["sweep"]["best"]["step"] == 3


def test_a_trial_whose_submit_answer_was_lost_is_started_once(clean_env: None) -> None:
    """A trial's runs/submit fails with a 500, then takes effect with its answer lost (the connection drops): the
    retries send the same token, and the workspace holds one run per trial."""
    with DatabricksPlatform() as platform:
        backend = platform.backend()
        request = backend.render(job_from_dict(all_at_once("databricks")), dict(platform.settings))
        platform.workspace.inject("create", "error", "drop")
        handle = backend.send(request)
        assert platform.workspace.played["error"] == 1
        assert platform.workspace.played["drop"] == 1
        assert len(platform.workspace.runs) == 4
        assert len({t["run_id"] for t in handle.ref["sweep"]["trials"]}) == 4
        assert len(platform.workspace.submits()) == 6  # one trial sent three times


def two_at_a_time(target: str) -> dict[str, Any]:
    spec = job(target)
    spec["sweep"] = {**spec["sweep"], "parallel_trials": 2}
    return spec


@pytest.mark.parametrize("target", TARGETS)
def test_parallel_trials_holds_and_each_next_trial_is_sent_once_as_one_ends(clean_env: None, target: str) -> None:
    """Submit sends the first two of four trials; status says the others are pending, and sends the next as a
    trial ends; a status of a handle read back from its text (another process) or a re-submit sends no trial
    twice (each trial's token returns its run)."""
    with platform_for(target) as platform:
        backend = platform.backend()
        request = backend.render(job_from_dict(two_at_a_time(target)), dict(platform.settings))
        handle = backend.send(request)
        assert len(platform.workspace.runs) == 2
        sweep = handle.ref["sweep"]
        assert [("run_id" in t, "submit" in t) for t in sweep["trials"]] == [(True, False)] * 2 + [(False, True)] * 2
        saved = str(handle)  # the handle as `crosstrain submit` writes it: trials 3 and 4 pending
        first, second = (t["run_id"] for t in sweep["trials"][:2])
        set_run(platform, first, "RUNNING")
        set_run(platform, second, "RUNNING")
        said = backend.status(handle)
        assert said.state is JobState.RUNNING
        assert "2 running, 2 pending (sent as trials end, 2 at a time)" in said.message
        assert handle.ref["outcome"]["sweep"]["pending"] == [3, 4]
        assert [t["state"] for t in handle.ref["outcome"]["sweep"]["trials"]][2:] == ["PENDING", "PENDING"]
        assert "<td>3</td><td>lr=0.1, optimizer=adam</td><td>PENDING</td><td></td>" in handle._repr_html_()
        assert len(platform.workspace.runs) == 2  # no slot free: nothing sent
        set_run(platform, first, "TERMINATED/SUCCESS")
        backend.status(handle)
        assert len(platform.workspace.runs) == 3  # trial 1 ended: trial 3 sent
        third = handle.ref["sweep"]["trials"][2]["run_id"]
        assert platform.workspace.runs[third]["token"] == trial_token(request.identity, 3)
        set_run(platform, third, "RUNNING")
        elsewhere = JobHandle.loads(saved)  # still says trial 3 is pending: its token returns its run
        backend.status(elsewhere)
        assert len(platform.workspace.runs) == 3
        assert elsewhere.ref["sweep"]["trials"][2]["run_id"] == third
        again = platform.backend().send(request)  # a re-submit: the first two trials' runs, the rest pending
        assert len(platform.workspace.runs) == 3
        assert [t.get("run_id") for t in again.ref["sweep"]["trials"]][:2] == [first, second]
        for run_id in (second, third):
            set_run(platform, run_id, "TERMINATED/SUCCESS")
        for trial, loss in zip(handle.ref["sweep"]["trials"][:3], (0.3, 0.2, 0.1), strict=True):
            platform.workspace.files[trial["results"]] = json.dumps({"step": 1, "metrics": {"val_loss": loss}}).encode()
        backend.status(handle)  # trials 2 and 3 ended: trial 4 sent
        fourth = handle.ref["sweep"]["trials"][3]["run_id"]
        set_run(platform, fourth, "TERMINATED/SUCCESS")
        done = backend.wait(handle, poll_interval=0.01)
        assert done.state is JobState.SUCCEEDED
        assert done.message.startswith("4 trials: 4 succeeded; best: trial 3")
        assert sorted(r["token"] for r in platform.workspace.runs.values()) == [
            trial_token(request.identity, n) for n in range(1, 5)
        ]


def test_a_cancelled_sweep_sends_no_pending_trial(clean_env: None) -> None:
    with DatabricksPlatform() as platform:
        backend = platform.backend()
        handle = backend.submit(job_from_dict(two_at_a_time("databricks")), dict(platform.settings))
        saved = str(handle)
        backend.cancel(handle)
        status = backend.status(handle)
        assert status.state is JobState.CANCELLED
        assert "2 pending (never sent: the sweep was cancelled)" in status.message
        assert backend.status(JobHandle.loads(saved)).state is JobState.CANCELLED  # its trials say so elsewhere too
        assert len(platform.workspace.runs) == 2


@pytest.mark.parametrize("target", ["databricks"])
def test_logs_read_every_trial_each_line_tagged(clean_env: None, target: str) -> None:
    with platform_for(target) as platform:
        backend = platform.backend()
        handle = backend.submit(job_from_dict(two_at_a_time(target)), dict(platform.settings))
        lines = list(backend.logs(handle))
        assert [line for line in lines if line.startswith("[trial 1] ")][:1] == ["[trial 1] [driver] epoch 1 loss 0.5"]
        assert "[trial 2] [driver] epoch 2 loss 0.1" in lines
        assert lines[-2:] == [
            "[trial 3] [crosstrain: pending: not sent yet (lr=0.1, optimizer=adam)]",
            "[trial 4] [crosstrain: pending: not sent yet (lr=0.1, optimizer=sgd)]",
        ]
        two = list(handle.logs(trial=2))  # `crosstrain logs --trial 2`: that trial's run only
        assert two == [line for line in lines if line.startswith("[trial 2] ")]
        with pytest.raises(SpecError, match="has no trial 9"):
            list(handle.logs(trial=9))


@pytest.mark.parametrize("target", TARGETS)
def test_list_shows_a_sweep_as_one_row_with_its_trials(clean_env: None, target: str) -> None:
    with platform_for(target) as platform:
        backend = platform.backend()
        single = backend.submit(job_from_dict({**job(target), "sweep": None, "args": []}), dict(platform.settings))
        handle = backend.submit(job_from_dict(all_at_once(target)), dict(platform.settings))
        runs = [t["run_id"] for t in handle.ref["sweep"]["trials"]]
        for run_id, native in zip(runs, ("TERMINATED/SUCCESS", "RUNNING", "RUNNING", "PENDING"), strict=True):
            set_run(platform, run_id, native)
        rows = list(platform.backend().list_jobs(dict(platform.settings)))
        assert [row.identity for row in rows] == [handle.identity, single.identity]  # newest first
        row = rows[0]
        assert row.state is JobState.RUNNING
        assert row.sweep is not None
        assert row.sweep["trials"] == 4
        assert row.sweep["states"] == {"QUEUED": 1, "RUNNING": 2, "SUCCEEDED": 1}
        assert row.to_dict()["sweep"]["summary"] == "4 trials: 1 queued, 2 running, 1 succeeded"
        assert "sweep" not in rows[1].to_dict()
        assert row.handle is not None
        listed = JobHandle.loads(row.handle.dumps())
        assert [t["params"] for t in listed.ref["sweep"]["trials"]][1] == {"lr": "0.01", "optimizer": "sgd"}
        status = platform.backend().status(listed)  # the row's handle reads every trial
        assert status.message == "4 trials: 1 queued, 2 running, 1 succeeded"


def test_a_pending_trial_is_sent_only_under_its_own_token(clean_env: None) -> None:
    """A handle whose pending trial's runs/submit carries another token (an edited handle) sends nothing: the
    trial's token is the sweep's identity and its number, which is what makes it exactly once."""
    with DatabricksPlatform() as platform:
        backend = platform.backend()
        handle = backend.submit(job_from_dict(two_at_a_time("databricks")), dict(platform.settings))
        edited = json.loads(str(handle))
        edited["ref"]["sweep"]["trials"][2]["submit"]["idempotency_token"] = "another-token"
        for trial in handle.ref["sweep"]["trials"][:2]:
            set_run(platform, trial["run_id"], "TERMINATED/SUCCESS")
        with pytest.raises(SpecError, match="own idempotency token"):
            platform.backend().status(JobHandle.loads(json.dumps(edited)))
        assert len(platform.workspace.runs) == 2
